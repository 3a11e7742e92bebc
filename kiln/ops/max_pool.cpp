// Max pooling: one N-D family (1/2/3-D, ceil_mode, dilation, adaptive bins) whose plain 2-D case
// (no dilation, ceil_mode or bins) is a specialisation: the max_pool2d op (the handle the layout
// pass and the ONNX exporter match) with row kernels specialised by stride and window (AVX2 for
// stride 2), which the N-D op runs too on plain 2-D windows. Both scatter their gradient with
// max_pool2d_grad (the N-D op's over flattened planes; its adjoint: max_pool2d_gather);
// max_pool2d_blocked (channel-blocked inference) and max_unpool. Gradient ops have rules of
// their own.
#ifdef __AVX2__
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "kiln/kernels/cpu/parallel.h"
#include "kiln/ops/op_util.h"
#include "kiln/ops/pool_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using namespace pool_util;
using op_util::one;
using op_util::pair2;

// Gradient rules refer to ops defined further down (and to each other); these wrappers are
// defined after all the OpDefs.

Tensor max_pool2d_grad_fn(const Tensor& g, const Tensor& idx, int64_t H, int64_t W);
Tensor max_pool2d_gather_fn(const Tensor& src, const Tensor& idx);

// ---- the plain 2-D specialisation: max_pool2d ------------------------------------------------

// One output row of max pooling over input rows [h0, h1), columns [ow0, ow1) whose windows lie
// inside the row (no column clipping). S is the column stride when it is a compile-time
// constant (1 or 2), else 0 (runtime); K, when not 0, is the window's height and width as a
// compile-time constant, so the window loops unroll. Branch-free selects with PyTorch's rule,
// take v when v > best or v is NaN: the first maximum wins ties, a NaN wins its window (the
// last NaN when there are several). The earlier form (first NaN wins: v != v && best == best)
// compiled to code 6-8x slower here (W5's [64, 6, 28, 28]: 760 -> ~150 us); the loop before
// that branched on each compare (1130 us).
template <typename T, int64_t S, int64_t K>
void max_pool_row(const T* xp, int64_t W, int64_t h0, int64_t h1_rt, int64_t kW_rt, int64_t sW_rt,
                  int64_t pW, int64_t ow0, int64_t ow1, T* yr, int64_t* ir) {
  const int64_t sW = S ? S : sW_rt;
  const int64_t h1 = K ? h0 + K : h1_rt, kW = K ? K : kW_rt;
#pragma omp simd
  for (int64_t ow = ow0; ow < ow1; ++ow) {
    const int64_t w0 = ow * sW - pW;
    T best = -std::numeric_limits<T>::infinity();
    int64_t bi = h0 * W + w0;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t kw = 0; kw < kW; ++kw) {
        const T v = xp[ih * W + w0 + kw];
        const bool take = (v > best) | (v != v);
        best = take ? v : best;
        bi = take ? ih * W + w0 + kw : bi;
      }
    yr[ow] = best;
    ir[ow] = bi;
  }
}

#ifdef __AVX2__
// 2x2 / stride 2 windows over rows r0, r1, outputs [0, n) with n >= 8: eight windows per step,
// the even and odd columns split by shuffles, the last step overlapping the one before (GCC
// does not vectorize the generic row: 14-wide rows and 64-bit indices). Same rule as
// max_pool_row: take v when v > best or v is NaN, in the order (r0, c), (r0, c+1), (r1, c),
// (r1, c+1). W5's [64, 6, 28, 28]: ~200 -> ~60 us. `base` is r0's offset within the plane.
void max_pool_2x2_row_avx2(const float* r0, const float* r1, int64_t W, int64_t base, int64_t n,
                           float* yr, int64_t* ir) {
  auto split = [](const float* p, __m256& even, __m256& odd) {
    const __m256 v0 = _mm256_loadu_ps(p), v1 = _mm256_loadu_ps(p + 8);
    const __m256 e = _mm256_shuffle_ps(v0, v1, _MM_SHUFFLE(2, 0, 2, 0));
    const __m256 o = _mm256_shuffle_ps(v0, v1, _MM_SHUFFLE(3, 1, 3, 1));
    even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
    odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), _MM_SHUFFLE(3, 1, 2, 0)));
  };
  const __m256i lane2 = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  const __m256i one = _mm256_set1_epi32(1), wv = _mm256_set1_epi32(static_cast<int32_t>(W)),
                w1 = _mm256_set1_epi32(static_cast<int32_t>(W + 1));
  for (int64_t j0 = 0; j0 < n; j0 += 8) {
    const int64_t j = j0 + 8 <= n ? j0 : n - 8;
    __m256 a, b, c, d;
    split(r0 + 2 * j, a, b);
    split(r1 + 2 * j, c, d);
    __m256 best = a;
    __m256i bi = _mm256_setzero_si256();
    auto step = [&](__m256 v, __m256i at) {
      const __m256 tk =
          _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      best = _mm256_blendv_ps(best, v, tk);
      bi = _mm256_castps_si256(
          _mm256_blendv_ps(_mm256_castsi256_ps(bi), _mm256_castsi256_ps(at), tk));
    };
    step(b, one);
    step(c, wv);
    step(d, w1);
    _mm256_storeu_ps(yr + j, best);
    // index = base + 2 j' + offset, widened to int64 (the plane offsets fit in int32 here).
    const __m256i col = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(2 * j)), lane2);
    const __m256i rel = _mm256_add_epi32(col, bi);
    const __m256i b64 = _mm256_set1_epi64x(base);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(ir + j),
                        _mm256_add_epi64(b64, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(rel))));
    _mm256_storeu_si256(
        reinterpret_cast<__m256i*>(ir + j + 4),
        _mm256_add_epi64(b64, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(rel, 1))));
  }
}
#endif

