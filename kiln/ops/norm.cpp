// Normalization family: layer_norm (a fused row kernel with mean and rstd as extra outputs) and
// its one-pass backward op layer_norm_backward, which serves every mode and has its own gradient
// rule; batch_norm as a composite of primitives in its wrapper.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kiln/dispatch/dispatch.h"
#include "kiln/kernels/cpu/stream.h"
#include "kiln/kernels/cpu/vec_math.h"
#include "kiln/ops/index_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using op_util::one;
using op_util::prod;

// ---- layer_norm -----------------------------------------------------------------------------
// Inputs: x, then weight and bias when the attrs say so. Outputs: y, mean, rstd (mean and rstd
// keep the normalized dims as size 1 so they broadcast against x in the gradient).

template <typename T, bool HasW, bool HasB>
void layer_norm_rows(const T* x, const T* w, const T* bb, T* y, T* mean_out, T* rstd_out,
                     int64_t rows, int64_t n, double eps) {
  // Outputs past the caches are streamed out (see kernels/cpu/stream.h): each piece of a row is
  // normalized into a small cached buffer and streamed out at once, so that the stores overlap
  // the next piece's arithmetic and loads (whole-row buffers left the memory bus idle while a
  // row was computed: W2 at 2 threads went from 77% to the copy loop's rate with pieces).
  constexpr int64_t kPiece = 128;
  const bool stream = rows * n * static_cast<int64_t>(sizeof(T)) >= cpu::kStreamBytes;
  // Independent accumulators for the moments: one vector accumulator is a chain of dependent
  // adds (4 cycles each), which made the statistics pass latency-bound.
  constexpr int64_t kAcc = 64 / sizeof(T) * 4;
  parallel_for(rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(n, 1)),
               [&](int64_t b, int64_t e) {
                 alignas(64) T buf[kPiece];
                 for (int64_t r = b; r < e; ++r) {
                   const T* xr = x + r * n;
                   // One pass over the row for both moments, shifted by its first element so
                   // that E[x^2] - E[x]^2 does not cancel when the mean is large against the
                   // spread (the shift makes the moments those of x - x0).
                   const T k = xr[0];
                   T a1[kAcc] = {}, a2[kAcc] = {};
                   int64_t j0 = 0;
                   for (; j0 + kAcc <= n; j0 += kAcc) {
#pragma omp simd
                     for (int64_t u = 0; u < kAcc; ++u) {
                       T d = xr[j0 + u] - k;
                       a1[u] += d;
                       a2[u] += d * d;
                     }
                   }
                   T s1 = 0, s2 = 0;
                   for (int64_t j = j0; j < n; ++j) {
                     T d = xr[j] - k;
                     s1 += d;
                     s2 += d * d;
                   }
#pragma omp simd reduction(+ : s1, s2)
                   for (int64_t u = 0; u < kAcc; ++u) {
                     s1 += a1[u];
                     s2 += a2[u];
                   }
                   const T m1 = s1 / static_cast<T>(n);
                   const T var = std::max(T(0), s2 / static_cast<T>(n) - m1 * m1);
                   const T mu = k + m1;
                   const T rs = T(1) / std::sqrt(var + static_cast<T>(eps));
                   mean_out[r] = mu;
                   rstd_out[r] = rs;
                   T* yr = y + r * n;
                   for (int64_t p0 = 0; p0 < n; p0 += kPiece) {
                     const int64_t m = std::min(kPiece, n - p0);
                     T* dst = stream ? buf : yr + p0;
#pragma omp simd
                     for (int64_t j = 0; j < m; ++j) {
                       T t = (xr[p0 + j] - mu) * rs;
                       if constexpr (HasW) t *= w[p0 + j];
                       if constexpr (HasB) t += bb[p0 + j];
                       dst[j] = t;
                     }
                     if (stream)
                       cpu::stream_copy(yr + p0, buf, m * static_cast<int64_t>(sizeof(T)));
                   }
                 }
                 if (stream) cpu::stream_fence();
               });
}

