// Helpers for ops that read integer index tensors (the gather/scatter, index_select, sort and
// advanced-indexing families, nll_loss): dtype checks, typed access to int64/int32 data, range
// checks run before any parallel loop (an exception must never leave an OpenMP region), and the
// small tensor-level helpers those families' wrappers and gradient rules share.
#pragma once
#include <cmath>
#include <string>
#include <type_traits>
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

/// NaN test that compiles for every dtype (false for integers and bool).
template <typename T>
bool nan_of(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  return false;
}

/// Both sizes known (a graph's dims may be dynamic, -1).
inline bool known(int64_t a, int64_t b) { return a >= 0 && b >= 0; }

/// Zeros shaped like `like` at run time (a graph's dims may be dynamic) in dtype dt.
inline Tensor zeros_as(const Tensor& like, DType dt) {
  Tensor z = zeros_like(like);
  return z.dtype() == dt ? z : cast(z, dt);
}

/// Bool inputs of the accumulating ops add as logical or (torch): computed on uint8, then != 0.
inline bool is_bool(const Tensor& t) { return t.defined() && t.dtype() == Bool; }
inline Tensor u8(const Tensor& t) { return is_bool(t) ? cast(t, UInt8) : t; }
inline Tensor back_to_bool(const Tensor& r, const Tensor& a) { return is_bool(a) ? ne(r, 0) : r; }

/// Eager (concrete) indices are checked here so that the error names `op`, the index and the
/// size; symbolic ones are checked by the primitive when the graph runs.
inline void check_eager_range(const char* op, const Tensor& t, int64_t size, bool negative_ok,
                              const std::string& what) {
  if (!t.is_concrete() || t.numel() == 0 || size < 0) return;
  const Tensor t64 = t.dtype() == Int64 ? t : cast(t, Int64);
  const int64_t lo = min(t64).item<int64_t>(), hi = max(t64).item<int64_t>();
  if (hi >= size || lo < (negative_ok ? -size : 0))
    fail(op, "index ", hi >= size ? hi : lo, " is out of range for ", what, " of size ", size,
         " (index shape ", t.shape(), ")");
}

}  // namespace kiln::detail::op_util
