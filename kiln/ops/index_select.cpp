// Row-indexing family: index_select, embedding, index_add (the row form of scatter_add) and
// index_select_grad (the index_add into zeros that is the gradient of index_select and
// embedding); one_hot. One index per slice along a dim: rows are copied or accumulated whole.
#include <algorithm>
#include <cstring>

#include "kiln/dispatch/dispatch.h"
#include "kiln/ops/index_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using op_util::back_to_bool;
using op_util::known;
using op_util::one;
using op_util::prod;
using op_util::u8;
using op_util::zeros_as;

// ---- index_select / embedding rows ----------------------------------------------------------

// out[o, i, :] = x[o, idx[i], :] for x viewed as [outer, V, inner].
template <typename T, typename I>
void select_rows(const T* X, const I* ip, T* O, int64_t outer, int64_t V, int64_t n,
                 int64_t inner) {
  parallel_for(outer * n, std::max<int64_t>(1, 32768 / std::max<int64_t>(inner, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t r = b; r < e; ++r) {
                   int64_t o = r / n;
                   const T* s = X + (o * V + static_cast<int64_t>(ip[r % n])) * inner;
                   if (inner == 1)
                     O[r] = *s;
                   else
                     std::memcpy(O + r * inner, s, static_cast<size_t>(inner) * sizeof(T));
                 }
               });
}

// out[o, idx[i], :] += g[o, i, :] for out viewed as [outer, V, inner], g as [outer, n, inner].
template <typename T, typename I>
void add_rows(const T* G, const I* ip, T* O, int64_t outer, int64_t V, int64_t n, int64_t inner) {
  // Tasks own disjoint (outer, column block) pairs: repeated indices never race.
  const int64_t blk = 256;
  int64_t nblk = (inner + blk - 1) / blk;
  int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, n * std::min(inner, blk)));
  parallel_for(outer * nblk, grain, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t o = t / nblk, j0 = (t % nblk) * blk, j1 = std::min(inner, j0 + blk);
      for (int64_t i = 0; i < n; ++i) {
        T* orow = O + (o * V + static_cast<int64_t>(ip[i])) * inner;
        const T* grow = G + (o * n + i) * inner;
#pragma omp simd
        for (int64_t j = j0; j < j1; ++j) orow[j] += grow[j];
      }
    }
  });
}

MetaList infer_index_select(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  const Tensor& idx = in[1];
  op_util::require_index("index_select", idx);
  if (x.dim() == 0) fail("index_select", "input must have at least 1 dim, got shape ", x.shape());
  if (idx.dim() > 1)
    fail("index_select", "index must be 0-d or 1-d, got shape ", idx.shape(), " (input ", x.shape(),
         ")");
  int64_t dim = wrap_dim(a.i(0), x.dim(), "index_select");
  Shape s = x.shape();
  s[dim] = idx.numel();
  return one(x.dtype(), s);
}

void index_select_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  const Tensor& idx = in[1];
  int64_t dim = wrap_dim(a.i(0), x.dim(), "index_select");
  const Shape& xs = x.shape();
  int64_t outer = prod(xs, 0, dim), V = xs[dim], inner = prod(xs, dim + 1, xs.rank());
  int64_t n = idx.numel();
  op_util::with_index(idx, "index_select", [&](auto* ip) {
    op_util::check_range("index_select", ip, n, V, "dim of the input", idx.shape());
    if (outer * n * inner == 0) return;
    KILN_DISPATCH_ALL_TYPES(x.dtype(), "index_select", [&] {
      select_rows(x.data_ptr<scalar_t>(), ip, out[0].data_ptr<scalar_t>(), outer, V, n, inner);
    });
  });
}

// index_select_grad(g, index; dim, size): zeros with g.shape but `size` along dim, then
// out[o, index[i], :] += g[o, i, :] (index read flat, so embedding can share it).
MetaList infer_index_select_grad(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& g = in[0];
  const Tensor& idx = in[1];
  op_util::require_index("index_select_grad", idx);
  op_util::require_numeric("index_select_grad", g);
  if (g.dim() == 0) fail("index_select_grad", "gradient must have at least 1 dim, got ", g.shape());
  int64_t dim = wrap_dim(a.i(0), g.dim(), "index_select_grad");
  if (known(g.shape()[dim], idx.numel()) && g.shape()[dim] != idx.numel())
    fail("index_select_grad", "gradient shape ", g.shape(), " has ", g.shape()[dim],
         " entries along dim ", dim, " but the index has ", idx.numel(), " (shape ", idx.shape(),
         ")");
  Shape s = g.shape();
  s[dim] = a.i(1);
  return one(g.dtype(), s);
}