struct LnAttrs {
  int64_t k;  // number of normalized (trailing) dims
  double eps;
  bool has_w, has_b;
  explicit LnAttrs(const Attrs& a) : k(a.i(0)), eps(a.f(1)), has_w(a.b(2)), has_b(a.b(3)) {}
};

MetaList infer_layer_norm(std::span<const Tensor> in, const Attrs& a) {
  LnAttrs la(a);
  const Tensor& x = in[0];
  op_util::require_float("layer_norm", x);
  size_t want = 1 + (la.has_w ? 1 : 0) + (la.has_b ? 1 : 0);
  if (in.size() != want)
    fail("layer_norm", "expected ", want, " inputs, got ", in.size(), " (input ", x.shape(), ")");
  if (la.k < 1 || la.k > x.dim())
    fail("layer_norm", "cannot normalize over the last ", la.k, " dims of input ", x.shape());
  Shape ns(x.shape().begin() + (x.dim() - la.k), x.shape().end());
  for (size_t i = 1; i < in.size(); ++i) {
    op_util::require_same_dtype("layer_norm", x, in[i]);
    if (!op_util::dims_agree(in[i].shape(), ns))
      fail("layer_norm", (i == 1 && la.has_w) ? "weight" : "bias", " shape ", in[i].shape(),
           " must equal normalized_shape ", ns, " (input ", x.shape(), ")");
  }
  Shape ks = x.shape();
  for (int64_t d = x.dim() - la.k; d < x.dim(); ++d) ks[d] = 1;
  MetaList m;
  m.push_back(TensorMeta{x.dtype(), x.shape()});
  m.push_back(TensorMeta{x.dtype(), ks});
  m.push_back(TensorMeta{x.dtype(), ks});
  return m;
}

void layer_norm_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  LnAttrs la(a);
  const Tensor& x = in[0];
  const Shape& s = x.shape();
  int64_t rows = prod(s, 0, s.rank() - la.k), n = prod(s, s.rank() - la.k, s.rank());
  if (rows == 0) return;
  KILN_DISPATCH_FLOAT(x.dtype(), "layer_norm", [&] {
    using T = scalar_t;
    const T* X = x.data_ptr<T>();
    const T* W = la.has_w ? in[1].data_ptr<T>() : nullptr;
    const T* B = la.has_b ? in[la.has_w ? 2 : 1].data_ptr<T>() : nullptr;
    T* Y = out[0].data_ptr<T>();
    T* M = out[1].data_ptr<T>();
    T* R = out[2].data_ptr<T>();
    if (n == 0) {  // nothing to normalize: y is empty, the moments of no values are NaN
      std::fill(M, M + rows, std::numeric_limits<T>::quiet_NaN());
      std::fill(R, R + rows, std::numeric_limits<T>::quiet_NaN());
      return;
    }
    if (W && B)
      layer_norm_rows<T, true, true>(X, W, B, Y, M, R, rows, n, la.eps);
    else if (W)
      layer_norm_rows<T, true, false>(X, W, B, Y, M, R, rows, n, la.eps);
    else if (B)
      layer_norm_rows<T, false, true>(X, W, B, Y, M, R, rows, n, la.eps);
    else
      layer_norm_rows<T, false, false>(X, W, B, Y, M, R, rows, n, la.eps);
  });
}

