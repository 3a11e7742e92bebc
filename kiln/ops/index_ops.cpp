// Indexing family: gather, scatter_add, index_select, embedding, index_select_grad (the
// index_add into zeros that is the gradient of index_select and embedding), topk (with sort
// and argsort as its k = all form), and tril/triu (entries kept by their position). Kernels take
// contiguous inputs, check every index before any parallel loop, then copy/accumulate rows.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kiln/dispatch/dispatch.h"
#include "kiln/ops/index_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using op_util::one;
using op_util::prod;

// Offsets of positions along a run of dims, as a table or (when the index and the tensor
// agree on those sizes, the common case) as i * scale without a table.
struct Offs {
  bool ident = true;
  int64_t scale = 1;
  std::vector<int64_t> tab;
  int64_t operator[](int64_t i) const { return ident ? i * scale : tab[static_cast<size_t>(i)]; }
};

// Offsets in contiguous tensor t (shape ts) of the index positions over dims [0, dim).
Offs outer_offs(const Shape& is, const Shape& ts, int64_t dim) {
  Offs o;
  bool same = true;
  for (int64_t d = 0; d < dim; ++d) same = same && is[d] == ts[d];
  if (same) {
    o.scale = prod(ts, dim, ts.rank());
  } else {
    o.ident = false;
    o.tab = op_util::dim_offsets(is, contiguous_strides(ts), 0, dim);
  }
  return o;
}

// Same for dims (dim, rank): identity offsets when the sizes agree.
Offs inner_offs(const Shape& is, const Shape& ts, int64_t dim) {
  Offs o;
  bool same = true;
  for (int64_t d = dim + 1; d < ts.rank(); ++d) same = same && is[d] == ts[d];
  if (!same) {
    o.ident = false;
    o.tab = op_util::dim_offsets(is, contiguous_strides(ts), dim + 1, ts.rank());
  }
  return o;
}

bool known(int64_t a, int64_t b) { return a >= 0 && b >= 0; }

// ---- gather ---------------------------------------------------------------------------------

MetaList infer_gather(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  const Tensor& idx = in[1];
  op_util::require_index("gather", idx);
  if (x.dim() == 0) fail("gather", "input must have at least 1 dim, got shape ", x.shape());
  int64_t dim = wrap_dim(a.i(0), x.dim(), "gather");
  if (idx.dim() != x.dim())
    fail("gather", "index rank ", idx.dim(), " must equal input rank ", x.dim(), " (input ",
         x.shape(), ", index ", idx.shape(), ")");
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != dim && known(idx.shape()[d], x.shape()[d]) && idx.shape()[d] > x.shape()[d])
      fail("gather", "index shape ", idx.shape(), " exceeds input shape ", x.shape(), " at dim ", d,
           " (only dim ", dim, " may differ freely)");
  return one(x.dtype(), idx.shape());
}

void gather_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  const Tensor& idx = in[1];
  int64_t dim = wrap_dim(a.i(0), x.dim(), "gather");
  const Shape& is = idx.shape();
  const Shape& xs = x.shape();
  int64_t outer = prod(is, 0, dim), n = is[dim], inner = prod(is, dim + 1, is.rank());
  if (outer * n * inner == 0) return;
  Offs xo = outer_offs(is, xs, dim), xi = inner_offs(is, xs, dim);
  int64_t sd = prod(xs, dim + 1, xs.rank());
  op_util::with_index(idx, "gather", [&](auto* ip) {
    op_util::check_range("gather", ip, idx.numel(), xs[dim], "dim of the input", is);
    KILN_DISPATCH_ALL_TYPES(x.dtype(), "gather", [&] {
      const scalar_t* X = x.data_ptr<scalar_t>();
      scalar_t* O = out[0].data_ptr<scalar_t>();
      parallel_for(outer * n, std::max<int64_t>(1, 32768 / inner), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const scalar_t* base = X + xo[r / n];
          const auto* rp = ip + r * inner;
          scalar_t* o = O + r * inner;
          if (xi.ident) {
            for (int64_t j = 0; j < inner; ++j) o[j] = base[rp[j] * sd + j];
          } else {
            for (int64_t j = 0; j < inner; ++j) o[j] = base[rp[j] * sd + xi[j]];
          }
        }
      });
    });
  });
}

// ---- scatter_add ----------------------------------------------------------------------------

MetaList infer_scatter_add(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  const Tensor& idx = in[1];
  const Tensor& src = in[2];
  op_util::require_index("scatter_add", idx);
  op_util::require_numeric("scatter_add", x);
  op_util::require_same_dtype("scatter_add", x, src);
  if (x.dim() == 0) fail("scatter_add", "input must have at least 1 dim, got shape ", x.shape());
  int64_t dim = wrap_dim(a.i(0), x.dim(), "scatter_add");
  if (idx.dim() != x.dim() || src.dim() != x.dim())
    fail("scatter_add", "input, index and src must have the same rank, got input ", x.shape(),
         ", index ", idx.shape(), ", src ", src.shape());
  for (int64_t d = 0; d < x.dim(); ++d) {
    int64_t id = idx.shape()[d];
    if (known(id, src.shape()[d]) && id > src.shape()[d])
      fail("scatter_add", "index shape ", idx.shape(), " exceeds src shape ", src.shape(),
           " at dim ", d);
    if (d != dim && known(id, x.shape()[d]) && id > x.shape()[d])
      fail("scatter_add", "index shape ", idx.shape(), " exceeds input shape ", x.shape(),
           " at dim ", d);
  }
  return one(x.dtype(), x.shape());
}

void scatter_add_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  const Tensor& idx = in[1];
  const Tensor& src = in[2];
  int64_t dim = wrap_dim(a.i(0), x.dim(), "scatter_add");
  const Shape& is = idx.shape();
  const Shape& xs = x.shape();
  const Shape& ss = src.shape();
  std::memcpy(out[0].raw_data(), x.raw_data(), static_cast<size_t>(x.numel()) * x.element_size());
  int64_t outer = prod(is, 0, dim), n = is[dim], inner = prod(is, dim + 1, is.rank());
  if (outer * n * inner == 0) return;
  Offs xo = outer_offs(is, xs, dim), xi = inner_offs(is, xs, dim);
  Offs so = outer_offs(is, ss, dim), si = inner_offs(is, ss, dim);
  int64_t xsd = prod(xs, dim + 1, xs.rank()), ssd = prod(ss, dim + 1, ss.rank());
  // Tasks own disjoint (outer, column block) pairs, so no two tasks add into the same element.
  const int64_t blk = 256;
  int64_t nblk = (inner + blk - 1) / blk;
  op_util::with_index(idx, "scatter_add", [&](auto* ip) {
    op_util::check_range("scatter_add", ip, idx.numel(), xs[dim], "dim of the input", is);
    KILN_DISPATCH_NUMERIC(x.dtype(), "scatter_add", [&] {
      scalar_t* O = out[0].data_ptr<scalar_t>();
      const scalar_t* S = src.data_ptr<scalar_t>();
      int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, n * std::min(inner, blk)));
      parallel_for(outer * nblk, grain, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          int64_t o = t / nblk, j0 = (t % nblk) * blk, j1 = std::min(inner, j0 + blk);
          scalar_t* ob = O + xo[o];
          const scalar_t* sb = S + so[o];
          for (int64_t k = 0; k < n; ++k) {
            const auto* rp = ip + (o * n + k) * inner;
            const scalar_t* sr = sb + k * ssd;
            for (int64_t j = j0; j < j1; ++j) ob[rp[j] * xsd + xi[j]] += sr[si[j]];
          }
        }
      });
    });
  });
}

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

