// Sorting and searching family: topk (with sort and argsort as its k = all form, stable, NaN
// largest as in torch) and searchsorted (with bucketize): positions found by comparing values.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kiln/dispatch/dispatch.h"
#include "kiln/ops/index_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using op_util::check_eager_range;
using op_util::known;
using op_util::nan_of;
using op_util::one;
using op_util::prod;
using op_util::zeros_as;

// ---- topk / sort ----------------------------------------------------------------------------
// Attrs: k (-1: the whole dim, i.e. sort), dim, largest. Outputs: values, int64 indices, both of
// x's shape with dim of length k. Order: largest (or smallest) first, equal values by index
// (a stable sort), NaN larger than every number (torch's order for sort and topk).

int64_t topk_len(const char* op, const Shape& s, const Attrs& a) {
  const int64_t d = wrap_dim(a.i(1), s, op);
  const int64_t n = s[d], k = a.i(0);
  if (k < -1) fail(op, "k must be >= 0, got ", k, " (input ", s, ", dim ", a.i(1), ")");
  if (k == -1) return n;
  if (n >= 0 && k > n) fail(op, "k = ", k, " is larger than dim ", d, " of shape ", s);
  return k;
}

MetaList infer_topk(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  op_util::require_numeric("topk", x);
  if (x.dtype() == Bool) fail("topk", "input must be numeric, not bool (", x.shape(), ")");
  if (x.dim() == 0) fail("topk", "input must have at least one dim, got a 0-d tensor");
  (void)a.b(2);
  Shape o = x.shape();
  o[wrap_dim(a.i(1), x.shape(), "topk")] = topk_len("topk", x.shape(), a);
  MetaList m;
  m.push_back(TensorMeta{x.dtype(), o});
  m.push_back(TensorMeta{Int64, o});
  return m;
}

void topk_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor x = in[0].is_contiguous() ? in[0] : raw_contiguous_copy(in[0]);
  const Shape& s = x.shape();
  const int64_t d = wrap_dim(a.i(1), s, "topk");
  const int64_t n = s[d], k = topk_len("topk", s, a);
  const bool largest = a.b(2);
  const int64_t outer = prod(s, 0, d), inner = prod(s, d + 1, s.rank());
  if (outer * inner * k == 0) return;
  int64_t* oi = out[1].data_ptr<int64_t>();
  KILN_DISPATCH_NUMERIC(x.dtype(), "topk", [&] {
    using T = scalar_t;
    const T* p = x.data_ptr<T>();
    T* ov = out[0].data_ptr<T>();
    parallel_for(outer * inner, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)),
                 [&](int64_t b, int64_t e) {
                   std::vector<int64_t> idx(static_cast<size_t>(n));
                   for (int64_t r = b; r < e; ++r) {
                     const int64_t i = r / inner, j = r % inner;
                     const T* row = p + i * n * inner + j;
                     auto at = [&](int64_t t) { return row[t * inner]; };
                     // a before b: NaN first when largest (last otherwise), then by value,
                     // then by index.
                     auto before = [&](int64_t u, int64_t v) {
                       const T x = at(u), y = at(v);
                       const bool nx = nan_of(x), ny = nan_of(y);
                       if (nx || ny) {
                         if (nx && ny) return u < v;
                         return largest ? nx : ny;
                       }
                       if (x != y) return largest ? x > y : x < y;
                       return u < v;
                     };
                     std::iota(idx.begin(), idx.end(), int64_t{0});
                     if (k < n)
                       std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), before);
                     else
                       std::sort(idx.begin(), idx.end(), before);
                     for (int64_t t = 0; t < k; ++t) {
                       const int64_t o = (i * k + t) * inner + j;
                       ov[o] = at(idx[static_cast<size_t>(t)]);
                       oi[o] = idx[static_cast<size_t>(t)];
                     }
                   }
                 });
  });
}

const OpDef& kTopk = def_op(
    {.name = "topk",
     .num_outputs = 2,
     .attr_names = {"k", "dim", "largest"},
     .infer = infer_topk,
     .kernel = topk_kernel,
     // values = gather(x, dim, indices): the gradient goes back to the positions picked
     // (scatter_add into zeros; the indices are distinct within a row).
     .grad =
         [](const GradCtx& c) {
           if (!c.flowed(0)) return TensorList{Tensor()};
           return TensorList{
               scatter_add(zeros_as(c.in(0), c.g(0).dtype()), c.attrs.i(1), c.out(1), c.g(0))};
         },
     .doc = "the k largest (or smallest) entries along dim, sorted, and their int64 indices"});

// ---- searchsorted ---------------------------------------------------------------------------
// Inputs: sorted_sequence (1-D, or [..., M] with the values' leading dims), values. Attrs:
// right, out_int32.

