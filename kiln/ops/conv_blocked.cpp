// Inference ops on channel-blocked activations [N, C/b, H, W, b] (oneDNN's nChw{b}c, which the
// block_layout pass keeps between convolutions): the global average pool and the per-channel
// scale of a squeeze-excite block, and a max pool with asymmetric padding (ceil_mode). The generic
// mean and broadcast mul read these layouts with strided inner loops (efficientnet_b0, batch 1: 62
// and 49 us a call against 5-10 here), so a network's SE blocks cost more in blocks than the copies
// back to NCHW they saved.
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kiln/kernels/cpu/parallel.h"
#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using op_util::one;
using Ints = std::vector<int64_t>;

void require_blocked(const char* op, const Tensor& x, const char* what) {
  const Shape& s = x.shape();
  if (s.rank() != 5 || (s[4] != 8 && s[4] != 16))
    fail(op, what, " must be 5-D [N, C/b, H, W, b] with b = 8 or 16, got shape ", s);
  op_util::require_float(op, x);
}

// The sum of one plane's HW b-lane vectors: four partial sums over interleaved positions, so
// the adds do not wait on each other (one running sum was bound by the add's latency:
// efficientnet_b0's squeeze-excite pools at batch 1, 15.7 us a call against onnxruntime's 7.4).
template <typename T, int64_t B>
void plane_sum(const T* __restrict p, int64_t HW, T* __restrict out) {
  T acc[4][B] = {};
  int64_t q = 0;
  for (; q + 4 <= HW; q += 4)
    for (int64_t u = 0; u < 4; ++u)
      for (int64_t i = 0; i < B; ++i) acc[u][i] += p[(q + u) * B + i];
  for (; q < HW; ++q)
    for (int64_t i = 0; i < B; ++i) acc[0][i] += p[q * B + i];
  for (int64_t i = 0; i < B; ++i) out[i] = (acc[0][i] + acc[1][i]) + (acc[2][i] + acc[3][i]);
}

// mean over H and W: [N, C/b, H, W, b] -> [N, C/b, 1, 1, b] (the bytes of [N, C, 1, 1]).
template <typename T>
void mean_hw(const Tensor& x, Tensor& y) {
  const int64_t planes = x.size(0) * x.size(1), HW = x.size(2) * x.size(3), B = x.size(4);
  const T* px = x.data_ptr<T>();
  T* py = y.data_ptr<T>();
  const T inv = HW > 0 ? T(1) / static_cast<T>(HW) : std::numeric_limits<T>::quiet_NaN();
  parallel_for(planes, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, HW * B)),
               [&](int64_t b, int64_t e) {
                 for (int64_t pl = b; pl < e; ++pl) {
                   T* o = py + pl * B;
                   if (B == 16)
                     plane_sum<T, 16>(px + pl * HW * B, HW, o);
                   else
                     plane_sum<T, 8>(px + pl * HW * B, HW, o);
                   for (int64_t i = 0; i < B; ++i) o[i] *= inv;
                 }
               });
}

const OpDef& kMeanHwBlocked =
    def_op({.name = "mean_hw_blocked",
            .num_inputs = 1,
            .infer =
                [](std::span<const Tensor> in, const Attrs&) {
                  require_blocked("mean_hw_blocked", in[0], "input");
                  const Shape& s = in[0].shape();
                  return one(in[0].dtype(), Shape{s[0], s[1], 1, 1, s[4]});
                },
            .kernel =
                [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
                  KILN_DISPATCH_FLOAT(in[0].dtype(), "mean_hw_blocked",
                                      [&] { mean_hw<scalar_t>(in[0], out[0]); });
                },
            .contiguous_inputs = true,
            .doc = "inference mean over H and W of channel-blocked [N, C/b, H, W, b] activations "
                   "-> [N, C/b, 1, 1, b] (a global average pool; what block_layout makes of "
                   "mean(x, {2, 3}, keepdim))"});