template <typename T>
void max_pool2d_fwd(const Tensor& x, Tensor& y, Tensor& idx, const PoolP& p) {
  const int64_t H = x.size(2), W = x.size(3), OH = y.size(2), OW = y.size(3);
  const T* px = x.data_ptr<T>();
  T* py = y.data_ptr<T>();
  int64_t* pi = idx.data_ptr<int64_t>();
  // Output columns whose windows need no clipping at the left/right edge.
  int64_t ow_lo = std::min(OW, (p.pW + p.sW - 1) / p.sW);
  int64_t ow_hi = W + p.pW - p.kW >= 0 ? std::min(OW, (W + p.pW - p.kW) / p.sW + 1) : 0;
  ow_hi = std::max(ow_hi, ow_lo);
  for_planes(x.size(0) * x.size(1), OH * OW * p.kH * p.kW, [&](int64_t pl) {
    const T* xp = px + pl * H * W;
    for (int64_t oh = 0; oh < OH; ++oh) {
      int64_t h0 = oh * p.sH - p.pH, h1 = std::min(h0 + p.kH, H);
      h0 = std::max<int64_t>(h0, 0);
      T* yr = py + (pl * OH + oh) * OW;
      int64_t* ir = pi + (pl * OH + oh) * OW;
      // Edge columns: clipped windows, one at a time.
      auto edge = [&](int64_t ow) {
        int64_t w0 = ow * p.sW - p.pW, w1 = std::min(w0 + p.kW, W);
        w0 = std::max<int64_t>(w0, 0);
        T best = -std::numeric_limits<T>::infinity();
        int64_t bi = h0 * W + w0;
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) {
            const T v = xp[ih * W + iw];
            const bool take = (v > best) | (v != v);
            best = take ? v : best;
            bi = take ? ih * W + iw : bi;
          }
        yr[ow] = best;
        ir[ow] = bi;
      };
      for (int64_t ow = 0; ow < ow_lo; ++ow) edge(ow);
      const bool k2 = p.kW == 2 && h1 - h0 == 2, k3 = p.kW == 3 && h1 - h0 == 3;
#ifdef __AVX2__
      if constexpr (std::is_same_v<T, float>)
        if (p.sW == 2 && k2 && p.pW == 0 && ow_lo == 0 && ow_hi - ow_lo >= 8) {
          max_pool_2x2_row_avx2(xp + h0 * W, xp + (h0 + 1) * W, W, h0 * W, ow_hi, yr, ir);
          for (int64_t ow = ow_hi; ow < OW; ++ow) edge(ow);
          continue;
        }
#endif
      if (p.sW == 2 && k2)
        max_pool_row<T, 2, 2>(xp, W, h0, h1, p.kW, 2, p.pW, ow_lo, ow_hi, yr, ir);
      else if (p.sW == 2 && k3)
        max_pool_row<T, 2, 3>(xp, W, h0, h1, p.kW, 2, p.pW, ow_lo, ow_hi, yr, ir);
      else if (p.sW == 1 && k3)
        max_pool_row<T, 1, 3>(xp, W, h0, h1, p.kW, 1, p.pW, ow_lo, ow_hi, yr, ir);
      else
        max_pool_row<T, 0, 0>(xp, W, h0, h1, p.kW, p.sW, p.pW, ow_lo, ow_hi, yr, ir);
      for (int64_t ow = ow_hi; ow < OW; ++ow) edge(ow);
    }
  });
}

