// SGD: v = momentum * v + (g + wd * p); p -= lr * (nesterov ? g + momentum * v : v).
#include "kiln/optim/sgd.h"

#include "kiln/dispatch/dispatch.h"
#include "kiln/ops/ops.h"

namespace kiln::optim {

SGD::SGD(std::vector<Tensor> params, SGDOptions opts) : params_(std::move(params)), opts_(opts) {
  if (opts.lr < 0) fail("SGD", "learning rate must be >= 0, got ", opts.lr);
  if (opts.momentum < 0) fail("SGD", "momentum must be >= 0, got ", opts.momentum);
  if (opts.nesterov && opts.momentum <= 0) fail("SGD", "nesterov needs momentum > 0");
  for (size_t i = 0; i < params_.size(); ++i)
    if (!params_[i].defined() || !params_[i].requires_grad() || !params_[i].is_leaf())
      fail("SGD", "parameter ", i, " must be a leaf tensor that requires grad");
  velocity_.resize(params_.size());
}

void SGD::step() {
  NoGradGuard ng;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (opts_.weight_decay != 0) g = add(g, mul(p, opts_.weight_decay));
    if (opts_.momentum != 0) {
      if (!velocity_[i].defined())
        velocity_[i] = g.clone();
      else
        velocity_[i].copy_(add(mul(velocity_[i], opts_.momentum), g));
      g = opts_.nesterov ? add(g, mul(velocity_[i], opts_.momentum)) : velocity_[i];
    }
    Tensor upd = sub(p, mul(g, opts_.lr));
    // copy_ refuses tensors that require grad while grad mode is on; we are under NoGradGuard.
    p.copy_(upd);
  }
}

void SGD::zero_grad() {
  for (auto& p : params_) p.zero_grad();
}

}  // namespace kiln::optim
