// Reduction family: sum, mean, max, min, var, prod, logsumexp, vector_norm, argmax, argmin over
// dims with keepdim, sum_to (the gradient of broadcasting), and the composites on them (std,
// amax/amin, any/all, nansum, normalize, cosine_similarity, ...). Non-trailing, non-leading
// reduced dims are permuted to the end and made contiguous once, then reduced row-wise. Scans
// and the order statistics along one dim are in scan_ops.cpp.
#include "kiln/kernels/cpu/reduce.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/kernels/cpu/vec_math.h"
#include "kiln/ops/elementwise_util.h"
#include "kiln/ops/op_util.h"
#include "kiln/ops/reduce_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using op_util::one;
using reduce_util::bool_back;
using reduce_util::ordered;
using reduce_util::WrapAcc;

struct RedDims {
  std::vector<int64_t> dims;  // sorted, unique, wrapped
  Shape keep_shape;           // input shape with reduced dims set to 1
  Shape out_shape;
  int64_t count = 1;  // elements reduced per output
};

RedDims red_dims(const Shape& s, const std::vector<int64_t>& dims_in, bool keepdim,
                 const char* op) {
  RedDims r;
  int64_t rank = s.rank();
  if (dims_in.empty()) {
    for (int64_t d = 0; d < rank; ++d) r.dims.push_back(d);
  } else {
    for (auto d : dims_in) r.dims.push_back(wrap_dim(d, s, op));
    std::sort(r.dims.begin(), r.dims.end());
    if (std::adjacent_find(r.dims.begin(), r.dims.end()) != r.dims.end())
      fail(op, "dim appears more than once in the reduction dims for shape ", s);
    if (rank == 0) r.dims.clear();
  }
  r.keep_shape = s;
  for (auto d : r.dims) {
    r.count = (r.count < 0 || s[d] < 0) ? -1 : r.count * s[d];
    r.keep_shape[d] = 1;
  }
  if (keepdim) {
    r.out_shape = r.keep_shape;
  } else {
    for (int64_t d = 0; d < rank; ++d)
      if (!std::binary_search(r.dims.begin(), r.dims.end(), d)) r.out_shape.push_back(s[d]);
  }
  return r;
}

std::vector<int64_t> dims_attr(const Attrs& a) { return a.ints(0); }

// x with the reduced dims moved last and made contiguous (x itself when they already are):
// [kept..., reduced...] rows for kernels that make several passes over each group.
Tensor reduced_last(const Tensor& x, const RedDims& rd) {
  const int64_t rank = x.dim(), nr = static_cast<int64_t>(rd.dims.size());
  bool trailing = true;
  for (int64_t i = 0; i < nr; ++i) trailing = trailing && rd.dims[i] == rank - nr + i;
  if (trailing && x.is_contiguous()) return x;
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < rank; ++d)
    if (!std::binary_search(rd.dims.begin(), rd.dims.end(), d)) perm.push_back(d);
  for (auto d : rd.dims) perm.push_back(d);
  Shape ps;
  Strides pst;
  for (auto d : perm) {
    ps.push_back(x.shape()[d]);
    pst.push_back(x.strides()[d]);
  }
  return raw_contiguous_copy(make_view(x, ps, pst, x.offset()));
}

