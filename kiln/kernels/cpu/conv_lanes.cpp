// Convolution with the batch in the vector lanes (see conv_lanes.h). oneDNN 2.6 runs LeNet's
// 6 -> 16 channel 5x5 convolution in 16-channel blocks, so 6 of 16 lanes carry data, and its
// weight gradient has no AVX-512 kernel for 6 input channels at all. Here the operands are
// transposed to [channels, rows, cols, samples] with the sample count padded to whole vectors:
// every lane is a sample, every multiply-add is useful, and the register tiles (6 channels x 4
// vectors, or 4 x 6 channel pairs for the weight gradient) need no shuffles.
#include "kiln/kernels/cpu/conv_lanes.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "kiln/kernels/cpu/parallel.h"
#include "kiln/kernels/cpu/scratch.h"
#include "kiln/kernels/cpu/transpose16.h"

namespace kiln::cpu {
namespace {

#if defined(__AVX512F__)
constexpr int64_t kVL = 16;  // lanes per vector
constexpr int kNV = 4;       // vectors per tile row: 6 x 4 = 24 accumulators of 32 registers
#else
constexpr int64_t kVL = 8;
constexpr int kNV = 2;  // 6 x 2 = 12 of 16 registers
#endif
constexpr int kAB = 6;  // channels per tile
typedef float vf __attribute__((vector_size(kVL * sizeof(float))));

inline vf load(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof v); }

int64_t padded(int64_t n) { return (n + kVL - 1) / kVL * kVL; }

// dst[j][i] = src[i][j] for i < ni, j < nj (both <= 16); rows i >= ni read as zeros. Writes nj
// rows of dst, `w` floats each. Whole tiles go straight through the register transpose; edge
// tiles through a zero-padded copy.
void transpose_tile(const float* src, int64_t lds, int64_t ni, int64_t nj, float* dst, int64_t ldd,
                    int64_t w) {
  if (ni == 16 && nj == 16 && w == 16) return transpose16(src, lds, dst, ldd);
  alignas(64) float in[16 * 16] = {}, out[16 * 16];
  for (int64_t i = 0; i < ni; ++i) std::memcpy(in + i * 16, src + i * lds, sizeof(float) * nj);
  transpose16(in, 16, out, 16);
  for (int64_t j = 0; j < nj; ++j) std::memcpy(dst + j * ldd, out + j * 16, sizeof(float) * w);
}

// dst [R][Np] = src [N][R] transposed; lanes N..Np-1 zero. 16 x 16 tiles (Np is a multiple of
// 16 under AVX-512, of 8 otherwise: the last tile is then 8 wide).
void to_lanes(const float* src, int64_t N, int64_t R, int64_t Np, float* dst) {
  const int64_t rt = (R + 15) / 16;
  parallel_for(rt, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      const int64_t r0 = b * 16, nj = std::min<int64_t>(16, R - r0);
      for (int64_t n0 = 0; n0 < Np; n0 += 16)
        transpose_tile(src + n0 * R + r0, R, std::max<int64_t>(0, std::min<int64_t>(16, N - n0)),
                       nj, dst + r0 * Np + n0, Np, std::min<int64_t>(16, Np - n0));
    }
  });
}

// dst [N][R] = src [R][Np] transposed back (lanes past N dropped).
void from_lanes(const float* src, int64_t N, int64_t R, int64_t Np, float* dst) {
  const int64_t rt = (R + 15) / 16;
  parallel_for(rt, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      const int64_t r0 = b * 16, ni = std::min<int64_t>(16, R - r0);
      for (int64_t n0 = 0; n0 < N; n0 += 16)
        transpose_tile(src + r0 * Np + n0, Np, ni, std::min<int64_t>(16, N - n0), dst + n0 * R + r0,
                       R, ni);
    }
  });
}

