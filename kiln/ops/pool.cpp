// Pooling family: max pooling (with its indices, gradient and gather ops) and average pooling
// with its gradient. Every gradient op's own rule is written with the family's ops, so
// gradients of gradients work.
#ifdef __AVX2__
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/kernels/cpu/parallel.h"
#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using op_util::one;
using op_util::out_size;
using op_util::pair2;
using Ints = std::vector<int64_t>;

// Gradient rules refer to ops defined further down (and to each other); these wrappers are
// defined after all the OpDefs.
Tensor max_pool2d_grad_fn(const Tensor& g, const Tensor& idx, int64_t H, int64_t W);
Tensor max_pool2d_gather_fn(const Tensor& src, const Tensor& idx);
Tensor avg_pool2d_fn(const Tensor& x, const Attrs& pool_attrs);
Tensor avg_pool2d_grad_fn(const Tensor& g, const Attrs& pool_attrs, int64_t H, int64_t W);

// ---- pooling: attributes {kernel, stride, padding} (+ input_size for the gradients) ----------

struct PoolP {
  int64_t kH, kW, sH, sW, pH, pW;
};

PoolP pool_params(const char* op, const Attrs& a) {
  const Ints &k = a.ints(0), &s = a.ints(1), &p = a.ints(2);
  if (k.size() != 2 || s.size() != 2 || p.size() != 2)
    fail(op, "kernel, stride and padding must have 2 values each, got ", Shape(k), ", ", Shape(s),
         ", ", Shape(p));
  if (k[0] <= 0 || k[1] <= 0) fail(op, "kernel must be positive, got ", Shape(k));
  if (s[0] <= 0 || s[1] <= 0) fail(op, "stride must be positive, got ", Shape(s));
  op_util::check_window_params(op, "kernel", k);
  op_util::check_window_params(op, "stride", s);
  // As PyTorch: a wider pad would give windows that see only padding.
  if (p[0] < 0 || p[1] < 0 || p[0] > k[0] / 2 || p[1] > k[1] / 2)
    fail(op, "padding ", Shape(p), " must be non-negative and at most half the kernel ", Shape(k));
  return PoolP{k[0], k[1], s[0], s[1], p[0], p[1]};
}

// Checks an input shape [N, C, H, W] (dynamic dims pass); returns the pooled shape.
Shape check_pool(const char* op, const Shape& s, const PoolP& p) {
  if (s.rank() != 4) fail(op, "input must be 4-D [N, C, H, W], got shape ", s);
  // As PyTorch: only the batch may be empty (an empty plane with padding gave windows of padding
  // alone: -inf maxima and indices into nothing).
  if (s[1] == 0 || s[2] == 0 || s[3] == 0)
    fail(op, "input must have non-empty C, H and W (only N may be 0), got shape ", s);
  if ((s[2] >= 0 && s[2] + 2 * p.pH < p.kH) || (s[3] >= 0 && s[3] + 2 * p.pW < p.kW))
    fail(op, "kernel [", p.kH, ", ", p.kW, "] is larger than the padded input ", s[2] + 2 * p.pH,
         "x", s[3] + 2 * p.pW, " (input shape ", s, ", padding [", p.pH, ", ", p.pW, "])");
  return Shape{s[0], s[1], out_size(s[2], p.kH, p.pH, p.sH), out_size(s[3], p.kW, p.pW, p.sW)};
}

Attrs pool_only(const Attrs& a) { return Attrs{a[0], a[1], a[2]}; }

// input_size of a pooling gradient: two positive sizes (-1: a dynamic dim of a graph).
void check_input_size(const char* op, const Ints& hw) {
  if (hw.size() != 2 || hw[0] == 0 || hw[1] == 0 || hw[0] < -1 || hw[1] < -1) {
    fail(op, "input_size must be 2 positive sizes, got ", ints_str(hw));
  }
}

// Spatial input size for a pooling gradient: input_size attribute (4th), checked against g.
Shape pool_grad_shape(const char* op, const Tensor& g, const Attrs& a, const PoolP& p) {
  if (g.dim() != 4) fail(op, "grad_output must be 4-D [N, C, OH, OW], got shape ", g.shape());
  op_util::require_float(op, g);
  const Ints& hw = a.ints(3);
  check_input_size(op, hw);
  Shape xs{g.size(0), g.size(1), hw[0], hw[1]};
  Shape ys = check_pool(op, xs, p);
  if ((ys[2] >= 0 && g.size(2) >= 0 && ys[2] != g.size(2)) ||
      (ys[3] >= 0 && g.size(3) >= 0 && ys[3] != g.size(3)))
    fail(op, "grad_output shape ", g.shape(), " does not match the pooled size ", ys, " of input ",
         xs);
  return xs;
}

// Calls f(plane) for each of the N*C planes, in parallel when the work is large.
template <typename F>
void for_planes(int64_t planes, int64_t work_per_plane, F&& f) {
  int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(work_per_plane, 1));
  parallel_for(planes, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) f(i);
  });
}

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
void max_pool_fwd(const Tensor& x, Tensor& y, Tensor& idx, const PoolP& p) {
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
                                      [&] { max_pool_fwd<scalar_t>(in[0], out[0], out[1], p); });
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

// Average pooling divides by the full window (count_include_pad = true, PyTorch's default);
// without ceil_mode no window reaches past the padding, so the divisor is always kH * kW.
template <typename T>
void avg_pool_fwd(const Tensor& x, Tensor& y, const PoolP& p) {
  const int64_t H = x.size(2), W = x.size(3), OH = y.size(2), OW = y.size(3);
  const T* px = x.data_ptr<T>();
  T* py = y.data_ptr<T>();
  const T inv = T(1) / static_cast<T>(p.kH * p.kW);
  for_planes(x.size(0) * x.size(1), OH * OW * p.kH * p.kW, [&](int64_t pl) {
    const T* xp = px + pl * H * W;
    for (int64_t oh = 0; oh < OH; ++oh) {
      int64_t h0 = std::max<int64_t>(oh * p.sH - p.pH, 0),
              h1 = std::min(oh * p.sH - p.pH + p.kH, H);
      for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t w0 = std::max<int64_t>(ow * p.sW - p.pW, 0);
        int64_t w1 = std::min(ow * p.sW - p.pW + p.kW, W);
        T s = 0;
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) s += xp[ih * W + iw];
        py[(pl * OH + oh) * OW + ow] = s * inv;
      }
    }
  });
}

