// Helpers shared by the op family files: common inference rules and kernel adapters.
#pragma once
#include <cmath>
#include <limits>

#include "kiln/dispatch/dispatch.h"
#include "kiln/kernels/cpu/elementwise.h"
#include "kiln/ops/grad_ops.h"
#include "kiln/ops/ops.h"
#include "kiln/registry/op_def.h"

namespace kiln::detail::op_util {

/// A size argument of an op call: attribute `attr` (element `elem` of an integer list, or the
/// integer itself when elem < 0) takes `size`, which may be a symbol.
struct SizeArg {
  int attr;
  int elem;
  SymInt size;
};
/// Calls `op` with `sizes` written into `attrs`: numbers directly; with symbols the call is
/// patched (the graph node reads them at run time).
TensorList call_sized(const OpDef& op, std::span<const Tensor> ins, Attrs attrs,
                      const std::vector<SizeArg>& sizes);
inline TensorList call_sized(const OpDef& op, std::initializer_list<Tensor> ins, Attrs attrs,
                             const std::vector<SizeArg>& sizes) {
  return call_sized(op, std::span<const Tensor>(ins.begin(), ins.size()), std::move(attrs), sizes);
}
/// The elements of an integer-list attribute as size arguments.
std::vector<SizeArg> list_sizes(int attr, const std::vector<SymInt>& s);
/// In a gradient rule: calls `op` with the forward node's symbolic sizes (GradCtx::patches),
/// their attribute indices moved by `shift`.
TensorList patched_again(const OpDef& op, std::span<const Tensor> ins, const Attrs& attrs,
                         const GradCtx& c, int shift);
inline TensorList patched_again(const OpDef& op, std::initializer_list<Tensor> ins,
                                const Attrs& attrs, const GradCtx& c, int shift) {
  return patched_again(op, std::span<const Tensor>(ins.begin(), ins.size()), attrs, c, shift);
}

inline MetaList one(DType dt, const Shape& s) {
  MetaList m;
  TensorMeta& t = m.emplace_back();
  t.dtype = dt;
  t.shape = s;
  return m;
}

inline void require_float(const char* op, const Tensor& t, const char* what = "input") {
  if (!is_floating(t.dtype()))
    fail(op, what, " must be float32 or float64, got ", t.dtype(), " (shape ", t.shape(), ")");
}
inline void require_numeric(const char* op, const Tensor& t) {
  if (t.dtype() == Bool) fail(op, "input must be numeric, got bool (shape ", t.shape(), ")");
}
inline void require_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    fail(op, "dtypes differ: ", a.dtype(), " ", a.shape(), " vs ", b.dtype(), " ", b.shape());
}

/// The in-place form of an op (Tensor::add_ and friends): writes op(inputs) into `self`, which
/// inputs[0] is or is a cast of. `name` ("add_") heads the errors. See Tensor::add_.
Tensor& write_in_place(const char* name, Tensor& self, const OpDef& op,
                       std::span<const Tensor> inputs, const Attrs& attrs = {});

/// A 0-d constant of t's dtype (broadcasts anywhere).
inline Tensor scalar_like(const Tensor& t, double v) { return scalar_tensor(v, t.dtype()); }

// Output size of a window sweep (convolution, pooling); -1 when the input size is dynamic.
/// Bound on window geometry values (stride, padding, dilation, pooling kernels, groups): past
/// it the size arithmetic (in + 2 pad, dilation (k - 1)) could overflow int64.
inline constexpr int64_t kMaxWindowParam = int64_t(1) << 30;
inline void check_window_params(const char* op, const char* what, const std::vector<int64_t>& v) {
  for (int64_t x : v)
    if (x > kMaxWindowParam) fail(op, what, " ", Shape(v), " is too large (at most 2^30)");
}

inline int64_t out_size(int64_t in, int64_t eff_kernel, int64_t pad, int64_t stride) {
  if (in < 0) return -1;
  return (in + 2 * pad - eff_kernel) / stride + 1;
}

/// Expands a 1- or 2-value size argument (kernel, stride, padding) to 2 values.
inline std::vector<int64_t> pair2(const char* op, const char* what, const std::vector<int64_t>& v) {
  if (v.size() == 1) return {v[0], v[0]};
  if (v.size() != 2) fail(op, what, " must have 1 or 2 values, got ", Shape(v));
  return v;
}

/// Whether two shapes can be equal: same rank, and each dim equal unless one is dynamic (-1; a
/// graph's sizes are then checked when it runs).
inline bool dims_agree(const Shape& a, const Shape& b) {
  if (a.rank() != b.rank()) return false;
  for (int64_t d = 0; d < a.rank(); ++d)
    if (a[d] >= 0 && b[d] >= 0 && a[d] != b[d]) return false;
  return true;
}

/// x itself, after checking at run time that the sizes of `dims` multiply to at least `min`;
/// else raises `[op] message <shape>`. For checks eager code makes on sizes a graph knows only
/// at run time (batch_norm's "more than 1 value per channel"); never pruned or folded.
Tensor check_numel(const Tensor& x, const std::vector<int64_t>& dims, int64_t min,
                   const std::string& op, const std::string& message);

/// dst = src converted to dst's dtype, element by element (both defined, same shape; dst may be
/// strided). The kernel behind cast, copy_ and cat.
void copy_cast_kernel(const Tensor& src, Tensor& dst);

}  // namespace kiln::detail::op_util
