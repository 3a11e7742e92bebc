// Neural-network family: softmax, log_softmax and layer_norm (fused row kernels: they sit on
// every attention / loss / transformer block path), nll_loss (+ nll_loss_grad), dropout; and
// the composites batch_norm, cross_entropy, mse_loss built from primitives in the wrappers.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kiln/kernels/cpu/stream.h"
#include "kiln/kernels/cpu/vec_math.h"
#include "kiln/ops/index_util.h"

namespace kiln {
namespace {

using opu::one;
using opu::prod;

// ---- softmax / log_softmax --------------------------------------------------------------------

// Reduced dim last (inner == 1): one contiguous row per task, max / exp-sum / scale. The max and
// the sum keep kW independent lanes: `omp simd reduction(max)` over a 64-element row (attention
// scores) compiled to a loop 5x slower than this (vector epilogues and a horizontal reduction per
// row), which made softmax 2x slower than exp over the same elements.
template <typename T, bool Log>
void softmax_rows(const T* x, T* y, int64_t rows, int64_t n) {
  constexpr int64_t kW = 64 / sizeof(T);
  parallel_for(rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(n, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t r = b; r < e; ++r) {
                   const T* xr = x + r * n;
                   T* yr = y + r * n;
                   T acc[kW];
                   for (int64_t u = 0; u < kW; ++u) acc[u] = -std::numeric_limits<T>::infinity();
                   int64_t j = 0;
                   for (; j + kW <= n; j += kW) {
#pragma omp simd
                     for (int64_t u = 0; u < kW; ++u)
                       acc[u] = acc[u] > xr[j + u] ? acc[u] : xr[j + u];
                   }
                   T m = -std::numeric_limits<T>::infinity();
                   for (int64_t u = 0; u < kW; ++u) m = std::max(m, acc[u]);
                   for (; j < n; ++j) m = std::max(m, xr[j]);
                   // A NaN anywhere reaches the sum through its exp, so the max may skip it.
                   T sa[kW] = {};
                   j = 0;
                   for (; j + kW <= n; j += kW) {
#pragma omp simd
                     for (int64_t u = 0; u < kW; ++u) {
                       const T ev = vm::exp<T>(xr[j + u] - m);
                       if constexpr (!Log) yr[j + u] = ev;
                       sa[u] += ev;
                     }
                   }
                   T s = 0;
                   for (int64_t u = 0; u < kW; ++u) s += sa[u];
                   for (; j < n; ++j) {
                     const T ev = vm::exp<T>(xr[j] - m);
                     if constexpr (!Log) yr[j] = ev;
                     s += ev;
                   }
                   if constexpr (Log) {
                     const T lse = m + std::log(s);
#pragma omp simd
                     for (int64_t k = 0; k < n; ++k) yr[k] = xr[k] - lse;
                   } else {
                     const T inv = T(1) / s;
#pragma omp simd
                     for (int64_t k = 0; k < n; ++k) yr[k] *= inv;
                   }
                 }
               });
}

// Reduced dim in the middle ([outer, n, inner], inner > 1): per task a block of columns, with
// the running max / sum held in small arrays so every inner loop is contiguous.
template <typename T, bool Log>
void softmax_cols(const T* x, T* y, int64_t outer, int64_t n, int64_t inner) {
  constexpr int64_t kBlk = 256;
  int64_t nblk = (inner + kBlk - 1) / kBlk;
  int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, n * std::min(inner, kBlk)));
  parallel_for(outer * nblk, grain, [&](int64_t b, int64_t e) {
    T mx[kBlk], sm[kBlk];
    for (int64_t t = b; t < e; ++t) {
      int64_t o = t / nblk, j0 = (t % nblk) * kBlk, w = std::min(inner, j0 + kBlk) - j0;
      const T* xb = x + o * n * inner + j0;
      T* yb = y + o * n * inner + j0;
      for (int64_t j = 0; j < w; ++j) {
        mx[j] = -std::numeric_limits<T>::infinity();
        sm[j] = 0;
      }
      for (int64_t k = 0; k < n; ++k) {
        const T* xr = xb + k * inner;
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) mx[j] = std::max(mx[j], xr[j]);
      }
      for (int64_t k = 0; k < n; ++k) {
        const T* xr = xb + k * inner;
        T* yr = yb + k * inner;
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) {
          T ev = vm::exp<T>(xr[j] - mx[j]);
          if constexpr (!Log) yr[j] = ev;
          sm[j] += ev;
        }
      }
      if constexpr (Log) {
        for (int64_t j = 0; j < w; ++j) sm[j] = mx[j] + std::log(sm[j]);
      } else {
        for (int64_t j = 0; j < w; ++j) sm[j] = T(1) / sm[j];
      }
      for (int64_t k = 0; k < n; ++k) {
        const T* xr = xb + k * inner;
        T* yr = yb + k * inner;
        if constexpr (Log) {
#pragma omp simd
          for (int64_t j = 0; j < w; ++j) yr[j] = xr[j] - sm[j];
        } else {
#pragma omp simd
          for (int64_t j = 0; j < w; ++j) yr[j] *= sm[j];
        }
      }
    }
  });
}