// Zeros shaped like `like` at run time (a graph's dims may be dynamic) in dtype dt.
Tensor zeros_as(const Tensor& like, DType dt) {
  Tensor z = zeros_like(like);
  return z.dtype() == dt ? z : cast(z, dt);
}

// Pads t with zeros at the end of each dim up to `shape` (src larger than index in scatter_add).
// The zeros are shaped from t (its other dims may be dynamic in a graph). A dynamic src dim is
// taken to equal t's (the engine's reduction to src's shape checks it when the graph runs); a
// dynamic t dim against a static src dim leaves the amount unknown.
Tensor pad_to(Tensor t, const Shape& shape) {
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t have = t.shape()[d], want = shape[d];
    if (have == want || want < 0 || (have >= 0 && have > want)) continue;
    if (have < 0)
      fail("scatter_add", "needs a static size: the gradient of src ", shape,
           " from an index of shape ", t.shape(), " pads dim ", d, ", whose size is dynamic");
    Shape block(static_cast<size_t>(t.dim()), -1);
    block[d] = want - have;
    t = cat({t, expand(zeros_like(sum(t, {d}, true)), block)}, d);
  }
  return t;
}

const OpDef& kGather =
    def_op({.name = "gather",
            .num_inputs = 2,
            .attr_names = {"dim"},
            .infer = infer_gather,
            .kernel = gather_kernel,
            // out[..., k, ...] = a[..., index[..., k, ...], ...]: each a element receives the sum
            // of the gradients of the outputs that read it, i.e. scatter_add into zeros.
            .grad =
                [](const GradCtx& c) {
                  Tensor ga;
                  if (c.need(0))
                    ga =
                        scatter_add(zeros_as(c.in(0), c.g().dtype()), c.attrs.i(0), c.in(1), c.g());
                  return TensorList{ga, Tensor()};
                },
            .contiguous_inputs = true,
            .doc = "out[i][j] = a[i][index[i][j]] (dim 1), as torch.gather",
            .native_dtypes = kAllDTypes});

const OpDef& kScatterAdd =
    def_op({.name = "scatter_add",
            .num_inputs = 3,
            .attr_names = {"dim"},
            .infer = infer_scatter_add,
            .kernel = scatter_add_kernel,
            // out = a + S(src), S linear: d/da = identity; d/dsrc = S^T g = gather(g, dim, index),
            // zero for src elements outside the index's extent.
            .grad =
                [](const GradCtx& c) {
                  Tensor gs;
                  if (c.need(2)) gs = pad_to(gather(c.g(), c.attrs.i(0), c.in(1)), c.in(2).shape());
                  return TensorList{c.need(0) ? c.g() : Tensor(), Tensor(), gs};
                },
            .contiguous_inputs = true,
            .doc = "copy of a with src added at index along dim, as torch.scatter_add"});

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

template <typename T>
bool nan_of(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  return false;
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

// ---- tril / triu -----------------------------------------------------------------------------
// Over the last two dims: tril keeps x[..., i, j] with j - i <= diagonal, triu those with
// j - i >= diagonal; the rest become 0. Linear and self-adjoint: the gradient is the same op.

template <bool Upper>
void tri_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor x = in[0].is_contiguous() ? in[0] : raw_contiguous_copy(in[0]);
  const Shape& s = x.shape();
  const int64_t R = s[s.rank() - 2], C = s[s.rank() - 1];
  // Diagonals past either corner keep everything or nothing; clamped so i + diag cannot overflow.
  const int64_t B = prod(s, 0, s.rank() - 2), diag = std::clamp<int64_t>(a.i(0), -R - 1, C + 1);
  if (B * R * C == 0) return;
  KILN_DISPATCH_ALL_TYPES(x.dtype(), Upper ? "triu" : "tril", [&] {
    using T = scalar_t;
    const T* p = x.data_ptr<T>();
    T* o = out[0].data_ptr<T>();
    parallel_for(B * R, std::max<int64_t>(1, 32768 / std::max<int64_t>(C, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t r = b; r < e; ++r) {
                     const int64_t i = r % R;
                     // kept columns: [0, i + diag] (tril) or [i + diag, C) (triu)
                     const int64_t cut = std::clamp<int64_t>(i + diag + (Upper ? 0 : 1), 0, C);
                     const T* src = p + r * C;
                     T* dst = o + r * C;
                     for (int64_t j = 0; j < C; ++j)
                       dst[j] = (Upper ? j >= cut : j < cut) ? src[j] : T(0);
                   }
                 });
  });
}

template <const char* Name>
MetaList infer_tri(std::span<const Tensor> in, const Attrs& a) {
  if (in[0].dim() < 2)
    fail(Name, "input must have at least 2 dims ([..., rows, cols]), got shape ", in[0].shape());
  (void)a.i(0);
  return one(in[0].dtype(), in[0].shape());
}

constexpr char kTrilN[] = "tril", kTriuN[] = "triu";
const OpDef& kTril =
    def_op({.name = kTrilN,
            .attr_names = {"diagonal"},
            .infer = infer_tri<kTrilN>,
            .kernel = tri_kernel<false>,
            .grad = [](const GradCtx& c) { return TensorList{tril(c.g(), c.attrs.i(0))}; },
            .doc = "x[..., i, j] where j - i <= diagonal, else 0",
            .native_dtypes = kAllDTypes});
const OpDef& kTriu =
    def_op({.name = kTriuN,
            .attr_names = {"diagonal"},
            .infer = infer_tri<kTriuN>,
            .kernel = tri_kernel<true>,
            .grad = [](const GradCtx& c) { return TensorList{triu(c.g(), c.attrs.i(0))}; },
            .doc = "x[..., i, j] where j - i >= diagonal, else 0",
            .native_dtypes = kAllDTypes});