// x [N, C/b, H, W, b] times s [N or 1, C/b, 1, 1, b]: each b-lane vector of a plane by the
// plane's scale vector.
template <typename T>
void scale_channels(const Tensor& x, const Tensor& s, Tensor& y) {
  const int64_t N = x.size(0), CB = x.size(1), HW = x.size(2) * x.size(3), B = x.size(4);
  const bool per_sample = s.size(0) == N && N > 1;
  const T *px = x.data_ptr<T>(), *ps = s.data_ptr<T>();
  T* py = y.data_ptr<T>();
  parallel_for(N * CB, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, HW * B)),
               [&](int64_t b, int64_t e) {
                 for (int64_t pl = b; pl < e; ++pl) {
                   const T* sv = ps + (per_sample ? pl : pl % CB) * B;
                   const T* p = px + pl * HW * B;
                   T* o = py + pl * HW * B;
                   for (int64_t q = 0; q < HW; ++q)
                     for (int64_t i = 0; i < B; ++i) o[q * B + i] = p[q * B + i] * sv[i];
                 }
               });
}

const OpDef& kScaleChannelsBlocked = def_op(
    {.name = "scale_channels_blocked",
     .num_inputs = 2,
     .infer =
         [](std::span<const Tensor> in, const Attrs&) {
           const char* op = "scale_channels_blocked";
           require_blocked(op, in[0], "input");
           require_blocked(op, in[1], "scale");
           const Shape &x = in[0].shape(), &s = in[1].shape();
           if (s[1] != x[1] || s[4] != x[4] || s[2] != 1 || s[3] != 1 ||
               (s[0] != 1 && s[0] != x[0]) || in[0].dtype() != in[1].dtype())
             fail(op, "scale must be [", x[0], " or 1, ", x[1], ", 1, 1, ", x[4],
                  "] of the input's dtype for input ", in[0].dtype(), x, ", got ", in[1].dtype(),
                  s);
           return one(in[0].dtype(), x);
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
           KILN_DISPATCH_FLOAT(in[0].dtype(), "scale_channels_blocked",
                               [&] { scale_channels<scalar_t>(in[0], in[1], out[0]); });
         },
     .contiguous_inputs = true,
     .doc =
         "inference x * s of channel-blocked x [N, C/b, H, W, b] and a per-channel s "
         "[N or 1, C/b, 1, 1, b] (a squeeze-excite scale; what block_layout makes of that mul)"});

// ---- max_pool2d_values: values-only max pooling, padding per side, NCHW or blocked -----------
// Attributes: kernel, stride, pad_begin, pad_end (2 values each: H, W) and block (0: NCHW [N, C,
// H, W], else [N, C/b, H, W, b]). Padded positions are skipped (as padding with -inf), so
// ONNX's asymmetric and ceil_mode pools (googlenet's, 13 per image) need no padded copy of
// their input (an extra pass over it) and no int64 indices, and stay in channel blocks.

struct PadPool {
  int64_t kH, kW, sH, sW, pt, pl, pb, pr, block;
};

PadPool pad_pool_params(const char* op, const Attrs& a) {
  const auto &k = a.ints(0), &s = a.ints(1), &b = a.ints(2), &e = a.ints(3);
  if (k.size() != 2 || s.size() != 2 || b.size() != 2 || e.size() != 2)
    fail(op, "kernel, stride, pad_begin and pad_end need 2 values each");
  PadPool p{k[0], k[1], s[0], s[1], b[0], b[1], e[0], e[1], a.i(4)};
  if (p.kH <= 0 || p.kW <= 0 || p.sH <= 0 || p.sW <= 0 || p.kH > (1 << 20) || p.kW > (1 << 20) ||
      p.sH > (1 << 20) || p.sW > (1 << 20))
    fail(op, "kernel and stride must be positive, got ", Shape(k), " and ", Shape(s));
  // Below the kernel, every window holds at least one input element.
  if (p.pt < 0 || p.pl < 0 || p.pb < 0 || p.pr < 0 || p.pt >= p.kH || p.pb >= p.kH ||
      p.pl >= p.kW || p.pr >= p.kW)
    fail(op, "pads ", Shape(b), " / ", Shape(e), " must be non-negative and below the kernel ",
         Shape(k));
  if (p.block != 0 && p.block != 8 && p.block != 16)
    fail(op, "block must be 0 (NCHW), 8 or 16, got ", p.block);
  return p;
}