template <bool Log>
void softmax_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  const Shape& s = x.shape();
  if (x.numel() == 0) return;
  int64_t r = std::max<int64_t>(s.rank(), 1);
  int64_t dim = wrap_dim(a.i(0), r, Log ? "log_softmax" : "softmax");
  int64_t outer = s.rank() ? prod(s, 0, dim) : 1, n = s.rank() ? s[dim] : 1;
  int64_t inner = s.rank() ? prod(s, dim + 1, s.rank()) : 1;
  KILN_DISPATCH_FLOAT(x.dtype(), "softmax", [&] {
    const scalar_t* X = x.data_ptr<scalar_t>();
    scalar_t* Y = out[0].data_ptr<scalar_t>();
    if (inner == 1)
      softmax_rows<scalar_t, Log>(X, Y, outer, n);
    else
      softmax_cols<scalar_t, Log>(X, Y, outer, n, inner);
  });
}

// dx = y * (g - sum(g * y)) along the softmax dim: two passes over each row while it is in
// cache, instead of four whole-tensor ops (mul, sum, sub, mul).
template <typename T>
void softmax_grad_impl(const T* g, const T* y, T* dx, int64_t outer, int64_t n, int64_t inner) {
  if (inner == 1) {
    parallel_for(outer, std::max<int64_t>(1, 32768 / std::max<int64_t>(n, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t r = b; r < e; ++r) {
                     const T* gr = g + r * n;
                     const T* yr = y + r * n;
                     T* dr = dx + r * n;
                     T s = 0;
#pragma omp simd reduction(+ : s)
                     for (int64_t j = 0; j < n; ++j) s += gr[j] * yr[j];
#pragma omp simd
                     for (int64_t j = 0; j < n; ++j) dr[j] = yr[j] * (gr[j] - s);
                   }
                 });
    return;
  }
  constexpr int64_t kBlk = 256;
  int64_t nblk = (inner + kBlk - 1) / kBlk;
  int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, n * std::min(inner, kBlk)));
  parallel_for(outer * nblk, grain, [&](int64_t b, int64_t e) {
    T sm[kBlk];
    for (int64_t t = b; t < e; ++t) {
      int64_t o = t / nblk, j0 = (t % nblk) * kBlk, w = std::min(inner, j0 + kBlk) - j0;
      const int64_t base = o * n * inner + j0;
      for (int64_t j = 0; j < w; ++j) sm[j] = 0;
      for (int64_t k = 0; k < n; ++k) {
        const T* gr = g + base + k * inner;
        const T* yr = y + base + k * inner;
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) sm[j] += gr[j] * yr[j];
      }
      for (int64_t k = 0; k < n; ++k) {
        const T* gr = g + base + k * inner;
        const T* yr = y + base + k * inner;
        T* dr = dx + base + k * inner;
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) dr[j] = yr[j] * (gr[j] - sm[j]);
      }
    }
  });
}

template <bool Log>
MetaList infer_softmax(std::span<const Tensor> in, const Attrs& a) {
  const char* op = Log ? "log_softmax" : "softmax";
  opu::require_float(op, in[0]);
  wrap_dim(a.i(0), std::max<int64_t>(in[0].dim(), 1), op);
  return one(in[0].dtype(), in[0].shape());
}