// ---- scatter (overwrite and reductions) -------------------------------------------------------
// One op for torch.scatter (reduce "none", or "sum"/"prod" as its add/multiply) and
// torch.scatter_reduce. Attrs: dim, reduce, include_self. Positions src writes to that a does
// not contribute to (include_self false) take the first value written there.

enum class Red { None, Sum, Prod, Mean, Amax, Amin };

Red red_of(const std::string& s, const char* op = "scatter") {
  if (s == "none") return Red::None;
  if (s == "sum") return Red::Sum;
  if (s == "prod") return Red::Prod;
  if (s == "mean") return Red::Mean;
  if (s == "amax") return Red::Amax;
  if (s == "amin") return Red::Amin;
  fail(op, "reduce must be one of sum, prod, mean, amax, amin, got '", s, "'");
}

MetaList infer_scatter(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  const Tensor& idx = in[1];
  const Tensor& src = in[2];
  const Red r = red_of(a.s(1));
  (void)a.b(2);
  op_util::require_index("scatter", idx);
  if (r != Red::None) op_util::require_numeric("scatter", x);
  if (x.dtype() != src.dtype())
    fail("scatter", "src dtype ", src.dtype(), " ", src.shape(), " must equal the input's ",
         x.dtype(), " ", x.shape());
  if (x.dim() == 0) fail("scatter", "input must have at least 1 dim, got shape ", x.shape());
  int64_t dim = wrap_dim(a.i(0), x.dim(), "scatter");
  if (idx.dim() != x.dim() || src.dim() != x.dim())
    fail("scatter", "input, index and src must have the same rank, got input ", x.shape(),
         ", index ", idx.shape(), ", src ", src.shape());
  for (int64_t d = 0; d < x.dim(); ++d) {
    int64_t id = idx.shape()[d];
    if (known(id, src.shape()[d]) && id > src.shape()[d])
      fail("scatter", "index shape ", idx.shape(), " exceeds src shape ", src.shape(), " at dim ",
           d);
    if (d != dim && known(id, x.shape()[d]) && id > x.shape()[d])
      fail("scatter", "index shape ", idx.shape(), " exceeds input shape ", x.shape(), " at dim ",
           d);
  }
  return one(x.dtype(), x.shape());
}

template <typename T>
T combine(Red r, T o, T v) {
  switch (r) {
    case Red::None:
      return v;
    case Red::Sum:
    case Red::Mean:
      return static_cast<T>(o + v);
    case Red::Prod:
      return static_cast<T>(o * v);
    case Red::Amax:
      return (nan_of(v) || v > o) ? v : o;
    case Red::Amin:
      return (nan_of(v) || v < o) ? v : o;
  }
  return v;
}

void scatter_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  const Tensor& idx = in[1];
  const Tensor& src = in[2];
  const int64_t dim = wrap_dim(a.i(0), x.dim(), "scatter");
  const Red r = red_of(a.s(1));
  const bool self = a.b(2) || r == Red::None;
  const Shape& is = idx.shape();
  const Shape& xs = x.shape();
  const Shape& ss = src.shape();
  std::memcpy(out[0].raw_data(), x.raw_data(), static_cast<size_t>(x.numel()) * x.element_size());
  int64_t outer = prod(is, 0, dim), n = is[dim], inner = prod(is, dim + 1, is.rank());
  if (outer * n * inner == 0) return;
  Offs xo = outer_offs(is, xs, dim), xi = inner_offs(is, xs, dim);
  Offs so = outer_offs(is, ss, dim), si = inner_offs(is, ss, dim);
  int64_t xsd = prod(xs, dim + 1, xs.rank()), ssd = prod(ss, dim + 1, ss.rank());
  // Per output element: how many values it holds (mean), whether src reached it (!self).
  std::vector<int64_t> cnt;
  if (r == Red::Mean || !self) cnt.assign(static_cast<size_t>(x.numel()), self ? 1 : 0);
  const int64_t blk = 256;
  int64_t nblk = (inner + blk - 1) / blk;
  op_util::with_index(idx, "scatter", [&](auto* ip) {
    op_util::check_range("scatter", ip, idx.numel(), xs[dim], "dim of the input", is);
    KILN_DISPATCH_ALL(x.dtype(), "scatter", [&] {
      using T = scalar_t;
      T* O = out[0].data_ptr<T>();
      const T* S = src.data_ptr<T>();
      // Tasks own disjoint (outer, column block) pairs: no two write the same element.
      int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, n * std::min(inner, blk)));
      parallel_for(outer * nblk, grain, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          int64_t o = t / nblk, j0 = (t % nblk) * blk, j1 = std::min(inner, j0 + blk);
          const int64_t ob = xo[o];
          const T* sb = S + so[o];
          for (int64_t k = 0; k < n; ++k) {
            const auto* rp = ip + (o * n + k) * inner;
            const T* sr = sb + k * ssd;
            for (int64_t j = j0; j < j1; ++j) {
              const int64_t p = ob + static_cast<int64_t>(rp[j]) * xsd + xi[j];
              const T v = sr[si[j]];
              if constexpr (std::is_same_v<T, bool>) {
                O[p] = v;  // bool is refused for the reductions
              } else if (cnt.empty()) {
                O[p] = combine(r, O[p], v);
              } else {
                int64_t& c = cnt[static_cast<size_t>(p)];
                O[p] = c == 0 ? v : combine(r, O[p], v);
                ++c;
              }
            }
          }
        }
      });
      if constexpr (!std::is_same_v<T, bool>) {
        if (r == Red::Mean) {
          const int64_t N = x.numel();
          for (int64_t p = 0; p < N; ++p) {
            const int64_t c = cnt[static_cast<size_t>(p)];
            if (c <= 1) continue;
            if constexpr (std::is_floating_point_v<T>) {
              O[p] = static_cast<T>(O[p] / static_cast<T>(c));
            } else {
              // torch floors integer means
              const double q = std::floor(static_cast<double>(O[p]) / static_cast<double>(c));
              O[p] = static_cast<T>(q);
            }
          }
        }
      }
    });
  });
}

// The entries of t along each dim up to `shape` (src larger than index).
Tensor crop_to(Tensor t, const Shape& shape) {
  for (int64_t d = 0; d < t.dim(); ++d)
    if (shape[d] >= 0 && t.shape()[d] >= 0 && t.shape()[d] > shape[d])
      t = slice(t, d, 0, shape[d], 1);
  return t;
}