template <typename T>
void avg_pool_bwd(const Tensor& g, Tensor& dx, const PoolP& p) {
  const int64_t H = dx.size(2), W = dx.size(3), OH = g.size(2), OW = g.size(3);
  const T* pg = g.data_ptr<T>();
  T* pd = dx.data_ptr<T>();
  const T inv = T(1) / static_cast<T>(p.kH * p.kW);
  std::fill(pd, pd + dx.numel(), T(0));
  for_planes(g.size(0) * g.size(1), OH * OW * p.kH * p.kW, [&](int64_t pl) {
    T* dp = pd + pl * H * W;
    for (int64_t oh = 0; oh < OH; ++oh) {
      int64_t h0 = std::max<int64_t>(oh * p.sH - p.pH, 0),
              h1 = std::min(oh * p.sH - p.pH + p.kH, H);
      for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t w0 = std::max<int64_t>(ow * p.sW - p.pW, 0);
        int64_t w1 = std::min(ow * p.sW - p.pW + p.kW, W);
        T v = pg[(pl * OH + oh) * OW + ow] * inv;
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) dp[ih * W + iw] += v;
      }
    }
  });
}

const OpDef& kAvgPool2d = def_op(
    {.name = "avg_pool2d",
     .num_inputs = 1,
     .attr_names = {"kernel", "stride", "padding"},
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           Shape ys = check_pool("avg_pool2d", in[0].shape(), pool_params("avg_pool2d", a));
           op_util::require_float("avg_pool2d", in[0]);
           return one(in[0].dtype(), ys);
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           PoolP p = pool_params("avg_pool2d", a);
           KILN_DISPATCH_FLOAT(in[0].dtype(), "avg_pool2d",
                               [&] { avg_pool_fwd<scalar_t>(in[0], out[0], p); });
         },
     // y = A x with A[o, i] = 1/(kH kW) for i in window o: dx = A^T g (avg_pool2d_grad).
     .grad =
         [](const GradCtx& c) {
           return TensorList{avg_pool2d_grad_fn(c.g(), c.attrs, c.in(0).size(2), c.in(0).size(3))};
         },
     .contiguous_inputs = true,
     .doc = "2-D average pooling, count_include_pad = true"});

const OpDef& kAvgPool2dGrad =
    def_op({.name = "avg_pool2d_grad",
            .num_inputs = 1,
            .attr_names = {"kernel", "stride", "padding", "input_size"},
            .infer =
                [](std::span<const Tensor> in, const Attrs& a) {
                  PoolP p = pool_params("avg_pool2d_grad", a);
                  return one(in[0].dtype(), pool_grad_shape("avg_pool2d_grad", in[0], a, p));
                },
            .kernel =
                [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
                  PoolP p = pool_params("avg_pool2d_grad", a);
                  KILN_DISPATCH_FLOAT(in[0].dtype(), "avg_pool2d_grad",
                                      [&] { avg_pool_bwd<scalar_t>(in[0], out[0], p); });
                },
            // dx = A^T g is linear in g; its adjoint is A: the g-gradient is avg_pool2d(gg).
            .grad = [](const GradCtx& c) { return TensorList{avg_pool2d_fn(c.g(), c.attrs)}; },
            .contiguous_inputs = true,
            .doc = "gradient of avg_pool2d: spreads grad_output / (kH kW) over each window"});

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
Tensor avg_pool2d_fn(const Tensor& x, const Attrs& a) {
  return call1(kAvgPool2d, {x}, pool_only(a));
}
Tensor avg_pool2d_grad_fn(const Tensor& g, const Attrs& a, int64_t H, int64_t W) {
  return call1(kAvgPool2dGrad, {g}, {a[0], a[1], a[2], Ints{H, W}});
}

// ---- N-D pooling with every torch option -----------------------------------------------------
// One max op (values + flat plane indices), one average op and its gradient cover 1, 2 and 3
// spatial dims, ceil_mode, dilation, count_include_pad, divisor_override and adaptive bins.
// Attributes {kernel, stride, padding, dilation, ceil_mode, count_include_pad,
// divisor_override, output_size}: an empty kernel means adaptive pooling to output_size.
// C and the spatial dims must be static (N may be dynamic).

struct NdP {
  size_t nd = 0;
  Ints k, s, p, d, osz;
  bool ceil = false, include_pad = true;
  int64_t divisor = 0;
  bool adaptive() const { return k.empty(); }
};

NdP nd_params(const char* op, const Attrs& a) {
  NdP q;
  q.k = a.ints(0);
  q.s = a.ints(1);
  q.p = a.ints(2);
  q.d = a.ints(3);
  q.ceil = a.b(4);
  q.include_pad = a.b(5);
  q.divisor = a.i(6);
  q.osz = a.ints(7);
  if (q.adaptive()) {
    q.nd = q.osz.size();
    if (q.nd < 1 || q.nd > 3) fail(op, "output_size must have 1 to 3 values, got ", Shape(q.osz));
    for (int64_t o : q.osz)
      if (o <= 0 || o > (int64_t(1) << 30))
        fail(op, "output_size must be positive, got ", Shape(q.osz));
    return q;
  }
  q.nd = q.k.size();
  if (q.nd < 1 || q.nd > 3 || q.s.size() != q.nd || q.p.size() != q.nd || q.d.size() != q.nd)
    fail(op, "kernel, stride, padding and dilation must have 1 to 3 values each, alike, got ",
         Shape(q.k), ", ", Shape(q.s), ", ", Shape(q.p), ", ", Shape(q.d));
  for (const Ints* v : {&q.k, &q.s, &q.p, &q.d}) op_util::check_window_params(op, "window", *v);
  for (size_t i = 0; i < q.nd; ++i) {
    if (q.k[i] <= 0) fail(op, "kernel_size must be positive, got ", Shape(q.k));
    if (q.s[i] <= 0) fail(op, "stride must be positive, got ", Shape(q.s));
    if (q.d[i] <= 0) fail(op, "dilation must be positive, got ", Shape(q.d));
    if (q.p[i] < 0 || q.p[i] > q.k[i] / 2)
      fail(op, "pad should be at most half of kernel size: padding ", Shape(q.p), ", kernel ",
           Shape(q.k));
  }
  if (q.divisor < 0) fail(op, "divisor_override must be positive, got ", q.divisor);
  return q;
}