const OpDef& kSoftmax = def_op(
    {.name = "softmax",
     .attr_names = {"dim"},
     .traits = kReduction,
     .infer = infer_softmax<false>,
     .kernel = softmax_kernel<false>,
     // y_i = e^{x_i} / sum_j e^{x_j}: dy_i/dx_k = y_i (d_ik - y_k), so
     // dx_k = sum_i g_i y_i (d_ik - y_k) = y_k (g_k - sum_i g_i y_i).
     .grad =
         [](const GradCtx& c) { return TensorList{softmax_grad(c.g(), c.out(0), c.attrs.i(0))}; },
     .contiguous_inputs = true,
     .doc = "exp(x - max) / sum(exp(x - max)) along dim"});

// Inputs g (the gradient of softmax's output) and y (that output). Its own gradient, for
// double backward: with s = sum(g y), dx_k = y_k (g_k - s) is linear in g, so d/dg against gg
// is softmax_grad(gg, y); d/dy_j = gg_j (g_j - s) - g_j sum(gg y).
const OpDef& kSoftmaxGrad = def_op(
    {.name = "softmax_grad",
     .num_inputs = 2,
     .attr_names = {"dim"},
     .traits = kReduction,
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           opu::require_float("softmax_grad", in[0]);
           opu::require_same_dtype("softmax_grad", in[0], in[1]);
           if (in[0].shape() != in[1].shape())
             fail("softmax_grad", "gradient shape ", in[0].shape(),
                  " differs from the softmax output's ", in[1].shape());
           wrap_dim(a.i(0), std::max<int64_t>(in[0].dim(), 1), "softmax_grad");
           return one(in[0].dtype(), in[0].shape());
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           const Shape& s = in[1].shape();
           if (s.numel() == 0) return;
           int64_t r = std::max<int64_t>(s.rank(), 1);
           int64_t dim = wrap_dim(a.i(0), r, "softmax_grad");
           int64_t outer = s.rank() ? prod(s, 0, dim) : 1, n = s.rank() ? s[dim] : 1;
           int64_t inner = s.rank() ? prod(s, dim + 1, s.rank()) : 1;
           KILN_DISPATCH_FLOAT(in[1].dtype(), "softmax_grad", [&] {
             softmax_grad_impl<scalar_t>(in[0].data_ptr<scalar_t>(), in[1].data_ptr<scalar_t>(),
                                         out[0].data_ptr<scalar_t>(), outer, n, inner);
           });
         },
     .grad =
         [](const GradCtx& c) {
           int64_t dim = c.attrs.i(0);
           const Tensor &g = c.in(0), &y = c.in(1), &gg = c.g();
           Tensor dg = c.need(0) ? softmax_grad(gg, y, dim) : Tensor();
           Tensor dy;
           if (c.need(1)) {
             Tensor s = sum(mul(g, y), {dim}, true);
             dy = sub(mul(gg, sub(g, s)), mul(g, sum(mul(gg, y), {dim}, true)));
           }
           return TensorList{dg, dy};
         },
     .contiguous_inputs = true,
     .doc = "y * (g - sum(g * y, dim)): softmax's gradient from its output y"});