const OpDef& kScatter = def_op(
    {.name = "scatter",
     .num_inputs = 3,
     .attr_names = {"dim", "reduce", "include_self"},
     .infer = infer_scatter,
     .kernel = scatter_kernel,
     // As torch's scatter_reduce_backward: a's gradient where a's value survives (scaled by
     // 1/count for mean, shared among ties for amax/amin), src's the gathered share.
     .grad =
         [](const GradCtx& c) {
           const int64_t dim = c.attrs.i(0);
           const Red r = red_of(c.attrs.s(1));
           const bool self = c.attrs.b(2) || r == Red::None;
           const Tensor& x = c.in(0);
           const Tensor& idx = c.in(1);
           const Tensor& src = c.in(2);
           const Tensor& g = c.g();
           if (r == Red::Prod && (c.need(0) || c.need(2)))
             fail("scatter_reduce", "the gradient of reduce='prod' is not implemented (input ",
                  x.shape(), ", index ", idx.shape(), ")");
           const DType dt = g.dtype();
           // g with 0 where src wrote: a's share when a's own value does not survive.
           auto masked = [&](const Tensor& t) {
             return call1(kScatter, {t, idx, expand_as(scalar_tensor(0, dt), idx)},
                          {dim, std::string("none"), true});
           };
           auto gath = [&](const Tensor& t) { return pad_to(gather(t, dim, idx), src.shape()); };
           Tensor ga, gs;
           if (r == Red::None || r == Red::Sum) {
             // overwritten places keep nothing of a
             if (c.need(0)) ga = self && r == Red::Sum ? g : masked(g);
             if (c.need(2)) gs = gath(g);
           } else if (r == Red::Mean) {
             Tensor n = self ? ones_like(g) : zeros_as(g, dt);
             n = scatter_add(n, dim, idx, expand_as(scalar_tensor(1, dt), idx));
             const Tensor gd = div(g, maximum(n, ones_like(n)));
             if (c.need(0)) ga = self ? gd : masked(gd);
             if (c.need(2)) gs = gath(gd);
           } else {  // amax, amin: ties share the gradient evenly
             const Tensor& res = c.out(0);
             const Tensor value = gather(res, dim, idx);
             const Tensor self_is = cast(eq(x, res), dt);
             const Tensor src_is = cast(eq(crop_to(src, idx.shape()), value), dt);
             const Tensor gd = div(g, scatter_add(self_is, dim, idx, src_is));
             if (c.need(0)) {
               ga = mul(self_is, gd);
               if (!self) ga = masked(ga);
             }
             if (c.need(2)) gs = pad_to(mul(src_is, gather(gd, dim, idx)), src.shape());
           }
           return TensorList{ga, Tensor(), gs};
         },
     .contiguous_inputs = true,
     .doc = "copy of a with src written (or reduced: sum, prod, mean, amax, amin) at index along "
            "dim, as torch.scatter / scatter_reduce"});

// ---- index_put --------------------------------------------------------------------------------
// Inputs: a, values, then one index tensor per indexed leading dim, all of one shape B (the
// wrapper broadcasts them), values of shape B + a.shape[k:]. Attr: accumulate.

MetaList infer_index_put(std::span<const Tensor> in, const Attrs& at) {
  if (in.size() < 3) fail("index_put", "needs the input, values and at least one index tensor");
  const Tensor& a = in[0];
  const Tensor& v = in[1];
  const bool acc = at.b(0);
  const int64_t k = static_cast<int64_t>(in.size()) - 2;
  if (k > a.dim())
    fail("index_put", "too many indices (", k, ") for an input of shape ", a.shape());
  if (acc) op_util::require_numeric("index_put", a);
  if (v.dtype() != a.dtype())
    fail("index_put", "values dtype ", v.dtype(), " ", v.shape(), " must equal the input's ",
         a.dtype(), " ", a.shape());
  // Dynamic dims (-1) are checked where known; the kernel runs on concrete shapes, which this
  // inference checks again then.
  const Shape& B = in[2].shape();
  for (int64_t i = 0; i < k; ++i) {
    const Tensor& t = in[static_cast<size_t>(2 + i)];
    op_util::require_index("index_put", t, "indices");
    if (!op_util::dims_agree(t.shape(), B))
      fail("index_put", "index tensors must have one shape, got ", B, " and ", t.shape());
  }
  Shape want = B;
  for (int64_t d = k; d < a.dim(); ++d) want.push_back(a.shape()[d]);
  if (!op_util::dims_agree(v.shape(), want))
    fail("index_put", "values shape ", v.shape(), " must be ", want, " (input ", a.shape(), ")");
  return one(a.dtype(), a.shape());
}

void index_put_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& at) {
  const Tensor& a = in[0];
  const Tensor& v = in[1];
  const bool acc = at.b(0);
  const int64_t k = static_cast<int64_t>(in.size()) - 2;
  const Shape& as = a.shape();
  std::memcpy(out[0].raw_data(), a.raw_data(), static_cast<size_t>(a.numel()) * a.element_size());
  const int64_t nb = in[2].numel(), inner = prod(as, k, as.rank());
  std::vector<int64_t> off(static_cast<size_t>(nb), 0);
  for (int64_t i = 0; i < k; ++i) {
    const Tensor& t = in[static_cast<size_t>(2 + i)];
    const int64_t size = as[i], stride = prod(as, i + 1, k) * inner;
    op_util::with_index(t, "index_put", [&](auto* ip) {
      for (int64_t p = 0; p < nb; ++p) {
        int64_t x = static_cast<int64_t>(ip[p]);
        if (x < -size || x >= size)
          fail("index_put", "index ", x, " is out of range for dim ", i, " of size ", size,
               " (input shape ", as, ", index shape ", t.shape(), ")");
        if (x < 0) x += size;
        off[static_cast<size_t>(p)] += x * stride;
      }
    });
  }
  if (nb * inner == 0) return;
  KILN_DISPATCH_ALL(a.dtype(), "index_put", [&] {
    using T = scalar_t;
    T* O = out[0].data_ptr<T>();
    const T* V = v.data_ptr<T>();
    // Tasks own column blocks of the inner slice, so repeated indices never race; within a
    // block the positions go in order (the last write wins, as on torch's CPU).
    const int64_t blk = 256, nblk = (inner + blk - 1) / blk;
    parallel_for(nblk, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t j0 = t * blk, j1 = std::min(inner, j0 + blk);
        for (int64_t p = 0; p < nb; ++p) {
          T* o = O + off[static_cast<size_t>(p)];
          const T* s = V + p * inner;
          if constexpr (std::is_same_v<T, bool>) {
            for (int64_t j = j0; j < j1; ++j) o[j] = acc ? (o[j] || s[j]) : s[j];
          } else if (acc) {
            for (int64_t j = j0; j < j1; ++j) o[j] = static_cast<T>(o[j] + s[j]);
          } else {
            for (int64_t j = j0; j < j1; ++j) o[j] = s[j];
          }
        }
      }
    });
  });
}

// g with zeros at the indexed places. With dynamic sizes the zeros come shaped from g (a
// broadcast 0 would have no static target).
Tensor zero_at(const Tensor& g, const std::vector<Tensor>& idx) {
  if (g.shape().is_static()) return index_put(g, idx, scalar_tensor(0, g.dtype()));
  return index_put(g, idx, index(zeros_like(g), idx));
}