const OpDef& kMaxPool2d =
    def_op({.name = "max_pool2d",
            .num_inputs = 1,
            .num_outputs = 2,
            .attr_names = {"kernel", "stride", "padding"},
            .infer =
                [](std::span<const Tensor> in, const Attrs& a) {
                  Shape ys = check_pool("max_pool2d", in[0].shape(), pool_params("max_pool2d", a));
                  op_util::require_float("max_pool2d", in[0]);
                  MetaList m = one(in[0].dtype(), ys);
                  m.push_back(TensorMeta{Int64, ys});
                  return m;
                },
            .kernel =
                [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
                  PoolP p = pool_params("max_pool2d", a);
                  KILN_DISPATCH_FLOAT(in[0].dtype(), "max_pool2d",
                                      [&] { max_pool2d_fwd<scalar_t>(in[0], out[0], out[1], p); });
                },
            // Output 1 holds each window's argmax (flat h * W + w within its plane): the gradient
            // is routed there, and only there (ties go to the first maximum, as the forward chose).
            .grad =
                [](const GradCtx& c) {
                  return TensorList{
                      max_pool2d_grad_fn(c.g(0), c.out(1), c.in(0).size(2), c.in(0).size(3))};
                },
            .contiguous_inputs = true,
            .doc = "2-D max pooling; outputs the maxima and their flat indices within each plane"});

// Shared check of (values [N, C, OH, OW], indices of the same shape).
void check_idx(const char* op, const Tensor& v, const Tensor& idx) {
  if (idx.dtype() != Int64)
    fail(op, "indices must be int64, got ", idx.dtype(), " (shape ", idx.shape(), ")");
  if (v.dim() != 4 || v.shape() != idx.shape())
    fail(op, "expects 4-D values and indices of one shape, got ", v.shape(), " and ", idx.shape());
  op_util::require_float(op, v);
}

// Checked serially before the parallel loops: an exception must not leave an OpenMP region.
// The range is found with a min/max reduction first (vectorized; a compare-and-branch per
// index cost ~40 us on W5's 75K indices), and the offending index only when it fails.
void check_indices(const char* op, const Tensor& idx, int64_t H, int64_t W) {
  const int64_t* pi = idx.data_ptr<int64_t>();
  const int64_t n = idx.numel();
  int64_t lo = 0, hi = 0;
  if (n > 0) lo = hi = pi[0];
#pragma omp simd reduction(min : lo) reduction(max : hi)
  for (int64_t q = 0; q < n; ++q) {
    lo = std::min(lo, pi[q]);
    hi = std::max(hi, pi[q]);
  }
  if (lo >= 0 && hi < H * W) return;
  for (int64_t q = 0; q < n; ++q)
    if (pi[q] < 0 || pi[q] >= H * W)
      fail(op, "index ", pi[q], " is outside the ", H, "x", W, " plane (indices shape ",
           idx.shape(), ")");
}

// dx[plane] = 0, then dx[plane][idx[q]] += g[q], over the planes [lo, hi): each thread zeroes
// and fills its own planes. Indices are range-checked in the same pass: a bad one is clamped
// (writing only into this fresh output, which the caller then discards with the error) and
// counted. Outside any lambda so that the stores are known not to alias the inputs. A separate
// serial check and fill took as long as the scatter and did not scale with threads.
template <typename T>
int64_t pool_scatter(const T* __restrict g, const int64_t* __restrict idx, T* __restrict dx,
                     int64_t lo, int64_t hi, int64_t Q, int64_t HW) {
  int64_t bad = 0;
  for (int64_t pl = lo; pl < hi; ++pl) {
    T* d = dx + pl * HW;
    std::fill(d, d + HW, T(0));
    const int64_t* ip = idx + pl * Q;
    const T* gp = g + pl * Q;
    for (int64_t q = 0; q < Q; ++q) {
      const int64_t i = ip[q];
      const bool ok = i >= 0 && i < HW;
      bad += !ok;
      d[ok ? i : 0] += gp[q];
    }
  }
  return bad;
}

const OpDef& kMaxPool2dGrad = def_op(
    {.name = "max_pool2d_grad",
     .num_inputs = 2,
     .attr_names = {"input_size"},
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           check_idx("max_pool2d_grad", in[0], in[1]);
           const Ints& hw = a.ints(0);
           check_input_size("max_pool2d_grad", hw);
           return one(in[0].dtype(), Shape{in[0].size(0), in[0].size(1), hw[0], hw[1]});
         },
     // dx = zeros, then dx[plane][idx] += g (a scatter-add: overlapping windows can share one).
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
           const int64_t H = out[0].size(2), W = out[0].size(3), Q = in[0].size(2) * in[0].size(3);
           const int64_t* pi = in[1].data_ptr<int64_t>();
           std::atomic<int64_t> bad{0};
           KILN_DISPATCH_FLOAT(in[0].dtype(), "max_pool2d_grad", [&] {
             const scalar_t* pg = in[0].data_ptr<scalar_t>();
             scalar_t* pd = out[0].data_ptr<scalar_t>();
             const int64_t planes = in[0].size(0) * in[0].size(1);
             parallel_for(planes, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(Q, 1)),
                          [&](int64_t lo, int64_t hi) {
                            bad += pool_scatter<scalar_t>(pg, pi, pd, lo, hi, Q, H * W);
                          });
           });
           // Outside the parallel region (an exception must not leave it): name the index.
           if (bad.load() > 0) check_indices("max_pool2d_grad", in[1], H, W);
         },
     // Linear in g: dx = S g (scatter). Its adjoint gathers: d<gg, S g>/dg = S^T gg.
     .grad =
         [](const GradCtx& c) {
           return TensorList{c.need(0) ? max_pool2d_gather_fn(c.g(), c.in(1)) : Tensor(), Tensor()};
         },
     .contiguous_inputs = true,
     .doc = "gradient of max_pool2d: scatters grad_output to the saved argmax positions"});