// Reduces x over rd.dims into out (contiguous, out numel = product of kept dims).
template <typename T>
void reduce_into(const Tensor& x, const RedDims& rd, T* out, cpu::RedKind k) {
  int64_t rank = x.dim();
  int64_t kept = 1, red = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::binary_search(rd.dims.begin(), rd.dims.end(), d))
      red *= x.shape()[d];
    else
      kept *= x.shape()[d];
  }
  if (kept == 0) return;
  if (red == 0) {
    if (k != cpu::RedKind::Sum)
      fail(k == cpu::RedKind::Max ? "max" : "min", "cannot reduce an empty dim of shape ",
           x.shape());
    for (int64_t i = 0; i < kept; ++i) out[i] = T(0);
    return;
  }
  bool trailing = true, leading = true;
  int64_t nr = static_cast<int64_t>(rd.dims.size());
  for (int64_t i = 0; i < nr; ++i) {
    trailing = trailing && rd.dims[i] == rank - nr + i;
    leading = leading && rd.dims[i] == i;
  }
  // Leading and trailing dims reduced around a kept middle block ({0, 2, 3} of [N, C, H, W]: a
  // conv bias gradient, batch norm statistics): rows first, then columns of the partial results,
  // instead of a transposing copy of the whole input (W5: 150 us -> tens per call).
  int64_t lead = 0, trail = 0;
  while (lead < nr && rd.dims[lead] == lead) ++lead;
  while (trail < nr - lead && rd.dims[nr - 1 - trail] == rank - 1 - trail) ++trail;
  const bool lead_and_trail = lead > 0 && trail > 0 && lead + trail == nr;
  if (x.is_contiguous() && trailing) {
    cpu::reduce_rows<T>(x.data_ptr<T>(), out, kept, red, k);
  } else if (x.is_contiguous() && leading) {
    cpu::reduce_cols<T>(x.data_ptr<T>(), out, red, kept, k);
  } else if (x.is_contiguous() && lead_and_trail) {
    int64_t A = 1, B = 1;
    for (int64_t d = 0; d < lead; ++d) A *= x.shape()[d];
    for (int64_t d = rank - trail; d < rank; ++d) B *= x.shape()[d];
    std::vector<T> part(static_cast<size_t>(A * kept));
    cpu::reduce_rows<T>(x.data_ptr<T>(), part.data(), A * kept, B, k);
    cpu::reduce_cols<T>(part.data(), out, A, kept, k);
  } else {
    Tensor c = reduced_last(x, rd);
    cpu::reduce_rows<T>(c.data_ptr<T>(), out, kept, red, k);
  }
}

MetaList infer_red(const char* op, std::span<const Tensor> in, const Attrs& a, bool float_only) {
  if (float_only) op_util::require_float(op, in[0]);
  op_util::require_numeric(op, in[0]);
  RedDims rd = red_dims(in[0].shape(), dims_attr(a), a.b(1), op);
  return one(in[0].dtype(), rd.out_shape);
}

// A reduced tensor with its reduced dims restored as size 1 (works with dynamic dims, unlike a
// reshape to the keepdim shape).
Tensor keepdims(const Tensor& t, const RedDims& rd, bool keepdim) {
  if (keepdim) return t;
  Tensor r = t;
  for (auto d : rd.dims) r = unsqueeze(r, d);
  return r;
}

// Gradient of a reduction broadcast back: restore the reduced dims, then expand to x's
// run-time shape.
Tensor unreduce(const Tensor& g, const Tensor& x, const Attrs& a, const char* op) {
  RedDims rd = red_dims(x.shape(), dims_attr(a), a.b(1), op);
  return expand_as(keepdims(g, rd, a.b(1)), x);
}

const OpDef& kSum = def_op(
    {.name = "sum",
     .attr_names = {"dims", "keepdim"},
     .traits = kReduction,
     .infer = [](std::span<const Tensor> in,
                 const Attrs& a) { return infer_red("sum", in, a, false); },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           RedDims rd = red_dims(in[0].shape(), dims_attr(a), a.b(1), "sum");
           KILN_DISPATCH_NUMERIC(in[0].dtype(), "sum", [&] {
             reduce_into<scalar_t>(in[0], rd, out[0].data_ptr<scalar_t>(), cpu::RedKind::Sum);
           });
         },
     .grad =
         [](const GradCtx& c) { return TensorList{unreduce(c.g(), c.in(0), c.attrs, "sum")}; }});

const OpDef& kMean =
    def_op({.name = "mean",
            .attr_names = {"dims", "keepdim"},
            .traits = kReduction,
            .infer = [](std::span<const Tensor> in,
                        const Attrs& a) { return infer_red("mean", in, a, true); },
            .kernel =
                [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
                  RedDims rd = red_dims(in[0].shape(), dims_attr(a), a.b(1), "mean");
                  KILN_DISPATCH_FLOAT(in[0].dtype(), "mean", [&] {
                    scalar_t* o = out[0].data_ptr<scalar_t>();
                    reduce_into<scalar_t>(in[0], rd, o, cpu::RedKind::Sum);
                    scalar_t inv = rd.count > 0 ? scalar_t(1) / static_cast<scalar_t>(rd.count)
                                                : std::numeric_limits<scalar_t>::quiet_NaN();
                    for (int64_t i = 0; i < out[0].numel(); ++i) o[i] *= inv;
                  });
                },
            // d mean / dx = 1/N broadcast
            .grad =
                [](const GradCtx& c) {
                  RedDims rd = red_dims(c.in(0).shape(), dims_attr(c.attrs), c.attrs.b(1), "mean");
                  // Divide the reduced gradient, then broadcast it (a view): dividing after the
                  // expand made a full-size tensor (W8's loss: 171 us per step for a scalar).
                  if (rd.count >= 0)
                    return TensorList{unreduce(div(c.g(), static_cast<double>(rd.count)), c.in(0),
                                               c.attrs, "mean")};
                  Tensor g = unreduce(c.g(), c.in(0), c.attrs, "mean");
                  // Dynamic dims (graph placeholders): count the reduced elements at run time.
                  return TensorList{div(g, sum(ones_like(c.in(0)), rd.dims, true))};
                }});

