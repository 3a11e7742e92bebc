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

}  // namespace

Tensor gather(const Tensor& a, int64_t dim, const Tensor& index) {
  return call1(kGather, {a, index}, {dim});
}

Tensor scatter_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) {
  return call1(kScatterAdd, {a, index, src}, {dim});
}

Tensor index_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) {
  return call1(kIndexAdd, {a, index, src}, {dim});
}

Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index) {
  return call1(kIndexSelect, {a, index}, {dim});
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  return call1(kEmbedding, {weight, indices});
}

std::pair<Tensor, Tensor> topk(const Tensor& a, int64_t k, int64_t dim, bool largest) {
  if (k < 0) fail("topk", "k must be >= 0, got ", k);
  TensorList r = call(kTopk, {a}, {k, dim, largest});
  return {r[0], r[1]};
}

std::pair<Tensor, Tensor> sort(const Tensor& a, int64_t dim, bool descending) {
  TensorList r = call(kTopk, {a}, {int64_t{-1}, dim, descending});
  return {r[0], r[1]};
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

}  // namespace kiln