const OpDef& kMaxPool2dGather = def_op(
    {.name = "max_pool2d_gather",
     .num_inputs = 2,
     .infer =
         [](std::span<const Tensor> in, const Attrs&) {
           const Tensor &src = in[0], &idx = in[1];
           if (src.dim() != 4 || idx.dim() != 4 || src.size(0) != idx.size(0) ||
               src.size(1) != idx.size(1))
             fail("max_pool2d_gather", "expects src [N, C, H, W] and indices [N, C, OH, OW], got ",
                  src.shape(), " and ", idx.shape());
           if (idx.dtype() != Int64)
             fail("max_pool2d_gather", "indices must be int64, got ", idx.dtype(), " (shape ",
                  idx.shape(), ")");
           op_util::require_float("max_pool2d_gather", src);
           return one(src.dtype(), idx.shape());
         },
     // out[plane][q] = src[plane][idx[plane][q]]
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
           const int64_t H = in[0].size(2), W = in[0].size(3), Q = in[1].size(2) * in[1].size(3);
           check_indices("max_pool2d_gather", in[1], H, W);
           const int64_t* pi = in[1].data_ptr<int64_t>();
           KILN_DISPATCH_FLOAT(in[0].dtype(), "max_pool2d_gather", [&] {
             const scalar_t* ps = in[0].data_ptr<scalar_t>();
             scalar_t* po = out[0].data_ptr<scalar_t>();
             for_planes(in[1].size(0) * in[1].size(1), Q, [&](int64_t pl) {
               const scalar_t* s = ps + pl * H * W;
               for (int64_t q = pl * Q; q < (pl + 1) * Q; ++q) po[q] = s[pi[q]];
             });
           });
         },
     // Linear in src: out = S^T src, so the src-gradient scatters back: S gg (max_pool2d_grad).
     .grad =
         [](const GradCtx& c) {
           return TensorList{
               c.need(0) ? max_pool2d_grad_fn(c.g(), c.in(1), c.in(0).size(2), c.in(0).size(3))
                         : Tensor(),
               Tensor()};
         },
     .contiguous_inputs = true,
     .doc = "picks src at max_pool2d's argmax indices (the adjoint of max_pool2d_grad)"});

// ---- max_pool2d_blocked: inference max pooling of channel-blocked activations ----------------
// [N, C/b, H, W, b] -> [N, C/b, OH, OW, b], values only: what the block_layout pass makes of a
// max_pool2d whose indices nothing reads (ResNet's stem), so the pool needs neither NCHW
// activations nor an int64 index per output. Each window step is b contiguous lanes.

template <typename T, int64_t B>
void max_pool_blocked(const Tensor& x, Tensor& y, const PoolP& p) {
  const int64_t H = x.size(2), W = x.size(3), OH = y.size(2), OW = y.size(3);
  const T* px = x.data_ptr<T>();
  T* py = y.data_ptr<T>();
  for_planes(x.size(0) * x.size(1), OH * OW * p.kH * p.kW * B, [&](int64_t pl) {
    const T* xp = px + pl * H * W * B;
    T* yp = py + pl * OH * OW * B;
    for (int64_t oh = 0; oh < OH; ++oh) {
      const int64_t h0 = std::max<int64_t>(oh * p.sH - p.pH, 0);
      const int64_t h1 = std::min(oh * p.sH - p.pH + p.kH, H);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t w0 = std::max<int64_t>(ow * p.sW - p.pW, 0);
        const int64_t w1 = std::min(ow * p.sW - p.pW + p.kW, W);
        T* out = yp + (oh * OW + ow) * B;
#ifdef __AVX2__
        if constexpr (std::is_same_v<T, float>) {
          // max(best, v) takes v when v is larger or NaN; a NaN already in best stays (the
          // unordered mask), as max_pool2d's rule has it.
          __m256 best[B / 8];
          for (int64_t k = 0; k < B / 8; ++k) best[k] = _mm256_set1_ps(-INFINITY);
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) {
              const float* v = xp + (ih * W + iw) * B;
              for (int64_t k = 0; k < B / 8; ++k) {
                const __m256 m = _mm256_max_ps(best[k], _mm256_loadu_ps(v + 8 * k));
                best[k] =
                    _mm256_blendv_ps(m, best[k], _mm256_cmp_ps(best[k], best[k], _CMP_UNORD_Q));
              }
            }
          for (int64_t k = 0; k < B / 8; ++k) _mm256_storeu_ps(out + 8 * k, best[k]);
          continue;
        }
#endif
        T best[B];
        for (int64_t i = 0; i < B; ++i) best[i] = -std::numeric_limits<T>::infinity();
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) {
            const T* v = xp + (ih * W + iw) * B;
            // max_pool2d's rule: v wins when larger or NaN.
            for (int64_t i = 0; i < B; ++i)
              best[i] = (v[i] > best[i]) | (v[i] != v[i]) ? v[i] : best[i];
          }
        for (int64_t i = 0; i < B; ++i) out[i] = best[i];
      }
    }
  });
}

