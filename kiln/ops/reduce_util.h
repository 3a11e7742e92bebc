// Helpers the reduction family (reduce.cpp) and the ops along one dim (scan_ops.cpp) share: the
// accumulator type of sums and products, and the bool handling of the ordering ops.
#pragma once
#include <type_traits>

#include "kiln/ops/op_util.h"

namespace kiln::detail::reduce_util {

/// Accumulator of sums and products: double for floats; for integers the unsigned type of the
/// same width, so that overflow wraps (as torch's) with defined behaviour.
template <typename T, bool = std::is_floating_point_v<T>>
struct WrapAcc {
  using type = double;
};
template <typename T>
struct WrapAcc<T, false> {
  using type = std::make_unsigned_t<T>;
};

/// Bool inputs of the ordering ops (max, argmax, cummax, mode, ...) order as 0 < 1, as torch's:
/// they run on uint8 and their values come back as bool.
inline Tensor ordered(const Tensor& a) {
  return a.defined() && a.dtype() == Bool ? cast(a, UInt8) : a;
}
inline Tensor bool_back(const Tensor& r, const Tensor& a) {
  return a.defined() && a.dtype() == Bool ? cast(r, Bool) : r;
}

}  // namespace kiln::detail::reduce_util
