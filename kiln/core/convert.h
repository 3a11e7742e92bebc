// One element converted between Kiln's element types, as PyTorch converts it: through float for
// float16/bfloat16, and a float into a narrow integer (int8, uint8, int16) through int64, so
// out-of-range values wrap (c10's static_cast_with_inter_type) instead of being undefined.
#pragma once
#include <cstdint>
#include <type_traits>

#include "kiln/core/half.h"

namespace kiln {

template <typename T>
inline constexpr bool is_float_like_v =
    std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <typename D, typename S>
inline D convert_element(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (is_float_like_v<S> && std::is_integral_v<D> && !std::is_same_v<D, bool> &&
                       sizeof(D) < 4) {
    return static_cast<D>(static_cast<int64_t>(v));
  } else {
    return static_cast<D>(v);
  }
}

}  // namespace kiln