const OpDef& kLogSoftmax =
    def_op({.name = "log_softmax",
            .attr_names = {"dim"},
            .traits = kReduction,
            .infer = infer_softmax<true>,
            .kernel = softmax_kernel<true>,
            // y_i = x_i - log sum_j e^{x_j}: dy_i/dx_k = d_ik - softmax_k, so
            // dx_k = g_k - softmax_k sum_i g_i = g_k - exp(y_k) sum_i g_i.
            .grad =
                [](const GradCtx& c) {
                  int64_t dim = c.attrs.i(0);
                  return TensorList{sub(c.g(), mul(exp(c.out(0)), sum(c.g(), {dim}, true)))};
                },
            .contiguous_inputs = true,
            .doc = "x - max - log(sum(exp(x - max))) along dim"});

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
  opu::require_float("layer_norm", x);
  size_t want = 1 + (la.has_w ? 1 : 0) + (la.has_b ? 1 : 0);
  if (in.size() != want)
    fail("layer_norm", "expected ", want, " inputs, got ", in.size(), " (input ", x.shape(), ")");
  if (la.k < 1 || la.k > x.dim())
    fail("layer_norm", "cannot normalize over the last ", la.k, " dims of input ", x.shape());
  Shape ns(x.shape().begin() + (x.dim() - la.k), x.shape().end());
  for (size_t i = 1; i < in.size(); ++i) {
    opu::require_same_dtype("layer_norm", x, in[i]);
    if (in[i].shape() != ns)
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
  const int nt = std::max(1, omp_in_parallel() ? 1 : omp_get_max_threads());
  std::vector<T> part(static_cast<size_t>(2 * nt * n), T(0));
  // The row loop lives in its own function: inside the parallel_for lambda every captured value
  // is a reference the partial-sum stores might alias, and the vectorized loop fell back to its
  // scalar version (190 us for [1024, 128]; 50 us as written here).
  parallel_for(rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(n, 1)),
               [&](int64_t b, int64_t e) {
                 const int t = omp_in_parallel() ? omp_get_thread_num() : 0;
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
                  opu::require_float(op, x);
                  const int64_t k = a.i(0);
                  if (k < 1 || k > x.dim())
                    fail(op, "cannot normalize over the last ", k, " dims of input ", x.shape());
                  Shape ns(x.shape().begin() + (x.dim() - k), x.shape().end());
                  Shape ks = x.shape();
                  for (int64_t d = x.dim() - k; d < x.dim(); ++d) ks[d] = 1;
                  for (size_t i = 0; i < in.size(); ++i) {
                    opu::require_same_dtype(op, x, in[i]);
                    const Shape& want = i <= 1 ? x.shape() : (i <= 3 ? ks : ns);
                    if (in[i].shape() != want)
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

// ---- nll_loss -------------------------------------------------------------------------------

const char* red_name(Reduction r) {
  return r == Reduction::None ? "none" : (r == Reduction::Sum ? "sum" : "mean");
}
Reduction red_of(const std::string& s) {
  return s == "none" ? Reduction::None : (s == "sum" ? Reduction::Sum : Reduction::Mean);
}

// log_probs [N, C, d...], target [N, d...].
void check_nll_shapes(const char* op, const Shape& lp, const Shape& t) {
  bool ok = lp.rank() >= 2 && t.rank() == lp.rank() - 1;
  for (int64_t d = 0; ok && d < t.rank(); ++d) {
    int64_t ld = lp[d == 0 ? 0 : d + 1];
    ok = ld < 0 || t[d] < 0 || ld == t[d];
  }
  if (!ok)
    fail(op, "target shape ", t, " does not match input shape ", lp,
         " (expected input [N, C, d...] and target [N, d...])");
}

MetaList infer_nll(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& lp = in[0];
  const Tensor& t = in[1];
  opu::require_float("nll_loss", lp);
  opu::require_index("nll_loss", t, "target");
  check_nll_shapes("nll_loss", lp.shape(), t.shape());
  if (red_of(a.s(0)) == Reduction::None) return one(lp.dtype(), t.shape());
  return one(lp.dtype(), Shape{});
}

// Calls f(n, j, class) for every target that is not ignore_index, after checking the range.
template <typename F>
void for_each_target(const char* op, const Tensor& t, int64_t C, int64_t ignore, F&& f) {
  const Shape& ts = t.shape();
  int64_t N = ts[0], inner = prod(ts, 1, ts.rank());
  opu::with_index(t, op, [&](auto* tp) {
    for (int64_t i = 0; i < N * inner; ++i) {
      int64_t v = static_cast<int64_t>(tp[i]);
      if (v == ignore) continue;
      if (v < 0 || v >= C)
        fail(op, "target ", v, " is out of range for ", C, " classes (ignore_index ", ignore,
             ", target shape ", ts, ")");
    }
    for (int64_t i = 0; i < N * inner; ++i) {
      int64_t v = static_cast<int64_t>(tp[i]);
      f(i / inner, i % inner, v == ignore ? int64_t(-1) : v);
    }
  });
}

void nll_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& lp = in[0];
  const Tensor& t = in[1];
  Reduction red = red_of(a.s(0));
  int64_t ignore = a.i(1);
  int64_t C = lp.shape()[1], inner = prod(lp.shape(), 2, lp.dim());
  KILN_DISPATCH_FLOAT(lp.dtype(), "nll_loss", [&] {
    const scalar_t* L = lp.data_ptr<scalar_t>();
    scalar_t* O = out[0].data_ptr<scalar_t>();
    double acc = 0;
    int64_t count = 0;
    for_each_target("nll_loss", t, C, ignore, [&](int64_t n, int64_t j, int64_t cls) {
      double v = cls < 0 ? 0.0 : -static_cast<double>(L[(n * C + cls) * inner + j]);
      if (red == Reduction::None) O[n * inner + j] = static_cast<scalar_t>(v);
      acc += v;
      count += cls >= 0;
    });
    // Mean over zero non-ignored targets is 0/0 = NaN, as in PyTorch.
    if (red == Reduction::Sum) O[0] = static_cast<scalar_t>(acc);
    if (red == Reduction::Mean)
      O[0] = count ? static_cast<scalar_t>(acc / static_cast<double>(count))
                   : std::numeric_limits<scalar_t>::quiet_NaN();
  });
}

// nll_loss_grad(g, target; reduction, ignore_index, num_classes) -> [N, C, d...]: zeros with
// -g (per element, or the scalar g, divided by the count for mean) at each target class.
MetaList infer_nll_grad(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& g = in[0];
  const Tensor& t = in[1];
  opu::require_float("nll_loss_grad", g);
  opu::require_index("nll_loss_grad", t, "target");
  if (t.dim() < 1) fail("nll_loss_grad", "target must be [N, d...], got shape ", t.shape());
  if (red_of(a.s(0)) == Reduction::None ? g.shape() != t.shape() : g.dim() != 0)
    fail("nll_loss_grad", "gradient shape ", g.shape(), " does not fit target ", t.shape(),
         " with reduction ", a.s(0));
  Shape s;
  s.push_back(t.shape()[0]);
  s.push_back(a.i(2));
  for (int64_t d = 1; d < t.dim(); ++d) s.push_back(t.shape()[d]);
  return one(g.dtype(), s);
}

void nll_grad_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& g = in[0];
  const Tensor& t = in[1];
  Reduction red = red_of(a.s(0));
  int64_t ignore = a.i(1), C = a.i(2);
  int64_t inner = prod(t.shape(), 1, t.dim());
  std::memset(out[0].raw_data(), 0, static_cast<size_t>(out[0].numel()) * out[0].element_size());
  int64_t count = 0;
  if (red == Reduction::Mean)
    for_each_target("nll_loss_grad", t, C, ignore,
                    [&](int64_t, int64_t, int64_t cls) { count += cls >= 0; });
  KILN_DISPATCH_FLOAT(g.dtype(), "nll_loss_grad", [&] {
    const scalar_t* G = g.data_ptr<scalar_t>();
    scalar_t* O = out[0].data_ptr<scalar_t>();
    scalar_t scale =
        red == Reduction::Mean ? scalar_t(1) / static_cast<scalar_t>(count) : scalar_t(1);
    for_each_target("nll_loss_grad", t, C, ignore, [&](int64_t n, int64_t j, int64_t cls) {
      if (cls < 0) return;
      scalar_t gv = red == Reduction::None ? G[n * inner + j] : G[0];
      O[(n * C + cls) * inner + j] = -gv * scale;
    });
  });
}

const OpDef& kNllLoss =
    def_op({.name = "nll_loss",
            .num_inputs = 2,
            .attr_names = {"reduction", "ignore_index"},
            .infer = infer_nll,
            .kernel = nll_kernel,
            // loss = -lp[n, t_n] (summed, or averaged over the non-ignored targets): the gradient
            // is -g (or -g / count) at each target class and zero elsewhere.
            .grad =
                [](const GradCtx& c) {
                  Tensor gl;
                  // nll_loss_grad is defined below (its own rule needs nll_loss): look it up once.
                  static const OpDef& grad_op = OpRegistry::get().at("nll_loss_grad");
                  if (c.need(0))
                    gl = call1(grad_op, {c.g(), c.in(1)},
                               {c.attrs.s(0), c.attrs.i(1), c.in(0).shape()[1]});
                  return TensorList{gl, Tensor()};
                },
            .contiguous_inputs = true,
            .doc = "negative log-likelihood of class indices; reduction none | mean | sum"});

const OpDef& kNllLossGrad = def_op(
    {.name = "nll_loss_grad",
     .num_inputs = 2,
     .attr_names = {"reduction", "ignore_index", "num_classes"},
     .infer = infer_nll_grad,
     .kernel = nll_grad_kernel,
     // Linear in g and the adjoint of nll_loss (as a linear map of lp): gradient nll_loss(gg).
     .grad =
         [](const GradCtx& c) {
           Tensor gg;
           if (c.need(0)) gg = call1(kNllLoss, {c.g(), c.in(1)}, {c.attrs.s(0), c.attrs.i(1)});
           return TensorList{gg, Tensor()};
         },
     .contiguous_inputs = true,
     .doc = "gradient of nll_loss with respect to the log-probabilities"});

// ---- dropout --------------------------------------------------------------------------------

// Counter-based hash (splitmix64 finalizer): element i's bits depend only on (seed, i), so the
// mask is the same for any thread count and any split of the loop.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

template <typename T>
void dropout_loop(const T* x, T* y, bool* mask, int64_t n, uint64_t seed, uint64_t thresh,
                  T scale) {
  parallel_for(n, kParallelGrain, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      uint64_t h = mix64(seed + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ULL);
      bool keep = (h >> 32) >= thresh;
      mask[i] = keep;
      y[i] = keep ? x[i] * scale : T(0);
    }
  });
}

