// Per-tap GEMMs for dilated convolutions (see conv_tap_gemm.h).
#include "kiln/kernels/cpu/conv_tap_gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kiln/kernels/cpu/gemm.h"
#include "kiln/kernels/cpu/parallel.h"
#include "kiln/kernels/cpu/scratch.h"
#include "kiln/kernels/cpu/transpose16.h"

namespace kiln::cpu {
namespace {

// The outputs [lo, hi) of one dim whose tap k reads the input (input size `in`, padding pad,
// stride s, dilation d): o s - pad + k d in [0, in).
void tap_range(int64_t out, int64_t in, int64_t pad, int64_t s, int64_t d, int64_t k, int64_t* lo,
               int64_t* hi) {
  const int64_t off = k * d - pad;  // input position of output 0
  *lo = off >= 0 ? 0 : (-off + s - 1) / s;
  *hi = off >= in ? 0 : std::min(out, (in - 1 - off) / s + 1);
  if (*hi < *lo) *hi = *lo;
}

}  // namespace

// Rows of output channels split across the threads: an eager call packs its weight every time
// (2.4 MB for 256 -> 256 3x3). A row [C, taps] becomes taps rows [C] by 16 x 16 transposes of 16
// channels (up to 16 taps): 84 -> 62 us on one thread (89 -> 46 in a standalone loop), where a
// strided scalar copy a tap row stalled on its loads (an AVX-512 gather, 175 us, more so).
void pack_tap_weights(const float* w, float* wt, int64_t O, int64_t C, int64_t taps) {
  parallel_for(O, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, C * taps)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t o = lo; o < hi; ++o) {
                   const float* src = w + o * C * taps;
                   float* dst = wt + o * C;  // tap t's row at dst + t O C
                   int64_t c = 0;
                   if (taps <= 16)
                     for (; c + 16 <= C; c += 16)
                       transpose16_narrow(src + c * taps, taps, static_cast<int>(taps), dst + c,
                                          O * C);
                   for (int64_t t = 0; t < taps; ++t)
                     for (int64_t k = c; k < C; ++k) dst[t * O * C + k] = src[k * taps + t];
                 }
               });
}