// The max over one window of B-lane vectors: max_pool2d's rule, a larger value or a NaN takes
// the place (a NaN already there stays).
template <typename T, int64_t B>
inline void window_max(const T* xp, int64_t W, int64_t h0, int64_t h1, int64_t w0, int64_t w1,
                       T* out) {
  // The running max is one max instruction a step; NaNs are gathered apart (a mask, off the
  // max's dependency chain) and win at the end: a blend in the chain made each step wait
  // three instructions (inception_v3's 147x147 stem pool: 785 us a call).
#ifdef __AVX512F__
  if constexpr (std::is_same_v<T, float> && B == 16) {
    __m512 best = _mm512_set1_ps(-INFINITY);
    __mmask16 nan = 0;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) {
        const __m512 v = _mm512_loadu_ps(xp + (ih * W + iw) * B);
        best = _mm512_mask_max_ps(best, 0xFFFF, best, v);  // gcc 12 warns on _mm512_max_ps
        nan = static_cast<__mmask16>(nan | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
      }
    _mm512_storeu_ps(out, _mm512_mask_mov_ps(best, nan, _mm512_set1_ps(NAN)));
    return;
  }
#endif
#ifdef __AVX2__
  if constexpr (std::is_same_v<T, float> && B % 8 == 0) {
    __m256 best[B / 8], nan[B / 8];
    for (int64_t k = 0; k < B / 8; ++k)
      best[k] = _mm256_set1_ps(-INFINITY), nan[k] = _mm256_setzero_ps();
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) {
        const float* v = xp + (ih * W + iw) * B;
        for (int64_t k = 0; k < B / 8; ++k) {
          const __m256 x = _mm256_loadu_ps(v + 8 * k);
          best[k] = _mm256_max_ps(best[k], x);
          nan[k] = _mm256_or_ps(nan[k], _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
        }
      }
    for (int64_t k = 0; k < B / 8; ++k)
      _mm256_storeu_ps(out + 8 * k, _mm256_blendv_ps(best[k], _mm256_set1_ps(NAN), nan[k]));
    return;
  }
#endif
  // v > m ? v : m is a max instruction, no branch (random data mispredicts half the
  // compares: 4.7 ns an element); a NaN is tracked apart and wins at the end.
  T best[B];
  bool nan[B];
  for (int64_t i = 0; i < B; ++i) best[i] = -std::numeric_limits<T>::infinity(), nan[i] = false;
  for (int64_t ih = h0; ih < h1; ++ih)
    for (int64_t iw = w0; iw < w1; ++iw) {
      const T* v = xp + (ih * W + iw) * B;
      for (int64_t i = 0; i < B; ++i) {
        best[i] = v[i] > best[i] ? v[i] : best[i];
        nan[i] |= v[i] != v[i];
      }
    }
  for (int64_t i = 0; i < B; ++i) out[i] = nan[i] ? std::numeric_limits<T>::quiet_NaN() : best[i];
}

// The sum over one row's part [w0, w1) of a window, added element by element in order onto
// acc (so a window's sum is the same row-major sequence of additions as in one loop).
template <typename T, int64_t B>
inline void row_sum(const T* __restrict xr, int64_t w0, int64_t w1, T* __restrict acc) {
  T s[B];  // in registers: acc's stores would otherwise be reloaded after each row element
  for (int64_t i = 0; i < B; ++i) s[i] = acc[i];
  for (int64_t iw = w0; iw < w1; ++iw)
    for (int64_t i = 0; i < B; ++i) s[i] += xr[iw * B + i];
  for (int64_t i = 0; i < B; ++i) acc[i] = s[i];
}