// out[a][p][q][:] = sum_b sum_i sum_j wt[b][i][j][a] * in[b][p + s i + off_h][q + s j + off_w][:],
// terms outside `in` being zero. The forward is s = +1, off = -pad (in = x, a = output
// channel); the input gradient is s = -1, off = +pad (in = g, a = input channel): the same
// correlation with the kernel flipped.
struct Corr {
  int64_t A, B, IH, IW, OH, OW, kH, kW, s, off_h, off_w, Np;
};

// Taps i with 0 <= p + s i + off < I.
inline std::pair<int64_t, int64_t> tap_range(int64_t p, int64_t s, int64_t off, int64_t I,
                                             int64_t k) {
  if (s > 0) return {std::max<int64_t>(0, -off - p), std::min<int64_t>(k, I - off - p)};
  return {std::max<int64_t>(0, p + off - I + 1), std::min<int64_t>(k, p + off + 1)};
}

// Dispatch table t[r][c] = &Tile<r + 1, c + 1>::run over a kernel's register-tile sizes, so
// that every tile size keeps its accumulators in registers.
template <typename Fn, template <int, int> class Tile, int R, int... C>
constexpr std::array<Fn, sizeof...(C)> tile_row(std::integer_sequence<int, C...>) {
  return {&Tile<R, C + 1>::run...};
}
template <typename Fn, template <int, int> class Tile, int NC, int... R>
constexpr std::array<std::array<Fn, NC>, sizeof...(R)> tile_table(
    std::integer_sequence<int, R...>) {
  return {tile_row<Fn, Tile, R + 1>(std::make_integer_sequence<int, NC>{})...};
}

template <int AB, int NV>
[[gnu::noinline]] void corr_tile(const Corr& c, const float* __restrict in,
                                 const float* __restrict wt, float* __restrict out, int64_t a0,
                                 int64_t p, int64_t n0) {
  const auto [i0, i1] = tap_range(p, c.s, c.off_h, c.IH, c.kH);
  const int64_t bstride = c.IH * c.IW * c.Np;
  for (int64_t q = 0; q < c.OW; ++q) {
    const auto [j0, j1] = tap_range(q, c.s, c.off_w, c.IW, c.kW);
    vf acc[AB][NV] = {};
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t i = i0; i < i1; ++i) {
        const float* row = in + b * bstride + (p + c.s * i + c.off_h) * c.IW * c.Np + n0;
        const float* wrow = wt + ((b * c.kH + i) * c.kW) * c.A + a0;
        for (int64_t j = j0; j < j1; ++j) {
          const float* src = row + (q + c.s * j + c.off_w) * c.Np;
          vf x[NV];
          for (int v = 0; v < NV; ++v) x[v] = load(src + v * kVL);
          const float* wv = wrow + j * c.A;
          for (int a = 0; a < AB; ++a) {
            const float w = wv[a];
            for (int v = 0; v < NV; ++v) acc[a][v] += x[v] * w;
          }
        }
      }
    for (int a = 0; a < AB; ++a) {
      float* dst = out + (((a0 + a) * c.OH + p) * c.OW + q) * c.Np + n0;
      for (int v = 0; v < NV; ++v) store(dst + v * kVL, acc[a][v]);
    }
  }
}

template <int AB, int NV>
struct CorrTile {
  static void run(const Corr& c, const float* in, const float* wt, float* out, int64_t a0,
                  int64_t p, int64_t n0) {
    corr_tile<AB, NV>(c, in, wt, out, a0, p, n0);
  }
};
using CorrFn = void (*)(const Corr&, const float*, const float*, float*, int64_t, int64_t, int64_t);
constexpr auto kCorr = tile_table<CorrFn, CorrTile, kNV>(std::make_integer_sequence<int, kAB>{});

void correlate(const Corr& c, const float* in, const float* wt, float* out) {
  const int64_t ablocks = (c.A + kAB - 1) / kAB, nvec = c.Np / kVL;
  parallel_for(ablocks * c.OH, 2, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t a0 = t / c.OH * kAB, p = t % c.OH;
      const int ab = static_cast<int>(std::min<int64_t>(kAB, c.A - a0));
      for (int64_t v0 = 0; v0 < nvec; v0 += kNV) {
        const int nv = static_cast<int>(std::min<int64_t>(kNV, nvec - v0));
        kCorr[static_cast<size_t>(ab - 1)][static_cast<size_t>(nv - 1)](c, in, wt, out, a0, p,
                                                                        v0 * kVL);
      }
    }
  });
}