const OpDef& kIndexPut =
    def_op({.name = "index_put",
            .num_inputs = -1,
            .attr_names = {"accumulate"},
            .infer = infer_index_put,
            .kernel = index_put_kernel,
            // accumulate: out = a + A(values), else a with the indexed places replaced: a's
            // gradient is g (with 0 at those places), values' the gradient read at the places.
            .grad =
                [](const GradCtx& c) {
                  std::vector<Tensor> idx(c.inputs.begin() + 2, c.inputs.end());
                  TensorList r;
                  r.push_back(Tensor());
                  r.push_back(Tensor());
                  if (c.need(0)) r[0] = c.attrs.b(0) ? c.g() : zero_at(c.g(), idx);
                  if (c.need(1)) r[1] = index(c.g(), idx);
                  for (size_t i = 0; i < idx.size(); ++i) r.push_back(Tensor());
                  return r;
                },
            .contiguous_inputs = true,
            .doc = "copy of a with a[indices...] = values (accumulate: +=), as torch.index_put"});

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

Tensor gather(const Tensor& a, int64_t dim, const Tensor& index) {
  return call1(kGather, {a, index}, {dim});
}

namespace {
// Bool inputs of the accumulating ops add as logical or (torch): computed on uint8, then != 0.
bool is_bool(const Tensor& t) { return t.defined() && t.dtype() == Bool; }
Tensor u8(const Tensor& t) { return is_bool(t) ? cast(t, UInt8) : t; }
Tensor back_to_bool(const Tensor& r, const Tensor& a) { return is_bool(a) ? ne(r, 0) : r; }
}  // namespace

Tensor scatter_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) {
  return back_to_bool(call1(kScatterAdd, {u8(a), index, u8(src)}, {dim}), a);
}

Tensor index_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) {
  return back_to_bool(call1(kIndexAdd, {u8(a), index, u8(src)}, {dim}), a);
}

Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index) {
  return call1(kIndexSelect, {a, index}, {dim});
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  return call1(kEmbedding, {weight, indices});
}

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

// nonzero and masked_select have shapes that depend on values: the mask is read on the host.
// Eagerly that is a copy out; under jit the read is a graph break whose value becomes a guard
// (as torch.compile breaks on nonzero); in a static graph it raises.
// The host read, with the reason a static graph cannot give it. (Under jit the read is answered:
// a graph break.)
static std::vector<int64_t> read_mask(const char* op, const Tensor& m,
                                      const std::source_location& loc) {
  try {
    return m.to_vector<int64_t>(loc);
  } catch (const Error& e) {
    if (!m.is_symbolic()) throw;
    fail(op, "the result's size depends on the values of ", m.shape(),
         ", which a static graph does not know: call it eagerly or under jit, where it is a "
         "graph break (",
         e.what(), ")");
  }
}

Tensor nonzero(const Tensor& a, const std::source_location& loc) {
  if (!a.defined()) fail("nonzero", "input is undefined");
  const Tensor m = a.dtype() == Bool ? cast(a, Int64) : cast(ne(a, 0.0), Int64);
  const std::vector<int64_t> v = read_mask("nonzero", m, loc);
  const int64_t r = a.dim();
  // Coordinates need the run-time sizes: under jit a dim may be dynamic (-1) in the traced
  // shape. Each such size is read too: the length of a sum over every other dim.
  Shape s = a.shape();
  for (int64_t d = 0; d < r; ++d)
    if (s[d] < 0) {
      std::vector<int64_t> others;
      for (int64_t e = 0; e < r; ++e)
        if (e != d) others.push_back(e);
      s[d] = static_cast<int64_t>(
          read_mask("nonzero", others.empty() ? m : sum(m, others), loc).size());
    }
  std::vector<int64_t> coords;
  int64_t n = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i]) continue;
    ++n;
    int64_t rem = static_cast<int64_t>(i);
    const size_t at = coords.size();
    coords.resize(at + static_cast<size_t>(r));
    for (int64_t d = r - 1; d >= 0; --d) {
      coords[at + static_cast<size_t>(d)] = rem % s[d];
      rem /= s[d];
    }
  }
  return tensor(coords, {n, r});
}

Tensor masked_select(const Tensor& a, const Tensor& mask, const std::source_location& loc) {
  if (!a.defined() || !mask.defined()) fail("masked_select", "undefined input");
  if (mask.dtype() != Bool)
    fail("masked_select", "mask must be bool, got ", mask.dtype(), mask.shape(), " (input ",
         a.shape(), ")");
  const Shape s = broadcast_shapes(a.shape(), mask.shape(), "masked_select");
  const Tensor m = mask.shape() == s ? mask : expand(mask, s);
  const std::vector<int64_t> v = read_mask("masked_select", cast(m, Int64), loc);
  std::vector<int64_t> at;
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i]) at.push_back(static_cast<int64_t>(i));
  const Tensor x = a.shape() == s ? a : expand(a, s);
  return index_select(reshape(x, {-1}), 0, tensor(at, {static_cast<int64_t>(at.size())}));
}

Tensor tril(const Tensor& a, int64_t diagonal) { return call1(kTril, {a}, {diagonal}); }
Tensor triu(const Tensor& a, int64_t diagonal) { return call1(kTriu, {a}, {diagonal}); }

Tensor argsort(const Tensor& a, int64_t dim, bool descending) {
  return sort(a, dim, descending).second;
}

// ---- scatter, index_put and the composites on them -------------------------------------------

Tensor scatter(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src,
               const std::string& reduce) {
  if (!a.defined() || !index.defined() || !src.defined()) fail("scatter", "undefined input");
  std::string r = "none";
  if (reduce == "add") {
    r = "sum";
  } else if (reduce == "multiply") {
    r = "prod";
  } else if (!reduce.empty()) {
    fail("scatter", "reduce must be 'add' or 'multiply' (or none), got '", reduce, "'");
  }
  return call1(kScatter, {a, index, src}, {dim, r, true});
}

Tensor scatter(const Tensor& a, int64_t dim, const Tensor& index, double value,
               const std::string& reduce) {
  if (!a.defined() || !index.defined()) fail("scatter", "undefined input");
  return scatter(a, dim, index, expand_as(scalar_tensor(value, a.dtype()), index), reduce);
}

Tensor scatter_reduce(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src,
                      const std::string& reduce, bool include_self) {
  if (!a.defined() || !index.defined() || !src.defined()) fail("scatter_reduce", "undefined input");
  if (reduce == "none") fail("scatter_reduce", "reduce must be one of sum, prod, mean, amax, amin");
  (void)red_of(reduce, "scatter_reduce");
  if (is_bool(a) && (reduce == "sum" || reduce == "amax" || reduce == "amin" || reduce == "prod"))
    return back_to_bool(call1(kScatter, {u8(a), index, u8(src)}, {dim, reduce, include_self}), a);
  return call1(kScatter, {a, index, src}, {dim, reduce, include_self});
}