// acc = the max of acc and r, lane by lane, as max_pool2d's rule: a larger value or a NaN takes
// the place (a NaN already there, or an equal earlier value, stays).
template <typename T, int64_t B>
inline void combine_max(const T* r, T* acc) {
#ifdef __AVX512F__
  if constexpr (std::is_same_v<T, float> && B == 16) {  // (GCC left the loop below scalar)
    const __m512 v = _mm512_loadu_ps(r), a = _mm512_loadu_ps(acc);
    const __mmask16 take = static_cast<__mmask16>(_mm512_cmp_ps_mask(v, a, _CMP_GT_OQ) |
                                                  _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
    _mm512_storeu_ps(acc, _mm512_mask_mov_ps(a, take, v));
    return;
  }
#endif
#ifdef __AVX2__
  if constexpr (std::is_same_v<T, float> && B % 8 == 0) {
    for (int64_t k = 0; k < B; k += 8) {
      const __m256 v = _mm256_loadu_ps(r + k), a = _mm256_loadu_ps(acc + k);
      const __m256 take =
          _mm256_or_ps(_mm256_cmp_ps(v, a, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      _mm256_storeu_ps(acc + k, _mm256_blendv_ps(a, v, take));
    }
    return;
  }
#endif
  for (int64_t i = 0; i < B; ++i) acc[i] = (r[i] > acc[i] || r[i] != r[i]) ? r[i] : acc[i];
}

// B (lanes per position) a constant, so the lane loops vectorize. kAvg: the mean (else max).
// Each output row is built one window row at a time, the input row read in order and folded
// into the output row: the window-at-a-time loop read three input rows interleaved, which the
// hardware prefetcher did not follow (squeezenet's [32, 96, 109, 109] 3x3/2 pool at 1 thread:
// 17.0 ms, 8.6 GB/s, against 5.4 ms row by row).
template <typename T, int64_t B, bool kAvg = false>
void max_pool_pad(const Tensor& x, Tensor& y, const PadPool& p) {
  const int64_t H = x.size(2), W = x.size(3), OH = y.size(2), OW = y.size(3);
  const int64_t planes = x.size(0) * x.size(1);
  const T* px = x.data_ptr<T>();
  T* py = y.data_ptr<T>();
  const PadPool q = p;  // by value: no reload of the geometry after each store
  const T size = static_cast<T>(q.kH * q.kW);
  // Row by row keeps the input's reads in order for the prefetcher, which matters once a
  // plane is beyond L2; within it a window's kH kW vectors max in registers (googlenet's
  // batch-1 pools).
  const bool whole = H * W * B * static_cast<int64_t>(sizeof(T)) <= (int64_t{256} << 10);
  parallel_for(planes, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, OH * OW * B)),
               [&](int64_t b0, int64_t e0) {
                 alignas(64) T r[B];
                 for (int64_t pl = b0; pl < e0; ++pl) {
                   const T* xp = px + pl * H * W * B;
                   for (int64_t oh = 0; oh < OH; ++oh) {
                     const int64_t h0 = std::max<int64_t>(oh * q.sH - q.pt, 0);
                     const int64_t h1 = std::min(oh * q.sH - q.pt + q.kH, H);
                     T* yr = py + (pl * OH + oh) * OW * B;
                     if constexpr (!kAvg)
                       if (B == 1 || whole) {
                         // One lane a position, or a plane that fits in L2: whole windows (rows
                         // of scalars folded into the output row ran 2x slower at two threads).
                         for (int64_t ow = 0; ow < OW; ++ow)
                           window_max<T, B>(xp, W, h0, h1, std::max<int64_t>(ow * q.sW - q.pl, 0),
                                            std::min(ow * q.sW - q.pl + q.kW, W), yr + ow * B);
                         continue;
                       }
                     for (int64_t ih = h0; ih < h1; ++ih) {
                       const T* xr = xp + ih * W * B;
                       for (int64_t ow = 0; ow < OW; ++ow) {
                         const int64_t w0 = std::max<int64_t>(ow * q.sW - q.pl, 0);
                         const int64_t w1 = std::min(ow * q.sW - q.pl + q.kW, W);
                         T* acc = yr + ow * B;
                         if constexpr (kAvg) {
                           if (ih == h0) std::fill(acc, acc + B, T(0));
                           row_sum<T, B>(xr, w0, w1, acc);
                         } else if (ih == h0) {
                           window_max<T, B>(xr, W, 0, 1, w0, w1, acc);
                         } else {
                           window_max<T, B>(xr, W, 0, 1, w0, w1, r);
                           combine_max<T, B>(r, acc);
                         }
                       }
                     }
                     if constexpr (kAvg)
                       for (int64_t i = 0; i < OW * B; ++i) yr[i] /= size;
                   }
                 }
               });
}

// The average pool with each input row's window sums formed once and kept while the window's
// rows cover it (a ring of kH rows of OW sums): an output is the sum of kH row sums, so a
// stride-1 3x3 pool adds 4 values an output instead of 8 (inception_v3's branch pools at batch
// 1: 85 us for [1, 12, 35, 35, 16] summing each window whole). The ring is small enough for L1
// where the caller sends a pool here (kH OW B <= 64 K elements).
template <typename T, int64_t B>
void avg_pool_row_sums(const Tensor& x, Tensor& y, const PadPool& p) {
  const int64_t H = x.size(2), W = x.size(3), OH = y.size(2), OW = y.size(3);
  const int64_t planes = x.size(0) * x.size(1);
  const T* px = x.data_ptr<T>();
  T* py = y.data_ptr<T>();
  const PadPool q = p;
  const T size = static_cast<T>(q.kH * q.kW);
  parallel_for(planes, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, OH * OW * B)),
               [&](int64_t b0, int64_t e0) {
                 std::vector<T> ring(static_cast<size_t>(q.kH * OW * B));
                 std::vector<int64_t> held(static_cast<size_t>(q.kH));
                 for (int64_t pl = b0; pl < e0; ++pl) {
                   const T* xp = px + pl * H * W * B;
                   std::fill(held.begin(), held.end(), int64_t(-1));
                   for (int64_t oh = 0; oh < OH; ++oh) {
                     const int64_t h0 = std::max<int64_t>(oh * q.sH - q.pt, 0);
                     const int64_t h1 = std::min(oh * q.sH - q.pt + q.kH, H);
                     for (int64_t ih = h0; ih < h1; ++ih) {
                       T* rs = ring.data() + (ih % q.kH) * OW * B;
                       if (held[static_cast<size_t>(ih % q.kH)] == ih) continue;
                       held[static_cast<size_t>(ih % q.kH)] = ih;
                       for (int64_t ow = 0; ow < OW; ++ow) {
                         const int64_t w0 = std::max<int64_t>(ow * q.sW - q.pl, 0);
                         const int64_t w1 = std::min(ow * q.sW - q.pl + q.kW, W);
                         std::fill(rs + ow * B, rs + (ow + 1) * B, T(0));
                         row_sum<T, B>(xp + ih * W * B, w0, w1, rs + ow * B);
                       }
                     }
                     // The window's row sums added row after row over the whole output row
                     // (contiguous loops that vectorize), then the division.
                     T* __restrict yr = py + (pl * OH + oh) * OW * B;
                     const int64_t n = OW * B;
                     const T* first = ring.data() + (h0 % q.kH) * n;
                     std::copy(first, first + n, yr);
                     for (int64_t ih = h0 + 1; ih < h1; ++ih) {
                       const T* __restrict rs = ring.data() + (ih % q.kH) * n;
                       for (int64_t i = 0; i < n; ++i) yr[i] += rs[i];
                     }
                     for (int64_t i = 0; i < n; ++i) yr[i] /= size;
                   }
                 }
               });
}