// torch's pooling_output_shape.
int64_t nd_out(int64_t L, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil) {
  const int64_t num = L + 2 * p - d * (k - 1) - 1 + (ceil ? s - 1 : 0);
  int64_t o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
  if (ceil && (o - 1) * s >= L + p) --o;
  return o;
}

Shape nd_check(const char* op, const Shape& xs, const NdP& q) {
  if (xs.rank() != static_cast<int64_t>(q.nd) + 2)
    fail(op, "input must be ", q.nd + 2, "-D [N, C, ",
         q.nd == 1   ? "L"
         : q.nd == 2 ? "H, W"
                     : "D, H, W",
         "] (or ", q.nd + 1, "-D unbatched), got shape ", xs);
  // Dynamic dims (-1, a graph or a jit trace) stay dynamic: N and C pass through, a dynamic
  // spatial dim pools to a dynamic size (adaptive bins to output_size); the kernel sees the
  // concrete shape and these checks run again on it.
  Shape ys = xs;
  if (xs[1] == 0) fail(op, "input must have non-empty channels (only N may be 0), got shape ", xs);
  for (size_t i = 0; i < q.nd; ++i) {
    const int64_t L = xs[static_cast<int64_t>(i) + 2];
    if (L < 0) {
      ys[static_cast<int64_t>(i) + 2] = q.adaptive() ? q.osz[i] : -1;
      continue;
    }
    if (L == 0) fail(op, "input has an empty spatial dim: shape ", xs);
    int64_t o = q.adaptive() ? q.osz[i] : nd_out(L, q.k[i], q.s[i], q.p[i], q.d[i], q.ceil);
    if (o < 1)
      fail(op, "output size is too small: input ", xs, " with kernel ", Shape(q.k), ", stride ",
           Shape(q.s), ", padding ", Shape(q.p), ", dilation ", Shape(q.d), " gives ", o,
           " in dim ", i + 2);
    ys[static_cast<int64_t>(i) + 2] = o;
  }
  return ys;
}

// One spatial dim's windows: output o reads positions start[o] + j step, j < count[o]; its
// share of the average's divisor is factor[o].
struct Win {
  std::vector<int64_t> start, count, factor;
  int64_t step = 1;
};

// The three dims (leading ones of size 1 when nd < 3) of input sizes L and output sizes O.
std::array<Win, 3> nd_windows(const NdP& q, const int64_t* L, const int64_t* O) {
  std::array<Win, 3> w;
  const size_t off = 3 - q.nd;
  for (size_t i = 0; i < 3; ++i) {
    Win& v = w[i];
    if (i < off) {
      v.start = {0};
      v.count = {1};
      v.factor = {1};
      continue;
    }
    const size_t j = i - off;
    const int64_t l = L[j], n = O[j];
    v.start.resize(static_cast<size_t>(n));
    v.count.resize(static_cast<size_t>(n));
    v.factor.resize(static_cast<size_t>(n));
    for (int64_t o = 0; o < n; ++o) {
      const size_t u = static_cast<size_t>(o);
      if (q.adaptive()) {
        const int64_t b = o * l / n, e = ((o + 1) * l + n - 1) / n;
        v.start[u] = b;
        v.count[u] = v.factor[u] = e - b;
        continue;
      }
      const int64_t k = q.k[j], st = q.s[j], p = q.p[j], d = q.d[j];
      const int64_t base = o * st - p;
      const int64_t j0 = base < 0 ? (-base + d - 1) / d : 0;
      const int64_t jend = base > l - 1 ? 0 : base + (k - 1) * d < l ? k : (l - 1 - base) / d + 1;
      v.start[u] = base + j0 * d;
      v.count[u] = std::max<int64_t>(0, jend - j0);
      v.factor[u] = q.include_pad ? std::min(base + k, l + p) - base : v.count[u];
      v.step = d;
    }
  }
  return w;
}

// Spatial sizes (padded to 3) of a [N, C, ...] tensor.
std::array<int64_t, 3> sp3(const Tensor& t, size_t nd) {
  std::array<int64_t, 3> r{1, 1, 1};
  for (size_t i = 0; i < nd; ++i) r[3 - nd + i] = t.size(static_cast<int64_t>(i) + 2);
  return r;
}

int64_t planes_of(const Tensor& t) { return t.size(0) * t.size(1); }

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

// forward = true: y = A x (average over each window); false: dx = A^T g.
template <typename T>
void nd_avg(const Tensor& src, Tensor& dst, const NdP& q, bool forward) {
  const Tensor& xin = forward ? src : dst;  // the input-shaped tensor
  const Tensor& yout = forward ? dst : src;
  const auto L = sp3(xin, q.nd), O = sp3(yout, q.nd);
  const auto w = nd_windows(q, L.data() + 3 - q.nd, O.data() + 3 - q.nd);
  const int64_t P = L[0] * L[1] * L[2], Q = O[0] * O[1] * O[2];
  const T* ps = src.data_ptr<T>();
  T* pd = dst.data_ptr<T>();
  for_planes(planes_of(xin), Q * 8, [&](int64_t pl) {
    const T* sp = ps + pl * (forward ? P : Q);
    T* dp = pd + pl * (forward ? Q : P);
    if (!forward) std::fill(dp, dp + P, T(0));
    int64_t q_ = 0;
    for (int64_t a = 0; a < O[0]; ++a)
      for (int64_t b = 0; b < O[1]; ++b)
        for (int64_t c = 0; c < O[2]; ++c, ++q_) {
          const size_t ua = static_cast<size_t>(a), ub = static_cast<size_t>(b),
                       uc = static_cast<size_t>(c);
          const int64_t div =
              q.divisor > 0 ? q.divisor : w[0].factor[ua] * w[1].factor[ub] * w[2].factor[uc];
          const T inv = div > 0 ? T(1) / static_cast<T>(div) : T(0);
          T acc = 0;
          const T gv = forward ? T(0) : sp[q_] * inv;
          for (int64_t i0 = 0; i0 < w[0].count[ua]; ++i0) {
            const int64_t z = w[0].start[ua] + i0 * w[0].step;
            for (int64_t i1 = 0; i1 < w[1].count[ub]; ++i1) {
              const int64_t r = (z * L[1] + w[1].start[ub] + i1 * w[1].step) * L[2];
              for (int64_t i2 = 0; i2 < w[2].count[uc]; ++i2) {
                const int64_t at = r + w[2].start[uc] + i2 * w[2].step;
                if (forward)
                  acc += sp[at];
                else
                  dp[at] += gv;
              }
            }
          }
          if (forward) dp[q_] = acc * inv;
        }
  });
}