void index_select_grad_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& g = in[0];
  const Tensor& idx = in[1];
  int64_t dim = wrap_dim(a.i(0), g.dim(), "index_select_grad");
  int64_t V = a.i(1);
  const Shape& gs = g.shape();
  int64_t outer = prod(gs, 0, dim), n = gs[dim], inner = prod(gs, dim + 1, gs.rank());
  std::memset(out[0].raw_data(), 0, static_cast<size_t>(out[0].numel()) * out[0].element_size());
  op_util::with_index(idx, "index_select_grad", [&](auto* ip) {
    op_util::check_range("index_select_grad", ip, n, V, "dim of the result", idx.shape());
    if (outer * n * inner == 0) return;
    KILN_DISPATCH_NUMERIC(g.dtype(), "index_select_grad", [&] {
      add_rows(g.data_ptr<scalar_t>(), ip, out[0].data_ptr<scalar_t>(), outer, V, n, inner);
    });
  });
}

MetaList infer_embedding(std::span<const Tensor> in, const Attrs&) {
  const Tensor& w = in[0];
  const Tensor& idx = in[1];
  op_util::require_index("embedding", idx, "indices");
  if (w.dim() != 2) fail("embedding", "weight must be 2-D [V, D], got shape ", w.shape());
  Shape s = idx.shape();
  s.push_back(w.shape()[1]);
  return one(w.dtype(), s);
}

void embedding_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor& w = in[0];
  const Tensor& idx = in[1];
  int64_t V = w.shape()[0], D = w.shape()[1], n = idx.numel();
  op_util::with_index(idx, "embedding", [&](auto* ip) {
    for (int64_t i = 0; i < n; ++i) {
      int64_t v = static_cast<int64_t>(ip[i]);
      if (v < 0 || v >= V)
        fail("embedding", "index ", v, " is out of range for a weight with V = ", V,
             " rows (weight ", w.shape(), ", indices ", idx.shape(), ")");
    }
    if (n * D == 0) return;
    KILN_DISPATCH_ALL_TYPES(w.dtype(), "embedding", [&] {
      select_rows(w.data_ptr<scalar_t>(), ip, out[0].data_ptr<scalar_t>(), 1, V, n, D);
    });
  });
}

Tensor flat_index(const Tensor& idx) { return idx.dim() == 1 ? idx : reshape(idx, Shape{-1}); }

const OpDef& kIndexSelectGrad = def_op(
    {.name = "index_select_grad",
     .num_inputs = 2,
     .attr_names = {"dim", "size"},
     .infer = infer_index_select_grad,
     .kernel = index_select_grad_kernel,
     // Linear in g and the adjoint of index_select: its gradient is index_select(gg, dim, index).
     .grad =
         [](const GradCtx& c) {
           return TensorList{
               c.need(0) ? index_select(c.g(), c.attrs.i(0), flat_index(c.in(1))) : Tensor(),
               Tensor()};
         },
     .contiguous_inputs = true,
     .doc = "zeros with `size` along dim, g's slices added at index (gradient of index_select)"});

const OpDef& kIndexSelect = def_op(
    {.name = "index_select",
     .num_inputs = 2,
     .attr_names = {"dim"},
     .infer = infer_index_select,
     .kernel = index_select_kernel,
     // rows picked by index: the gradient adds each output row back into the row it came from.
     .grad =
         [](const GradCtx& c) {
           Tensor ga;
           if (c.need(0)) {
             int64_t dim = wrap_dim(c.attrs.i(0), c.in(0).dim(), "index_select");
             const int64_t size = c.in(0).shape()[dim];
             // A dynamic source size is known only at run time: add into zeros shaped like it.
             ga = size >= 0 ? call1(kIndexSelectGrad, {c.g(), c.in(1)}, {dim, size})
                            : index_add(zeros_as(c.in(0), c.g().dtype()), dim, flat_index(c.in(1)),
                                        c.g());
           }
           return TensorList{ga, Tensor()};
         },
     .contiguous_inputs = true,
     .doc = "slices of a along dim at the given indices",
     .native_dtypes = kAllDTypes});

// index_add(a, dim, index, src): a copy of a with src's slices added at index along dim
// (torch.index_add). The row form of scatter_add that MoE's combine step needs: one index per
// slice instead of an expanded index tensor per element.
MetaList infer_index_add(std::span<const Tensor> in, const Attrs& at) {
  const Tensor& a = in[0];
  const Tensor& idx = in[1];
  const Tensor& src = in[2];
  op_util::require_index("index_add", idx);
  op_util::require_numeric("index_add", a);
  op_util::require_same_dtype("index_add", a, src);
  if (a.dim() == 0) fail("index_add", "input must have at least 1 dim, got shape ", a.shape());
  if (idx.dim() > 1)
    fail("index_add", "index must be 0-d or 1-d, got shape ", idx.shape(), " (input ", a.shape(),
         ")");
  int64_t dim = wrap_dim(at.i(0), a.dim(), "index_add");
  bool ok = src.dim() == a.dim();
  for (int64_t d = 0; ok && d < a.dim(); ++d) {
    int64_t want = d == dim ? idx.numel() : a.shape()[d];
    ok = !known(src.shape()[d], want) || src.shape()[d] == want;
  }
  if (!ok)
    fail("index_add", "src shape ", src.shape(), " must equal input shape ", a.shape(),
         " with dim ", dim, " of the index's length ", idx.numel());
  return one(a.dtype(), a.shape());
}