// max/min: the gradient is shared equally among tied extrema (as torch.amax).
TensorList minmax_grad(const GradCtx& c, const char* op) {
  Tensor x = c.in(0);
  RedDims rd = red_dims(x.shape(), dims_attr(c.attrs), c.attrs.b(1), op);
  Tensor o = keepdims(c.out(0), rd, c.attrs.b(1));
  Tensor mask = eq(x, o);
  Tensor cnt = sum(cast(mask, x.dtype()), rd.dims, true);
  Tensor g = div(keepdims(c.g(), rd, c.attrs.b(1)), cnt);
  return TensorList{where(mask, expand_as(g, x), op_util::scalar_like(g, 0))};
}

const OpDef& kMax = def_op(
    {.name = "max",
     .attr_names = {"dims", "keepdim"},
     .traits = kReduction,
     .infer = [](std::span<const Tensor> in,
                 const Attrs& a) { return infer_red("max", in, a, false); },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           RedDims rd = red_dims(in[0].shape(), dims_attr(a), a.b(1), "max");
           KILN_DISPATCH_NUMERIC(in[0].dtype(), "max", [&] {
             reduce_into<scalar_t>(in[0], rd, out[0].data_ptr<scalar_t>(), cpu::RedKind::Max);
           });
         },
     .grad = [](const GradCtx& c) { return minmax_grad(c, "max"); }});

const OpDef& kMin = def_op(
    {.name = "min",
     .attr_names = {"dims", "keepdim"},
     .traits = kReduction,
     .infer = [](std::span<const Tensor> in,
                 const Attrs& a) { return infer_red("min", in, a, false); },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           RedDims rd = red_dims(in[0].shape(), dims_attr(a), a.b(1), "min");
           KILN_DISPATCH_NUMERIC(in[0].dtype(), "min", [&] {
             reduce_into<scalar_t>(in[0], rd, out[0].data_ptr<scalar_t>(), cpu::RedKind::Min);
           });
         },
     .grad = [](const GradCtx& c) { return minmax_grad(c, "min"); }});

const OpDef& kVar =
    def_op({.name = "var",
            .attr_names = {"dims", "keepdim", "correction"},
            .traits = kReduction,
            .infer = [](std::span<const Tensor> in,
                        const Attrs& a) { return infer_red("var", in, a, true); },
            .kernel =
                [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
                  // Two passes (mean, then squared deviations) for accuracy.
                  const Tensor& x = in[0];
                  RedDims rd = red_dims(x.shape(), dims_attr(a), true, "var");
                  KILN_DISPATCH_FLOAT(x.dtype(), "var", [&] {
                    Tensor m = empty(rd.keep_shape, x.dtype());
                    scalar_t* mp = m.data_ptr<scalar_t>();
                    reduce_into<scalar_t>(x, rd, mp, cpu::RedKind::Sum);
                    const int64_t mn = m.numel();
                    for (int64_t i = 0; i < mn; ++i) mp[i] /= static_cast<scalar_t>(rd.count);
                    Tensor d = empty(x.shape(), x.dtype());
                    cpu::binary_loop<scalar_t, scalar_t, scalar_t>(
                        x, m, d, [](scalar_t u, scalar_t v) { return (u - v) * (u - v); });
                    scalar_t* o = out[0].data_ptr<scalar_t>();
                    reduce_into<scalar_t>(d, rd, o, cpu::RedKind::Sum);
                    double denom = static_cast<double>(rd.count - a.i(2));
                    for (int64_t i = 0; i < out[0].numel(); ++i)
                      o[i] = denom > 0 ? static_cast<scalar_t>(o[i] / denom)
                                       : std::numeric_limits<scalar_t>::quiet_NaN();
                  });
                },
            // d var / dx = 2 (x - mean) / (N - correction)
            .grad =
                [](const GradCtx& c) {
                  const Tensor& x = c.in(0);
                  RedDims rd = red_dims(x.shape(), dims_attr(c.attrs), c.attrs.b(1), "var");
                  Tensor m = mean(x, rd.dims, true);
                  Tensor g = keepdims(c.g(), rd, c.attrs.b(1));
                  if (rd.count >= 0) {
                    double denom = static_cast<double>(rd.count - c.attrs.i(2));
                    return TensorList{mul(mul(sub(x, m), g), 2.0 / denom)};
                  }
                  // Dynamic dims: N - correction at run time.
                  Tensor denom =
                      sub(sum(ones_like(x), rd.dims, true), static_cast<double>(c.attrs.i(2)));
                  return TensorList{div(mul(mul(sub(x, m), g), 2.0), denom)};
                }});