Tensor nd_avg_fn(const Tensor& x, const Attrs& a);
Tensor nd_avg_grad_fn(const Tensor& g, const Attrs& a, const Tensor& x);
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
           NdP q = nd_params("max_pool_nd", a);
           KILN_DISPATCH_FLOAT(in[0].dtype(), "max_pool_nd",
                               [&] { nd_max_fwd<scalar_t>(in[0], out[0], out[1], q); });
         },
     // The gradient goes to each window's argmax (output 1), as max_pool2d's.
     .grad = [](const GradCtx& c) { return TensorList{nd_max_grad(c.g(0), c.out(1), c.in(0))}; },
     .contiguous_inputs = true,
     .doc = "1/2/3-D max pooling (ceil_mode, dilation, adaptive bins); outputs the maxima and "
            "their flat indices within each plane. Any dim may be dynamic (a dynamic spatial "
            "dim pools to a dynamic size), but the gradient of a 2/3-D input with a dynamic "
            "spatial dim and another dynamic dim needs a static size"});

const OpDef& kAvgPoolNd = def_op(
    {.name = "avg_pool_nd",
     .num_inputs = 1,
     .attr_names = {"kernel", "stride", "padding", "dilation", "ceil_mode", "count_include_pad",
                    "divisor_override", "output_size"},
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           const char* op = "avg_pool_nd";
           Shape ys = nd_check(op, in[0].shape(), nd_params(op, a));
           op_util::require_float(op, in[0]);
           return one(in[0].dtype(), ys);
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           NdP q = nd_params("avg_pool_nd", a);
           KILN_DISPATCH_FLOAT(in[0].dtype(), "avg_pool_nd",
                               [&] { nd_avg<scalar_t>(in[0], out[0], q, true); });
         },
     // y = A x: dx = A^T g (avg_pool_nd_grad).
     .grad = [](const GradCtx& c) { return TensorList{nd_avg_grad_fn(c.g(), c.attrs, c.in(0))}; },
     .contiguous_inputs = true,
     .doc = "1/2/3-D average pooling (ceil_mode, count_include_pad, divisor_override, adaptive "
            "bins). Any dim may be dynamic (a dynamic spatial dim pools to a dynamic size)"});

const OpDef& kAvgPoolNdGrad = def_op(
    {.name = "avg_pool_nd_grad",
     .num_inputs = -1,
     .attr_names = {"kernel", "stride", "padding", "dilation", "ceil_mode", "count_include_pad",
                    "divisor_override", "output_size", "input_size"},
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           const char* op = "avg_pool_nd_grad";
           NdP q = nd_params(op, a);
           const Tensor& g = in[0];
           op_util::require_float(op, g, "grad_output");
           // An optional input 1 (the pooled input, its values unread) gives the input
           // size where input_size has dynamic dims: it cannot be read back from g
           // (strided windows round).
           if (in.size() != 1 && in.size() != 2)
             fail(op, "takes grad_output and an optional input, got ", in.size(), " inputs");
           const Ints& sz = a.ints(8);
           if (g.dim() != static_cast<int64_t>(q.nd) + 2 || sz.size() != q.nd ||
               (in.size() == 2 && in[1].dim() != g.dim()))
             fail(op, "grad_output ", g.shape(), " and input_size ", Shape(sz), " must have ",
                  q.nd + 2, " and ", q.nd, " dims");
           Shape xs{g.size(0), g.size(1)};
           for (size_t i = 0; i < q.nd; ++i) {
             const int64_t v = in.size() == 2 ? in[1].size(static_cast<int64_t>(i) + 2) : sz[i];
             if (v < 0 && in.size() == 1)
               fail(op, "needs a static size: input_size ", Shape(sz),
                    " has a dynamic dim and no input gives it (grad_output ", g.shape(), ")");
             xs.push_back(v);
           }
           Shape ys = nd_check(op, xs, q);
           for (int64_t d = 2; d < g.dim(); ++d)
             if (g.size(d) >= 0 && ys[d] != g.size(d))
               fail(op, "grad_output shape ", g.shape(), " does not match the pooled size ", ys,
                    " of input ", xs);
           return one(g.dtype(), xs);
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           NdP q = nd_params("avg_pool_nd_grad", a);
           KILN_DISPATCH_FLOAT(in[0].dtype(), "avg_pool_nd_grad",
                               [&] { nd_avg<scalar_t>(in[0], out[0], q, false); });
         },
     // dx = A^T g is linear in g; its adjoint is A.
     .grad =
         [](const GradCtx& c) {
           TensorList r{nd_avg_fn(c.g(), Attrs{c.attrs[0], c.attrs[1], c.attrs[2], c.attrs[3],
                                               c.attrs[4], c.attrs[5], c.attrs[6], c.attrs[7]})};
           if (c.inputs.size() == 2) r.push_back(Tensor());
           return r;
         },
     .contiguous_inputs = true,
     .doc = "gradient of avg_pool_nd: spreads grad_output / divisor over each window"});

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

Tensor nd_avg_fn(const Tensor& x, const Attrs& a) { return call1(kAvgPoolNd, {x}, a); }
Tensor nd_avg_grad_fn(const Tensor& g, const Attrs& a, const Tensor& x) {
  const Ints all = x.shape().vec();
  Ints sz(all.begin() + 2, all.end());
  const Attrs ga{a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], sz};
  // A dynamic spatial size: x itself gives it when the graph runs (its values are not read).
  if (std::any_of(sz.begin(), sz.end(), [](int64_t v) { return v < 0; }))
    return call1(kAvgPoolNdGrad, {g, x}, ga);
  return call1(kAvgPoolNdGrad, {g}, ga);
}
Tensor max_unpool_fn(const Tensor& x, const Tensor& idx, int64_t plane) {
  return call1(kMaxUnpool, {x, idx}, {plane});
}

