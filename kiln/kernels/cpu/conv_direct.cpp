// Direct float32 convolution for tiny reductions: the forward and weight-gradient loops behind
// conv2d when C kH kW <= 32 at stride 1 (see conv_direct.h).
#include "kiln/kernels/cpu/conv_direct.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kiln/kernels/cpu/parallel.h"
#include "kiln/kernels/cpu/static_count.h"

namespace kiln::cpu {
namespace {

// A first layer on one (or three) image channels reduces over C kH kW <= 32 values per output.
// oneDNN's primitives spend most of their time there in layout reorders and im2col's column
// matrix is 25x the input, so this computes it directly: vectors of output columns, all
// output channels of a block in registers, one load of each shifted input row per tap. The
// weight gradient runs the same loops with the roles swapped. float32, stride 1, no dilation,
// no groups. W5's conv1 at 1 thread: forward 478 -> 255 us with 8-float vectors, 204 us with
// 16-float ones; weight gradient 450 -> ~330 us (bound by its gradient-row loads, so the wider
// vectors did not change it).

// Vectors of VW floats: 16 (one AVX-512 register) where the rows are wide enough, else 8.
template <int64_t VW>
struct Vec {
  typedef float type __attribute__((vector_size(VW * sizeof(float))));
};
#if defined(__AVX512F__)
constexpr int64_t kWideVW = 16;
#else
constexpr int64_t kWideVW = 8;
#endif
constexpr int64_t kOB = 8;  // output channels per register block

template <int64_t VW>
inline typename Vec<VW>::type loadv(const float* p) {
  typename Vec<VW>::type v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <int64_t VW>
inline void storev(float* p, typename Vec<VW>::type v) {
  std::memcpy(p, &v, sizeof v);
}

// Calls f(std::integral_constant<int64_t, VW>) with the widest vector the output rows fill.
template <typename F>
void with_width(int64_t OW, F&& f) {
  if (OW >= kWideVW) return f(std::integral_constant<int64_t, kWideVW>{});
  return f(std::integral_constant<int64_t, 8>{});
}

// Zero-padded planes of one sample: [C][PH][PWp], the input at row pH, column pW; PWp leaves
// room for whole vectors past the last output column.
void pad_sample(const float* x, int64_t C, int64_t H, int64_t W, int64_t pH, int64_t pW, int64_t PH,
                int64_t PWp, float* pad) {
  std::fill(pad, pad + C * PH * PWp, 0.f);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t h = 0; h < H; ++h)
      std::memcpy(pad + (c * PH + h + pH) * PWp + pW, x + (c * H + h) * W,
                  static_cast<size_t>(W) * sizeof(float));
}

template <int64_t VW, int64_t OB>
[[gnu::noinline]] void direct_fwd_block(const float* __restrict pad, const float* __restrict w,
                                        float* __restrict y, int64_t C, int64_t PH, int64_t PWp,
                                        int64_t kH, int64_t kW, int64_t OH, int64_t OW,
                                        int64_t o0) {
  const int64_t T = C * kH * kW;
  for (int64_t oh = 0; oh < OH; ++oh)
    for (int64_t j0 = 0; j0 < OW; j0 += VW) {
      const int64_t j = j0 + VW <= OW ? j0 : OW - VW;  // the last vector overlaps the one before
      typename Vec<VW>::type acc[OB] = {};
      int64_t t = 0;
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < kH; ++i) {
          const float* row = pad + (c * PH + oh + i) * PWp + j;
          for (int64_t k = 0; k < kW; ++k, ++t) {
            const typename Vec<VW>::type xv = loadv<VW>(row + k);
            for (int64_t o = 0; o < OB; ++o) acc[o] += xv * w[(o0 + o) * T + t];
          }
        }
      for (int64_t o = 0; o < OB; ++o) storev<VW>(y + ((o0 + o) * OH + oh) * OW + j, acc[o]);
    }
}

}  // namespace