// With mu = mean(x), rstd = (var(x) + eps)^-1/2 (biased var), xh = (x - mu) rstd,
// y = xh w + b over the N normalized elements of a row, and gh = g w:
//   dxh/dx contribution: rstd (gh - mean(gh) - xh mean(gh xh))
//   mu output:   dmu/dx_i   = 1/N                          -> + g_mu / N
//   rstd output: drstd/dx_i = -rstd^3 (x_i - mu) / N = -rstd^2 xh_i / N
// (the mu and rstd terms matter only for gradients of gradients, where those outputs are used
// by this very rule). Grouped so that only rows-sized tensors carry the per-row coefficients:
//   dx = rstd gh + (g_mu/N - rstd mean(gh)) + xh (-g_rstd rstd^2 / N - rstd mean(gh xh)).
// layer_norm_backward: inputs g, x, mean, rstd[, weight]; outputs dx, dweight, dbias (the last
// two of the normalized shape, dweight zeros without a weight). Per row, with xh = (x - mean)
// rstd and gh = g w: dx = rstd (gh - mean(gh) - xh mean(gh xh)); dweight = sum over rows of
// g xh, dbias = sum of g. One pass per row in cache instead of ~15 whole-tensor ops.
template <typename T, bool HasW>
void ln_backward_range(const T* __restrict g, const T* __restrict x, const T* __restrict mu,
                       const T* __restrict rs, const T* __restrict w, T* __restrict dx,
                       T* __restrict pw, T* __restrict pb, int64_t b, int64_t e, int64_t n) {
  for (int64_t r = b; r < e; ++r) {
    const T* gr = g + r * n;
    const T* xr = x + r * n;
    T* dr = dx + r * n;
    const T m = mu[r], s = rs[r];
    T s1 = 0, s2 = 0;
#pragma omp simd reduction(+ : s1, s2)
    for (int64_t j = 0; j < n; ++j) {
      const T xh = (xr[j] - m) * s;
      T gh = gr[j];
      if constexpr (HasW) gh *= w[j];
      s1 += gh;
      s2 += gh * xh;
      pw[j] += gr[j] * xh;
      pb[j] += gr[j];
    }
    const T a = s1 / T(n), c = s2 / T(n);
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const T xh = (xr[j] - m) * s;
      T gh = gr[j];
      if constexpr (HasW) gh *= w[j];
      dr[j] = s * (gh - a - xh * c);
    }
  }
}

template <typename T, bool HasW>
void ln_backward_rows(const T* g, const T* x, const T* mu, const T* rs, const T* w, T* dx, T* dw,
                      T* db, int64_t rows, int64_t n) {
  // One slot when called inside a parallel region (parallel_for then runs inline, and the
  // caller's thread number must not index this buffer).
  const bool outer = omp_in_parallel();
  const int nt = std::max(1, outer ? 1 : omp_get_max_threads());
  std::vector<T> part(static_cast<size_t>(2 * nt * n), T(0));
  // The row loop lives in its own function: inside the parallel_for lambda every captured value
  // is a reference the partial-sum stores might alias, and the vectorized loop fell back to its
  // scalar version (190 us for [1024, 128]; 50 us as written here).
  parallel_for(rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(n, 1)),
               [&](int64_t b, int64_t e) {
                 const int t = outer ? 0 : omp_get_thread_num();
                 T* pw = part.data() + static_cast<size_t>(2 * t) * n;
                 ln_backward_range<T, HasW>(g, x, mu, rs, w, dx, pw, pw + n, b, e, n);
               });
  for (int64_t j = 0; j < n; ++j) {
    T sw = 0, sb = 0;
    for (int t = 0; t < nt; ++t) {
      sw += part[static_cast<size_t>(2 * t) * n + j];
      sb += part[static_cast<size_t>(2 * t + 1) * n + j];
    }
    dw[j] = sw;
    db[j] = sb;
  }
}

