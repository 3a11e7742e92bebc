// Products by name and their neighbours, composites over matmul and views with torch's argument
// checks: mm, bmm, mv, addmv, baddbmm, addbmm, dot, vdot, outer, inner; diagonal, diag_embed,
// diag, trace; tensordot, kron, cross.
#include <algorithm>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "kiln/dispatch/autocast.h"
#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {

// ---- products by name, diagonals, tensordot, kron, cross (composites over matmul and views) --

namespace {
void need_rank(const char* op, const Tensor& t, int64_t r, const char* what) {
  if (!t.defined()) fail(op, what, " is undefined");
  if (t.dim() != r) fail(op, what, " must be ", r, "-D, got shape ", t.shape());
}
// beta * input + r, as torch's add* ops: beta = 0 ignores input (NaN included); input must
// broadcast to r's shape.
Tensor add_scaled(const char* op, const Tensor& input, const Tensor& r, double beta) {
  if (!input.defined()) fail(op, "input is undefined");
  if (!broadcastable_to(input.shape(), r.shape()))
    fail(op, "input of shape ", input.shape(), " does not broadcast to the product's shape ",
         r.shape());
  if (beta == 0) return r;
  return add(beta == 1 ? input : mul(input, beta), r);
}
}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) {
  need_rank("mm", a, 2, "self");
  need_rank("mm", b, 2, "mat2");
  return matmul(a, b);
}
Tensor bmm(const Tensor& a, const Tensor& b) {
  need_rank("bmm", a, 3, "self");
  need_rank("bmm", b, 3, "mat2");
  if (a.shape()[0] >= 0 && b.shape()[0] >= 0 && a.shape()[0] != b.shape()[0])
    fail("bmm", "batch sizes differ: shapes ", a.shape(), " and ", b.shape());
  return matmul(a, b);
}
Tensor mv(const Tensor& a, const Tensor& v) {
  need_rank("mv", a, 2, "self");
  need_rank("mv", v, 1, "vec");
  // torch's autocast lists leave mv (and dot, addmv) out: they run in their inputs' dtype
  const AutocastGuard off(false);
  return matmul(a, v);
}
Tensor addmv(const Tensor& input, const Tensor& mat, const Tensor& vec, double beta, double alpha) {
  const Tensor r = mv(mat, vec);
  return add_scaled("addmv", input, alpha == 1 ? r : mul(r, alpha), beta);
}
Tensor baddbmm(const Tensor& input, const Tensor& b1, const Tensor& b2, double beta, double alpha) {
  const Tensor r = bmm(b1, b2);
  // under autocast input is cast with the product's operands, so the sum stays bfloat16 (torch)
  return add_scaled("baddbmm", autocast_arg(AutocastPolicy::kLower, input),
                    alpha == 1 ? r : mul(r, alpha), beta);
}
Tensor addbmm(const Tensor& input, const Tensor& b1, const Tensor& b2, double beta, double alpha) {
  Tensor r = sum(bmm(b1, b2), {0});
  if (r.defined() && b1.defined() && r.dtype() != b1.dtype() && !is_floating(b1.dtype()))
    r = cast(r, b1.dtype());  // an integer batch sum keeps the dtype (torch.addbmm)
  return add_scaled("addbmm", autocast_arg(AutocastPolicy::kLower, input),
                    alpha == 1 ? r : mul(r, alpha), beta);
}
Tensor dot(const Tensor& a, const Tensor& b) {
  need_rank("dot", a, 1, "self");
  need_rank("dot", b, 1, "tensor");
  if (a.shape()[0] >= 0 && b.shape()[0] >= 0 && a.shape()[0] != b.shape()[0])
    fail("dot", "1-D tensors of different sizes: ", a.shape(), " and ", b.shape());
  op_util::require_same_dtype("dot", a, b);
  const AutocastGuard off(false);  // (as mv)
  if (is_floating(a.dtype())) return matmul(a, b);
  // Integers keep their dtype (torch.dot of int32 is int32), bools are refused as torch does.
  if (a.dtype() == Bool) fail("dot", "is not implemented for bool tensors (", a.shape(), ")");
  return cast(sum(mul(a, b)), a.dtype());
}
Tensor vdot(const Tensor& a, const Tensor& b) { return dot(a, b); }
Tensor outer(const Tensor& a, const Tensor& b) {
  need_rank("outer", a, 1, "self");
  need_rank("outer", b, 1, "vec2");
  return mul(unsqueeze(a, 1), unsqueeze(b, 0));
}
Tensor inner(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) fail("inner", "inputs must be defined");
  if (a.dim() > 0 && b.dim() > 0 && a.dtype() != b.dtype())
    fail("inner", "both tensors must have one dtype, got ", a.dtype(), a.shape(), " and ",
         b.dtype(), b.shape());
  if (a.dim() == 0 || b.dim() == 0) return mul(a, b);
  return tensordot(a, b, {a.dim() - 1}, {b.dim() - 1});
}