// dw[o][c][i][j] = sum_{p, q, lanes} g[o][p][q][:] * x[c][p + i - pH][q + j - pW][:]: a tile of
// OB x CB (output, input) channel pairs for one tap, summed over positions and lanes.
struct WGrad {
  int64_t C, H, W, O, OH, OW, kH, kW, pH, pW, Np;
};

template <int OB, int CB>
[[gnu::noinline]] void wgrad_tile(const WGrad& s, const float* __restrict x,
                                  const float* __restrict g, float* __restrict dw, int64_t o0,
                                  int64_t c0, int64_t i, int64_t j) {
  const auto [p0, p1] = tap_range(i, 1, -s.pH, s.H, s.OH);  // rows p with 0 <= p+i-pH < H
  const auto [q0, q1] = tap_range(j, 1, -s.pW, s.W, s.OW);
  const int64_t gs = s.OH * s.OW * s.Np, xs = s.H * s.W * s.Np;
  vf acc[OB][CB] = {};
  for (int64_t p = p0; p < p1; ++p)
    for (int64_t q = q0; q < q1; ++q) {
      const float* gp = g + (o0 * s.OH * s.OW + p * s.OW + q) * s.Np;
      const float* xp = x + (c0 * s.H * s.W + (p + i - s.pH) * s.W + q + j - s.pW) * s.Np;
      for (int64_t n = 0; n < s.Np; n += kVL) {
        vf gv[OB], xv[CB];
        for (int o = 0; o < OB; ++o) gv[o] = load(gp + o * gs + n);
        for (int c = 0; c < CB; ++c) xv[c] = load(xp + c * xs + n);
        for (int o = 0; o < OB; ++o)
          for (int c = 0; c < CB; ++c) acc[o][c] += gv[o] * xv[c];
      }
    }
  for (int o = 0; o < OB; ++o)
    for (int c = 0; c < CB; ++c) {
      float t = 0.f;
      for (int u = 0; u < kVL; ++u) t += acc[o][c][u];
      dw[(((o0 + o) * s.C + c0 + c) * s.kH + i) * s.kW + j] = t;
    }
}

#if defined(__AVX512F__)
constexpr int kWO = 4;  // output channels per weight-gradient tile: 4 x 6 = 24 accumulators
#else
constexpr int kWO = 2;
#endif
template <int OB, int CB>
struct WGradTile {
  static void run(const WGrad& s, const float* x, const float* g, float* dw, int64_t o0, int64_t c0,
                  int64_t i, int64_t j) {
    wgrad_tile<OB, CB>(s, x, g, dw, o0, c0, i, j);
  }
};
using WGradFn = void (*)(const WGrad&, const float*, const float*, float*, int64_t, int64_t,
                         int64_t, int64_t);
constexpr auto kWGrad = tile_table<WGradFn, WGradTile, kAB>(std::make_integer_sequence<int, kWO>{});

}  // namespace

bool conv_lanes_suits(const LaneConv& s, bool weight_grad) {
  // Lanes at most 1/5 empty (padded N <= 1.25 N); few channels (oneDNN's blocks are 16 wide); a
  // reduction too large for conv_direct's tiny-layer loops. Against oneDNN 2.6 at 1 thread (input
  // gradient / weight gradient, us): LeNet's 6x14x14 -> 16 5x5 263/336 vs 621/514; 12x16x16 -> 32
  // 3x3 645/663 vs 612/900; 3x32x32 -> 16 5x5 1969/3057 vs 7426/1626; 8x32x32 -> 16 3x3 2305/4088
  // vs 3216/2371; 4x64x64 -> 8 3x3 777/1015 vs 3039/1257. The input gradient wins or ties
  // throughout. The weight gradient wins on the small planes and on 4x64x64 but loses 1.7-1.9x
  // on both 32x32 planes (its tiles stream from L2); without a model of when, it takes planes of
  // at most 256 pixels only, giving up the 64x64 win.
  const bool base = s.N >= kVL && padded(s.N) * 4 <= s.N * 5 && std::min(s.C, s.O) < 16 &&
                    s.C * s.kH * s.kW > 32 && s.OH > 0 && s.OW > 0;
  return base && (!weight_grad || s.H * s.W <= 256);
}