// out[i] = f(group i, its length) for the groups of `in` over rd (float dtypes): for reductions
// that make several passes over a group (logsumexp, vector_norm).
template <typename F>
void for_each_group(const char* op, const Tensor& in, const RedDims& rd, Tensor& out, F&& f) {
  const int64_t kept = out.numel(), red = rd.count;
  if (kept == 0) return;
  const Tensor c = reduced_last(in, rd);
  KILN_DISPATCH_FLOAT(in.dtype(), op, [&] {
    using T = scalar_t;
    const T* x = c.data_ptr<T>();
    T* o = out.data_ptr<T>();
    parallel_for(kept, std::max<int64_t>(1, 16384 / std::max<int64_t>(red, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t i = b; i < e; ++i) o[i] = f(x + i * red, red);
                 });
  });
}

// log(sum(exp(x))) = m + log(sum(exp(x - m))) with m the group's max: no overflow, and rows of
// -inf (all masked) give -inf, as torch. An empty group sums to 0: -inf.
const OpDef& kLogsumexp =
    def_op({.name = "logsumexp",
            .attr_names = {"dims", "keepdim"},
            .traits = kReduction,
            .infer = [](std::span<const Tensor> in,
                        const Attrs& a) { return infer_red("logsumexp", in, a, true); },
            .kernel =
                [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
                  const RedDims rd = red_dims(in[0].shape(), dims_attr(a), a.b(1), "logsumexp");
                  for_each_group("logsumexp", in[0], rd, out[0], [](const auto* r, int64_t n) {
                    using T = std::remove_cv_t<std::remove_pointer_t<decltype(r)>>;
                    T m = -std::numeric_limits<T>::infinity();
                    bool nan = false;
                    for (int64_t j = 0; j < n; ++j) {
                      nan = nan || r[j] != r[j];
                      m = r[j] > m ? r[j] : m;
                    }
                    if (nan) return std::numeric_limits<T>::quiet_NaN();
                    if (std::isinf(m)) return m;  // all -inf, or a +inf
                    double acc = 0;               // float32 groups sum in double
                    for (int64_t j = 0; j < n; ++j)
                      acc += static_cast<double>(vec_math::exp<T>(r[j] - m));
                    return static_cast<T>(static_cast<double>(m) + std::log(acc));
                  });
                },
            // d lse / dx = exp(x - lse) (the softmax over the group)
            .grad =
                [](const GradCtx& c) {
                  const RedDims rd =
                      red_dims(c.in(0).shape(), dims_attr(c.attrs), c.attrs.b(1), "logsumexp");
                  const Tensor lse = keepdims(c.out(0), rd, c.attrs.b(1));
                  return TensorList{
                      mul(unreduce(c.g(), c.in(0), c.attrs, "logsumexp"), exp(sub(c.in(0), lse)))};
                }});