const OpDef& kDropout = def_op(
    {.name = "dropout",
     .num_outputs = 2,
     .attr_names = {"p"},
     .traits = kRandom,
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           opu::require_float("dropout", in[0]);
           double p = a.f(0);
           if (!(p >= 0 && p < 1))
             fail("dropout", "p must be in [0, 1), got ", p, " (input shape ", in[0].shape(), ")");
           MetaList m;
           m.push_back(TensorMeta{in[0].dtype(), in[0].shape()});
           m.push_back(TensorMeta{Bool, in[0].shape()});
           return m;
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           double p = a.f(0);
           // One draw from the global generator per call seeds the per-element hash, so
           // manual_seed makes the mask reproducible.
           uint64_t seed = random_u64();
           uint64_t thresh = static_cast<uint64_t>(std::ldexp(p, 32));
           KILN_DISPATCH_FLOAT(in[0].dtype(), "dropout", [&] {
             dropout_loop<scalar_t>(in[0].data_ptr<scalar_t>(), out[0].data_ptr<scalar_t>(),
                                    out[1].data_ptr<bool>(), in[0].numel(), seed, thresh,
                                    static_cast<scalar_t>(1.0 / (1.0 - p)));
           });
         },
     // y = x * mask / (1 - p) with the mask saved as output 1: dx = g * mask / (1 - p).
     .grad =
         [](const GradCtx& c) {
           const Tensor& g = c.g(0);
           return TensorList{
               where(c.out(1), mul(g, 1.0 / (1.0 - c.attrs.f(0))), opu::scalar_like(g, 0))};
         },
     .contiguous_inputs = true,
     .doc = "zeroes elements with probability p, scales the rest by 1/(1-p); output 1 is the "
            "kept mask"});