void conv_direct_fwd(const float* x, const float* w, float* y, int64_t N, int64_t C, int64_t H,
                     int64_t W, int64_t O, int64_t kH, int64_t kW, int64_t OH, int64_t OW,
                     int64_t pH, int64_t pW) {
  with_width(OW, [&](auto vw) {
    constexpr int64_t VW = decltype(vw)::value;
    const int64_t PH = H + 2 * pH, PWp = W + 2 * pW + VW;
    parallel_for(N, 1, [&](int64_t lo, int64_t hi) {
      std::vector<float> pad(static_cast<size_t>(C * PH * PWp));
      for (int64_t n = lo; n < hi; ++n) {
        pad_sample(x + n * C * H * W, C, H, W, pH, pW, PH, PWp, pad.data());
        float* yn = y + n * O * OH * OW;
        for (int64_t o0 = 0; o0 < O; o0 += kOB)
          with_count<kOB>(std::min(kOB, O - o0), [&](auto ob) {
            direct_fwd_block<VW, decltype(ob)::value>(pad.data(), w, yn, C, PH, PWp, kH, kW, OH, OW,
                                                      o0);
          });
      }
    });
  });
}

// dw[o][t] += sum over rows and columns of g[o] * (the tap's shifted input). g comes in rows of
// OWp columns with zeros past OW, so every vector is whole and the padding adds nothing.
template <int64_t VW, int64_t OB>
[[gnu::noinline]] void direct_bwdw_block(const float* __restrict pad, const float* __restrict gp,
                                         float* __restrict dw, int64_t C, int64_t PH, int64_t PWp,
                                         int64_t kH, int64_t kW, int64_t OH, int64_t OWp,
                                         int64_t o0) {
  const int64_t T = C * kH * kW;
  int64_t t = 0;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < kH; ++i)
      for (int64_t k = 0; k < kW; ++k, ++t) {
        typename Vec<VW>::type acc[OB] = {};
        for (int64_t oh = 0; oh < OH; ++oh) {
          const float* row = pad + (c * PH + oh + i) * PWp + k;
          const float* grow = gp + (o0 * OH + oh) * OWp;
          for (int64_t j = 0; j < OWp; j += VW) {
            const typename Vec<VW>::type xv = loadv<VW>(row + j);
            for (int64_t o = 0; o < OB; ++o) acc[o] += xv * loadv<VW>(grow + o * OH * OWp + j);
          }
        }
        for (int64_t o = 0; o < OB; ++o) {
          float s = 0.f;
          for (int u = 0; u < VW; ++u) s += acc[o][u];
          dw[(o0 + o) * T + t] += s;
        }
      }
}

void conv_direct_bwdw(const float* x, const float* g, float* dw, int64_t N, int64_t C, int64_t H,
                      int64_t W, int64_t O, int64_t kH, int64_t kW, int64_t OH, int64_t OW,
                      int64_t pH, int64_t pW) {
  const int64_t K = O * C * kH * kW;
  // Called inside a parallel region, parallel_for runs inline and the caller's thread number
  // says nothing about this buffer: one slot then, picked by `outer`, not by omp_in_parallel().
  const bool outer = omp_in_parallel();
  const int nt = outer ? 1 : std::max(1, omp_get_max_threads());
  std::vector<float> part(static_cast<size_t>(nt * K), 0.f);
  with_width(OW, [&](auto vw) {
    constexpr int64_t VW = decltype(vw)::value;
    const int64_t OWp = (OW + VW - 1) / VW * VW;
    const int64_t PH = H + 2 * pH, PWp = std::max(W + 2 * pW, OWp + kW - 1) + VW;
    parallel_for(N, 1, [&](int64_t lo, int64_t hi) {
      const int tid = outer ? 0 : omp_get_thread_num();
      float* acc = part.data() + tid * K;
      std::vector<float> pad(static_cast<size_t>(C * PH * PWp));
      std::vector<float> gpad(static_cast<size_t>(O * OH * OWp), 0.f);
      for (int64_t n = lo; n < hi; ++n) {
        pad_sample(x + n * C * H * W, C, H, W, pH, pW, PH, PWp, pad.data());
        const float* gn = g + n * O * OH * OW;
        for (int64_t r = 0; r < O * OH; ++r)
          std::memcpy(gpad.data() + r * OWp, gn + r * OW, static_cast<size_t>(OW) * sizeof(float));
        for (int64_t o0 = 0; o0 < O; o0 += kOB)
          with_count<kOB>(std::min(kOB, O - o0), [&](auto ob) {
            direct_bwdw_block<VW, decltype(ob)::value>(pad.data(), gpad.data(), acc, C, PH, PWp, kH,
                                                       kW, OH, OWp, o0);
          });
      }
    });
  });
  for (int64_t q = 0; q < K; ++q) {
    float s = 0.f;
    for (int t = 0; t < nt; ++t) s += part[static_cast<size_t>(t * K + q)];
    dw[q] = s;
  }
}

}  // namespace kiln::cpu
