// Gather/scatter family: gather, scatter_add and scatter (overwrite, or reduced by sum, prod,
// mean, amax, amin: torch.scatter and scatter_reduce), one index per element along a dim.
// Kernels take contiguous inputs, check every index before any parallel loop, then copy or
// accumulate; index offsets come from a table only where the index and tensor sizes differ.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kiln/dispatch/dispatch.h"
#include "kiln/ops/index_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using op_util::back_to_bool;
using op_util::is_bool;
using op_util::known;
using op_util::nan_of;
using op_util::one;
using op_util::prod;
using op_util::u8;
using op_util::zeros_as;

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

}  // namespace

Tensor gather(const Tensor& a, int64_t dim, const Tensor& index) {
  return call1(kGather, {a, index}, {dim});
}

Tensor scatter_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) {
  return back_to_bool(call1(kScatterAdd, {u8(a), index, u8(src)}, {dim}), a);
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

}  // namespace kiln
