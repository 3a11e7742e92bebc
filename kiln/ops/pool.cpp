// Pooling family: max pooling (with its indices, gradient and gather ops) and average pooling
// with its gradient. Every gradient op's own rule is written with the family's ops, so
// gradients of gradients work.
#ifdef __AVX2__
#include <immintrin.h>
#endif

#include <algorithm>
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
                  std::vector<int64_t> padding) {
  Ints k = pair2("max_pool2d", "kernel", kernel);
  Ints s = stride.empty() ? k : pair2("max_pool2d", "stride", stride);
  Ints p = pair2("max_pool2d", "padding", padding);
  return pool_call("max_pool2d", x, [&](const Tensor& x4) {
    return call(kMaxPool2d, {x4}, {k, s, p})[0];
  });
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
    auto bins = [](const Tensor& t, int64_t dim, int64_t len, int64_t n) {
      std::vector<Tensor> parts;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t b = i * len / n, e = ((i + 1) * len + n - 1) / n;
        parts.push_back(mean(slice(t, dim, b, e), {dim}, true));
      }
      return cat(parts, dim);
    };
    return bins(bins(x4, 2, H, o[0]), 3, W, o[1]);
  });
}

namespace {
// The [out, in] matrix of a 1-D resampling: torch's "nearest" (source floor(i in / out)) or
// "bilinear" along one axis (half-pixel centres, or corners aligned).
Tensor resample_matrix(int64_t out, int64_t in, bool bilinear, bool align_corners, DType dt) {
  std::vector<double> m(static_cast<size_t>(out * in), 0.0);
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  for (int64_t i = 0; i < out; ++i) {
    double* row = m.data() + i * in;
    if (!bilinear) {
      row[std::min(in - 1, static_cast<int64_t>(std::floor(static_cast<double>(i) * scale)))] = 1;
      continue;
    }
    double src = align_corners ? (out > 1 ? static_cast<double>(i) * static_cast<double>(in - 1) /
                                                static_cast<double>(out - 1)
                                          : 0.0)
                               : std::max(0.0, (static_cast<double>(i) + 0.5) * scale - 0.5);
    const int64_t i0 = std::min(in - 1, static_cast<int64_t>(std::floor(src)));
    const int64_t i1 = std::min(in - 1, i0 + 1);
    const double w1 = src - static_cast<double>(i0);
    row[i0] += 1 - w1;
    row[i1] += w1;
  }
  return tensor(m, {out, in}).to(dt);
}
}  // namespace

// Resizing is linear and separable: y = A_h x A_w^T with A the per-axis matrices above (two
// small GEMMs over all N C planes; gradients are those of matmul).
Tensor interpolate(const Tensor& x, std::vector<int64_t> size, const std::string& mode,
                   bool align_corners) {
  const char* op = "interpolate";
  const Ints o = pair2(op, "size", size);
  if (o[0] <= 0 || o[1] <= 0 || o[0] > (int64_t(1) << 24) || o[1] > (int64_t(1) << 24))
    fail(op, "size must be positive (and at most 2^24), got ", Shape(o));
  if (mode != "nearest" && mode != "bilinear")
    fail(op, "mode must be \"nearest\" or \"bilinear\", got \"", mode, "\"");
  if (align_corners && mode != "bilinear") fail(op, "align_corners applies to bilinear only");
  return pool_call(op, x, [&](const Tensor& x4) {
    if (!is_floating(x4.dtype()))
      fail(op, "input must be floating point, got ", x4.dtype(), x4.shape());
    const int64_t H = x4.size(2), W = x4.size(3);
    if (H <= 0 || W <= 0) fail(op, "needs static, non-empty H and W, got shape ", x4.shape());
    // The resampling matrices are [out, in] per axis.
    if (o[0] * H > (int64_t(1) << 28) || o[1] * W > (int64_t(1) << 28))
      fail(op, "resizing ", x4.shape(), " to ", Shape(o),
           " needs resampling matrices over 2^28 elements");
    const bool bil = mode == "bilinear";
    Tensor y = x4;
    if (o[0] != H || bil) y = matmul(resample_matrix(o[0], H, bil, align_corners, x4.dtype()), y);
    if (o[1] != W || bil)
      y = matmul(y, transpose(resample_matrix(o[1], W, bil, align_corners, x4.dtype()), 0, 1));
    return y.is_same(x4) ? clone(y) : y;
  });
}

Tensor avg_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding) {
  Ints k = pair2("avg_pool2d", "kernel", kernel);
  Ints s = stride.empty() ? k : pair2("avg_pool2d", "stride", stride);
  Ints p = pair2("avg_pool2d", "padding", padding);
  return pool_call("avg_pool2d", x, [&](const Tensor& x4) {
    return call1(kAvgPool2d, {x4}, {k, s, p});
  });
}

}  // namespace kiln