namespace {

// Bool masks among index tensors become one int64 index per mask dim (nonzero's columns).
std::vector<Tensor> int_indices(const char* op, const Tensor& a,
                                const std::vector<Tensor>& indices) {
  std::vector<Tensor> out;
  for (const Tensor& t : indices) {
    if (!t.defined()) fail(op, "an index tensor is undefined (input ", a.shape(), ")");
    if (t.dtype() == Bool) {
      const int64_t at = static_cast<int64_t>(out.size());
      if (t.dim() == 0 || at + t.dim() > a.dim())
        fail(op, "bool mask of shape ", t.shape(), " does not fit input shape ", a.shape(),
             " after ", at, " indexed dims");
      for (int64_t d = 0; d < t.dim(); ++d)
        if (t.shape()[d] != a.shape()[at + d])
          fail(op, "bool mask of shape ", t.shape(), " does not match input shape ", a.shape(),
               " at dim ", at + d);
      for (const Tensor& c : nonzero_tuple(t)) out.push_back(c);
    } else {
      op_util::require_index(op, t, "indices");
      out.push_back(t);
    }
  }
  if (out.empty()) fail(op, "needs at least one index tensor (input ", a.shape(), ")");
  if (static_cast<int64_t>(out.size()) > a.dim())
    fail(op, "too many indices (", out.size(), ") for an input of shape ", a.shape());
  return out;
}

Shape broadcast_all(const char* op, const std::vector<Tensor>& ts) {
  Shape s = ts[0].shape();
  for (size_t k = 1; k < ts.size(); ++k) s = broadcast_shapes(s, ts[k].shape(), op);
  return s;
}

// Eager (concrete) indices are checked here so that the error names `op`, the index and the
// size; symbolic ones are checked by the primitive when the graph runs.
void check_eager_range(const char* op, const Tensor& t, int64_t size, bool negative_ok,
                       const std::string& what) {
  if (!t.is_concrete() || t.numel() == 0 || size < 0) return;
  const Tensor t64 = t.dtype() == Int64 ? t : cast(t, Int64);
  const int64_t lo = min(t64).item<int64_t>(), hi = max(t64).item<int64_t>();
  if (hi >= size || lo < (negative_ok ? -size : 0))
    fail(op, "index ", hi >= size ? hi : lo, " is out of range for ", what, " of size ", size,
         " (index shape ", t.shape(), ")");
}

// t (int64) with negative entries counted from the end.
Tensor wrap_index(const Tensor& t, int64_t size) {
  const Tensor x = t.dtype() == Int64 ? t : cast(t, Int64);
  if (x.is_concrete() && (x.numel() == 0 || min(x).item<int64_t>() >= 0)) return x;
  return add(x, mul(cast(lt(x, 0), Int64), size));
}

// The gathers below flatten a to [rows, rest...]: only dim 0 may be dynamic (the row count
// then is), as the strides of the other indexed dims and the reshapes need their sizes.
void require_static_past_0(const char* op, const Tensor& a) {
  for (int64_t d = 1; d < a.dim(); ++d)
    if (a.shape()[d] < 0)
      fail(op, "needs a static size: input shape ", a.shape(), " is dynamic past dim 0");
}

// t (int64) with negative entries counted from the end of a's dynamic dim d, whose size comes
// from a at run time (ones summed along d).
Tensor wrap_index_dynamic(const Tensor& t, const Tensor& a, int64_t d) {
  const Tensor x = t.dtype() == Int64 ? t : cast(t, Int64);
  std::vector<int64_t> others;
  for (int64_t e = 0; e < a.dim(); ++e)
    if (e != d) others.push_back(e);
  const Tensor ones = others.empty() ? ones_like(a) : gt(sum(ones_like(a), others), -1.0);
  const Tensor n = sum(cast(ones, Int64));
  return add(x, mul(cast(lt(x, 0), Int64), n));
}

// A tensor of the index tensors' broadcast shape B (their sum: only its run-time shape is
// used), for expand_as where B has dynamic sizes: expand's -1 would mean "keep".
Tensor broadcast_like(const std::vector<Tensor>& idx) {
  Tensor r = idx[0];
  for (size_t i = 1; i < idx.size(); ++i) r = add(r, idx[i]);
  return r;
}

}  // namespace

Tensor index(const Tensor& a, const std::vector<Tensor>& indices) {
  if (!a.defined()) fail("index", "input is undefined");
  const std::vector<Tensor> idx = int_indices("index", a, indices);
  require_static_past_0("index", a);
  const int64_t k = static_cast<int64_t>(idx.size());
  const Shape B = broadcast_all("index", idx);
  Tensor lin;
  int64_t stride = 1;
  for (int64_t i = k - 1; i >= 0; --i) {
    const Tensor& t0 = idx[static_cast<size_t>(i)];
    check_eager_range("index", t0, a.shape()[i], true, "dim " + std::to_string(i));
    Tensor t = a.shape()[i] < 0 ? wrap_index_dynamic(t0, a, i) : wrap_index(t0, a.shape()[i]);
    if (stride != 1) t = mul(t, stride);
    lin = lin.defined() ? add(lin, t) : t;
    stride *= a.shape()[i];
  }
  Shape flat{a.shape()[0] < 0 ? -1 : stride}, out = B;
  for (int64_t d = k; d < a.dim(); ++d) {
    flat.push_back(a.shape()[d]);
    out.push_back(a.shape()[d]);
  }
  if (lin.shape() != B) lin = expand(lin, B);
  return reshape(index_select(reshape(a, flat), 0, reshape(lin, Shape{-1})), out);
}

