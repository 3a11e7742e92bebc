// Neural-network family: softmax and log_softmax (fused row kernels: they sit on every attention
// and loss path) with softmax_grad, nll_loss (+ nll_loss_grad), dropout; and the composites
// cross_entropy and mse_loss built from primitives in the wrappers. Normalization is in
// norm.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kiln/dispatch/dispatch.h"
#include "kiln/kernels/cpu/vec_math.h"
#include "kiln/ops/index_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using op_util::one;
using op_util::prod;

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
                       const T ev = vec_math::exp<T>(xr[j + u] - m);
                       if constexpr (!Log) yr[j + u] = ev;
                       sa[u] += ev;
                     }
                   }
                   T s = 0;
                   for (int64_t u = 0; u < kW; ++u) s += sa[u];
                   for (; j < n; ++j) {
                     const T ev = vec_math::exp<T>(xr[j] - m);
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
          T ev = vec_math::exp<T>(xr[j] - mx[j]);
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
  op_util::require_float(op, in[0]);
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
           op_util::require_float("softmax_grad", in[0]);
           op_util::require_same_dtype("softmax_grad", in[0], in[1]);
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
  op_util::require_float("nll_loss", lp);
  op_util::require_index("nll_loss", t, "target");
  check_nll_shapes("nll_loss", lp.shape(), t.shape());
  if (red_of(a.s(0)) == Reduction::None) return one(lp.dtype(), t.shape());
  return one(lp.dtype(), Shape{});
}

// Calls f(n, j, class) for every target that is not ignore_index, after checking the range.
template <typename F>
void for_each_target(const char* op, const Tensor& t, int64_t C, int64_t ignore, F&& f) {
  const Shape& ts = t.shape();
  int64_t N = ts[0], inner = prod(ts, 1, ts.rank());
  op_util::with_index(t, op, [&](auto* tp) {
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
  op_util::require_float("nll_loss_grad", g);
  op_util::require_index("nll_loss_grad", t, "target");
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
            .autocast = AutocastPolicy::kFloat32,
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
           op_util::require_float("dropout", in[0]);
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
               where(c.out(1), mul(g, 1.0 / (1.0 - c.attrs.f(0))), op_util::scalar_like(g, 0))};
         },
     .contiguous_inputs = true,
     .doc = "zeroes elements with probability p, scales the rest by 1/(1-p); output 1 is the "
            "kept mask"});

}  // namespace

Tensor softmax(const Tensor& a, int64_t dim) { return call1(kSoftmax, {a}, {dim}); }
Tensor log_softmax(const Tensor& a, int64_t dim) { return call1(kLogSoftmax, {a}, {dim}); }
Tensor detail::softmax_grad(const Tensor& g, const Tensor& y, int64_t dim) {
  return call1(kSoftmaxGrad, {g, y}, {dim});
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
  // Autocast: a float32 op, as in torch (log_softmax on its own keeps its input's dtype).
  if (auto f = autocast_arg(AutocastPolicy::kFloat32, logits); !f.is_same(logits))
    return cross_entropy(f, target, reduction, ignore_index);
  if (!logits.defined() || !target.defined()) fail("cross_entropy", "undefined input");
  if (logits.dim() < 1) fail("cross_entropy", "logits must be [N, C, d...], got a 0-d tensor");
  if (target.dtype() != Int64 && target.dtype() != Int32)
    fail("cross_entropy", "target must hold class indices (int64 or int32), got ", target.dtype(),
         " ", target.shape(), " for logits ", logits.shape());
  if (logits.dim() >= 2) check_nll_shapes("cross_entropy", logits.shape(), target.shape());
  return nll_loss(log_softmax(logits, logits.dim() == 1 ? 0 : 1), target, reduction, ignore_index);
}

Tensor mse_loss(const Tensor& a, const Tensor& b, Reduction reduction) {
  if (auto fa = autocast_arg(AutocastPolicy::kFloat32, a),
      fb = autocast_arg(AutocastPolicy::kFloat32, b);
      !fa.is_same(a) || !fb.is_same(b))
    return mse_loss(fa, fb, reduction);  // autocast: a float32 op, as in torch
  if (!a.defined() || !b.defined()) fail("mse_loss", "undefined input");
  broadcast_shapes(a.shape(), b.shape(), "mse_loss");
  Tensor d = sub(a, b);
  Tensor sq = mul(d, d);
  if (reduction == Reduction::None) return sq;
  return reduction == Reduction::Sum ? sum(sq) : mean(sq);
}

