// ONNX converters for the scatters: Scatter, ScatterElements (Kiln's scatter and scatter_reduce
// along an axis) and ScatterND (the indexed leading dims flattened to rows, then a scatter of
// whole rows), with their reductions.
#include "kiln/onnx/onnx_internal.h"

namespace kiln::onnx::detail {
namespace {

// Negative indices count from the end of `size`.
Tensor wrap(const Tensor& idx, int64_t size) {
  Tensor i = cast(idx, Int64);
  return where(lt(i, 0), add(i, size), i);
}

// ONNX's reduction attribute as scatter_reduce's name ("" overwrites).
std::string reduction(const NodeIn& n) {
  const std::string r = n.s("reduction", "none");
  if (r == "none") return "";
  if (r == "add") return "sum";
  if (r == "mul") return "prod";
  if (r == "max") return "amax";
  if (r == "min") return "amin";
  n.fail("unknown reduction '", r, "'");
}

Tensor scatter_along(const NodeIn& n, const Tensor& data, int64_t axis, const Tensor& idx,
                     const Tensor& upd) {
  if (data.size(axis) < 0) n.fail("needs a static size along axis ", axis, ", got ", data.shape());
  const Tensor i = wrap(idx, data.size(axis));
  const std::string r = reduction(n);
  if (r.empty()) return scatter(data, axis, i, upd);
  return scatter_reduce(data, axis, i, upd, r, true);
}

TL scatter_elements(NodeIn& n) {
  const Tensor &data = n.req(0), &idx = n.req(1), &upd = n.req(2);
  const int64_t axis = wrap_dim(n.i("axis", 0), data.dim(), kOp);
  return TL{scatter_along(n, data, axis, idx, upd)};
}

KILN_ONNX_OP(ScatterElements) { return scatter_elements(n); }
KILN_ONNX_OP(Scatter) { return scatter_elements(n); }

// indices [..., k] address the first k dims of data; each names a row of the rest, which
// updates [..., rest] replaces (or combines with). The k coordinates become one row number of
// data viewed as [rows, rest], and a scatter along dim 0 writes whole rows.
KILN_ONNX_OP(ScatterND) {
  const Tensor &data = n.req(0), &idx = n.req(1), &upd = n.req(2);
  if (!data.shape().is_static() || !idx.shape().is_static() || !upd.shape().is_static())
    n.fail("needs static shapes, got data ", data.shape(), ", indices ", idx.shape(), ", updates ",
           upd.shape());
  const int64_t q = idx.dim(), r = data.dim();
  const int64_t k = q > 0 ? idx.size(q - 1) : -1;
  if (q < 1 || k < 1 || k > r)
    n.fail("indices ", idx.shape(), " must end in a dim of 1 to ", r, " (data ", data.shape(), ")");
  Shape want;
  for (int64_t d = 0; d < q - 1; ++d) want.push_back(idx.size(d));
  int64_t rows = 1, rest = 1, m = 1;
  for (int64_t d = 0; d < k; ++d) rows *= data.size(d);
  for (int64_t d = k; d < r; ++d) want.push_back(data.size(d)), rest *= data.size(d);
  for (int64_t d = 0; d < q - 1; ++d) m *= idx.size(d);
  if (upd.shape() != want)
    n.fail("updates must be ", want, " for data ", data.shape(), " and indices ", idx.shape(),
           ", got ", upd.shape());
  Tensor row = zeros(Shape{}, Int64);
  int64_t stride = 1;
  for (int64_t j = k - 1; j >= 0; --j) {
    Tensor ij = wrap(reshape(slice(idx, q - 1, j, j + 1), Shape{m}), data.size(j));
    row = add(row, mul(ij, stride));
    stride *= data.size(j);
  }
  Tensor at = expand(reshape(row, Shape{m, 1}), Shape{m, rest});
  Tensor flat = reshape(data, Shape{rows, rest});
  Tensor u = reshape(upd, Shape{m, rest});
  const std::string red = reduction(n);
  Tensor y = red.empty() ? scatter(flat, 0, at, u) : scatter_reduce(flat, 0, at, u, red, true);
  return TL{reshape(y, data.shape())};
}

}  // namespace
}  // namespace kiln::onnx::detail