MetaList pad_pool_infer(const char* op, std::span<const Tensor> in, const Attrs& a) {
  const PadPool p = pad_pool_params(op, a);
  const Shape& s = in[0].shape();
  if (p.block) {
    require_blocked(op, in[0], "input");
    if (s[4] != p.block) fail(op, "input ", s, " is not in blocks of ", p.block);
  } else if (s.rank() != 4) {
    fail(op, "input must be 4-D [N, C, H, W], got shape ", s);
  }
  op_util::require_float(op, in[0]);
  if (s[2] == 0 || s[3] == 0) fail(op, "input must have a non-empty plane, got ", s);
  Shape ys = s;
  if (s[2] >= 0) ys[2] = (s[2] + p.pt + p.pb - p.kH) / p.sH + 1;
  if (s[3] >= 0) ys[3] = (s[3] + p.pl + p.pr - p.kW) / p.sW + 1;
  if (ys[2] == 0 || ys[3] == 0 || (s[2] >= 0 && s[2] + p.pt + p.pb < p.kH) ||
      (s[3] >= 0 && s[3] + p.pl + p.pr < p.kW))
    fail(op, "the kernel ", p.kH, "x", p.kW, " does not fit the padded input ", s);
  return one(in[0].dtype(), ys);
}

template <bool kAvg>
void pad_pool_kernel(const char* op, std::span<const Tensor> in, std::span<Tensor> out,
                     const Attrs& a) {
  const PadPool p = pad_pool_params(op, a);
  KILN_DISPATCH_FLOAT(in[0].dtype(), op, [&] {
    const bool ring = kAvg && p.kH * out[0].size(3) * std::max<int64_t>(p.block, 1) <= (1 << 16);
    if (ring && p.block == 16)
      avg_pool_row_sums<scalar_t, 16>(in[0], out[0], p);
    else if (ring && p.block == 8)
      avg_pool_row_sums<scalar_t, 8>(in[0], out[0], p);
    else if (ring)
      avg_pool_row_sums<scalar_t, 1>(in[0], out[0], p);
    else if (p.block == 16)
      max_pool_pad<scalar_t, 16, kAvg>(in[0], out[0], p);
    else if (p.block == 8)
      max_pool_pad<scalar_t, 8, kAvg>(in[0], out[0], p);
    else
      max_pool_pad<scalar_t, 1, kAvg>(in[0], out[0], p);
  });
}