// Vector norms over dims (torch.linalg.vector_norm): ord 2, 1, inf, -inf, 0 (count of nonzeros)
// or any other p: (sum |x|^p)^(1/p). Float32 groups accumulate in double.
const OpDef& kVectorNorm =
    def_op({.name = "vector_norm",
            .attr_names = {"ord", "dims", "keepdim"},
            .traits = kReduction,
            .infer =
                [](std::span<const Tensor> in, const Attrs& a) {
                  if (std::isnan(a.f(0))) fail("vector_norm", "ord must not be NaN");
                  op_util::require_float("vector_norm", in[0]);
                  RedDims rd = red_dims(in[0].shape(), a.ints(1), a.b(2), "vector_norm");
                  return one(in[0].dtype(), rd.out_shape);
                },
            .kernel =
                [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
                  const double p = a.f(0);
                  const RedDims rd = red_dims(in[0].shape(), a.ints(1), a.b(2), "vector_norm");
                  for_each_group("vector_norm", in[0], rd, out[0], [p](const auto* r, int64_t n) {
                    using T = std::remove_cv_t<std::remove_pointer_t<decltype(r)>>;
                    double acc = std::isinf(p) && p < 0 ? INFINITY : 0.0;
                    for (int64_t j = 0; j < n; ++j) {
                      const double v = std::fabs(static_cast<double>(r[j]));
                      if (v != v) return static_cast<T>(v);
                      if (p == 2)
                        acc += v * v;
                      else if (p == 1)
                        acc += v;
                      else if (std::isinf(p))
                        acc = p > 0 ? std::max(acc, v) : std::min(acc, v);
                      else if (p == 0)
                        acc += v != 0;
                      else
                        acc += std::pow(v, p);
                    }
                    if (!std::isinf(p) && p != 1 && p != 0)
                      acc = p == 2 ? std::sqrt(acc) : std::pow(acc, 1 / p);
                    return static_cast<T>(acc);
                  });
                },
            // d ||x||_p / dx = sign(x) |x|^(p-1) / ||x||^(p-1): x / n for p = 2, sign(x) for p = 1,
            // the extremal entries shared equally for +-inf, nothing for 0. Where the norm is 0 the
            // gradient is 0 (a subgradient; torch does the same) instead of 0/0.
            .grad =
                [](const GradCtx& c) {
                  const Tensor& x = c.in(0);
                  const double p = c.attrs.f(0);
                  const RedDims rd =
                      red_dims(x.shape(), c.attrs.ints(1), c.attrs.b(2), "vector_norm");
                  const Tensor n = keepdims(c.out(0), rd, c.attrs.b(2));
                  const Tensor g = keepdims(c.g(), rd, c.attrs.b(2));
                  const Tensor zero = op_util::scalar_like(x, 0);
                  if (p == 0) return TensorList{mul(x, 0.0)};
                  if (std::isinf(p)) {
                    const Tensor hit = eq(abs(x), n);
                    const Tensor cnt = sum(cast(hit, x.dtype()), rd.dims, true);
                    return TensorList{where(hit, div(mul(sign(x), g), cnt), zero)};
                  }
                  if (p == 1) return TensorList{mul(sign(x), g)};
                  const Tensor safe = where(eq(n, 0.0), op_util::scalar_like(n, 1), n);
                  if (p == 2) return TensorList{where(eq(n, 0.0), zero, mul(x, div(g, safe)))};
                  const Tensor r = mul(sign(x), pow(div(abs(x), safe), p - 1));
                  return TensorList{where(eq(n, 0.0), zero, mul(r, g))};
                }});

template <bool IsMax>
void arg_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x0 = in[0];
  bool flat = a.i(0) == INT64_MIN;
  Tensor x = flat ? raw_contiguous_copy(x0) : x0;
  int64_t rank = flat ? 1 : x.dim();
  int64_t dim =
      flat ? 0 : wrap_dim(a.i(0), std::max<int64_t>(rank, 1), IsMax ? "argmax" : "argmin");
  Shape shp = flat ? Shape{x.numel()} : x.shape();
  if (rank == 0) shp = Shape{1};
  int64_t n = shp.rank() ? shp[dim] : 1;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= shp[d];
  for (int64_t d = dim + 1; d < shp.rank(); ++d) inner *= shp[d];
  Tensor c = x.is_contiguous() ? x : raw_contiguous_copy(x);
  int64_t* o = out[0].data_ptr<int64_t>();
  KILN_DISPATCH_NUMERIC(x.dtype(), "argmax", [&] {
    const scalar_t* p = c.data_ptr<scalar_t>();
    for (int64_t i = 0; i < outer; ++i)
      for (int64_t j = 0; j < inner; ++j) {
        int64_t best = 0;
        scalar_t bv = p[i * n * inner + j];
        for (int64_t k = 1; k < n; ++k) {
          scalar_t v = p[(i * n + k) * inner + j];
          if (bv != bv) break;  // NaN wins, as in PyTorch
          if (v != v || (IsMax ? v > bv : v < bv)) {
            bv = v;
            best = k;
          }
        }
        o[i * inner + j] = best;
      }
  });
}