// n values from a 1- or n-value argument (kernel_size=3 or (3, 3, 3)).
Ints expand_n(const char* op, const char* what, const Ints& v, size_t n) {
  if (v.size() == 1) return Ints(n, v[0]);
  if (v.size() != n) fail(op, what, " must have 1 or ", n, " values, got ", Shape(v));
  return v;
}

// Adds a batch dim to an unbatched input ([C, *] with nd spatial dims) around f.
template <typename F>
auto nd_call(const char* op, const Tensor& x, size_t nd, F&& f) {
  if (!x.defined()) fail(op, "input is an undefined tensor");
  const int64_t r = static_cast<int64_t>(nd);
  if (x.dim() != r + 1 && x.dim() != r + 2)
    fail(op, "input must be ", r + 1, "-D (unbatched) or ", r + 2, "-D (batched), got shape ",
         x.shape());
  return f(x.dim() == r + 1 ? unsqueeze(x, 0) : x, x.dim() == r + 1);
}

Attrs nd_attrs(const char* op, size_t nd, const Ints& kernel, const Ints& stride,
               const Ints& padding, const Ints& dilation, bool ceil, bool include_pad,
               int64_t divisor) {
  Ints k = expand_n(op, "kernel_size", kernel, nd);
  Ints s = stride.empty() ? k : expand_n(op, "stride", stride, nd);
  return Attrs{k,
               s,
               expand_n(op, "padding", padding, nd),
               expand_n(op, "dilation", dilation, nd),
               ceil,
               include_pad,
               divisor,
               Ints{}};
}

std::pair<Tensor, Tensor> max_pool_nd(const char* op, size_t nd, const Tensor& x,
                                      const Ints& kernel, const Ints& stride, const Ints& padding,
                                      const Ints& dilation, bool ceil) {
  Attrs a = nd_attrs(op, nd, kernel, stride, padding, dilation, ceil, true, 0);
  return nd_call(op, x, nd, [&](const Tensor& xb, bool unb) {
    nd_check(op, xb.shape(), nd_params(op, a));  // (errors name the public op)
    TensorList r = call(kMaxPoolNd, {xb}, a);
    if (unb) return std::pair{squeeze(r[0], 0), squeeze(r[1], 0)};
    return std::pair{r[0], r[1]};
  });
}

std::pair<Tensor, Tensor> adaptive_max_nd(const char* op, size_t nd, const Tensor& x,
                                          const Ints& output_size) {
  Attrs a{Ints{}, Ints{}, Ints{},     Ints{},
          false,  true,   int64_t(0), expand_n(op, "output_size", output_size, nd)};
  return nd_call(op, x, nd, [&](const Tensor& xb, bool unb) {
    nd_check(op, xb.shape(), nd_params(op, a));  // (errors name the public op)
    TensorList r = call(kMaxPoolNd, {xb}, a);
    if (unb) return std::pair{squeeze(r[0], 0), squeeze(r[1], 0)};
    return std::pair{r[0], r[1]};
  });
}

Tensor adaptive_avg_nd(const char* op, size_t nd, const Tensor& x, const Ints& output_size) {
  Attrs a{Ints{}, Ints{}, Ints{},     Ints{},
          false,  true,   int64_t(0), expand_n(op, "output_size", output_size, nd)};
  return nd_call(op, x, nd, [&](const Tensor& xb, bool unb) {
    nd_check(op, xb.shape(), nd_params(op, a));
    Tensor y = call1(kAvgPoolNd, {xb}, a);
    return unb ? squeeze(y, 0) : y;
  });
}

