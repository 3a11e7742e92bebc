// Runtime count -> compile-time constant, for kernels templated on a small register-block size.
#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace kiln::cpu {

namespace detail {
template <typename F, int64_t... I>
void with_count_impl(int64_t n, F& f, std::integer_sequence<int64_t, I...>) {
  (void)((n == I + 1 ? (f(std::integral_constant<int64_t, I + 1>{}), true) : false) || ...);
}
}  // namespace detail

/// Calls f(std::integral_constant<int64_t, n>) with n clamped to [1, Max], so that each block
/// size instantiates its own loop and keeps all its accumulators in registers.
template <int64_t Max, typename F>
void with_count(int64_t n, F&& f) {
  detail::with_count_impl(std::clamp<int64_t>(n, 1, Max), f,
                          std::make_integer_sequence<int64_t, Max>{});
}

}  // namespace kiln::cpu
