// Ops that exist for gradient rules (and the passes that rewrite them), not for users: each is a
// registered op with a sample like any other, but kiln/kiln.h does not declare it.
#pragma once
#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::detail {

/// g * gelu'(x): gelu's gradient in one pass (what gelu's backward runs eagerly).
Tensor gelu_grad(const Tensor& g, const Tensor& x, bool approximate = false);
/// A copy of `base` with `src` written into the region as_strided(base, sizes, strides, offset)
/// names (torch.as_strided_scatter).
Tensor as_strided_scatter(const Tensor& base, const Tensor& src, const std::vector<int64_t>& sizes,
                          const std::vector<int64_t>& strides, int64_t offset = 0);
/// sum_to with the target shape read from `like` when it runs (works with dynamic dims).
Tensor sum_to_like(const Tensor& a, const Tensor& like);
/// y * (g - sum(g * y, dim)): the gradient of softmax from its output y, in one op.
Tensor softmax_grad(const Tensor& g, const Tensor& y, int64_t dim = -1);

}  // namespace kiln::detail