Tensor diagonal(const Tensor& a, int64_t offset, int64_t dim1, int64_t dim2) {
  if (!a.defined()) fail("diagonal", "input is undefined");
  if (a.dim() < 2) fail("diagonal", "input must have at least 2 dims, got shape ", a.shape());
  const Shape& s = a.shape();
  const int64_t d1 = wrap_dim(dim1, s, "diagonal"), d2 = wrap_dim(dim2, s, "diagonal");
  if (d1 == d2) fail("diagonal", "dim1 and dim2 cannot be the same dim (", d1, ")");
  for (int64_t d = 0; d < s.rank(); ++d)
    if (s[d] < 0) fail("diagonal", "needs a static size, got shape ", s);
  const int64_t n1 = s[d1], n2 = s[d2];
  const int64_t len = offset >= 0 ? std::max<int64_t>(0, std::min(n1, n2 - offset))
                                  : std::max<int64_t>(0, std::min(n1 + offset, n2));
  // A strided view of the contiguous input: other dims in order, then the diagonal.
  const Tensor c = contiguous(a);
  Strides st(static_cast<size_t>(s.rank()), 1);
  for (int64_t d = s.rank() - 2; d >= 0; --d) st[d] = st[d + 1] * std::max<int64_t>(s[d + 1], 1);
  std::vector<int64_t> sizes, strides;
  for (int64_t d = 0; d < s.rank(); ++d)
    if (d != d1 && d != d2) {
      sizes.push_back(s[d]);
      strides.push_back(st[d]);
    }
  sizes.push_back(len);
  strides.push_back(st[d1] + st[d2]);
  const int64_t start = len == 0 ? 0 : (offset >= 0 ? offset * st[d2] : -offset * st[d1]);
  return as_strided(c, sizes, strides, start);
}

Tensor diag_embed(const Tensor& a, int64_t offset, int64_t dim1, int64_t dim2) {
  if (!a.defined()) fail("diag_embed", "input is undefined");
  if (a.dim() < 1) fail("diag_embed", "input must have at least 1 dim, got a 0-d tensor");
  const int64_t r = a.dim() + 1;
  const int64_t d1 = wrap_dim(dim1, r, "diag_embed"), d2 = wrap_dim(dim2, r, "diag_embed");
  if (d1 == d2) fail("diag_embed", "dim1 and dim2 cannot be the same dim (", d1, ")");
  const int64_t len = a.shape()[a.dim() - 1];
  if (len < 0) fail("diag_embed", "needs a static size, got shape ", a.shape());
  const int64_t k = offset < 0 ? -offset : offset, n = len + k;
  // Row i of the [n, n] block holds v[i] at column i + offset (offset >= 0); for a negative
  // offset column j holds v[j] at row j - offset: a mask of the one diagonal times v broadcast
  // along rows or columns.
  const Tensor v = k == 0 ? a : pad(a, {0, k});
  const Tensor mask = cast(tril(triu(ones(Shape{n, n}, Float32), offset), offset), a.dtype());
  const Tensor m = mul(offset >= 0 ? unsqueeze(v, -1) : unsqueeze(v, -2), mask);
  // m's new dims are last (r - 2, r - 1); put them at d1, d2.
  std::vector<int64_t> perm(static_cast<size_t>(r), -1);
  perm[d1] = r - 2;
  perm[d2] = r - 1;
  int64_t next = 0;
  for (auto& p : perm)
    if (p < 0) p = next++;
  bool identity = true;
  for (int64_t i = 0; i < r; ++i) identity = identity && perm[i] == i;
  return identity ? m : permute(m, perm);
}

Tensor diag(const Tensor& a, int64_t diagonal_) {
  if (!a.defined()) fail("diag", "input is undefined");
  if (a.dim() == 1) return diag_embed(a, diagonal_, 0, 1);
  if (a.dim() == 2) return diagonal(a, diagonal_, 0, 1);
  fail("diag", "input must be 1-D or 2-D, got shape ", a.shape());
}

Tensor trace(const Tensor& a) {
  need_rank("trace", a, 2, "input");
  // Under autocast in float32, as torch.autocast's fp32 list (a sum of a diagonal).
  return sum(diagonal(autocast_arg(AutocastPolicy::kFloat32, a), 0, 0, 1));
}

