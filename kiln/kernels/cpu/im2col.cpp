// im2col / col2im loops. The valid output-column range of each kernel tap is computed once per
// row, so the inner loop is a branch-free copy (a memcpy when the stride is 1).
#include "kiln/kernels/cpu/im2col.h"

#include <algorithm>
#include <cstring>

namespace kiln::cpu {
namespace {

// Output columns ow whose input column ow*sW + off lies in [0, W): [lo, hi).
inline void valid_cols(int64_t off, int64_t W, int64_t sW, int64_t OW, int64_t* lo, int64_t* hi) {
  int64_t l = off >= 0 ? 0 : (-off + sW - 1) / sW;
  int64_t h = (W - 1 - off) < 0 ? 0 : (W - 1 - off) / sW + 1;
  l = std::min(l, OW);
  h = std::clamp(h, l, OW);
  *lo = l;
  *hi = h;
}

}  // namespace

template <typename T>
void im2col(const T* x, const Conv2dGeom& g, T* cols) {
  const int64_t P = g.OH * g.OW;
  for (int64_t c = 0; c < g.C; ++c) {
    const T* src = x + c * g.H * g.W;
    for (int64_t ki = 0; ki < g.kH; ++ki) {
      for (int64_t kj = 0; kj < g.kW; ++kj) {
        T* dst = cols + ((c * g.kH + ki) * g.kW + kj) * P;
        const int64_t ih0 = ki * g.dH - g.pH, off = kj * g.dW - g.pW;
        int64_t lo, hi;
        valid_cols(off, g.W, g.sW, g.OW, &lo, &hi);
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          T* d = dst + oh * g.OW;
          const int64_t ih = oh * g.sH + ih0;
          if (ih < 0 || ih >= g.H) {
            std::fill(d, d + g.OW, T(0));
            continue;
          }
          // Indexed from the row start (lo * sW + off >= 0), never a pointer before it.
          const T* row = src + ih * g.W;
          std::fill(d, d + lo, T(0));
          if (g.sW == 1) {
            // An inline loop, not memcpy: rows are short (10-30 elements in LeNet-sized convs),
            // and a library call per row cost more than the copy (conv2 of W5: 1.0 -> 0.3 ms).
            const T* r = row + off;
#pragma omp simd
            for (int64_t ow = lo; ow < hi; ++ow) d[ow] = r[ow];
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) d[ow] = row[ow * g.sW + off];
          }
          std::fill(d + hi, d + g.OW, T(0));
        }
      }
    }
  }
}

template <typename T>
void col2im(const T* cols, const Conv2dGeom& g, T* x) {
  const int64_t P = g.OH * g.OW;
  for (int64_t c = 0; c < g.C; ++c) {
    T* dstc = x + c * g.H * g.W;
    for (int64_t ki = 0; ki < g.kH; ++ki) {
      for (int64_t kj = 0; kj < g.kW; ++kj) {
        const T* src = cols + ((c * g.kH + ki) * g.kW + kj) * P;
        const int64_t ih0 = ki * g.dH - g.pH, off = kj * g.dW - g.pW;
        int64_t lo, hi;
        valid_cols(off, g.W, g.sW, g.OW, &lo, &hi);
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          const int64_t ih = oh * g.sH + ih0;
          if (ih < 0 || ih >= g.H) continue;
          const T* s = src + oh * g.OW;
          T* row = dstc + ih * g.W;
          if (g.sW == 1) {
            for (int64_t ow = lo; ow < hi; ++ow) row[ow + off] += s[ow];
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) row[ow * g.sW + off] += s[ow];
          }
        }
      }
    }
  }
}

template void im2col<float>(const float*, const Conv2dGeom&, float*);
template void im2col<double>(const double*, const Conv2dGeom&, double*);
template void col2im<float>(const float*, const Conv2dGeom&, float*);
template void col2im<double>(const double*, const Conv2dGeom&, double*);

}  // namespace kiln::cpu