MetaList infer_arg(const char* op, std::span<const Tensor> in, const Attrs& a) {
  op_util::require_numeric(op, in[0]);
  const Shape& s = in[0].shape();
  if (a.i(0) == INT64_MIN) {  // over all elements
    if (s.numel() == 0) fail(op, "cannot take ", op, " of an empty tensor of shape ", s);
    return one(Int64, a.b(1) ? Shape(static_cast<size_t>(s.rank()), 1) : Shape{});
  }
  // Along a dim only that dim must be non-empty ([0, C] along 1 gives [0], as PyTorch).
  int64_t d = wrap_dim(a.i(0), s, op);
  if (s.rank() == 0) return one(Int64, Shape{});
  if (s[d] == 0) fail(op, "dim ", d, " of shape ", s, " is empty");
  Shape o;
  for (int64_t i = 0; i < s.rank(); ++i) {
    if (i == d) {
      if (a.b(1)) o.push_back(1);
    } else {
      o.push_back(s[i]);
    }
  }
  return one(Int64, o);
}

const OpDef& kArgmax = def_op(
    {.name = "argmax",
     .attr_names = {"dim", "keepdim"},
     .traits = kReduction,
     .infer = [](std::span<const Tensor> in, const Attrs& a) { return infer_arg("argmax", in, a); },
     .kernel = arg_kernel<true>});
const OpDef& kArgmin = def_op(
    {.name = "argmin",
     .attr_names = {"dim", "keepdim"},
     .traits = kReduction,
     .infer = [](std::span<const Tensor> in, const Attrs& a) { return infer_arg("argmin", in, a); },
     .kernel = arg_kernel<false>});

// sum_to with the target shape taken from another tensor at run time: the gradient of a
// broadcast when shapes are only known when the graph runs (dynamic dims).
const OpDef& kSumToLike =
    def_op({.name = "sum_to_like",
            .num_inputs = 2,
            .traits = kReduction | kView,
            .infer =
                [](std::span<const Tensor> in, const Attrs&) {
                  const Shape& a = in[0].shape();
                  const Shape& t = in[1].shape();
                  if (t.rank() > a.rank())
                    fail("sum_to_like", "cannot reduce shape ", a, " to the larger rank of ", t);
                  return one(in[0].dtype(), t);
                },
            .view =
                [](std::span<const Tensor> in, const Attrs&) {
                  // Checked here (views run without infer) so that the error names this op.
                  if (!broadcastable_to(in[1].shape(), in[0].shape()))
                    fail("sum_to_like", "cannot reduce shape ", in[0].shape(), " to ",
                         in[1].shape(), ": the target does not broadcast to it");
                  NoGradGuard ng;  // an eager helper inside one op: nothing to record
                  Tensor r = sum_to(in[0], in[1].shape());
                  return TensorList{r};
                },
            .grad =
                [](const GradCtx& c) {
                  return TensorList{expand_as(c.g(), c.in(0)), Tensor()};
                }});