Tensor avg_pool_nd(const char* op, size_t nd, const Tensor& x, const Ints& kernel,
                   const Ints& stride, const Ints& padding, bool ceil, bool include_pad,
                   int64_t divisor) {
  Attrs a = nd_attrs(op, nd, kernel, stride, padding, Ints{1}, ceil, include_pad, divisor);
  return nd_call(op, x, nd, [&](const Tensor& xb, bool unb) {
    nd_check(op, xb.shape(), nd_params(op, a));
    Tensor y = call1(kAvgPoolNd, {xb}, a);
    return unb ? squeeze(y, 0) : y;
  });
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

// torch's lp_pool: (sign(s) relu(|s|) * kernel_numel)^(1/p) with s = avg_pool(x^p).
Tensor lp_pool_nd(const char* op, size_t nd, const Tensor& x, double norm_type, const Ints& kernel,
                  const Ints& stride, bool ceil) {
  if (!x.defined()) fail(op, "input is an undefined tensor");
  const Ints k = expand_n(op, "kernel_size", kernel, nd);
  int64_t numel = 1;
  for (int64_t v : k) numel *= v;
  Tensor s = avg_pool_nd(op, nd, pow(x, norm_type), k, stride, Ints{0}, ceil, true, 0);
  return pow(mul(mul(sign(s), relu(abs(s))), static_cast<double>(numel)), 1.0 / norm_type);
}

// Pooling accepts [C, H, W] too (as PyTorch): a batch dim is added and removed around the op.
template <typename F>
Tensor pool_call(const char* op, const Tensor& x, F&& f) {
  if (!x.defined()) fail(op, "input is an undefined tensor");
  if (x.dim() == 3) return squeeze(f(unsqueeze(x, 0)), 0);
  if (x.dim() != 4)
    fail(op, "input must be 3-D [C, H, W] or 4-D [N, C, H, W], got shape ", x.shape());
  return f(x);
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
Tensor avg_pool1d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, bool ceil_mode, bool count_include_pad) {
  return avg_pool_nd("avg_pool1d", 1, x, kernel, stride, padding, ceil_mode, count_include_pad, 0);
}
Tensor avg_pool3d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, bool ceil_mode, bool count_include_pad,
                  int64_t divisor_override) {
  return avg_pool_nd("avg_pool3d", 3, x, kernel, stride, padding, ceil_mode, count_include_pad,
                     divisor_override);
}
Tensor lp_pool1d(const Tensor& x, double norm_type, std::vector<int64_t> kernel,
                 std::vector<int64_t> stride, bool ceil_mode) {
  return lp_pool_nd("lp_pool1d", 1, x, norm_type, kernel, stride, ceil_mode);
}
Tensor lp_pool2d(const Tensor& x, double norm_type, std::vector<int64_t> kernel,
                 std::vector<int64_t> stride, bool ceil_mode) {
  return lp_pool_nd("lp_pool2d", 2, x, norm_type, kernel, stride, ceil_mode);
}
Tensor adaptive_avg_pool1d(const Tensor& x, std::vector<int64_t> output_size) {
  return adaptive_avg_nd("adaptive_avg_pool1d", 1, x, output_size);
}
Tensor adaptive_avg_pool3d(const Tensor& x, std::vector<int64_t> output_size) {
  return adaptive_avg_nd("adaptive_avg_pool3d", 3, x, output_size);
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

// torch's bins: output i of n over a length L averages [floor(i L / n), ceil((i + 1) L / n)).
// The bins of a rectangle are products of row and column ranges, so averaging over rows, then
// columns, is the rectangle's mean. Equal bins (L divisible by n) are one avg_pool2d.
Tensor adaptive_avg_pool2d(const Tensor& x, std::vector<int64_t> output_size) {
  const char* op = "adaptive_avg_pool2d";
  Ints o = pair2(op, "output_size", output_size);
  if (o[0] <= 0 || o[1] <= 0) fail(op, "output_size must be positive, got ", Shape(o));
  // (uneven bins cost one op per output row and column)
  if (o[0] > 65536 || o[1] > 65536)
    fail(op, "output_size must be at most 65536 per dim, got ", Shape(o));
  return pool_call(op, x, [&](const Tensor& x4) {
    if (!is_floating(x4.dtype()))
      fail(op, "input must be floating point, got ", x4.dtype(), x4.shape());
    const int64_t H = x4.size(2), W = x4.size(3);
    if (H < 0 || W < 0) fail(op, "needs static H and W, got shape ", x4.shape());
    if (H == 0 || W == 0) fail(op, "input has an empty spatial dim: shape ", x4.shape());
    if (H % o[0] == 0 && W % o[1] == 0) return avg_pool2d(x4, {H / o[0], W / o[1]});
    // Uneven bins: the N-D op's adaptive windows.
    return adaptive_avg_nd(op, 2, x4, o);
  });
}

namespace {
enum class Resample { Nearest, NearestExact, Linear, Cubic, Area };

// torch's cubic convolution weights (A = -0.75).
double cubic1(double x) {
  const double A = -0.75;
  return ((A + 2) * x - (A + 3)) * x * x + 1;
}
double cubic2(double x) {
  const double A = -0.75;
  return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
}

// The [out, in] matrix of a 1-D resampling, as torch's kernels index: `scale` is 1/scale_factor
// when the caller gave one (and did not ask to recompute it), else 0 (in / out is used).
Tensor resample_matrix(int64_t out, int64_t in, Resample mode, bool align_corners, double scale,
                       DType dt) {
  std::vector<double> m(static_cast<size_t>(out * in), 0.0);
  const double fin = static_cast<double>(in), fout = static_cast<double>(out);
  const double sc =
      align_corners ? (out > 1 ? (fin - 1) / (fout - 1) : 0.0) : (scale > 0 ? scale : fin / fout);
  for (int64_t i = 0; i < out; ++i) {
    double* row = m.data() + i * in;
    const double fi = static_cast<double>(i);
    switch (mode) {
      case Resample::Nearest:
      case Resample::NearestExact: {
        // torch computes these in float32
        const float f = mode == Resample::Nearest
                            ? static_cast<float>(fi) * static_cast<float>(sc)
                            : (static_cast<float>(fi) + 0.5f) * static_cast<float>(sc);
        // (torch's nearest special-cases equal and doubled sizes, whatever the scale)
        const int64_t src = mode == Resample::Nearest && out == in ? i
                            : mode == Resample::Nearest && out == 2 * in
                                ? i / 2
                                : std::min(in - 1, static_cast<int64_t>(std::floor(f)));
        row[src] = 1;
        break;
      }
      case Resample::Area: {
        const int64_t b = i * in / out, e = ((i + 1) * in + out - 1) / out;
        for (int64_t j = b; j < e; ++j) row[j] = 1.0 / static_cast<double>(e - b);
        break;
      }
      case Resample::Linear: {
        double src = align_corners ? sc * fi : std::max(0.0, sc * (fi + 0.5) - 0.5);
        const int64_t i0 = std::min(in - 1, static_cast<int64_t>(std::floor(src)));
        const int64_t i1 = i0 < in - 1 ? i0 + 1 : i0;
        const double w1 = std::clamp(src - static_cast<double>(i0), 0.0, 1.0);
        row[i0] += 1 - w1;
        row[i1] += w1;
        break;
      }
      case Resample::Cubic: {
        const double src = align_corners ? sc * fi : sc * (fi + 0.5) - 0.5;
        const double fl = std::floor(src);
        const int64_t i0 = static_cast<int64_t>(fl);
        const double t = src - fl;
        const double w[4] = {cubic2(t + 1), cubic1(t), cubic1(1 - t), cubic2(2 - t)};
        for (int64_t k = 0; k < 4; ++k) row[std::clamp<int64_t>(i0 - 1 + k, 0, in - 1)] += w[k];
        break;
      }
    }
  }
  return tensor(m, {out, in}).to(dt);
}
}  // namespace

// Resizing is linear and separable: one [out, in] matrix per resized axis, applied as a GEMM
// over all the other dims (gradients are those of matmul).
Tensor interpolate(const Tensor& x, std::vector<int64_t> size, const std::string& mode,
                   bool align_corners, std::vector<double> scale_factor,
                   bool recompute_scale_factor) {
  const char* op = "interpolate";
  if (!x.defined()) fail(op, "input is an undefined tensor");
  Resample rm;
  int64_t need = 0;  // the input rank the mode requires (0: 3 to 5)
  if (mode == "nearest") {
    rm = Resample::Nearest;
  } else if (mode == "nearest-exact") {
    rm = Resample::NearestExact;
  } else if (mode == "area") {
    rm = Resample::Area;
  } else if (mode == "linear" || mode == "bilinear" || mode == "trilinear") {
    rm = Resample::Linear;
    need = mode == "linear" ? 3 : mode == "bilinear" ? 4 : 5;
  } else if (mode == "bicubic") {
    rm = Resample::Cubic;
    need = 4;
  } else {
    fail(op,
         "mode must be nearest, nearest-exact, linear, bilinear, bicubic, trilinear or area, "
         "got \"",
         mode, "\"");
  }
  if (align_corners &&
      (rm == Resample::Nearest || rm == Resample::NearestExact || rm == Resample::Area))
    fail(op,
         "align_corners option can only be set with the interpolating modes: linear | "
         "bilinear | bicubic | trilinear (mode \"",
         mode, "\")");
  if (x.dim() < 3 || x.dim() > 5 || (need && x.dim() != need))
    fail(op, "mode \"", mode, "\" expects ", need ? std::to_string(need) : std::string("3-D to 5"),
         "-D input [N, C, spatial...], got shape ", x.shape());
  if (!is_floating(x.dtype())) fail(op, "input must be floating point, got ", x.dtype(), x.shape());
  const int64_t nd = x.dim() - 2;
  if (size.empty() == scale_factor.empty())
    fail(op, "exactly one of size and scale_factor must be given, got size ", Shape(size), " and ",
         scale_factor.size(), " scale factors");
  Ints o;
  std::vector<double> scales(static_cast<size_t>(nd), 0.0);
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t in = x.size(d + 2);
    if (in <= 0) fail(op, "needs static, non-empty spatial dims, got shape ", x.shape());
    const size_t u = static_cast<size_t>(d);
    if (!size.empty()) {
      if (size.size() != 1 && size.size() != static_cast<size_t>(nd))
        fail(op, "size must have 1 or ", nd, " values for input ", x.shape(), ", got ",
             Shape(size));
      o.push_back(size.size() == 1 ? size[0] : size[u]);
    } else {
      if (scale_factor.size() != 1 && scale_factor.size() != static_cast<size_t>(nd))
        fail(op, "scale_factor must have 1 or ", nd, " values for input ", x.shape(), ", got ",
             scale_factor.size());
      const double f = scale_factor.size() == 1 ? scale_factor[0] : scale_factor[u];
      if (!(f > 0) || !std::isfinite(f)) fail(op, "scale_factor must be positive, got ", f);
      o.push_back(static_cast<int64_t>(std::floor(static_cast<double>(in) * f)));
      if (!recompute_scale_factor) scales[u] = 1.0 / f;
    }
    if (o.back() <= 0 || o.back() > (int64_t(1) << 24))
      fail(op, "output size must be positive (and at most 2^24), got ", Shape(o), " for input ",
           x.shape());
    // The resampling matrices are [out, in] per axis.
    if (o.back() * in > (int64_t(1) << 28))
      fail(op, "resizing ", x.shape(), " to ", Shape(o),
           " needs resampling matrices over 2^28 elements");
  }
  // Axis d's matrix A: y = A applied along that dim. The last dim multiplies from the right;
  // the others by moving the dim last... as [.., in, rest] @ from the left.
  Tensor y = x;
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t in = x.size(d + 2), out = o[static_cast<size_t>(d)];
    const bool identity = out == in && (rm == Resample::Nearest || rm == Resample::Area);
    if (identity) continue;
    Tensor A =
        resample_matrix(out, in, rm, align_corners, scales[static_cast<size_t>(d)], x.dtype());
    const int64_t dim = d + 2;
    if (dim == y.dim() - 1) {
      y = matmul(y, transpose(A, 0, 1));
    } else {
      // [N, C, ..., in, rest...] -> [N, C, ..., in, R] (rest merged) -> A @ -> back
      Shape ys = y.shape();
      Shape merged;
      for (int64_t k = 0; k <= dim; ++k) merged.push_back(ys[k]);
      merged.push_back(-1);
      Tensor z = matmul(A, reshape(y, merged));
      Shape back = ys;
      back[dim] = out;
      y = reshape(z, back);
    }
  }
  return y.is_same(x) ? clone(y) : y;
}

