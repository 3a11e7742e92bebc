// Eager autograd, the user's side: backward(), functional grad()/vjp() and gradcheck (the tape's
// nodes are in grad_node.h). Gradient rules live with their ops (OpDef::grad) and are written in
// Kiln ops.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/dispatch/grad_mode.h"

namespace kiln {

/// Backpropagates `grad_outputs` (ones for scalar outputs when omitted) from `outputs`,
/// accumulating into the .grad() of leaves.
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              bool retain_graph = false, bool create_graph = false);

/// Gradients of `outputs` w.r.t. `inputs` (torch.autograd.grad): nothing is accumulated.
/// On symbolic tensors (in a graph or under jit) it adds gradient nodes instead.
/// With create_graph the results are differentiable (gradients of gradients).
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool create_graph = false, bool allow_unused = false);

using TensorFn = std::function<Tensor(const std::vector<Tensor>&)>;
using TensorsFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

/// Functional gradient of a scalar-valued fn at `inputs` (jax.grad style).
std::vector<Tensor> grad(const TensorFn& fn, const std::vector<Tensor>& inputs);
/// Vector-Jacobian product: returns fn(inputs) and v^T J for each input.
std::pair<Tensor, std::vector<Tensor>> vjp(const TensorFn& fn, const std::vector<Tensor>& inputs,
                                           const Tensor& v);

struct GradcheckResult {
  bool ok = true;
  std::string message;  ///< which input/element disagreed, analytic vs numeric
  double max_abs_err = 0;
};

/// Compares analytic gradients of <v, fn(x)> (v random) with central differences, in float64.
/// Inputs are cast to float64; integer inputs are passed through and not checked.
GradcheckResult gradcheck(const TensorsFn& fn, const std::vector<Tensor>& inputs, double eps = 1e-6,
                          double atol = 1e-5, double rtol = 1e-3);
GradcheckResult gradcheck(const TensorFn& fn, const std::vector<Tensor>& inputs, double eps = 1e-6,
                          double atol = 1e-5, double rtol = 1e-3);

}  // namespace kiln
