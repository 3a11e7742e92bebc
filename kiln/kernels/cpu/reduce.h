// Reduction loops over a [outer, inner] view: "rows" reduces each contiguous row of length
// inner (reduced dims trailing); "cols" reduces over the leading dim (reduced dims leading),
// accumulating vectorized across the kept dims. Float32 accumulates in vector lanes.
#pragma once
#include <cstdint>
#include <limits>

#include "kiln/kernels/cpu/parallel.h"

namespace kiln::cpu {

enum class RedKind { Sum, Max, Min };

template <typename T>
T red_init(RedKind k) {
  if (k == RedKind::Sum) return T(0);
  if constexpr (std::numeric_limits<T>::has_infinity) {
    return k == RedKind::Max ? -std::numeric_limits<T>::infinity()
                             : std::numeric_limits<T>::infinity();
  } else {
    return k == RedKind::Max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
  }
}

/// out[i] = reduce_j x[i*inner + j]. NaN propagates through max/min.
template <typename T>
void reduce_rows(const T* x, T* out, int64_t outer, int64_t inner, RedKind k) {
  parallel_for(outer, std::max<int64_t>(1, 32768 / std::max<int64_t>(inner, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t i = b; i < e; ++i) {
                   const T* r = x + i * inner;
                   T acc = red_init<T>(k);
                   if (k == RedKind::Sum) {
#pragma omp simd reduction(+ : acc)
                     for (int64_t j = 0; j < inner; ++j) acc += r[j];
                   } else if (k == RedKind::Max) {
                     bool nan = false;
                     for (int64_t j = 0; j < inner; ++j) {
                       nan = nan || (r[j] != r[j]);
                       acc = r[j] > acc ? r[j] : acc;
                     }
                     if (nan) acc = std::numeric_limits<T>::quiet_NaN();
                   } else {
                     bool nan = false;
                     for (int64_t j = 0; j < inner; ++j) {
                       nan = nan || (r[j] != r[j]);
                       acc = r[j] < acc ? r[j] : acc;
                     }
                     if (nan) acc = std::numeric_limits<T>::quiet_NaN();
                   }
                   out[i] = acc;
                 }
               });
}

/// out[j] = reduce_i x[i*inner + j] (reduce over the leading dim).
template <typename T>
void reduce_cols(const T* x, T* out, int64_t outer, int64_t inner, RedKind k) {
  parallel_for(inner, std::max<int64_t>(16, 32768 / std::max<int64_t>(outer, 1)),
               [&](int64_t b, int64_t e) {
                 T init = red_init<T>(k);
                 for (int64_t j = b; j < e; ++j) out[j] = init;
                 for (int64_t i = 0; i < outer; ++i) {
                   const T* r = x + i * inner;
                   if (k == RedKind::Sum) {
#pragma omp simd
                     for (int64_t j = b; j < e; ++j) out[j] += r[j];
                   } else if (k == RedKind::Max) {
                     for (int64_t j = b; j < e; ++j)
                       out[j] = (r[j] > out[j] || r[j] != r[j]) ? r[j] : out[j];
                   } else {
                     for (int64_t j = b; j < e; ++j)
                       out[j] = (r[j] < out[j] || r[j] != r[j]) ? r[j] : out[j];
                   }
                 }
               });
}

}  // namespace kiln::cpu