Tensor avg_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, bool ceil_mode, bool count_include_pad,
                  int64_t divisor_override) {
  // The fast op divides by the full window and never sees a window past the padding.
  if (ceil_mode || !count_include_pad || divisor_override != 0)
    return avg_pool_nd("avg_pool2d", 2, x, kernel, stride, padding, ceil_mode, count_include_pad,
                       divisor_override);
  Ints k = pair2("avg_pool2d", "kernel", kernel);
  Ints s = stride.empty() ? k : pair2("avg_pool2d", "stride", stride);
  Ints p = pair2("avg_pool2d", "padding", padding);
  return pool_call("avg_pool2d", x, [&](const Tensor& x4) {
    return call1(kAvgPool2d, {x4}, {k, s, p});
  });
}

// ---- padding modes, pixel shuffle ------------------------------------------------------------

// One dynamic padded dim (a graph or a jit trace): the borders are slices counted from either
// end of the dim, reordered by a static index_select, and cat'ed around y; eager's size checks
// run when the graph runs (check_numel).
static Tensor pad_mode_dynamic(const Tensor& y, int64_t dim, int64_t lo, int64_t hi,
                               const std::string& mode) {
  const char* op = "pad";
  const bool reflect = mode == "reflect", circular = mode == "circular";
  const int64_t need = reflect ? std::max(lo, hi) + 1 : circular ? std::max(lo, hi) : 1;
  const Tensor x = op_util::check_numel(
      y, {dim}, need, op,
      reflect    ? str_cat("padding (", lo, ", ", hi, ") at dimension ", dim,
                           " should be less than the corresponding input dimension: shape ")
      : circular ? str_cat("padding (", lo, ", ", hi, ") at dimension ", dim,
                           " wraps around more than once: shape ")
                 : str_cat("mode \"", mode, "\" cannot pad an empty dim: shape "));
  auto index = [](int64_t n, bool reversed, bool zero) {
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = zero ? 0 : reversed ? n - 1 - i : i;
    return tensor(v, Shape{n});
  };
  // Each border: the source rows (a slice of n rows, or of the one edge row for replicate)
  // and the order to take them in.
  auto border = [&](bool left, int64_t n) {
    if (mode == "replicate")
      return index_select(left ? slice(x, dim, 0, 1) : slice(x, dim, -1, INT64_MAX), dim,
                          index(n, false, true));
    if (reflect)
      return index_select(left ? slice(x, dim, 1, n + 1) : slice(x, dim, -n - 1, -1), dim,
                          index(n, true, false));
    return index_select(left ? slice(x, dim, -n, INT64_MAX) : slice(x, dim, 0, n), dim,
                        index(n, false, false));
  };
  std::vector<Tensor> parts;
  if (lo > 0) parts.push_back(border(true, lo));
  parts.push_back(x);
  if (hi > 0) parts.push_back(border(false, hi));
  return cat(parts, dim);
}