// inception_v3's branch pools (a Pad, then a 3x3 average pool: 9 per image), in blocks and
// without the padded copy.
const OpDef& kAvgPool2dValues = def_op(
    {.name = "avg_pool2d_values",
     .num_inputs = 1,
     .attr_names = {"kernel", "stride", "pad_begin", "pad_end", "block"},
     .infer = [](std::span<const Tensor> in,
                 const Attrs& a) { return pad_pool_infer("avg_pool2d_values", in, a); },
     .kernel = [](std::span<const Tensor> in, std::span<Tensor> out,
                  const Attrs& a) { pad_pool_kernel<true>("avg_pool2d_values", in, out, a); },
     .contiguous_inputs = true,
     .doc = "inference 2-D average pooling with zero padding per side counted in the divisor "
            "(count_include_pad), of NCHW or channel-blocked [N, C/b, H, W, b] input (block "
            "attribute)"});

const OpDef& kMaxPool2dValues = def_op(
    {.name = "max_pool2d_values",
     .num_inputs = 1,
     .attr_names = {"kernel", "stride", "pad_begin", "pad_end", "block"},
     .infer = [](std::span<const Tensor> in,
                 const Attrs& a) { return pad_pool_infer("max_pool2d_values", in, a); },
     .kernel = [](std::span<const Tensor> in, std::span<Tensor> out,
                  const Attrs& a) { pad_pool_kernel<false>("max_pool2d_values", in, out, a); },
     .contiguous_inputs = true,
     .doc = "inference 2-D max pooling, values only, with padding per side (padded positions "
            "skipped), of NCHW or channel-blocked [N, C/b, H, W, b] input (block attribute)"});

// ---- gather_channels_blocked: channel moves between blocked values --------------------------
// Attributes: channels (each input's channel count, at most its C/b * b lanes) and index (for
// each output channel, its channel in the inputs' concatenation). One op for what a network
// does to channels besides computing them: a concatenation whose inputs end inside a block
// (channel counts padded to the block), a slice of channels, shufflenet's channel shuffle
// (reshape, transpose, reshape); the output's padded lanes are zero. block_layout composes
// chains of them into one, so that shufflenet's units stay in blocks.

struct GatherP {
  Ints channels, index;
  int64_t total;
};

GatherP gather_params(const char* op, const Attrs& a) {
  GatherP g{a.ints(0), a.ints(1), 0};
  for (int64_t c : g.channels) {
    if (c < 0) fail(op, "channels must be non-negative, got ", Shape(g.channels));
    g.total += c;
  }
  for (int64_t i : g.index)
    if (i < 0 || i >= g.total)
      fail(op, "index ", i, " is outside the inputs' ", g.total, " channels ", Shape(g.channels));
  return g;
}

// One source vector of an output block: lanes `mask` of the block come from lanes `lane` of
// block `cb` of input `in`.
struct GatherSrc {
  int64_t in, cb;
  uint32_t mask;
  int32_t lane[16];
};

std::vector<std::vector<GatherSrc>> gather_plan(const GatherP& g, int64_t B, int64_t OB) {
  std::vector<int64_t> first(g.channels.size(), 0);
  for (size_t j = 1; j < g.channels.size(); ++j) first[j] = first[j - 1] + g.channels[j - 1];
  std::vector<std::vector<GatherSrc>> plan(static_cast<size_t>(OB));
  for (size_t c = 0; c < g.index.size(); ++c) {
    const int64_t gi = g.index[c];
    const int64_t in = std::upper_bound(first.begin(), first.end(), gi) - first.begin() - 1;
    const int64_t ch = gi - first[static_cast<size_t>(in)], cb = ch / B;
    auto& srcs = plan[c / static_cast<size_t>(B)];
    auto it = std::find_if(srcs.begin(), srcs.end(),
                           [&](const GatherSrc& s) { return s.in == in && s.cb == cb; });
    if (it == srcs.end()) it = srcs.insert(srcs.end(), GatherSrc{in, cb, 0, {}});
    const auto l = static_cast<int64_t>(c) % B;
    it->mask |= 1u << l;
    it->lane[l] = static_cast<int32_t>(ch % B);
  }
  return plan;
}