const OpDef& kMaxPool2dBlocked = def_op(
    {.name = "max_pool2d_blocked",
     .num_inputs = 1,
     .attr_names = {"kernel", "stride", "padding"},
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           const char* op = "max_pool2d_blocked";
           const Shape& s = in[0].shape();
           if (s.rank() != 5 || (s[4] != 8 && s[4] != 16))
             fail(op, "input must be 5-D [N, C/b, H, W, b] with b = 8 or 16, got shape ", s);
           op_util::require_float(op, in[0]);
           Shape ys = check_pool(op, Shape{s[0], s[1], s[2], s[3]}, pool_params(op, a));
           return one(in[0].dtype(), Shape{ys[0], ys[1], ys[2], ys[3], s[4]});
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           PoolP p = pool_params("max_pool2d_blocked", a);
           KILN_DISPATCH_FLOAT(in[0].dtype(), "max_pool2d_blocked", [&] {
             if (in[0].size(4) == 16)
               max_pool_blocked<scalar_t, 16>(in[0], out[0], p);
             else
               max_pool_blocked<scalar_t, 8>(in[0], out[0], p);
           });
         },
     .contiguous_inputs = true,
     .doc = "inference 2-D max pooling of channel-blocked [N, C/b, H, W, b] activations (values "
            "only; what the block_layout pass makes of max_pool2d)"});

// ---- the forward-declared helpers ------------------------------------------------------------

Tensor max_pool2d_grad_fn(const Tensor& g, const Tensor& idx, int64_t H, int64_t W) {
  return call1(kMaxPool2dGrad, {g, idx}, {Ints{H, W}});
}
Tensor max_pool2d_gather_fn(const Tensor& src, const Tensor& idx) {
  return call1(kMaxPool2dGather, {src, idx});
}

template <typename T>
void nd_max_fwd(const Tensor& x, Tensor& y, Tensor& idx, const NdP& q) {
  const auto L = sp3(x, q.nd), O = sp3(y, q.nd);
  const auto w = nd_windows(q, L.data() + 3 - q.nd, O.data() + 3 - q.nd);
  const int64_t P = L[0] * L[1] * L[2], Q = O[0] * O[1] * O[2];
  const T* px = x.data_ptr<T>();
  T* py = y.data_ptr<T>();
  int64_t* pi = idx.data_ptr<int64_t>();
  for_planes(planes_of(x), Q * 8, [&](int64_t pl) {
    const T* xp = px + pl * P;
    int64_t q_ = pl * Q;
    for (int64_t a = 0; a < O[0]; ++a)
      for (int64_t b = 0; b < O[1]; ++b)
        for (int64_t c = 0; c < O[2]; ++c, ++q_) {
          const size_t ua = static_cast<size_t>(a), ub = static_cast<size_t>(b),
                       uc = static_cast<size_t>(c);
          T best = -std::numeric_limits<T>::infinity();
          // (a window with no element inside keeps a valid index for the gradient's scatter)
          int64_t bi =
              std::min(P - 1, (w[0].start[ua] * L[1] + w[1].start[ub]) * L[2] + w[2].start[uc]);
          for (int64_t i0 = 0; i0 < w[0].count[ua]; ++i0) {
            const int64_t z = w[0].start[ua] + i0 * w[0].step;
            for (int64_t i1 = 0; i1 < w[1].count[ub]; ++i1) {
              const int64_t r = (z * L[1] + w[1].start[ub] + i1 * w[1].step) * L[2];
              for (int64_t i2 = 0; i2 < w[2].count[uc]; ++i2) {
                const int64_t at = r + w[2].start[uc] + i2 * w[2].step;
                const T v = xp[at];
                const bool take = (v > best) | (v != v);
                best = take ? v : best;
                bi = take ? at : bi;
              }
            }
          }
          py[q_] = best;
          pi[q_] = bi;
        }
  });
}