const OpDef& kProd =
    def_op({.name = "prod",
            .attr_names = {"dims", "keepdim"},
            .traits = kReduction,
            .infer = [](std::span<const Tensor> in,
                        const Attrs& a) { return infer_red("prod", in, a, false); },
            .kernel =
                [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
                  const RedDims rd = red_dims(in[0].shape(), dims_attr(a), a.b(1), "prod");
                  const int64_t kept = out[0].numel(), red = std::max<int64_t>(rd.count, 0);
                  if (kept == 0) return;
                  const Tensor c = reduced_last(in[0], rd);
                  KILN_DISPATCH_NUMERIC(in[0].dtype(), "prod", [&] {
                    using T = scalar_t;
                    using Acc = typename WrapAcc<T>::type;
                    const T* x = c.data_ptr<T>();
                    T* o = out[0].data_ptr<T>();
                    for (int64_t i = 0; i < kept; ++i) {
                      Acc acc = Acc(1);
                      for (int64_t j = 0; j < red; ++j) acc *= static_cast<Acc>(x[i * red + j]);
                      o[i] = static_cast<T>(acc);
                    }
                  });
                },
            // As torch: with no zero in a group the gradient is out / x; with one zero only that
            // element gets the product of the others; with two or more, nothing. The product of the
            // nonzero elements is itself a prod, so the rule is differentiable again.
            .grad =
                [](const GradCtx& c) {
                  const Tensor& x = c.in(0);
                  const RedDims rd = red_dims(x.shape(), dims_attr(c.attrs), c.attrs.b(1), "prod");
                  const Tensor g = keepdims(c.g(), rd, c.attrs.b(1));
                  const Tensor zero = eq(x, 0.0);
                  const Tensor nz = sum(cast(zero, Int64), rd.dims, true);
                  const Tensor xs = where(zero, op_util::scalar_like(x, 1), x);
                  const Tensor p = prod(xs, rd.dims, true);
                  const Tensor one_zero = logical_and(eq(nz, 1.0), zero);
                  const Tensor d =
                      where(eq(nz, 0.0), div(p, xs),
                            where(one_zero, expand_as(p, x), op_util::scalar_like(x, 0)));
                  return TensorList{mul(d, g)};
                },
            // torch.autocast runs prod in float32 (products lose bf16's few bits fast).
            .autocast = AutocastPolicy::kFloat32});

// A bool tensor that is true where a is nonzero (NaN included).
Tensor nonzero_mask(const Tensor& a) { return a.dtype() == Bool ? a : ne(a, 0.0); }

}  // namespace

Tensor sum(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  // Bools and every integer dtype sum as int64, as torch.sum (no wrap-around at 32 bits).
  const bool widen = a.defined() && accumulate_result(a.dtype()) != a.dtype();
  Tensor x = widen ? cast(a, Int64) : a;
  return call1(kSum, {x}, {dims, keepdim});
}
Tensor mean(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  return call1(kMean, {a}, {dims, keepdim});
}
Tensor max(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  return bool_back(call1(kMax, {ordered(a)}, {dims, keepdim}), a);
}
Tensor min(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  return bool_back(call1(kMin, {ordered(a)}, {dims, keepdim}), a);
}
Tensor var(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim, int64_t correction) {
  return call1(kVar, {a}, {dims, keepdim, correction});
}
Tensor std_dev(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim,
               int64_t correction) {
  return sqrt(var(a, dims, keepdim, correction));
}
Tensor vector_norm(const Tensor& a, double ord, const std::vector<int64_t>& dims, bool keepdim) {
  if (!a.defined()) fail("vector_norm", "input is undefined");
  return call1(kVectorNorm, {elementwise_util::float_in(a)}, {ord, dims, keepdim});
}
Tensor normalize(const Tensor& a, double p, int64_t dim, double eps) {
  if (!a.defined()) fail("normalize", "input is undefined");
  if (!(eps >= 0)) fail("normalize", "eps must be >= 0, got ", eps);
  const Tensor x = elementwise_util::float_in(a);
  return div(x, clamp(vector_norm(x, p, {dim}, true), eps, INFINITY));
}
// torch: x1 . x2 / max(||x1|| ||x2||, eps) over dim (broadcast together).
Tensor cosine_similarity(const Tensor& a, const Tensor& b, int64_t dim, double eps) {
  if (!a.defined() || !b.defined()) fail("cosine_similarity", "input is undefined");
  if (!(eps >= 0)) fail("cosine_similarity", "eps must be >= 0, got ", eps);
  Tensor x = elementwise_util::float_in(a), y = elementwise_util::float_in(b);
  // The norms are over the broadcast inputs: a dim of size 1 broadcast against n counts n times.
  if (x.shape() != y.shape()) {
    const Shape s = broadcast_shapes(x.shape(), y.shape(), "cosine_similarity");
    x = expand(x, s);
    y = expand(y, s);
  }
  const Tensor dot = sum(mul(x, y), {dim});
  const Tensor nn = mul(vector_norm(x, 2, {dim}), vector_norm(y, 2, {dim}));
  return div(dot, clamp(nn, eps, INFINITY));
}
Tensor logsumexp(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  if (!a.defined()) fail("logsumexp", "input is undefined");
  return call1(kLogsumexp, {elementwise_util::float_in(a)}, {dims, keepdim});
}