// Gradient of layer_norm_backward (mean and rstd are inputs of their own, r = rstd), for
// gradients of gradients and so that graphs can use the one-pass op. Per row, with
// a = mean(gh), c = mean(gh xh), upstream u (for dx), uw (dweight), ub (dbias), and
// U1 = sum(u), U2 = sum(u xh):
//   <u, dx> = r (sum(u gh) - a U1 - c U2)
//   d/dgh_j = r (u_j - U1/N - xh_j U2/N) =: v_j       -> dg += v w, dw += sum over rows v g
//   d/dxh_j = -r (c u_j + U2 gh_j / N) + uw_j g_j =: G_j (dweight = sum g xh adds uw g)
//   dx = r G;  dmean = -r sum(G);  drstd = sum(G xh) / r + (sum(u gh) - a U1 - c U2)
//   dg = v w + uw xh + ub   (without a weight: w = 1 and no uw terms, dweight being zeros)
TensorList layer_norm_backward_grad(const GradCtx& c) {
  const bool hw = c.attrs.b(1);
  const Tensor &g = c.in(0), &x = c.in(1), &mu = c.in(2), &r = c.in(3);
  const int64_t k = c.attrs.i(0);
  std::vector<int64_t> dims;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d) dims.push_back(d);
  const double n = static_cast<double>(prod(x.shape(), x.dim() - k, x.dim()));
  const Tensor &u = c.g(0), &uw = c.g(1), &ub = c.g(2);
  Tensor xh = mul(sub(x, mu), r);
  Tensor gh = hw ? mul(g, c.in(4)) : g;
  Tensor a = mean(gh, dims, true), cc = mean(mul(gh, xh), dims, true);
  Tensor u1 = sum(u, dims, true), u2 = sum(mul(u, xh), dims, true);
  Tensor v = mul(r, sub(sub(u, div(u1, n)), mul(xh, div(u2, n))));
  // Without a weight the dweight output is constant zeros: no uw terms.
  Tensor gx = neg(mul(r, add(mul(cc, u), mul(gh, div(u2, n)))));
  if (hw) gx = add(gx, mul(uw, g));
  TensorList res(hw ? 5 : 4);
  if (c.need(0)) res[0] = add(hw ? add(mul(v, c.in(4)), mul(uw, xh)) : v, ub);
  if (c.need(1)) res[1] = mul(r, gx);
  if (c.need(2)) res[2] = neg(mul(r, sum(gx, dims, true)));
  if (c.need(3))
    res[3] = add(div(sum(mul(gx, xh), dims, true), r),
                 sub(sub(sum(mul(u, gh), dims, true), mul(a, u1)), mul(cc, u2)));
  if (hw && c.need(4)) res[4] = sum_to(mul(v, g), c.in(4).shape());
  return res;
}

const OpDef& kLayerNormBackward =
    def_op({.name = "layer_norm_backward",
            .num_inputs = -1,
            .num_outputs = 3,
            .attr_names = {"normalized_ndim", "has_weight"},
            .infer =
                [](std::span<const Tensor> in, const Attrs& a) {
                  const char* op = "layer_norm_backward";
                  const bool hw = a.b(1);
                  if (in.size() != (hw ? 5u : 4u))
                    fail(op, "expected ", hw ? 5 : 4, " inputs (g, x, mean, rstd",
                         hw ? ", weight" : "", "), got ", in.size());
                  const Tensor& x = in[1];
                  op_util::require_float(op, x);
                  const int64_t k = a.i(0);
                  if (k < 1 || k > x.dim())
                    fail(op, "cannot normalize over the last ", k, " dims of input ", x.shape());
                  Shape ns(x.shape().begin() + (x.dim() - k), x.shape().end());
                  Shape ks = x.shape();
                  for (int64_t d = x.dim() - k; d < x.dim(); ++d) ks[d] = 1;
                  for (size_t i = 0; i < in.size(); ++i) {
                    op_util::require_same_dtype(op, x, in[i]);
                    const Shape& want = i <= 1 ? x.shape() : (i <= 3 ? ks : ns);
                    if (!op_util::dims_agree(in[i].shape(), want))
                      fail(op, "input ", i, " has shape ", in[i].shape(), ", expected ", want,
                           " (input ", x.shape(), ")");
                  }
                  MetaList m;
                  m.push_back(TensorMeta{x.dtype(), x.shape()});
                  m.push_back(TensorMeta{x.dtype(), ns});
                  m.push_back(TensorMeta{x.dtype(), ns});
                  return m;
                },
            .kernel =
                [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
                  const Shape& s = in[1].shape();
                  const int64_t k = a.i(0);
                  int64_t rows = prod(s, 0, s.rank() - k), n = prod(s, s.rank() - k, s.rank());
                  KILN_DISPATCH_FLOAT(in[1].dtype(), "layer_norm_backward", [&] {
                    scalar_t* dw = out[1].data_ptr<scalar_t>();
                    scalar_t* db = out[2].data_ptr<scalar_t>();
                    if (rows == 0) {
                      std::fill(dw, dw + n, scalar_t(0));
                      std::fill(db, db + n, scalar_t(0));
                      return;
                    }
                    auto run = [&](auto has_w) {
                      ln_backward_rows<scalar_t, decltype(has_w)::value>(
                          in[0].data_ptr<scalar_t>(), in[1].data_ptr<scalar_t>(),
                          in[2].data_ptr<scalar_t>(), in[3].data_ptr<scalar_t>(),
                          has_w ? in[4].data_ptr<scalar_t>() : nullptr, out[0].data_ptr<scalar_t>(),
                          dw, db, rows, n);
                    };
                    if (a.b(1))
                      run(std::true_type{});
                    else
                      run(std::false_type{});
                    if (!a.b(1)) std::fill(dw, dw + n, scalar_t(0));
                  });
                },
            .grad = layer_norm_backward_grad,
            .contiguous_inputs = true,
            .doc = "layer_norm's gradients (dx, dweight, dbias) from g, x, mean, rstd[, weight]"});