Tensor max_unpool_fn(const Tensor& x, const Tensor& idx, int64_t plane);

// Routes a max pooling gradient through max_pool2d_grad over planes flattened to [1, P].
Tensor nd_max_grad(const Tensor& g, const Tensor& idx, const Tensor& x) {
  // N and C may be dynamic (the reshape back keeps them: a leading run of -1s, or one
  // inferred). The plane size is an attribute of max_pool2d_grad: with a dynamic spatial dim
  // g is scattered into zeros of x's run-time shape instead, planes flattened.
  int64_t P = 1, dynamic = 0;
  for (int64_t d = 0; d < x.dim(); ++d) dynamic += x.size(d) < 0;
  for (int64_t d = 2; d < x.dim(); ++d) P = x.size(d) < 0 || P < 0 ? -1 : P * x.size(d);
  if (P < 0) {
    if (x.dim() > 3 && dynamic > 1)
      fail("max_pool_nd", "needs a static size: the gradient of input ", x.shape(),
           " with a dynamic spatial dim and another dynamic dim");
    const Tensor r = scatter_add(flatten(zeros_like(x), 2), 2, flatten(idx, 2), flatten(g, 2));
    return x.dim() == 3 ? r : reshape(r, x.shape());
  }
  Tensor g4 = unsqueeze(flatten(g, 2), 2), i4 = unsqueeze(flatten(idx, 2), 2);
  return reshape(max_pool2d_grad_fn(g4, i4, 1, P), x.shape());
}

// The windows of `q` as max_pool2d's, when they are plain 2-D ones (no dilation, ceil_mode or
// adaptive bins): the N-D op then runs the 2-D row kernels.
std::optional<PoolP> plain_2d(const NdP& q) {
  if (q.nd != 2 || q.adaptive() || q.ceil || q.d[0] != 1 || q.d[1] != 1) return std::nullopt;
  return PoolP{q.k[0], q.k[1], q.s[0], q.s[1], q.p[0], q.p[1]};
}

const OpDef& kMaxPoolNd = def_op(
    {.name = "max_pool_nd",
     .num_inputs = 1,
     .num_outputs = 2,
     .attr_names = {"kernel", "stride", "padding", "dilation", "ceil_mode", "count_include_pad",
                    "divisor_override", "output_size"},
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           const char* op = "max_pool_nd";
           Shape ys = nd_check(op, in[0].shape(), nd_params(op, a));
           op_util::require_float(op, in[0]);
           MetaList m = one(in[0].dtype(), ys);
           m.push_back(TensorMeta{Int64, ys});
           return m;
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           const NdP q = nd_params("max_pool_nd", a);
           const std::optional<PoolP> p2 = plain_2d(q);
           KILN_DISPATCH_FLOAT(in[0].dtype(), "max_pool_nd", [&] {
             if (p2)
               max_pool2d_fwd<scalar_t>(in[0], out[0], out[1], *p2);
             else
               nd_max_fwd<scalar_t>(in[0], out[0], out[1], q);
           });
         },
     // The gradient goes to each window's argmax (output 1), as max_pool2d's.
     .grad = [](const GradCtx& c) { return TensorList{nd_max_grad(c.g(0), c.out(1), c.in(0))}; },
     .contiguous_inputs = true,
     .doc = "1/2/3-D max pooling (ceil_mode, dilation, adaptive bins); outputs the maxima and "
            "their flat indices within each plane. Any dim may be dynamic (a dynamic spatial "
            "dim pools to a dynamic size), but the gradient of a 2/3-D input with a dynamic "
            "spatial dim and another dynamic dim needs a static size"});

// out [N, C, plane] = 0, then out[n, c, idx[n, c, q]] = x[n, c, q] (assignment, as torch's
// max_unpool: indices repeated by overlapping windows carry equal values).
const OpDef& kMaxUnpool = def_op(
    {.name = "max_unpool",
     .num_inputs = 2,
     .attr_names = {"plane_size"},
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           const char* op = "max_unpool";
           const Tensor &x = in[0], &idx = in[1];
           if (x.dim() != 3 || !op_util::dims_agree(x.shape(), idx.shape()))
             fail(op, "expects values [N, C, Q] and indices of the same shape, got ", x.shape(),
                  " and ", idx.shape());
           if (idx.dtype() != Int64)
             fail(op, "indices must be int64, got ", idx.dtype(), " (shape ", idx.shape(), ")");
           op_util::require_float(op, x);
           if (a.i(0) <= 0) fail(op, "plane_size must be positive, got ", a.i(0));
           return one(x.dtype(), Shape{x.size(0), x.size(1), a.i(0)});
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           const int64_t P = a.i(0), Q = in[0].size(2);
           check_indices("max_unpool", in[1], 1, P);
           const int64_t* pi = in[1].data_ptr<int64_t>();
           KILN_DISPATCH_FLOAT(in[0].dtype(), "max_unpool", [&] {
             const scalar_t* px = in[0].data_ptr<scalar_t>();
             scalar_t* po = out[0].data_ptr<scalar_t>();
             for_planes(planes_of(in[0]), Q + P, [&](int64_t pl) {
               scalar_t* o = po + pl * P;
               std::fill(o, o + P, scalar_t(0));
               for (int64_t q = pl * Q; q < (pl + 1) * Q; ++q) o[pi[q]] = px[q];
             });
           });
         },
     // d out[idx[q]] / d x[q] = 1: the gradient gathers (as torch's backward).
     .grad =
         [](const GradCtx& c) {
           if (!c.need(0)) return TensorList{Tensor(), Tensor()};
           Tensor g4 = unsqueeze(c.g(), 2), i4 = unsqueeze(c.in(1), 2);
           return TensorList{squeeze(max_pool2d_gather_fn(g4, i4), 2), Tensor()};
         },
     .contiguous_inputs = true,
     .doc = "max_unpool: values written at flat plane indices of a zero output"});