void conv_lanes_fwd(const LaneConv& s, const float* x, const float* w, float* y) {
  const int64_t Np = padded(s.N), T = s.kH * s.kW;
  Scratch xl(s.C * s.H * s.W * Np), yl(s.O * s.OH * s.OW * Np), wt(s.C * T * s.O);
  to_lanes(x, s.N, s.C * s.H * s.W, Np, xl.p);
  for (int64_t o = 0; o < s.O; ++o)  // wt[c][i][j][o]
    for (int64_t c = 0; c < s.C; ++c)
      for (int64_t t = 0; t < T; ++t) wt.p[(c * T + t) * s.O + o] = w[(o * s.C + c) * T + t];
  correlate(Corr{s.O, s.C, s.H, s.W, s.OH, s.OW, s.kH, s.kW, 1, -s.pH, -s.pW, Np}, xl.p, wt.p,
            yl.p);
  from_lanes(yl.p, s.N, s.O * s.OH * s.OW, Np, y);
}

void conv_lanes_bwd_data(const LaneConv& s, const float* g, const float* w, float* dx) {
  const int64_t Np = padded(s.N), T = s.kH * s.kW;
  Scratch gl(s.O * s.OH * s.OW * Np), dxl(s.C * s.H * s.W * Np), wt(s.O * T * s.C);
  to_lanes(g, s.N, s.O * s.OH * s.OW, Np, gl.p);
  for (int64_t o = 0; o < s.O; ++o)  // wt[o][i][j][c]
    for (int64_t c = 0; c < s.C; ++c)
      for (int64_t t = 0; t < T; ++t) wt.p[(o * T + t) * s.C + c] = w[(o * s.C + c) * T + t];
  correlate(Corr{s.C, s.O, s.OH, s.OW, s.H, s.W, s.kH, s.kW, -1, s.pH, s.pW, Np}, gl.p, wt.p,
            dxl.p);
  from_lanes(dxl.p, s.N, s.C * s.H * s.W, Np, dx);
}

void conv_lanes_bwd_weight(const LaneConv& s, const float* x, const float* g, float* dw) {
  const int64_t Np = padded(s.N);
  Scratch xl(s.C * s.H * s.W * Np), gl(s.O * s.OH * s.OW * Np);
  to_lanes(x, s.N, s.C * s.H * s.W, Np, xl.p);
  to_lanes(g, s.N, s.O * s.OH * s.OW, Np, gl.p);
  const WGrad wg{s.C, s.H, s.W, s.O, s.OH, s.OW, s.kH, s.kW, s.pH, s.pW, Np};
  const int64_t ob = (s.O + kWO - 1) / kWO, cb = (s.C + kAB - 1) / kAB, taps = s.kH * s.kW;
  parallel_for(ob * cb * taps, 2, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t tap = t % taps, rest = t / taps;
      const int64_t o0 = rest / cb * kWO, c0 = rest % cb * kAB;
      const int on = static_cast<int>(std::min<int64_t>(kWO, s.O - o0));
      const int cn = static_cast<int>(std::min<int64_t>(kAB, s.C - c0));
      kWGrad[static_cast<size_t>(on - 1)][static_cast<size_t>(cn - 1)](wg, xl.p, gl.p, dw, o0, c0,
                                                                       tap / s.kW, tap % s.kW);
    }
  });
}

}  // namespace kiln::cpu