TensorList layer_norm_grad(const GradCtx& c) {
  LnAttrs la(c.attrs);
  const Tensor& x = c.in(0);
  // When only y's gradient flowed (mean and rstd unused, as in any model): one fused pass,
  // layer_norm_backward, eagerly and in graphs (its own rule serves gradients of gradients).
  // Otherwise the decomposition below, which carries the mean and rstd gradients too. In W7's
  // graph the decomposition was ~13 ops, ~340 us per layer_norm against ~50 us.
  if (!c.flowed(1) && !c.flowed(2)) {
    TensorList in{c.g(0), x, c.out(1), c.out(2)};
    if (la.has_w) in.push_back(c.in(1));
    TensorList r =
        call(kLayerNormBackward, std::span<const Tensor>(in.data(), in.size()), {la.k, la.has_w});
    TensorList res{c.need(0) ? r[0] : Tensor()};
    if (la.has_w) res.push_back(c.need(1) ? r[1] : Tensor());
    if (la.has_b) res.push_back(c.need(la.has_w ? 2 : 1) ? r[2] : Tensor());
    return res;
  }
  std::vector<int64_t> dims;
  for (int64_t d = x.dim() - la.k; d < x.dim(); ++d) dims.push_back(d);
  double n = static_cast<double>(prod(x.shape(), x.dim() - la.k, x.dim()));
  const Tensor& mu = c.out(1);
  const Tensor& rstd = c.out(2);
  const Tensor& g = c.g(0);
  Tensor xh = mul(sub(x, mu), rstd);
  TensorList res;
  res.push_back(Tensor());
  if (c.need(0)) {
    Tensor gh = la.has_w ? mul(g, c.in(1)) : g;
    Tensor a0 = sub(div(c.g(1), n), mul(rstd, mean(gh, dims, true)));
    Tensor a1 =
        sub(div(mul(c.g(2), mul(rstd, rstd)), -n), mul(rstd, mean(mul(gh, xh), dims, true)));
    res[0] = add(add(mul(rstd, gh), a0), mul(xh, a1));
  }
  if (la.has_w) res.push_back(c.need(1) ? sum_to(mul(g, xh), c.in(1).shape()) : Tensor());
  if (la.has_b) {
    size_t k = la.has_w ? 2 : 1;
    res.push_back(c.need(k) ? sum_to(g, c.in(k).shape()) : Tensor());
  }
  return res;
}

const OpDef& kLayerNorm = def_op(
    {.name = "layer_norm",
     .num_inputs = -1,
     .num_outputs = 3,
     .attr_names = {"normalized_ndim", "eps", "has_weight", "has_bias"},
     .infer = infer_layer_norm,
     .kernel = layer_norm_kernel,
     .grad = layer_norm_grad,
     .contiguous_inputs = true,
     .doc = "(x - mean) / sqrt(var + eps) * weight + bias over the trailing dims; also returns "
            "mean and rstd"});