void index_add_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& at) {
  const Tensor& a = in[0];
  const Tensor& idx = in[1];
  const Tensor& src = in[2];
  int64_t dim = wrap_dim(at.i(0), a.dim(), "index_add");
  const Shape& as = a.shape();
  int64_t outer = prod(as, 0, dim), V = as[dim], inner = prod(as, dim + 1, as.rank());
  int64_t n = idx.numel();
  std::memcpy(out[0].raw_data(), a.raw_data(), static_cast<size_t>(a.numel()) * a.element_size());
  op_util::with_index(idx, "index_add", [&](auto* ip) {
    op_util::check_range("index_add", ip, n, V, "dim of the input", idx.shape());
    if (outer * n * inner == 0) return;
    KILN_DISPATCH_NUMERIC(a.dtype(), "index_add", [&] {
      add_rows(src.data_ptr<scalar_t>(), ip, out[0].data_ptr<scalar_t>(), outer, V, n, inner);
    });
  });
}

const OpDef& kIndexAdd = def_op(
    {.name = "index_add",
     .num_inputs = 3,
     .attr_names = {"dim"},
     .infer = infer_index_add,
     .kernel = index_add_kernel,
     // out = a + A(src) with A linear: d/da = g; d/dsrc = A^T g = index_select(g, dim, index).
     .grad =
         [](const GradCtx& c) {
           Tensor gs;
           if (c.need(2)) gs = index_select(c.g(), c.attrs.i(0), flat_index(c.in(1)));
           return TensorList{c.need(0) ? c.g() : Tensor(), Tensor(), gs};
         },
     .contiguous_inputs = true,
     .doc = "copy of a with src's slices added at index along dim, as torch.index_add"});

const OpDef& kEmbedding = def_op(
    {.name = "embedding",
     .num_inputs = 2,
     .infer = infer_embedding,
     .kernel = embedding_kernel,
     // out[i, :] = w[idx[i], :]: dw = index_add of the rows of g into zeros [V, D].
     .grad =
         [](const GradCtx& c) {
           Tensor gw;
           if (c.need(0)) {
             const Tensor& w = c.in(0);
             int64_t D = w.shape()[1];
             Tensor g2 = reshape(c.g(), Shape{c.in(1).numel(), D});
             gw = w.shape()[0] >= 0
                      ? call1(kIndexSelectGrad, {g2, c.in(1)}, {int64_t(0), w.shape()[0]})
                      : index_add(zeros_as(w, g2.dtype()), 0, flat_index(c.in(1)), g2);
           }
           return TensorList{gw, Tensor()};
         },
     .contiguous_inputs = true,
     .doc = "rows of weight [V, D] picked by integer indices (any shape) -> indices.shape + [D]",
     .native_dtypes = kAllDTypes});

}  // namespace

Tensor index_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) {
  return back_to_bool(call1(kIndexAdd, {u8(a), index, u8(src)}, {dim}), a);
}

Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index) {
  return call1(kIndexSelect, {a, index}, {dim});
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  return call1(kEmbedding, {weight, indices});
}

// A comparison against arange: works on symbolic indices too. Eager indices are checked first
// (out-of-range ones would give all-zero rows, which torch refuses).
Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  if (!indices.defined()) fail("one_hot", "indices are undefined");
  if (indices.dtype() != Int64 && indices.dtype() != Int32)
    fail("one_hot", "indices must be int64 or int32, got ", indices.dtype(), indices.shape());
  if (num_classes <= 0 || num_classes > (int64_t(1) << 40))
    fail("one_hot", "num_classes must be in [1, 2^40], got ", num_classes);
  if (indices.is_concrete() && indices.numel() > 0) {
    const Tensor lo = min(indices), hi = max(indices);
    const int64_t l = lo.item<int64_t>(), h = hi.item<int64_t>();
    if (l < 0 || h >= num_classes)
      fail("one_hot", "indices must lie in [0, ", num_classes, "), got values in [", l, ", ", h,
           "] (shape ", indices.shape(), ")");
  }
  const Tensor classes = arange(0, static_cast<double>(num_classes), 1, indices.dtype());
  return cast(eq(unsqueeze(indices, -1), classes), Int64);
}

}  // namespace kiln