Tensor tensordot(const Tensor& a, const Tensor& b, const std::vector<int64_t>& dims_a,
                 const std::vector<int64_t>& dims_b) {
  if (!a.defined() || !b.defined()) fail("tensordot", "inputs must be defined");
  // torch contracts one dtype only ("expected scalar type Int but found Long").
  if (a.dtype() != b.dtype())
    fail("tensordot", "both tensors must have one dtype, got ", a.dtype(), a.shape(), " and ",
         b.dtype(), b.shape());
  if (dims_a.size() != dims_b.size())
    fail("tensordot", "both dim lists must have the same length, got ", Shape(dims_a), " and ",
         Shape(dims_b));
  std::vector<bool> ca(static_cast<size_t>(a.dim())), cb(static_cast<size_t>(b.dim()));
  std::vector<int64_t> pa, pb, free_a, free_b;
  int64_t K = 1, Fa = 1, Fb = 1;
  for (size_t i = 0; i < dims_a.size(); ++i) {
    const int64_t da = wrap_dim(dims_a[i], a.shape(), "tensordot");
    const int64_t db = wrap_dim(dims_b[i], b.shape(), "tensordot");
    if (ca[da] || cb[db])
      fail("tensordot", "a dim appears twice in ", Shape(dims_a), " / ", Shape(dims_b));
    ca[da] = cb[db] = true;
    if (a.shape()[da] != b.shape()[db])
      fail("tensordot", "contracted dims differ in size: dim ", da, " of ", a.shape(), " and dim ",
           db, " of ", b.shape());
    K *= a.shape()[da];
  }
  for (int64_t d = 0; d < a.dim(); ++d)
    if (!ca[d]) {
      pa.push_back(d);
      free_a.push_back(a.shape()[d]);
      Fa *= a.shape()[d];
    }
  for (size_t i = 0; i < dims_a.size(); ++i)
    pa.push_back(wrap_dim(dims_a[i], a.shape(), "tensordot"));
  for (size_t i = 0; i < dims_b.size(); ++i)
    pb.push_back(wrap_dim(dims_b[i], b.shape(), "tensordot"));
  for (int64_t d = 0; d < b.dim(); ++d)
    if (!cb[d]) {
      pb.push_back(d);
      free_b.push_back(b.shape()[d]);
      Fb *= b.shape()[d];
    }
  const Tensor a2 = reshape(permute(a, pa), Shape{Fa, K});
  const Tensor b2 = reshape(permute(b, pb), Shape{K, Fb});
  // (integers: matmul's float64 path, in their own dtype as torch; bool: a sum of products)
  const Tensor r =
      a.dtype() != Bool ? matmul(a2, b2) : sum(mul(unsqueeze(a2, 2), unsqueeze(b2, 0)), {1});
  Shape out(free_a);
  for (auto x : free_b) out.push_back(x);
  return reshape(r, out);
}

Tensor tensordot(const Tensor& a, const Tensor& b, int64_t dims) {
  if (!a.defined() || !b.defined()) fail("tensordot", "inputs must be defined");
  if (dims < 0 || dims > a.dim() || dims > b.dim())
    fail("tensordot", "dims must be in [0, min(rank)], got ", dims, " for shapes ", a.shape(),
         " and ", b.shape());
  std::vector<int64_t> da, db;
  for (int64_t i = 0; i < dims; ++i) {
    da.push_back(a.dim() - dims + i);
    db.push_back(i);
  }
  return tensordot(a, b, da, db);
}

Tensor kron(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) fail("kron", "inputs must be defined");
  const int64_t r = std::max(a.dim(), b.dim());
  Shape sa(static_cast<size_t>(r - a.dim()), 1), sb(static_cast<size_t>(r - b.dim()), 1);
  for (auto x : a.shape()) sa.push_back(x);
  for (auto x : b.shape()) sb.push_back(x);
  // a as [a0, 1, a1, 1, ...] times b as [1, b0, 1, b1, ...], then merged pairwise.
  Shape ea, eb, out;
  for (int64_t d = 0; d < r; ++d) {
    ea.push_back(sa[d]);
    ea.push_back(1);
    eb.push_back(1);
    eb.push_back(sb[d]);
    out.push_back(sa[d] * sb[d]);
  }
  return reshape(mul(reshape(a, ea), reshape(b, eb)), out);
}

Tensor cross(const Tensor& a, const Tensor& b, int64_t dim) {
  if (!a.defined() || !b.defined()) fail("linalg_cross", "inputs must be defined");
  const Shape s = broadcast_shapes(a.shape(), b.shape(), "linalg_cross");
  const int64_t d = wrap_dim(dim, s, "linalg_cross");
  if (a.dim() != b.dim() && (a.dim() == 0 || b.dim() == 0))
    fail("linalg_cross", "inputs must have the same rank, got ", a.shape(), " and ", b.shape());
  if (s[d] != 3)
    fail("linalg_cross", "dim ", d, " must have size 3, got shapes ", a.shape(), " and ",
         b.shape());
  const Tensor x = a.shape() == s ? a : expand(a, s), y = b.shape() == s ? b : expand(b, s);
  auto at = [&](const Tensor& t, int64_t i) { return slice(t, d, i, i + 1); };
  const Tensor c0 = sub(mul(at(x, 1), at(y, 2)), mul(at(x, 2), at(y, 1)));
  const Tensor c1 = sub(mul(at(x, 2), at(y, 0)), mul(at(x, 0), at(y, 2)));
  const Tensor c2 = sub(mul(at(x, 0), at(y, 1)), mul(at(x, 1), at(y, 0)));
  return cat({c0, c1, c2}, d);
}

}  // namespace kiln