Tensor index_put(const Tensor& a, const std::vector<Tensor>& indices, const Tensor& values,
                 bool accumulate) {
  if (!a.defined() || !values.defined()) fail("index_put", "undefined input");
  const std::vector<Tensor> idx = int_indices("index_put", a, indices);
  const int64_t k = static_cast<int64_t>(idx.size());
  for (int64_t i = 0; i < k; ++i)
    check_eager_range("index_put", idx[static_cast<size_t>(i)], a.shape()[i], true,
                      "dim " + std::to_string(i));
  const Shape B = broadcast_all("index_put", idx);
  Shape want = B;
  for (int64_t d = k; d < a.dim(); ++d) want.push_back(a.shape()[d]);
  if (!broadcastable_to(values.shape(), want))
    fail("index_put", "values of shape ", values.shape(), " do not broadcast to the indexed shape ",
         want, " (input ", a.shape(), ")");
  const bool b = accumulate && is_bool(a);  // accumulating bools is logical or (torch)
  const Tensor v = b ? u8(values) : values;
  // With dynamic sizes in the target, expand's -1 would mean "keep" (and equal shapes with a
  // dynamic dim may still differ at run time): values and indices are broadcast to tensors of
  // the target shapes at run time instead (expand_as).
  std::vector<Tensor> ins{b ? u8(a) : a};
  if (want.is_static()) {
    ins.push_back(v.shape() == want ? v : expand(v, want));
  } else {
    Tensor like = broadcast_like(idx);
    Shape target(static_cast<size_t>(B.rank()), -1);
    bool dynamic_rest = false;
    for (int64_t d = k; d < a.dim(); ++d) {
      like = unsqueeze(like, -1);
      target.push_back(a.shape()[d]);
      dynamic_rest = dynamic_rest || a.shape()[d] < 0;
    }
    if (dynamic_rest) {  // a's trailing sizes at run time: a summed over the indexed dims
      std::vector<int64_t> lead(static_cast<size_t>(k));
      std::iota(lead.begin(), lead.end(), int64_t(0));
      like = add(like, sum(a, lead));
    } else if (k < a.dim()) {
      like = expand(like, target);
    }
    ins.push_back(expand_as(v, like));
  }
  for (const Tensor& t : idx)
    ins.push_back(t.shape() == B && (B.is_static() || idx.size() == 1) ? t
                  : B.is_static()                                      ? expand(t, B)
                                  : expand_as(t, broadcast_like(idx)));
  const Tensor r = call1(kIndexPut, std::span<const Tensor>(ins.data(), ins.size()), {accumulate});
  return b ? ne(r, 0) : r;
}

Tensor index_fill(const Tensor& a, int64_t dim, const Tensor& index, double value) {
  if (!a.defined() || !index.defined()) fail("index_fill", "undefined input");
  op_util::require_index("index_fill", index);
  if (index.dim() > 1) fail("index_fill", "index must be 0-d or 1-d, got shape ", index.shape());
  if (a.dim() == 0) return index_fill(reshape(a, Shape{1}), 0, index, value).reshape(Shape{});
  const int64_t d = wrap_dim(dim, a.shape(), "index_fill");
  check_eager_range("index_fill", index, a.shape()[d], true, "dim " + std::to_string(d));
  const Tensor r =
      index_put(movedim(a, d, 0), {reshape(index, Shape{-1})}, scalar_tensor(value, a.dtype()));
  return movedim(r, 0, d);
}

Tensor index_copy(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) {
  if (!a.defined() || !index.defined() || !src.defined()) fail("index_copy", "undefined input");
  op_util::require_index("index_copy", index);
  if (index.dim() > 1) fail("index_copy", "index must be 0-d or 1-d, got shape ", index.shape());
  if (a.dim() == 0)
    return index_copy(reshape(a, Shape{1}), 0, index, reshape(src, Shape{1})).reshape(Shape{});
  const int64_t d = wrap_dim(dim, a.shape(), "index_copy");
  Shape want = a.shape();
  want[d] = index.numel();
  if (!op_util::dims_agree(src.shape(), want))
    fail("index_copy", "src shape ", src.shape(), " must be ", want, " (input ", a.shape(),
         ", index of ", index.numel(), " entries along dim ", d, ")");
  if (src.dtype() != a.dtype())
    fail("index_copy", "src dtype ", src.dtype(), " must equal the input's ", a.dtype());
  check_eager_range("index_copy", index, a.shape()[d], false, "dim " + std::to_string(d));
  const Tensor r = index_put(movedim(a, d, 0), {reshape(index, Shape{-1})}, movedim(src, d, 0));
  return movedim(r, 0, d);
}

Tensor take(const Tensor& a, const Tensor& index) {
  if (!a.defined() || !index.defined()) fail("take", "undefined input");
  op_util::require_index("take", index);
  check_eager_range("take", index, a.numel(), true, "the flattened input");
  return kiln::index(reshape(a, Shape{-1}), {index});
}

Tensor take_along_dim(const Tensor& a, const Tensor& indices, std::optional<int64_t> dim) {
  if (!a.defined() || !indices.defined()) fail("take_along_dim", "undefined input");
  op_util::require_index("take_along_dim", indices);
  if (!dim) {
    check_eager_range("take_along_dim", indices, a.numel(), false, "the flattened input");
    return gather(reshape(a, Shape{-1}), 0, reshape(indices, Shape{-1}));
  }
  if (a.dim() == 0)
    fail("take_along_dim", "input must have at least 1 dim with dim given, got a 0-d tensor");
  if (a.dim() != indices.dim())
    fail("take_along_dim", "input ", a.shape(), " and indices ", indices.shape(),
         " must have the same number of dims");
  const int64_t d = wrap_dim(*dim, a.shape(), "take_along_dim");
  check_eager_range("take_along_dim", indices, a.shape()[d], false, "dim " + std::to_string(d));
  Shape sa = a.shape(), si = indices.shape();
  sa[d] = 1;
  si[d] = 1;
  Shape s = broadcast_shapes(sa, si, "take_along_dim");
  Shape ta = s, ti = s;
  ta[d] = a.shape()[d];
  ti[d] = indices.shape()[d];
  return gather(a.shape() == ta ? a : expand(a, ta), d,
                indices.shape() == ti ? indices : expand(indices, ti));
}

Tensor masked_scatter(const Tensor& a, const Tensor& mask, const Tensor& source,
                      const std::source_location& loc) {
  if (!a.defined() || !mask.defined() || !source.defined())
    fail("masked_scatter", "undefined input");
  if (mask.dtype() != Bool)
    fail("masked_scatter", "mask must be bool, got ", mask.dtype(), mask.shape());
  if (source.dtype() != a.dtype())
    fail("masked_scatter", "source dtype ", source.dtype(), " must equal the input's ", a.dtype());
  const Shape s = broadcast_shapes(a.shape(), mask.shape(), "masked_scatter");
  const Tensor m = mask.shape() == s ? mask : expand(mask, s);
  const std::vector<int64_t> v = read_mask("masked_scatter", cast(m, Int64), loc);
  std::vector<int64_t> at;
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i]) at.push_back(static_cast<int64_t>(i));
  const int64_t n = static_cast<int64_t>(at.size());
  if (source.numel() < n)
    fail("masked_scatter", "source has ", source.numel(), " elements (shape ", source.shape(),
         ") but the mask selects ", n);
  const Tensor x = reshape(a.shape() == s ? a : expand(a, s), Shape{-1});
  const Tensor src = slice(reshape(source, Shape{-1}), 0, 0, n, 1);
  return reshape(index_put(x, {tensor(at, {n})}, src), s);
}

// ---- host-read ops: nonzero's forms, unique, repeat counts -----------------------------------

