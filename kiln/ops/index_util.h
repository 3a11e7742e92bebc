// Helpers for ops that read integer index tensors (gather, scatter_add, index_select, embedding,
// nll_loss): dtype checks, typed access to int64/int32 data, and range checks run before any
// parallel loop (an exception must never leave an OpenMP region).
#pragma once
#include <vector>

#include "kiln/ops/op_util.h"

namespace kiln::detail::op_util {

/// Index tensors are int64 or int32.
inline void require_index(const char* op, const Tensor& idx, const char* what = "index") {
  if (idx.dtype() != Int64 && idx.dtype() != Int32)
    fail(op, what, " must be int64 or int32, got ", idx.dtype(), " (shape ", idx.shape(), ")");
}

/// Calls f(const I* data) with the typed (contiguous) index data, I = int64_t or int32_t.
template <typename F>
void with_index(const Tensor& idx, const char* op, F&& f) {
  if (idx.dtype() == Int64) {
    f(static_cast<const int64_t*>(idx.data_ptr<int64_t>()));
  } else if (idx.dtype() == Int32) {
    f(static_cast<const int32_t*>(idx.data_ptr<int32_t>()));
  } else {
    fail(op, "index must be int64 or int32, got ", idx.dtype());
  }
}

/// Fails unless every index is in [0, limit). `what` names the indexed extent in the message.
template <typename I>
void check_range(const char* op, const I* p, int64_t n, int64_t limit, const char* what,
                 const Shape& idx_shape) {
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = static_cast<int64_t>(p[i]);
    if (v < 0 || v >= limit)
      fail(op, "index ", v, " is out of range for ", what, " of size ", limit, " (index shape ",
           idx_shape, ")");
  }
}

/// Offsets (in elements, with strides `st`) of every position of the dims [d0, d1) of `sizes`,
/// in row-major order.
inline std::vector<int64_t> dim_offsets(const Shape& sizes, const Strides& st, int64_t d0,
                                        int64_t d1) {
  std::vector<int64_t> off{0};
  for (int64_t d = d0; d < d1; ++d) {
    std::vector<int64_t> nx;
    nx.reserve(off.size() * static_cast<size_t>(sizes[d]));
    for (int64_t o : off)
      for (int64_t i = 0; i < sizes[d]; ++i) nx.push_back(o + i * st[d]);
    off.swap(nx);
  }
  return off;
}

inline int64_t prod(const Shape& s, int64_t d0, int64_t d1) {
  int64_t p = 1;
  for (int64_t d = d0; d < d1; ++d) p *= s[d];
  return p;
}

}  // namespace kiln::detail::op_util
