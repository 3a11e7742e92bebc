// Eager optimizers over parameter tensors (torch.optim style): SGD with momentum, Nesterov and
// weight decay. Updates run under NoGradGuard and write parameters in place.
#pragma once
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::optim {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD {
 public:
  /// `params` must be leaves that require grad.
  SGD(std::vector<Tensor> params, SGDOptions opts);
  /// One update from the accumulated .grad() of each parameter (parameters without a
  /// gradient are skipped, as in PyTorch).
  void step();
  /// Drops every parameter's gradient.
  void zero_grad();
  double lr() const { return opts_.lr; }
  void set_lr(double lr) { opts_.lr = lr; }

 private:
  std::vector<Tensor> params_;
  std::vector<Tensor> velocity_;
  SGDOptions opts_;
};

}  // namespace kiln::optim