template <typename T>
void gather_channels(std::span<const Tensor> in, Tensor& y, const GatherP& g) {
  const int64_t N = y.size(0), OB = y.size(1), HW = y.size(2) * y.size(3), B = y.size(4);
  const auto plan = gather_plan(g, B, OB);
  std::vector<const T*> px(in.size());
  for (size_t j = 0; j < in.size(); ++j) px[j] = in[j].data_ptr<T>();
  T* py = y.data_ptr<T>();
  parallel_for(N * OB, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, HW * B)),
               [&](int64_t b0, int64_t e0) {
                 for (int64_t pl = b0; pl < e0; ++pl) {
                   const int64_t n = pl / OB;
                   const auto& srcs = plan[static_cast<size_t>(pl % OB)];
                   T* yp = py + pl * HW * B;
                   const T* sp[16];
                   for (size_t s = 0; s < srcs.size(); ++s)
                     sp[s] =
                         px[static_cast<size_t>(srcs[s].in)] +
                         (n * in[static_cast<size_t>(srcs[s].in)].size(1) + srcs[s].cb) * HW * B;
#ifdef __AVX512F__
                   if constexpr (std::is_same_v<T, float>) {
                     if (B == 16) {
                       __m512i idx[16];
                       for (size_t s = 0; s < srcs.size(); ++s)
                         idx[s] = _mm512_loadu_si512(srcs[s].lane);
                       for (int64_t q = 0; q < HW; ++q) {
                         __m512 r = _mm512_setzero_ps();
                         for (size_t s = 0; s < srcs.size(); ++s)
                           r = _mm512_mask_permutexvar_ps(r, static_cast<__mmask16>(srcs[s].mask),
                                                          idx[s], _mm512_loadu_ps(sp[s] + q * 16));
                         _mm512_storeu_ps(yp + q * 16, r);
                       }
                       continue;
                     }
                   }
#endif
                   for (int64_t q = 0; q < HW; ++q) {
                     T* o = yp + q * B;
                     for (int64_t l = 0; l < B; ++l) o[l] = T(0);
                     for (size_t s = 0; s < srcs.size(); ++s)
                       for (int64_t l = 0; l < B; ++l)
                         if (srcs[s].mask >> l & 1u) o[l] = sp[s][q * B + srcs[s].lane[l]];
                   }
                 }
               });
}

const OpDef& kGatherChannelsBlocked = def_op(
    {.name = "gather_channels_blocked",
     .num_inputs = -1,
     .attr_names = {"channels", "index"},
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           const char* op = "gather_channels_blocked";
           const GatherP g = gather_params(op, a);
           if (in.empty() || g.channels.size() != in.size())
             fail(op, "expects one channel count per input, got ", g.channels.size(), " for ",
                  in.size(), " inputs");
           const Shape& s0 = in[0].shape();
           for (size_t j = 0; j < in.size(); ++j) {
             require_blocked(op, in[j], "input");
             const Shape& s = in[j].shape();
             if (s[0] != s0[0] || s[2] != s0[2] || s[3] != s0[3] || s[4] != s0[4] ||
                 in[j].dtype() != in[0].dtype())
               fail(op, "inputs must share N, H, W, the block and the dtype, got ", in[0].dtype(),
                    s0, " and ", in[j].dtype(), s);
             if (s[1] < 0 || g.channels[j] > s[1] * s[4])
               fail(op, "input ", j, " of shape ", s, " cannot hold ", g.channels[j], " channels");
           }
           const auto C = static_cast<int64_t>(g.index.size());
           return one(in[0].dtype(), Shape{s0[0], (C + s0[4] - 1) / s0[4], s0[2], s0[3], s0[4]});
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
           const GatherP g = gather_params("gather_channels_blocked", a);
           KILN_DISPATCH_FLOAT(in[0].dtype(), "gather_channels_blocked",
                               [&] { gather_channels<scalar_t>(in, out[0], g); });
         },
     .contiguous_inputs = true,
     .doc = "inference channel moves between channel-blocked [N, C/b, H, W, b] values: output "
            "channel c is channel index[c] of the inputs' concatenation (channels: each input's "
            "count); padded lanes zero. What block_layout makes of channel concatenations, "
            "slices and shuffles"});

}  // namespace
}  // namespace kiln