// reflect / replicate / circular: each padded dim is one index_select with the source position
// of every output position (the gradient is index_select's: contributions summed back).
Tensor pad(const Tensor& a, const std::vector<int64_t>& pads, const std::string& mode,
           double value) {
  const char* op = "pad";
  if (mode == "constant") return pad(a, pads, value);
  if (mode != "reflect" && mode != "replicate" && mode != "circular")
    fail(op, "mode must be constant, reflect, replicate or circular, got \"", mode, "\"");
  if (!a.defined()) fail(op, "input is an undefined tensor");
  if (value != 0.0)
    fail(op, "padding mode \"", mode, "\" doesn't take in value argument (got ", value, ")");
  const int64_t np = static_cast<int64_t>(pads.size()) / 2;
  if (pads.size() % 2 != 0 || np < 1 || np > 3)
    fail(op, "mode \"", mode, "\" pads 1 to 3 trailing dims: pad must have 2, 4 or 6 values, got ",
         Shape(pads));
  // As torch: the padded dims plus a channel dim, and an optional batch dim.
  if (a.dim() != np + 1 && a.dim() != np + 2)
    fail(op, "mode \"", mode, "\" with ", pads.size(), " pad values expects a ", np + 1, "-D or ",
         np + 2, "-D input, got shape ", a.shape());
  Tensor y = a;
  for (int64_t j = 0; j < np; ++j) {
    const int64_t dim = a.dim() - 1 - j;
    const int64_t L = a.size(dim), lo = pads[static_cast<size_t>(2 * j)],
                  hi = pads[static_cast<size_t>(2 * j + 1)];
    if (lo < 0 || hi < 0)
      fail(op, "mode \"", mode, "\" needs non-negative padding, got ", Shape(pads));
    if (L < 0) {
      if (lo > 0 || hi > 0) y = pad_mode_dynamic(y, dim, lo, hi, mode);
      continue;
    }
    if (mode == "reflect" && (lo >= L || hi >= L))
      fail(op, "padding size should be less than the corresponding input dimension, but got: ",
           "padding (", lo, ", ", hi, ") at dimension ", dim, " of input ", a.shape());
    if (mode == "circular" && (lo > L || hi > L))
      fail(op, "padding value causes wrapping around more than once: padding (", lo, ", ", hi,
           ") at dimension ", dim, " of input ", a.shape());
    if (L == 0) fail(op, "mode \"", mode, "\" cannot pad an empty dim, input shape ", a.shape());
    if (lo == 0 && hi == 0) continue;
    std::vector<int64_t> idx;
    for (int64_t q = -lo; q < L + hi; ++q) {
      int64_t src = q;
      if (mode == "reflect")
        src = q < 0 ? -q : q >= L ? 2 * (L - 1) - q : q;
      else if (mode == "replicate")
        src = std::clamp<int64_t>(q, 0, L - 1);
      else
        src = ((q % L) + L) % L;
      idx.push_back(src);
    }
    y = index_select(y, dim, tensor(idx, Shape{static_cast<int64_t>(idx.size())}));
  }
  return y.is_same(a) ? clone(y) : y;
}

Tensor pixel_shuffle(const Tensor& x, int64_t r) {
  const char* op = "pixel_shuffle";
  if (!x.defined()) fail(op, "input is an undefined tensor");
  if (x.dim() < 3)
    fail(op, "input must have at least 3 dims [*, C r^2, H, W], got shape ", x.shape());
  if (r <= 0) fail(op, "upscale_factor must be positive, got ", r);
  const int64_t n = x.dim(), C = x.size(n - 3), H = x.size(n - 2), W = x.size(n - 1);
  if (C < 0 || H < 0 || W < 0) fail(op, "needs static C, H and W, got shape ", x.shape());
  if (C % (r * r) != 0)
    fail(op, "input's channel dim ", C, " must be divisible by the square of upscale_factor ", r,
         " (input shape ", x.shape(), ")");
  const Ints dims = x.shape().vec();
  Shape lead(dims.begin(), dims.end() - 3);
  Shape s6 = lead;
  for (int64_t v : {C / (r * r), r, r, H, W}) s6.push_back(v);
  std::vector<int64_t> perm;
  const int64_t b = static_cast<int64_t>(lead.rank());
  for (int64_t i = 0; i < b; ++i) perm.push_back(i);
  for (int64_t v : {0, 3, 1, 4, 2}) perm.push_back(b + v);
  Shape out = lead;
  for (int64_t v : {C / (r * r), H * r, W * r}) out.push_back(v);
  return reshape(permute(reshape(x, s6), perm), out);
}

Tensor pixel_unshuffle(const Tensor& x, int64_t r) {
  const char* op = "pixel_unshuffle";
  if (!x.defined()) fail(op, "input is an undefined tensor");
  if (x.dim() < 3)
    fail(op, "input must have at least 3 dims [*, C, H r, W r], got shape ", x.shape());
  if (r <= 0) fail(op, "downscale_factor must be positive, got ", r);
  const int64_t n = x.dim(), C = x.size(n - 3), H = x.size(n - 2), W = x.size(n - 1);
  if (C < 0 || H < 0 || W < 0) fail(op, "needs static C, H and W, got shape ", x.shape());
  if (H % r != 0 || W % r != 0)
    fail(op, "input's height and width (", H, ", ", W, ") must be divisible by downscale_factor ",
         r, " (input shape ", x.shape(), ")");
  const Ints dims = x.shape().vec();
  Shape lead(dims.begin(), dims.end() - 3);
  Shape s6 = lead;
  for (int64_t v : {C, H / r, r, W / r, r}) s6.push_back(v);
  std::vector<int64_t> perm;
  const int64_t b = static_cast<int64_t>(lead.rank());
  for (int64_t i = 0; i < b; ++i) perm.push_back(i);
  for (int64_t v : {0, 2, 4, 1, 3}) perm.push_back(b + v);
  Shape out = lead;
  for (int64_t v : {C * r * r, H / r, W / r}) out.push_back(v);
  return reshape(permute(reshape(x, s6), perm), out);
}

}  // namespace kiln