MetaList infer_searchsorted(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& s = in[0];
  const Tensor& v = in[1];
  (void)a.b(0);
  op_util::require_numeric("searchsorted", s);
  if (s.dtype() != v.dtype())
    fail("searchsorted", "sorted_sequence dtype ", s.dtype(), " must equal the values' ",
         v.dtype());
  if (s.dim() == 0) fail("searchsorted", "sorted_sequence must have at least 1 dim, got 0-d");
  if (s.dim() > 1) {
    bool ok = v.dim() == s.dim();
    for (int64_t d = 0; ok && d + 1 < s.dim(); ++d)
      ok = !known(s.shape()[d], v.shape()[d]) || s.shape()[d] == v.shape()[d];
    if (!ok)
      fail("searchsorted", "sorted_sequence ", s.shape(), " and values ", v.shape(),
           " must agree on all dims but the last (or sorted_sequence be 1-D)");
  }
  return one(a.b(1) ? Int32 : Int64, v.shape());
}

void searchsorted_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& s = in[0];
  const Tensor& v = in[1];
  const bool right = a.b(0), i32 = a.b(1);
  const int64_t M = s.shape()[s.dim() - 1];
  const int64_t nv = v.numel();
  if (nv == 0) return;
  const int64_t per = s.dim() == 1 ? nv : v.shape()[v.dim() - 1];  // values per sequence
  KILN_DISPATCH_NUMERIC(s.dtype(), "searchsorted", [&] {
    using T = scalar_t;
    const T* S = s.data_ptr<T>();
    const T* V = v.data_ptr<T>();
    // NaN sorts last, as torch's comparator.
    auto less = [](T x, T y) {
      if (nan_of(y)) return !nan_of(x);
      return x < y;
    };
    parallel_for(nv, 4096, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const T* row = S + (s.dim() == 1 ? 0 : (i / per) * M);
        const T x = V[i];
        const T* p = right ? std::upper_bound(row, row + M, x, less)
                           : std::lower_bound(row, row + M, x, less);
        const int64_t r = p - row;
        if (i32)
          out[0].data_ptr<int32_t>()[i] = static_cast<int32_t>(r);
        else
          out[0].data_ptr<int64_t>()[i] = r;
      }
    });
  });
}

const OpDef& kSearchsorted =
    def_op({.name = "searchsorted",
            .num_inputs = 2,
            .attr_names = {"right", "out_int32"},
            .infer = infer_searchsorted,
            .kernel = searchsorted_kernel,
            .contiguous_inputs = true,
            .doc = "insertion indices of values into the sorted last dim of sorted_sequence"});

}  // namespace

// Bool inputs order as 0 < 1 (torch): they run on uint8 and the values come back as bool.
std::pair<Tensor, Tensor> topk(const Tensor& a, int64_t k, int64_t dim, bool largest) {
  if (k < 0) fail("topk", "k must be >= 0, got ", k);
  // A 0-d tensor is its own top 1 (torch), index 0.
  if (a.defined() && a.dim() == 0 && k == 1) {
    if (dim != 0 && dim != -1) fail("topk", "dim ", dim, " is out of range for a 0-d tensor");
    return {clone(a), zeros_like(cast(a, Int64))};  // (symbolic in a graph too)
  }
  const bool b = a.defined() && a.dtype() == Bool;
  TensorList r = call(kTopk, {b ? cast(a, UInt8) : a}, {k, dim, largest});
  return {b ? cast(r[0], Bool) : r[0], r[1]};
}

std::pair<Tensor, Tensor> sort(const Tensor& a, int64_t dim, bool descending) {
  // A 0-d tensor sorts to itself, index 0 (torch).
  if (a.defined() && a.dim() == 0) {
    if (dim != 0 && dim != -1) fail("sort", "dim ", dim, " is out of range for a 0-d tensor");
    return {clone(a), zeros_like(cast(a, Int64))};  // (symbolic in a graph too)
  }
  const bool b = a.defined() && a.dtype() == Bool;
  TensorList r = call(kTopk, {b ? cast(a, UInt8) : a}, {int64_t{-1}, dim, descending});
  return {b ? cast(r[0], Bool) : r[0], r[1]};
}

Tensor argsort(const Tensor& a, int64_t dim, bool descending) {
  return sort(a, dim, descending).second;
}

// ---- searchsorted / bucketize ---------------------------------------------------------------

Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& values, bool out_int32, bool right,
                    const Tensor& sorter) {
  if (!sorted_sequence.defined() || !values.defined()) fail("searchsorted", "undefined input");
  Tensor s = sorted_sequence, v = values;
  if (sorter.defined()) {
    op_util::require_index("searchsorted", sorter, "sorter");
    if (sorter.shape() != s.shape())
      fail("searchsorted", "sorter shape ", sorter.shape(), " must equal sorted_sequence's ",
           s.shape());
    if (s.dim() > 0)
      check_eager_range("searchsorted", sorter, s.shape()[s.dim() - 1], false,
                        "the last dim of sorted_sequence");
    s = gather(s, -1, sorter);
  }
  if (s.dtype() != v.dtype()) {
    const DType t = promote(s.dtype(), v.dtype());
    s = cast(s, t);
    v = cast(v, t);
  }
  return call1(kSearchsorted, {s, v}, {right, out_int32});
}

Tensor bucketize(const Tensor& input, const Tensor& boundaries, bool out_int32, bool right) {
  if (!input.defined() || !boundaries.defined()) fail("bucketize", "undefined input");
  if (boundaries.dim() != 1)
    fail("bucketize", "boundaries must be 1-D, got shape ", boundaries.shape());
  return searchsorted(boundaries, input, out_int32, right);
}

}  // namespace kiln
