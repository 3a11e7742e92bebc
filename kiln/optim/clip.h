// Gradient clipping for eager training loops (torch.nn.utils.clip_grad_norm_ / _value_).
#pragma once
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::optim {

/// Total norm of all parameters' gradients taken together (as if concatenated), with
/// norm_type p > 0 or INFINITY; when it exceeds max_norm, every gradient is scaled in place by
/// max_norm / (total + 1e-6). Returns the total norm before clipping. Parameters without a
/// gradient are skipped (no gradients at all: returns 0). As in PyTorch with
/// error_if_nonfinite=false, a NaN total makes the gradients NaN and an infinite one zeroes
/// them; the returned norm tells the caller. Accumulates in float64. Raises kiln::Error for
/// max_norm < 0, norm_type <= 0, or a symbolic parameter.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

/// Clamps every gradient element to [-clip_value, clip_value] in place (clip_value >= 0).
void clip_grad_value(const std::vector<Tensor>& params, double clip_value);

}  // namespace kiln::optim