namespace {

// One tap's GEMM operands: its [O, C] matrix, the input it reads ([C, P], ldb apart: x itself
// for an unshifted tap over the whole output, else a packed window) and its output rectangle.
struct TapWork {
  const float* a;
  const float* b;
  int64_t ldb, h0, rh, w0, rw;
  bool whole;       ///< the rectangle is the whole output, in y's own layout
  bool transposed;  ///< b is [P, C]: a few outputs (see kFewOutputs)
};

// A tap reaching at most this many outputs (a corner of a dilated kernel on a small map) runs
// as y^T = window^T A^T: oneDNN's sgemm then packs the 4-row window, not the 256 x 256 tap
// matrix (4 x 256 x 256: 10.1 -> 4.0 us; at 28 outputs the plain form is faster, 16.5 vs 19.6).
constexpr int64_t kFewOutputs = 8;

// Rows of rw floats, ls apart at stride sw, from src into dst one after another.
[[gnu::noinline]] void copy_rows(const float* __restrict src, int64_t ls, int64_t sw, int64_t rh,
                                 int64_t rw, float* __restrict dst) {
  if (sw == 1 && rw >= 16) {
    for (int64_t r = 0; r < rh; ++r)
      std::memcpy(dst + r * rw, src + r * ls, sizeof(float) * static_cast<size_t>(rw));
    return;
  }
  for (int64_t r = 0; r < rh; ++r)
    for (int64_t q = 0; q < rw; ++q) dst[r * rw + q] = src[r * ls + q * sw];
}

// The input window a tap reads (rows from iy0, columns from ix0, at the strides) into dst:
// [C, rh rw], or [rh rw, C] when transposed. A channel's rows copy in a small function of its
// own: inlined in the loops over channels and taps, its counters lived on the stack (ASPP's
// 2-column edge windows took 10% of the convolution).
void pack_window(const float* xn, const Conv2dGeom& g, int64_t iy0, int64_t ix0, int64_t rh,
                 int64_t rw, bool transposed, float* dst) {
  const int64_t C = g.C, HW = g.H * g.W, P = rh * rw;
  const float* x0 = xn + iy0 * g.W + ix0;
  if (!transposed) {
    for (int64_t c = 0; c < C; ++c) copy_rows(x0 + c * HW, g.sH * g.W, g.sW, rh, rw, dst + c * P);
    return;
  }
  for (int64_t c = 0; c < C; ++c)
    for (int64_t r = 0; r < rh; ++r)
      for (int64_t q = 0; q < rw; ++q)
        dst[(r * rw + q) * C + c] = x0[c * HW + r * g.sH * g.W + q * g.sW];
}

// The taps that reach some output for sample xn, their windows packed into `pack` (small: the
// taps' rectangles times C).
std::vector<TapWork> sample_taps(const float* xn, const float* wt, int64_t O, const Conv2dGeom& g,
                                 Scratch& pack) {
  const int64_t C = g.C, OHW = g.OH * g.OW;
  std::vector<TapWork> taps;
  for (int pass = 0; pass < 2; ++pass) {  // sizes, then windows
    int64_t at = 0;
    for (int64_t ky = 0; ky < g.kH; ++ky)
      for (int64_t kx = 0; kx < g.kW; ++kx) {
        int64_t h0, h1, w0, w1;
        tap_range(g.OH, g.H, g.pH, g.sH, g.dH, ky, &h0, &h1);
        tap_range(g.OW, g.W, g.pW, g.sW, g.dW, kx, &w0, &w1);
        const int64_t rh = h1 - h0, rw = w1 - w0, P = rh * rw;
        if (P == 0) continue;
        const float* a = wt + (ky * g.kW + kx) * O * C;
        const int64_t iy0 = h0 * g.sH - g.pH + ky * g.dH, ix0 = w0 * g.sW - g.pW + kx * g.dW;
        if (P == OHW && g.sH == 1 && g.sW == 1 && iy0 == 0 && ix0 == 0 && g.H == g.OH &&
            g.W == g.OW) {  // the whole output from x as it is
          if (pass) taps.push_back({a, xn, g.H * g.W, h0, rh, w0, rw, true, false});
          continue;
        }
        if (pass) {
          const bool tr = P <= kFewOutputs;
          pack_window(xn, g, iy0, ix0, rh, rw, tr, pack.p + at);
          taps.push_back({a, pack.p + at, tr ? C : P, h0, rh, w0, rw, false, tr});
        }
        at += C * P;
      }
    if (!pass) pack.grow(at);
  }
  // A tap over the whole output first: it writes the sums (beta 0) and no pass zeroes them.
  std::stable_partition(taps.begin(), taps.end(), [](const TapWork& t) { return t.whole; });
  return taps;
}

// Every tap's product on output channels [lo, hi) of one sample's yn: the first tap writes
// the sums when it covers the whole output, else the rows are zeroed first. A rectangle of
// whole output rows is contiguous in each channel's plane: its GEMM adds into yn in place.
void run_taps(const std::vector<TapWork>& taps, int64_t lo, int64_t hi, const Conv2dGeom& g,
              float* yn) {
  using T = float;
  const int64_t C = g.C, OHW = g.OH * g.OW, m = hi - lo;
  if (taps.empty() || !taps[0].whole) std::fill(yn + lo * OHW, yn + hi * OHW, 0.f);
  int64_t most = 0;  // the largest product buffer a tap needs
  for (const TapWork& t : taps) most = std::max(most, m * t.rh * t.rw);
  Scratch tmp(most);  // (a fresh std::vector a call was mapped and faulted in)
  for (size_t i = 0; i < taps.size(); ++i) {
    const TapWork& t = taps[i];
    const int64_t P = t.rh * t.rw;
    if (t.whole || (t.rw == g.OW && !t.transposed)) {
      gemm<T>(false, false, m, P, C, t.a + lo * C, C, t.b, t.ldb, T(i == 0 && t.whole ? 0 : 1),
              yn + lo * OHW + t.h0 * g.OW, OHW);
      continue;
    }
    if (t.transposed) {  // tmp [P, m]
      gemm<T>(false, true, P, m, C, t.b, t.ldb, t.a + lo * C, C, T(0), tmp.p, m);
      for (int64_t q = 0; q < P; ++q) {
        T* dst = yn + lo * OHW + (t.h0 + q / t.rw) * g.OW + t.w0 + q % t.rw;
        for (int64_t o = 0; o < m; ++o) dst[o * OHW] += tmp.p[q * m + o];
      }
      continue;
    }
    gemm<T>(false, false, m, P, C, t.a + lo * C, C, t.b, t.ldb, T(0), tmp.p, P);
    for (int64_t o = 0; o < m; ++o)
      for (int64_t r = 0; r < t.rh; ++r) {
        T* dst = yn + (lo + o) * OHW + (t.h0 + r) * g.OW + t.w0;
        const T* src = tmp.p + o * P + r * t.rw;
        for (int64_t q = 0; q < t.rw; ++q) dst[q] += src[q];
      }
  }
}

}  // namespace

// The windows first, then the GEMMs with the output channels split across the threads, each
// thread running every tap on its rows.
void conv2d_tap_gemms(const float* x, const float* wt, float* y, int64_t N, int64_t O,
                      const Conv2dGeom& g) {
  const int64_t C = g.C, HW = g.H * g.W, OHW = g.OH * g.OW;
  const double macs = double(O) * double(C) * double(OHW);
  const int64_t grain = macs < double(1 << 22) ? O : std::min<int64_t>(O, 32);
  Scratch pack;  // (as a std::vector, 131 KB for ASPP's d12 was mapped and faulted in a call)
  for (int64_t n = 0; n < N; ++n) {
    const std::vector<TapWork> taps = sample_taps(x + n * C * HW, wt, O, g, pack);
    float* yn = y + n * O * OHW;
    parallel_for(O, grain, [&](int64_t lo, int64_t hi) { run_taps(taps, lo, hi, g, yn); });
  }
}

}  // namespace kiln::cpu