Tensor max_unpool_fn(const Tensor& x, const Tensor& idx, int64_t plane) {
  return call1(kMaxUnpool, {x, idx}, {plane});
}

// max_pool_nd with attributes `a` on x ([N, C, *] or unbatched [C, *]): values and indices.
std::pair<Tensor, Tensor> call_max_nd(const char* op, size_t nd, const Tensor& x, const Attrs& a) {
  return nd_call(op, x, nd, [&](const Tensor& xb, bool unb) {
    nd_check(op, xb.shape(), nd_params(op, a));  // (errors name the public op)
    TensorList r = call(kMaxPoolNd, {xb}, a);
    if (unb) return std::pair{squeeze(r[0], 0), squeeze(r[1], 0)};
    return std::pair{r[0], r[1]};
  });
}

std::pair<Tensor, Tensor> max_pool_nd(const char* op, size_t nd, const Tensor& x,
                                      const Ints& kernel, const Ints& stride, const Ints& padding,
                                      const Ints& dilation, bool ceil) {
  return call_max_nd(op, nd, x, nd_attrs(op, nd, kernel, stride, padding, dilation, ceil, true, 0));
}

std::pair<Tensor, Tensor> adaptive_max_nd(const char* op, size_t nd, const Tensor& x,
                                          const Ints& output_size) {
  return call_max_nd(op, nd, x,
                     Attrs{Ints{}, Ints{}, Ints{}, Ints{}, false, true, int64_t(0),
                           expand_n(op, "output_size", output_size, nd)});
}

// torch's max_unpool: output_size is the spatial size (or the full shape, whose last nd dims
// count); by default (in - 1) stride - 2 pad + kernel.
Tensor max_unpool_nd(const char* op, size_t nd, const Tensor& x, const Tensor& idx,
                     const Ints& kernel, const Ints& stride, const Ints& padding,
                     const Ints& output_size) {
  if (!idx.defined()) fail(op, "indices is an undefined tensor");
  const Ints k = expand_n(op, "kernel_size", kernel, nd);
  const Ints s = stride.empty() ? k : expand_n(op, "stride", stride, nd);
  const Ints p = expand_n(op, "padding", padding, nd);
  return nd_call(op, x, nd, [&](const Tensor& xb, bool unb) {
    const Tensor ib = unb ? unsqueeze(idx, 0) : idx;
    if (!op_util::dims_agree(xb.shape(), ib.shape()))
      fail(op, "indices shape ", idx.shape(), " must match the input shape ", x.shape());
    Ints out;
    if (output_size.empty()) {
      for (size_t i = 0; i < nd; ++i) {
        const int64_t in = xb.size(static_cast<int64_t>(i) + 2);
        if (in < 0) fail(op, "needs static spatial sizes, got shape ", x.shape());
        out.push_back((in - 1) * s[i] - 2 * p[i] + k[i]);
      }
    } else if (output_size.size() == nd || output_size.size() == nd + 1 ||
               output_size.size() == nd + 2) {
      out.assign(output_size.end() - static_cast<int64_t>(nd), output_size.end());
    } else {
      fail(op, "output_size must have ", nd, " values (or the full shape), got ",
           Shape(output_size));
    }
    int64_t plane = 1;
    Shape ys{-1, xb.size(1)};
    for (int64_t v : out) {
      if (v <= 0) fail(op, "output size must be positive, got ", Shape(out));
      plane *= v;
      ys.push_back(v);
    }
    Tensor y = reshape(max_unpool_fn(flatten(xb, 2), flatten(ib, 2), plane), ys);
    return unb ? squeeze(y, 0) : y;
  });
}

}  // namespace