Tensor as_dtype(const Tensor& t, DType dt) {
  return !t.defined() || t.dtype() == dt ? t : cast(t, dt);
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  if (!x.defined()) fail("layer_norm", "input is undefined");
  int64_t k = normalized_shape.rank();
  bool ok = k >= 1 && k <= x.dim();
  for (int64_t d = 0; ok && d < k; ++d) {
    int64_t xd = x.shape()[x.dim() - k + d];
    ok = xd < 0 || xd == normalized_shape[d];
  }
  if (!ok)
    fail("layer_norm", "normalized_shape ", normalized_shape,
         " does not match the trailing dims of input ", x.shape());
  for (const Tensor* t : {&weight, &bias})
    if (t->defined() && !op_util::dims_agree(t->shape(), normalized_shape))
      fail("layer_norm", t == &weight ? "weight" : "bias", " shape ", t->shape(),
           " must equal normalized_shape ", normalized_shape, " (input ", x.shape(), ")");
  SmallVec<Tensor, 4> in;
  in.push_back(x);
  if (weight.defined()) in.push_back(weight);
  if (bias.defined()) in.push_back(bias);
  TensorList outs = call(kLayerNorm, std::span<const Tensor>(in.data(), in.size()),
                         {k, eps, weight.defined(), bias.defined()});
  return outs[0];
}

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  if (!x.defined()) fail("batch_norm", "input is undefined");
  op_util::require_float("batch_norm", x);
  if (x.dim() < 2) fail("batch_norm", "input must be [N, C, ...], got shape ", x.shape());
  int64_t C = x.shape()[1];
  const std::pair<const Tensor*, const char*> params[] = {{&running_mean, "running_mean"},
                                                          {&running_var, "running_var"},
                                                          {&weight, "weight"},
                                                          {&bias, "bias"}};
  for (auto [t, what] : params)
    if (t->defined() && (t->dim() != 1 || !op_util::dims_agree(t->shape(), Shape{C})))
      fail("batch_norm", what, " must have shape [", C, "], got ", t->shape(), " (input ",
           x.shape(), ")");
  if (running_mean.defined() != running_var.defined())
    fail("batch_norm", "running_mean and running_var must both be given or both be undefined");
  // The update is written back with a cast to the buffer's dtype: an integer buffer would keep
  // a truncated statistic. Float64 stats with float32 input (or the reverse) are fine.
  for (auto [t, what] : {params[0], params[1]})
    if (t->defined() && !is_floating(t->dtype()))
      fail("batch_norm", what, " must be float32 or float64, got ", t->dtype(), " ", t->shape(),
           " (input ", x.dtype(), " ", x.shape(), ")");
  // Checked before either is written: copy_ would refuse a graph value, but only after the
  // other buffer had been updated.
  if (training && running_mean.defined() &&
      (!running_mean.is_concrete() || !running_var.is_concrete()))
    fail("batch_norm", "running_mean and running_var are updated in place when training and must ",
         "be concrete tensors, got a graph value for ",
         running_mean.is_concrete() ? "running_var" : "running_mean", " (input ", x.shape(), ")");
  Shape bshape(static_cast<size_t>(x.dim()), 1);
  bshape[1] = C;
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  Tensor mu, inv;
  if (training) {
    const char* kFew = "expected more than 1 value per channel when training, got input shape ";
    int64_t per = 1;
    for (int64_t d : dims) per = (per < 0 || x.size(d) < 0) ? -1 : per * x.size(d);
    if (per >= 0 && per <= 1) fail("batch_norm", kFew, x.shape());
    // A dynamic size: the same check when the graph runs.
    Tensor xc = per < 0 ? op_util::check_numel(x, dims, 2, "batch_norm", kFew) : x;
    mu = mean(xc, dims, true);
    Tensor v = var(xc, dims, true, 0);  // biased variance normalizes, as in PyTorch
    inv = rsqrt(add(v, eps));
    if (running_mean.defined()) {
      // running = (1 - m) running + m stat, with the unbiased variance (PyTorch semantics).
      NoGradGuard ng;
      Tensor m1 = reshape(mu.detach(), Shape{C});
      Tensor v1 = per >= 0 ? mul(reshape(v.detach(), Shape{C}),
                                 static_cast<double>(per) / static_cast<double>(per - 1))
                           : reshape(var(xc.detach(), dims, true, 1), Shape{C});
      Tensor rm = as_dtype(running_mean, x.dtype()), rv = as_dtype(running_var, x.dtype());
      Tensor new_m = add(mul(rm, 1.0 - momentum), mul(m1, momentum));
      Tensor new_v = add(mul(rv, 1.0 - momentum), mul(v1, momentum));
      Tensor rm_out = running_mean, rv_out = running_var;  // handles sharing the storage
      rm_out.copy_(new_m);
      rv_out.copy_(new_v);
    }
  } else {
    if (!running_mean.defined())
      fail("batch_norm", "eval mode needs running_mean and running_var (input ", x.shape(), ")");
    mu = reshape(as_dtype(running_mean, x.dtype()), bshape);
    inv = rsqrt(add(reshape(as_dtype(running_var, x.dtype()), bshape), eps));
  }
  Tensor y = mul(sub(x, mu), inv);
  if (weight.defined()) y = mul(y, reshape(as_dtype(weight, x.dtype()), bshape));
  if (bias.defined()) y = add(y, reshape(as_dtype(bias, x.dtype()), bshape));
  return y;
}

}  // namespace kiln