Tensor argmax(const Tensor& a, std::optional<int64_t> dim, bool keepdim) {
  return call1(kArgmax, {ordered(a)}, {dim ? *dim : INT64_MIN, keepdim});
}
Tensor argmin(const Tensor& a, std::optional<int64_t> dim, bool keepdim) {
  return call1(kArgmin, {ordered(a)}, {dim ? *dim : INT64_MIN, keepdim});
}

Tensor detail::sum_to_like(const Tensor& a, const Tensor& like) {
  return call1(kSumToLike, {a, like});
}

Tensor sum_to(const Tensor& a, const Shape& shape) {
  if (a.shape() == shape) return a;
  // A dynamic (?) dim of the target matches any dim of a: nothing is reduced there (in a graph,
  // a placeholder [?, 3] gets gradients of shape [N, 3] from ops that met static shapes).
  bool fits = shape.rank() <= a.dim();
  for (int64_t i = 0; fits && i < shape.rank(); ++i) {
    int64_t t = shape[i], d = a.shape()[a.dim() - shape.rank() + i];
    fits = t == 1 || t < 0 || t == d;
  }
  if (!fits) fail("sum_to", "shape ", shape, " does not broadcast to ", a.shape());
  int64_t lead = a.dim() - shape.rank();
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && a.shape()[d] != 1)) dims.push_back(d);
  Tensor s = dims.empty() ? a : sum(a, dims, true);
  // Same rank: the shapes already agree (dynamic dims included); otherwise drop leading dims.
  if (s.dim() == shape.rank()) return s;
  Tensor r = s;
  for (int64_t d = lead - 1; d >= 0; --d) r = squeeze(r, d);
  return r;
}

Tensor prod(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  if (!a.defined()) fail("prod", "input is undefined");
  // Integers and bools multiply as int64, as torch.prod.
  const Tensor x = !is_floating(a.dtype()) && a.dtype() != Int64 ? cast(a, Int64) : a;
  return call1(kProd, {x}, {dims, keepdim});
}

Tensor any(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  if (!a.defined()) fail("any", "input is undefined");
  return gt(sum(cast(nonzero_mask(a), Int64), dims, keepdim), 0.0);
}
Tensor all(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  if (!a.defined()) fail("all", "input is undefined");
  return eq(sum(cast(logical_not(nonzero_mask(a)), Int64), dims, keepdim), 0.0);
}
Tensor amax(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  return max(a, dims, keepdim);
}
Tensor amin(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  return min(a, dims, keepdim);
}
std::pair<Tensor, Tensor> aminmax(const Tensor& a, std::optional<int64_t> dim, bool keepdim) {
  std::vector<int64_t> dims;
  if (dim) dims.push_back(*dim);
  return {min(a, dims, keepdim), max(a, dims, keepdim)};
}
std::pair<Tensor, Tensor> std_mean(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim,
                                   int64_t correction) {
  return {std_dev(a, dims, keepdim, correction), mean(a, dims, keepdim)};
}
std::pair<Tensor, Tensor> var_mean(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim,
                                   int64_t correction) {
  return {var(a, dims, keepdim, correction), mean(a, dims, keepdim)};
}
Tensor count_nonzero(const Tensor& a, const std::vector<int64_t>& dims) {
  if (!a.defined()) fail("count_nonzero", "input is undefined");
  return sum(cast(nonzero_mask(a), Int64), dims, false);
}
Tensor nansum(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  if (!a.defined()) fail("nansum", "input is undefined");
  if (!is_floating(a.dtype())) return sum(a, dims, keepdim);
  return sum(where(ne(a, a), op_util::scalar_like(a, 0), a), dims, keepdim);
}
Tensor nanmean(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  if (!a.defined()) fail("nanmean", "input is undefined");
  op_util::require_float("nanmean", a);
  const Tensor ok = eq(a, a);
  return div(sum(where(ok, a, op_util::scalar_like(a, 0)), dims, keepdim),
             sum(cast(ok, a.dtype()), dims, keepdim));
}

Tensor Tensor::sum() const { return kiln::sum(*this); }
Tensor Tensor::mean() const { return kiln::mean(*this); }

}  // namespace kiln