Tensor max_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, std::vector<int64_t> dilation, bool ceil_mode) {
  Ints d = pair2("max_pool2d", "dilation", dilation);
  if (ceil_mode || d[0] != 1 || d[1] != 1)
    return max_pool_nd("max_pool2d", 2, x, kernel, stride, padding, d, ceil_mode).first;
  Ints k = pair2("max_pool2d", "kernel", kernel);
  Ints s = stride.empty() ? k : pair2("max_pool2d", "stride", stride);
  Ints p = pair2("max_pool2d", "padding", padding);
  return pool_call("max_pool2d", x, [&](const Tensor& x4) {
    return call(kMaxPool2d, {x4}, {k, s, p})[0];
  });
}

Tensor max_pool2d_blocked(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                          std::vector<int64_t> padding) {
  Ints k = pair2("max_pool2d_blocked", "kernel", kernel);
  Ints s = stride.empty() ? k : pair2("max_pool2d_blocked", "stride", stride);
  return call1(kMaxPool2dBlocked, {x}, {k, s, pair2("max_pool2d_blocked", "padding", padding)});
}

Tensor max_pool1d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, std::vector<int64_t> dilation, bool ceil_mode) {
  return max_pool_nd("max_pool1d", 1, x, kernel, stride, padding, dilation, ceil_mode).first;
}
Tensor max_pool3d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, std::vector<int64_t> dilation, bool ceil_mode) {
  return max_pool_nd("max_pool3d", 3, x, kernel, stride, padding, dilation, ceil_mode).first;
}
std::pair<Tensor, Tensor> max_pool1d_with_indices(const Tensor& x, std::vector<int64_t> kernel,
                                                  std::vector<int64_t> stride,
                                                  std::vector<int64_t> padding,
                                                  std::vector<int64_t> dilation, bool ceil_mode) {
  return max_pool_nd("max_pool1d", 1, x, kernel, stride, padding, dilation, ceil_mode);
}
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, std::vector<int64_t> kernel,
                                                  std::vector<int64_t> stride,
                                                  std::vector<int64_t> padding,
                                                  std::vector<int64_t> dilation, bool ceil_mode) {
  return max_pool_nd("max_pool2d", 2, x, kernel, stride, padding, dilation, ceil_mode);
}
std::pair<Tensor, Tensor> max_pool3d_with_indices(const Tensor& x, std::vector<int64_t> kernel,
                                                  std::vector<int64_t> stride,
                                                  std::vector<int64_t> padding,
                                                  std::vector<int64_t> dilation, bool ceil_mode) {
  return max_pool_nd("max_pool3d", 3, x, kernel, stride, padding, dilation, ceil_mode);
}
Tensor max_unpool1d(const Tensor& x, const Tensor& indices, std::vector<int64_t> kernel,
                    std::vector<int64_t> stride, std::vector<int64_t> padding,
                    std::vector<int64_t> output_size) {
  return max_unpool_nd("max_unpool1d", 1, x, indices, kernel, stride, padding, output_size);
}
Tensor max_unpool2d(const Tensor& x, const Tensor& indices, std::vector<int64_t> kernel,
                    std::vector<int64_t> stride, std::vector<int64_t> padding,
                    std::vector<int64_t> output_size) {
  return max_unpool_nd("max_unpool2d", 2, x, indices, kernel, stride, padding, output_size);
}
Tensor max_unpool3d(const Tensor& x, const Tensor& indices, std::vector<int64_t> kernel,
                    std::vector<int64_t> stride, std::vector<int64_t> padding,
                    std::vector<int64_t> output_size) {
  return max_unpool_nd("max_unpool3d", 3, x, indices, kernel, stride, padding, output_size);
}

Tensor adaptive_max_pool1d(const Tensor& x, std::vector<int64_t> output_size) {
  return adaptive_max_nd("adaptive_max_pool1d", 1, x, output_size).first;
}
Tensor adaptive_max_pool2d(const Tensor& x, std::vector<int64_t> output_size) {
  return adaptive_max_nd("adaptive_max_pool2d", 2, x, output_size).first;
}
Tensor adaptive_max_pool3d(const Tensor& x, std::vector<int64_t> output_size) {
  return adaptive_max_nd("adaptive_max_pool3d", 3, x, output_size).first;
}
std::pair<Tensor, Tensor> adaptive_max_pool1d_with_indices(const Tensor& x,
                                                           std::vector<int64_t> output_size) {
  return adaptive_max_nd("adaptive_max_pool1d", 1, x, output_size);
}
std::pair<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& x,
                                                           std::vector<int64_t> output_size) {
  return adaptive_max_nd("adaptive_max_pool2d", 2, x, output_size);
}
std::pair<Tensor, Tensor> adaptive_max_pool3d_with_indices(const Tensor& x,
                                                           std::vector<int64_t> output_size) {
  return adaptive_max_nd("adaptive_max_pool3d", 3, x, output_size);
}

}  // namespace kiln