namespace {
Tensor reduce_loss(const Tensor& l, Reduction reduction) {
  if (reduction == Reduction::None) return l;
  return reduction == Reduction::Sum ? sum(l) : mean(l);
}
void check_loss_pair(const char* op, const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) fail(op, "undefined input");
  if (!is_floating(a.dtype()) || !is_floating(b.dtype()))
    fail(op, "inputs must be floating point, got ", a.dtype(), a.shape(), " and ", b.dtype(),
         b.shape());
  broadcast_shapes(a.shape(), b.shape(), op);
}
}  // namespace

// With x the logits and y the target: -(y log s(x) + (1 - y) log(1 - s(x))), where
// -log s(x) = softplus(-x) and -log(1 - s(x)) = x + softplus(-x); softplus keeps both exact for
// large |x|. pos_weight p scales the positive term: (1 - y) x + (1 + (p - 1) y) softplus(-x).
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction reduction, const Tensor& pos_weight) {
  if (auto fl = autocast_arg(AutocastPolicy::kFloat32, logits),
      ft = autocast_arg(AutocastPolicy::kFloat32, target);
      !fl.is_same(logits) || !ft.is_same(target))
    return binary_cross_entropy_with_logits(fl, ft, reduction,
                                            autocast_arg(AutocastPolicy::kFloat32, pos_weight));
  constexpr const char* op = "binary_cross_entropy_with_logits";
  check_loss_pair(op, logits, target);
  if (target.shape() != logits.shape())
    fail(op, "target shape ", target.shape(), " must equal the logits' shape ", logits.shape());
  const Tensor sp = softplus(neg(logits));
  Tensor pos = sp;
  if (pos_weight.defined()) {
    if (!is_floating(pos_weight.dtype()))
      fail(op, "pos_weight must be floating point, got ", pos_weight.dtype(), pos_weight.shape());
    broadcast_shapes(pos_weight.shape(), logits.shape(), op);
    pos = mul(add(mul(sub(pos_weight, 1.0), target), 1.0), sp);
  }
  return reduce_loss(add(mul(sub(1.0, target), logits), pos), reduction);
}

// 0.5 d^2 / beta where |d| < beta, |d| - beta / 2 beyond: quadratic near 0, linear in the tails
// (continuous with its first derivative at |d| = beta).
Tensor smooth_l1_loss(const Tensor& a, const Tensor& b, Reduction reduction, double beta) {
  if (auto fa = autocast_arg(AutocastPolicy::kFloat32, a),
      fb = autocast_arg(AutocastPolicy::kFloat32, b);
      !fa.is_same(a) || !fb.is_same(b))
    return smooth_l1_loss(fa, fb, reduction, beta);  // autocast: a float32 op, as in torch
  check_loss_pair("smooth_l1_loss", a, b);
  if (!(beta >= 0) || !std::isfinite(beta))
    fail("smooth_l1_loss", "beta must be finite and >= 0, got ", beta);
  const Tensor d = abs(sub(a, b));
  if (beta == 0) return reduce_loss(d, reduction);
  const Tensor l = where(lt(d, beta), mul(mul(d, d), 0.5 / beta), sub(d, 0.5 * beta));
  return reduce_loss(l, reduction);
}

// delta * smooth_l1(beta = delta): 0.5 d^2 inside, delta (|d| - delta / 2) outside.
Tensor huber_loss(const Tensor& a, const Tensor& b, Reduction reduction, double delta) {
  if (auto fa = autocast_arg(AutocastPolicy::kFloat32, a),
      fb = autocast_arg(AutocastPolicy::kFloat32, b);
      !fa.is_same(a) || !fb.is_same(b))
    return huber_loss(fa, fb, reduction, delta);  // autocast: a float32 op, as in torch
  check_loss_pair("huber_loss", a, b);
  if (!(delta > 0) || !std::isfinite(delta))
    fail("huber_loss", "delta must be finite and > 0, got ", delta);
  const Tensor d = abs(sub(a, b));
  const Tensor l = where(lt(d, delta), mul(mul(d, d), 0.5), mul(sub(d, 0.5 * delta), delta));
  return reduce_loss(l, reduction);
}

Tensor dropout(const Tensor& a, double p, bool training) {
  if (!a.defined()) fail("dropout", "input is undefined");
  if (!(p >= 0 && p <= 1))
    fail("dropout", "p must be in [0, 1], got ", p, " (input shape ", a.shape(), ")");
  if (!training || p == 0) return a;
  // Everything dropped: zeros with a zero gradient, as PyTorch (which multiplies by 0 too); the
  // op's 1/(1-p) scale would be infinite.
  if (p == 1) return mul(a, 0.0);
  return call(kDropout, {a}, {p})[0];
}

}  // namespace kiln