Tensor as_dtype(const Tensor& t, DType dt) {
  return !t.defined() || t.dtype() == dt ? t : cast(t, dt);
}

}  // namespace

Tensor softmax(const Tensor& a, int64_t dim) { return call1(kSoftmax, {a}, {dim}); }
Tensor log_softmax(const Tensor& a, int64_t dim) { return call1(kLogSoftmax, {a}, {dim}); }
Tensor softmax_grad(const Tensor& g, const Tensor& y, int64_t dim) {
  return call1(kSoftmaxGrad, {g, y}, {dim});
}

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
    if (t->defined() && t->shape() != normalized_shape)
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
  opu::require_float("batch_norm", x);
  if (x.dim() < 2) fail("batch_norm", "input must be [N, C, ...], got shape ", x.shape());
  int64_t C = x.shape()[1];
  const std::pair<const Tensor*, const char*> params[] = {{&running_mean, "running_mean"},
                                                          {&running_var, "running_var"},
                                                          {&weight, "weight"},
                                                          {&bias, "bias"}};
  for (auto [t, what] : params)
    if (t->defined() && (t->dim() != 1 || t->shape()[0] != C))
      fail("batch_norm", what, " must have shape [", C, "], got ", t->shape(), " (input ",
           x.shape(), ")");
  if (running_mean.defined() != running_var.defined())
    fail("batch_norm", "running_mean and running_var must both be given or both be undefined");
  Shape bshape(static_cast<size_t>(x.dim()), 1);
  bshape[1] = C;
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  Tensor mu, inv;
  if (training) {
    int64_t per = C > 0 ? x.numel() / C : 0;
    if (per <= 1)
      fail("batch_norm", "expected more than 1 value per channel when training, got input shape ",
           x.shape());
    mu = mean(x, dims, true);
    Tensor v = var(x, dims, true, 0);  // biased variance normalizes, as in PyTorch
    inv = rsqrt(add(v, eps));
    if (running_mean.defined()) {
      // running = (1 - m) running + m stat, with the unbiased variance (PyTorch semantics).
      NoGradGuard ng;
      Tensor m1 = reshape(mu.detach(), Shape{C});
      Tensor v1 = mul(reshape(v.detach(), Shape{C}),
                      static_cast<double>(per) / static_cast<double>(per - 1));
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

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction,
                int64_t ignore_index) {
  if (!log_probs.defined() || !target.defined()) fail("nll_loss", "undefined input");
  if (log_probs.dim() == 1) {
    // Unbatched [C] with a 0-d target, as in PyTorch.
    if (target.dim() != 0)
      fail("nll_loss", "target shape ", target.shape(), " does not match input shape ",
           log_probs.shape(), " (an unbatched [C] input takes a 0-d target)");
    Tensor r = call1(kNllLoss, {unsqueeze(log_probs, 0), unsqueeze(target, 0)},
                     {std::string(red_name(reduction)), ignore_index});
    return reduction == Reduction::None ? squeeze(r, 0) : r;
  }
  return call1(kNllLoss, {log_probs, target}, {std::string(red_name(reduction)), ignore_index});
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction,
                     int64_t ignore_index) {
  if (!logits.defined() || !target.defined()) fail("cross_entropy", "undefined input");
  if (logits.dim() < 1) fail("cross_entropy", "logits must be [N, C, d...], got a 0-d tensor");
  if (target.dtype() != Int64 && target.dtype() != Int32)
    fail("cross_entropy", "target must hold class indices (int64 or int32), got ", target.dtype(),
         " ", target.shape(), " for logits ", logits.shape());
  if (logits.dim() >= 2) check_nll_shapes("cross_entropy", logits.shape(), target.shape());
  return nll_loss(log_softmax(logits, logits.dim() == 1 ? 0 : 1), target, reduction, ignore_index);
}

Tensor mse_loss(const Tensor& a, const Tensor& b, Reduction reduction) {
  if (!a.defined() || !b.defined()) fail("mse_loss", "undefined input");
  broadcast_shapes(a.shape(), b.shape(), "mse_loss");
  Tensor d = sub(a, b);
  Tensor sq = mul(d, d);
  if (reduction == Reduction::None) return sq;
  return reduction == Reduction::Sum ? sum(sq) : mean(sq);
}

Tensor dropout(const Tensor& a, double p, bool training) {
  if (!a.defined()) fail("dropout", "input is undefined");
  if (!(p >= 0 && p < 1))
    fail("dropout", "p must be in [0, 1), got ", p, " (input shape ", a.shape(), ")");
  if (!training || p == 0) return a;
  return call(kDropout, {a}, {p})[0];
}

}  // namespace kiln
