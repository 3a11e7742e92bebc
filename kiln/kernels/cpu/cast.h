// Strided copy with conversion between any two dtypes (the cast op, copies into views, and the
// dispatcher's compute-in-float32 path for the reduced dtypes).
#pragma once
#include "kiln/core/tensor.h"

namespace kiln::cpu {

/// dst = src converted to dst's dtype; src broadcasts to dst's shape, either may be strided.
void cast_copy(const Tensor& src, Tensor& dst);

}  // namespace kiln::cpu