namespace kiln {

// group_norm: [N, C, *] viewed as [N, G, C/G *]; each group normalized with its biased
// variance (as torch), then the per-channel affine.
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                  double eps) {
  const char* op = "group_norm";
  if (!x.defined()) fail(op, "input is undefined");
  op_util::require_float(op, x);
  if (x.dim() < 2) fail(op, "input must be [N, C, *], got shape ", x.shape());
  const int64_t C = x.size(1);
  if (num_groups <= 0) fail(op, "num_groups must be positive, got ", num_groups);
  if (C < 0) fail(op, "needs a static channel dim, got shape ", x.shape());
  if (C % num_groups != 0)
    fail(op, "expected number of channels in input (", C, ") to be divisible by num_groups (",
         num_groups, "), input shape ", x.shape());
  for (auto [t, what] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}})
    if (t->defined() && (t->dim() != 1 || t->size(0) != C))
      fail(op, what, " must have shape [", C, "], got ", t->shape(), " (input ", x.shape(), ")");
  int64_t per = C / num_groups;
  for (int64_t d = 2; d < x.dim(); ++d) {
    if (x.size(d) < 0) fail(op, "needs static dims past the batch, got shape ", x.shape());
    per *= x.size(d);
  }
  // float16/bfloat16 normalize in float32 and round once at the end, as torch's kernel
  // accumulates (each op in bf16 was up to 8 ulps off).
  const DType wide = is_reduced(x.dtype()) ? Float32 : x.dtype();
  const Tensor xw = as_dtype(x, wide);
  const Tensor xg = reshape(xw, Shape{-1, num_groups, per});
  const Tensor mu = mean(xg, {2}, true);
  const Tensor v = var(xg, {2}, true, 0);
  Tensor y = reshape(mul(sub(xg, mu), rsqrt(add(v, eps))), x.shape());
  Shape bshape(static_cast<size_t>(x.dim()), 1);
  bshape[1] = C;
  if (weight.defined()) y = mul(y, reshape(as_dtype(weight, wide), bshape));
  if (bias.defined()) y = add(y, reshape(as_dtype(bias, wide), bshape));
  return as_dtype(y, x.dtype());
}

