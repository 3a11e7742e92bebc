// Per-tap GEMMs for dilated convolutions (see conv_tap_gemm.h).
#include "kiln/kernels/cpu/conv_tap_gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kiln/kernels/cpu/gemm.h"

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

void pack_tap_weights(const float* w, float* wt, int64_t O, int64_t C, int64_t taps) {
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t t = 0; t < taps; ++t) wt[(t * O + o) * C + c] = w[(o * C + c) * taps + t];
}

void conv2d_tap_gemms(const float* x, const float* wt, float* y, int64_t N, int64_t O,
                      const Conv2dGeom& g) {
  using T = float;
  const int64_t C = g.C, HW = g.H * g.W, OHW = g.OH * g.OW;
  std::vector<T> pack, tmp;
  for (int64_t n = 0; n < N; ++n) {
    const T* xn = x + n * C * HW;
    T* yn = y + n * O * OHW;
    std::fill(yn, yn + O * OHW, T(0));
    for (int64_t ky = 0; ky < g.kH; ++ky)
      for (int64_t kx = 0; kx < g.kW; ++kx) {
        int64_t h0, h1, w0, w1;
        tap_range(g.OH, g.H, g.pH, g.sH, g.dH, ky, &h0, &h1);
        tap_range(g.OW, g.W, g.pW, g.sW, g.dW, kx, &w0, &w1);
        const int64_t rh = h1 - h0, rw = w1 - w0, P = rh * rw;
        if (P == 0) continue;
        const T* a = wt + (ky * g.kW + kx) * O * C;
        const int64_t iy0 = h0 * g.sH - g.pH + ky * g.dH, ix0 = w0 * g.sW - g.pW + kx * g.dW;
        if (P == OHW && g.sH == 1 && g.sW == 1 && iy0 == 0 && ix0 == 0 && g.H == g.OH &&
            g.W == g.OW) {  // the whole output from x as it is
          gemm<T>(false, false, O, P, C, a, C, xn, HW, T(1), yn, OHW);
          continue;
        }
        pack.resize(static_cast<size_t>(C * P));
        for (int64_t c = 0; c < C; ++c)
          for (int64_t r = 0; r < rh; ++r) {
            const T* src = xn + c * HW + (iy0 + r * g.sH) * g.W + ix0;
            T* dst = pack.data() + c * P + r * rw;
            if (g.sW == 1)
              std::memcpy(dst, src, sizeof(T) * static_cast<size_t>(rw));
            else
              for (int64_t q = 0; q < rw; ++q) dst[q] = src[q * g.sW];
          }
        tmp.resize(static_cast<size_t>(O * P));
        gemm<T>(false, false, O, P, C, a, C, pack.data(), P, T(0), tmp.data(), P);
        for (int64_t o = 0; o < O; ++o)
          for (int64_t r = 0; r < rh; ++r) {
            T* dst = yn + o * OHW + (h0 + r) * g.OW + w0;
            const T* src = tmp.data() + o * P + r * rw;
            for (int64_t q = 0; q < rw; ++q) dst[q] += src[q];
          }
      }
  }
}

}  // namespace kiln::cpu