std::vector<Tensor> nonzero_tuple(const Tensor& a, const std::source_location& loc) {
  if (!a.defined()) fail("nonzero", "input is undefined");
  const Tensor nz = nonzero(a.dim() == 0 ? reshape(a, Shape{1}) : a, loc);
  std::vector<Tensor> out;
  for (int64_t d = 0; d < nz.shape()[1]; ++d) out.push_back(contiguous(nz.select(1, d)));
  return out;
}

Tensor argwhere(const Tensor& a, const std::source_location& loc) { return nonzero(a, loc); }

std::vector<Tensor> where(const Tensor& cond, const std::source_location& loc) {
  return nonzero_tuple(cond, loc);
}

namespace {
// The values of `a` read on the host as double (integers beyond 2^53 as int64 keys), with the
// static-graph refusal read_mask gives.
template <typename T>
std::vector<T> read_values(const char* op, const Tensor& a, const std::source_location& loc) {
  try {
    return a.to_vector<T>(loc);
  } catch (const Error& e) {
    if (!a.is_symbolic()) throw;
    fail(op, "the result's size depends on the values of ", a.shape(),
         ", which a static graph does not know: call it eagerly or under jit, where it is a "
         "graph break (",
         e.what(), ")");
  }
}

template <typename T>
bool is_nan_v(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  return false;
}

// Groups equal values: order[i] lists positions, runs delimited where values differ (NaNs never
// equal, as torch's ==). Fills values, inverse and counts.
template <typename T>
UniqueResult unique_impl(const Tensor& a, const std::vector<T>& v,
                         const std::vector<int64_t>& order) {
  std::vector<T> vals;
  std::vector<int64_t> inv(v.size()), counts;
  for (size_t k = 0; k < order.size(); ++k) {
    const T x = v[static_cast<size_t>(order[k])];
    if (k == 0 || !(x == vals.back())) {
      vals.push_back(x);
      counts.push_back(0);
    }
    ++counts.back();
    inv[static_cast<size_t>(order[k])] = static_cast<int64_t>(vals.size()) - 1;
  }
  const int64_t n = static_cast<int64_t>(vals.size());
  UniqueResult r;
  r.values = cast(tensor(vals, {n}), a.dtype());
  r.inverse = tensor(inv, a.shape());
  r.counts = tensor(counts, {n});
  return r;
}

template <typename T>
UniqueResult unique_typed(const Tensor& a, bool consecutive, const std::source_location& loc) {
  const char* op = consecutive ? "unique_consecutive" : "unique";
  const std::vector<T> v = read_values<T>(op, a, loc);
  std::vector<int64_t> order(v.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!consecutive)
    std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) {
      const T x = v[static_cast<size_t>(i)], y = v[static_cast<size_t>(j)];
      if (is_nan_v(x) || is_nan_v(y)) return !is_nan_v(x) && is_nan_v(y);
      return x < y;
    });
  return unique_impl(a, v, order);
}

UniqueResult unique_any(const Tensor& a, bool consecutive, const std::source_location& loc) {
  if (!a.defined()) fail(consecutive ? "unique_consecutive" : "unique", "input is undefined");
  if (is_floating(a.dtype())) return unique_typed<double>(a, consecutive, loc);
  return unique_typed<int64_t>(a, consecutive, loc);
}
}  // namespace

UniqueResult unique(const Tensor& a, bool /*sorted*/, const std::source_location& loc) {
  return unique_any(a, false, loc);
}

UniqueResult unique_consecutive(const Tensor& a, const std::source_location& loc) {
  return unique_any(a, true, loc);
}

Tensor repeat_interleave(const Tensor& a, const Tensor& repeats, std::optional<int64_t> dim,
                         const std::source_location& loc) {
  if (!a.defined() || !repeats.defined()) fail("repeat_interleave", "undefined input");
  if (repeats.dtype() != Int64 && repeats.dtype() != Int32)
    fail("repeat_interleave", "repeats must be int64 or int32, got ", repeats.dtype());
  if (repeats.dim() > 1)
    fail("repeat_interleave", "repeats must be 0-d or 1-d, got shape ", repeats.shape());
  const std::vector<int64_t> r = read_values<int64_t>("repeat_interleave", repeats, loc);
  if (r.size() == 1) return repeat_interleave(a, r[0], dim);
  const Tensor x = dim ? a : reshape(a, Shape{-1});
  const int64_t d = dim ? wrap_dim(*dim, x.shape(), "repeat_interleave") : 0;
  if (x.shape()[d] != static_cast<int64_t>(r.size()))
    fail("repeat_interleave", "repeats has ", r.size(), " entries but dim ", d, " of shape ",
         x.shape(), " has ", x.shape()[d]);
  std::vector<int64_t> at;
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i] < 0) fail("repeat_interleave", "repeats must be >= 0, got ", r[i]);
    at.insert(at.end(), static_cast<size_t>(r[i]), static_cast<int64_t>(i));
  }
  return index_select(x, d, tensor(at, {static_cast<int64_t>(at.size())}));
}

Tensor repeat_interleave(const Tensor& repeats, const std::source_location& loc) {
  if (!repeats.defined()) fail("repeat_interleave", "repeats is undefined");
  if (repeats.dim() > 1)
    fail("repeat_interleave", "repeats must be 0-d or 1-d, got shape ", repeats.shape());
  return repeat_interleave(arange(0, static_cast<double>(repeats.numel()), 1, repeats.dtype()),
                           repeats.dim() == 0 ? reshape(repeats, Shape{1}) : repeats, 0, loc);
}

Tensor triu_indices(int64_t row, int64_t col, int64_t offset) {
  if (row < 0 || col < 0) fail("triu_indices", "row and col must be >= 0, got ", row, ", ", col);
  std::vector<int64_t> rs, cs;
  for (int64_t i = 0; i < row; ++i)
    for (int64_t j = std::max<int64_t>(0, i + offset); j < col; ++j) {
      rs.push_back(i);
      cs.push_back(j);
    }
  const int64_t n = static_cast<int64_t>(rs.size());
  rs.insert(rs.end(), cs.begin(), cs.end());
  return tensor(rs, {2, n});
}

Tensor tril_indices(int64_t row, int64_t col, int64_t offset) {
  if (row < 0 || col < 0) fail("tril_indices", "row and col must be >= 0, got ", row, ", ", col);
  std::vector<int64_t> rs, cs;
  for (int64_t i = 0; i < row; ++i)
    for (int64_t j = 0; j < std::min(col, i + offset + 1); ++j) {
      rs.push_back(i);
      cs.push_back(j);
    }
  const int64_t n = static_cast<int64_t>(rs.size());
  rs.insert(rs.end(), cs.begin(), cs.end());
  return tensor(rs, {2, n});
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