// instance_norm is batch_norm over [1, N C, *] (torch's own formulation): the running stats are
// repeated per sample, updated by batch_norm, and averaged back over the batch.
Tensor instance_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                     const Tensor& weight, const Tensor& bias, bool use_input_stats,
                     double momentum, double eps) {
  const char* op = "instance_norm";
  if (!x.defined()) fail(op, "input is undefined");
  op_util::require_float(op, x);
  if (x.dim() < 3)
    fail(op, "input must be [N, C, *] with at least one spatial dim, got shape ", x.shape());
  for (int64_t d = 0; d < x.dim(); ++d)
    if (x.size(d) < 0) fail(op, "needs static sizes, got shape ", x.shape());
  const int64_t N = x.size(0), C = x.size(1);
  if (running_mean.defined() != running_var.defined())
    fail(op, "running_mean and running_var must both be given or both be undefined");
  for (auto [t, what] :
       {std::pair{&running_mean, "running_mean"}, std::pair{&running_var, "running_var"},
        std::pair{&weight, "weight"}, std::pair{&bias, "bias"}})
    if (t->defined() && (t->dim() != 1 || t->size(0) != C))
      fail(op, what, " must have shape [", C, "], got ", t->shape(), " (input ", x.shape(), ")");
  // (as batch_norm: the update is written back into the buffers, which must be concrete floats)
  for (auto [t, what] :
       {std::pair{&running_mean, "running_mean"}, std::pair{&running_var, "running_var"}}) {
    if (t->defined() && !is_floating(t->dtype()))
      fail(op, what, " must be float32 or float64, got ", t->dtype(), " ", t->shape(), " (input ",
           x.dtype(), " ", x.shape(), ")");
    if (t->defined() && use_input_stats && !t->is_concrete())
      fail(op, what, " is updated in place and must be a concrete tensor, got a graph value");
  }
  if (!use_input_stats && !running_mean.defined())
    fail(op, "expected running_mean and running_var to be defined when use_input_stats is false");
  if (use_input_stats) {
    int64_t per = 1;
    for (int64_t d = 2; d < x.dim(); ++d) per *= x.size(d);
    if (per <= 1)
      fail(op, "expected more than 1 spatial element when training, got input shape ", x.shape());
  }
  Shape s1 = x.shape();
  s1[0] = 1;
  s1[1] = N * C;
  Tensor rm, rv;
  if (running_mean.defined()) {
    rm = repeat(as_dtype(running_mean, x.dtype()).detach(), {N});
    rv = repeat(as_dtype(running_var, x.dtype()).detach(), {N});
  }
  Tensor y = batch_norm(reshape(x, s1), rm, rv, Tensor(), Tensor(), use_input_stats, momentum, eps);
  y = reshape(y, x.shape());
  if (use_input_stats && running_mean.defined()) {
    NoGradGuard ng;
    Tensor rm_out = running_mean, rv_out = running_var;
    rm_out.copy_(mean(reshape(rm, Shape{N, C}), {0}));
    rv_out.copy_(mean(reshape(rv, Shape{N, C}), {0}));
  }
  Shape bshape(static_cast<size_t>(x.dim()), 1);
  bshape[1] = C;
  if (weight.defined()) y = mul(y, reshape(as_dtype(weight, x.dtype()), bshape));
  if (bias.defined()) y = add(y, reshape(as_dtype(bias, x.dtype()), bshape));
  return y;
}

// torch's local_response_norm: x / (k + alpha * avg over `size` neighbouring channels of x^2)^beta,
// the window zero-padded (size / 2 before, (size - 1) / 2 after) and averaged by size.
Tensor local_response_norm(const Tensor& x, int64_t size, double alpha, double beta, double k) {
  const char* op = "local_response_norm";
  if (!x.defined()) fail(op, "input is undefined");
  op_util::require_float(op, x);
  if (x.dim() < 3) fail(op, "expected 3D or higher dimensional input, got shape ", x.shape());
  if (size <= 0) fail(op, "size must be positive, got ", size);
  for (int64_t d = 1; d < x.dim(); ++d)
    if (x.size(d) < 0) fail(op, "needs static sizes past the batch, got shape ", x.shape());
  const int64_t C = x.size(1);
  Tensor sq = mul(x, x);
  // [N, C, rest] -> [N, 1, C + size - 1, rest] summed over windows of `size` along C
  int64_t rest = 1;
  for (int64_t d = 2; d < x.dim(); ++d) rest *= x.size(d);
  Tensor s = unsqueeze(reshape(sq, Shape{-1, C, rest}), 1);
  s = pad(s, {0, 0, size / 2, (size - 1) / 2});
  s = avg_pool2d(s, {size, 1}, {1, 1});
  const Tensor d = pow(add(mul(reshape(squeeze(s, 1), x.shape()), alpha), k), beta);
  return div(x, d);
}

}  // namespace kiln
