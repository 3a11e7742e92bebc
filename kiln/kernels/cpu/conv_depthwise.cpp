// Depthwise convolution straight from NCHW planes (see conv_depthwise.h).
#include "kiln/kernels/cpu/conv_depthwise.h"

// GCC 12's _mm512_max_ps / _mm512_min_ps / _mm512_alignr_epi32 pass an uninitialized vector as
// their unused masked source, which -W(maybe-)uninitialized reports once inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "kiln/kernels/cpu/conv_dnnl.h"
#include "kiln/kernels/cpu/parallel.h"
#include "kiln/kernels/cpu/silu_avx512.h"

namespace kiln::cpu {

#if defined(__AVX512F__)
namespace {

constexpr int64_t VW = 16;  // outputs a vector
using V = __m512;

// Lanes i with 0 <= c + i < W.
inline __mmask16 inside(int64_t c, int64_t W) {
  const int64_t lo = std::clamp<int64_t>(-c, 0, VW), hi = std::clamp<int64_t>(W - c, 0, VW);
  if (hi <= lo) return 0;
  return static_cast<__mmask16>(((1u << hi) - 1) & ~((1u << lo) - 1));
}

// 16 floats from p; at an edge only the lanes in m (a masked lane never touches memory, so the
// address may start before a row or run past it).
template <bool EDGE>
inline V load(__mmask16 m, const float* p) {
  if constexpr (EDGE) return _mm512_maskz_loadu_ps(m, p);
  return _mm512_loadu_ps(p);
}

// y = act(v + bias (+ y)) on the lanes in m, the activation known when compiled.
template <int ACT>
inline void finish(V v, V bias, bool acc, float* y, __mmask16 m) {
  v = _mm512_add_ps(v, bias);
  if (acc) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, y));
  const V zero = _mm512_setzero_ps();
  if constexpr (ACT == kConvActRelu) v = _mm512_max_ps(zero, v);  // NaN stays NaN (the 2nd operand)
  if constexpr (ACT == kConvActHardswish) {
    const V t = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(v, _mm512_set1_ps(3.f)), zero),
                              _mm512_set1_ps(6.f));
    v = _mm512_div_ps(_mm512_mul_ps(v, t), _mm512_set1_ps(6.f));
  }
  if constexpr (ACT == kConvActSwish) v = silu16(v);
  _mm512_mask_storeu_ps(y, m, v);
}

// Sums a block stored row by row, NV vectors a row, through an epilogue with a slow activation.
template <int ACT>
__attribute__((noinline)) void finish_stored(int R, int NV, const float* sums, V bias, bool add,
                                             float* y, int64_t OW, const __mmask16* out) {
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v)
      finish<ACT>(_mm512_load_ps(sums + (r * NV + v) * VW), bias, add, y + r * OW + v * VW, out[v]);
}

// A block's R x NV sums through the epilogue into y's rows (OW apart) and vectors. None and relu
// run inline; swish and hardswish (an exponential, a division) out of line on a copy of the sums:
// inline, they took registers the block's loop needs, and tested a vector at a time, the
// epilogue took 18% of a stride-2 block whatever the activation.
template <int R, int NV>
inline void finish_block(const V (&acc)[R][NV], V bias, int act, bool add, float* y, int64_t OW,
                         const __mmask16* out) {
  if (act == kConvActNone || act == kConvActRelu) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        if (act == kConvActRelu)
          finish<kConvActRelu>(acc[r][v], bias, add, y + r * OW + v * VW, out[v]);
        else
          finish<kConvActNone>(acc[r][v], bias, add, y + r * OW + v * VW, out[v]);
      }
    return;
  }
  alignas(64) float sums[R * NV * VW];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_store_ps(sums + (r * NV + v) * VW, acc[r][v]);
  if (act == kConvActSwish) finish_stored<kConvActSwish>(R, NV, sums, bias, add, y, OW, out);
  if (act == kConvActHardswish)
    finish_stored<kConvActHardswish>(R, NV, sums, bias, add, y, OW, out);
}

// Up to 4 output vectors of a row and what their loads need, the same for every row and plane:
// made once a call.
struct ColBlock {
  int64_t ox0;
  int nv;
  bool edge;           ///< some load meets the input's edge (masked loads)
  __mmask16 mk[4][3];  ///< each load's lanes inside the input (stride 1: per tap column)
  __mmask16 out[4];    ///< each vector's lanes inside the output row
};

struct Plane {
  const DepthwiseConv& s;
  const float* x;  ///< the channel's input plane
  const float* w;  ///< its kH kW weights
  V bias;
  int act;
  bool acc;
  float* y;  ///< its output plane
};

// Stride 1, dilation D: output rows [oy, oy + R), vectors [ox0, ox0 + 16 NV), sums in registers,
// then the epilogue. Each input row the block reads is loaded once and added into every output row
// it feeds (up to 3): one load a multiply-add ran at a third of the FMA units' rate here (2.9 ns
// for 8 against 1.0 from registers). The loops over input and output rows unroll, so which tap row
// an input row gives each output row is known when compiled (tested at run time, those branches
// mispredicted more than the sums cost). One unaligned load a tap column (D apart); at an edge the
// loads are masked to the input's columns (a masked lane never touches memory, so an address may
// start before a row or run past it).
template <int R, int NV, int D, bool EDGE>
void block(const Plane& p, const ColBlock& cb, int64_t oy) {
  const DepthwiseConv& s = p.s;
  const int64_t W = s.W, H = s.H;
  const float* x0 = p.x + cb.ox0 - s.pW;  // the block's first column
  __mmask16 mk[NV][3];                    // (copied: read from cb, they were reloaded)
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v)
#pragma GCC unroll 3
    for (int j = 0; j < 3; ++j) mk[v][j] = EDGE ? cb.mk[v][j] : __mmask16(0xFFFF);
  V acc[R][NV], wr[9];  // the weights broadcast once a block (in registers where they fit)
#pragma GCC unroll 9
  for (int k = 0; k < 9; ++k) wr[k] = _mm512_set1_ps(p.w[k]);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  constexpr int kRowsIn = R - 1 + 2 * D + 1;
#pragma GCC unroll 16
  for (int i = 0; i < kRowsIn; ++i) {
    const int64_t ir = oy - s.pH + i;
    if (ir < 0 || ir >= H) continue;  // padding: adds nothing
    const float* xr = x0 + ir * W;
#pragma GCC unroll 3
    for (int kx = 0; kx < 3; ++kx) {
      V xv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) xv[v] = load<EDGE>(mk[v][kx], xr + v * VW + kx * D);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const int t = i - r, ky = t / D;
        if (t < 0 || t % D != 0 || ky > 2) continue;
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(wr[ky * 3 + kx], xv[v], acc[r][v]);
      }
    }
  }
  // (Every loop over the sums unrolled: an indexed one keeps them on the stack, a store after
  // each multiply-add.)
  finish_block<R, NV>(acc, p.bias, p.act, p.acc, p.y + oy * s.OW + cb.ox0, s.OW, cb.out);
}

// Lane 15 of prev, then lanes 0-14 of cur: cur moved on by one column (stride 2: two inputs).
inline V after(V cur, V prev) {
  return _mm512_castsi512_ps(
      _mm512_alignr_epi32(_mm512_castps_si512(cur), _mm512_castps_si512(prev), 15));
}

// Stride 2, left padding P (0 to 2): output rows [oy, oy + R), vectors [ox0, ox0 + 16 NV). Vector
// v's 32 input columns start at column 2 (ox0 + 16 v) itself, not shifted by the padding: two
// loads, aligned where the row is (an unaligned 64-byte load takes a cycle here, an aligned one
// half), split into even and odd lanes by two permutes. Tap kx reads column 2 ox + kx - P: the
// even or the odd lanes, moved on by one lane where the tap reaches left of the pair (its first
// lane from the vector before, or zero at the row's left edge: LEFT) or right of it (P 0's third
// tap: the next pair's first column). ROWS: every input row the block reads lies inside the
// input, so the loop tests none. The input rows 16 ahead are prefetched: the planes stream from
// L3 or memory, and the hardware's prefetch left the 56x56x256 map's loads waiting (63 -> 49 us).
template <int R, int NV, int P, bool LEFT, bool ROWS>
void block_s2(const Plane& p, const ColBlock& cb, int64_t oy) {
  const DepthwiseConv& s = p.s;
  const int64_t W = s.W, H = s.H, r0 = oy * 2 - s.pH;
  const float* xb = p.x + r0 * W + cb.ox0 * 2;  // the block's first row and column
  __mmask16 mk[NV][2];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v)
#pragma GCC unroll 2
    for (int j = 0; j < 2; ++j) mk[v][j] = cb.mk[v][j];
  const __mmask16 mnext = cb.mk[NV - 1][2];
  V acc[R][NV], wr[9];
#pragma GCC unroll 9
  for (int k = 0; k < 9; ++k) wr[k] = _mm512_set1_ps(p.w[k]);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
#pragma GCC unroll 16
  for (int i = 0; i < 2 * R + 1; ++i) {
    if (!ROWS && (r0 + i < 0 || r0 + i >= H)) continue;  // padding: adds nothing
    const float* xr = xb + i * W;
    if (i < 2 * R)
#pragma GCC unroll 8
      for (int q = 0; q < 2 * NV; ++q)
        _mm_prefetch(reinterpret_cast<const char*>(xr + 16 * W + 16 * q), _MM_HINT_T0);
    V e[NV], o[NV], t[NV][3];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const V a = _mm512_maskz_loadu_ps(mk[v][0], xr + 32 * v);
      const V b = _mm512_maskz_loadu_ps(mk[v][1], xr + 32 * v + 16);
      e[v] = _mm512_permutex2var_ps(a, even, b);
      o[v] = _mm512_permutex2var_ps(a, odd, b);
    }
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      if constexpr (P == 0) {  // column 32 v + 32: lane 0 of the next pair, or one more load
        const V next = v + 1 < NV ? e[v + 1] : _mm512_maskz_loadu_ps(mnext, xr + 32 * NV);
        t[v][0] = e[v];
        t[v][1] = o[v];
        t[v][2] = _mm512_castsi512_ps(
            _mm512_alignr_epi32(_mm512_castps_si512(next), _mm512_castps_si512(e[v]), 1));
      } else {  // columns 32 v - 1 (and - 2): lane 15 of the pair before
        V pe, po;
        if (v > 0) {
          pe = e[v - 1], po = o[v - 1];
        } else if (LEFT) {
          pe = po = _mm512_setzero_ps();
        } else {
          po = _mm512_loadu_ps(xr - 16), pe = P == 2 ? _mm512_loadu_ps(xr - 17) : po;
        }
        t[v][0] = P == 1 ? after(o[v], po) : after(e[v], pe);
        t[v][1] = P == 1 ? e[v] : after(o[v], po);
        t[v][2] = P == 1 ? o[v] : e[v];
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const int ky = i - 2 * r;
      if (ky < 0 || ky > 2) continue;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v)
#pragma GCC unroll 3
        for (int kx = 0; kx < 3; ++kx)
          acc[r][v] = _mm512_fmadd_ps(wr[ky * 3 + kx], t[v][kx], acc[r][v]);
    }
  }
  finish_block<R, NV>(acc, p.bias, p.act, p.acc, p.y + oy * s.OW + cb.ox0, s.OW, cb.out);
}

// Whether vector ox0's loads all lie inside the input's columns (stride 1).
bool interior(const DepthwiseConv& s, int64_t ox0) {
  const int64_t first = ox0 - s.pW;
  return first >= 0 && first + VW + 2 * s.dW <= s.W;
}

// The row's vectors in blocks of up to 4 at stride 1, 2 at stride 2 (what the registers hold).
std::vector<ColBlock> col_blocks(const DepthwiseConv& s) {
  const int64_t max_nv = s.sW == 1 ? 4 : 2, nv_all = (s.OW + VW - 1) / VW;
  std::vector<ColBlock> v;
  for (int64_t v0 = 0; v0 < nv_all; v0 += max_nv) {
    ColBlock b{};
    b.ox0 = v0 * VW;
    b.nv = static_cast<int>(std::min(max_nv, nv_all - v0));
    for (int i = 0; i < b.nv; ++i) {
      const int64_t ox = b.ox0 + i * VW;
      b.edge = b.edge || !interior(s, ox);
      for (int j = 0; j < 3; ++j)  // stride 2: the pair's two loads and the next pair's first
        b.mk[i][j] = inside(s.sW == 1 ? ox - s.pW + j * s.dW : 2 * ox + j * VW, s.W);
      b.out[i] = inside(ox, s.OW);
    }
    v.push_back(b);
  }
  return v;
}

template <int R, int D, bool EDGE>
void run_block(const Plane& p, const ColBlock& cb, int64_t oy) {
  if (cb.nv == 4) block<R, 4, D, EDGE>(p, cb, oy);
  if (cb.nv == 3) block<R, 3, D, EDGE>(p, cb, oy);
  if (cb.nv == 2) block<R, 2, D, EDGE>(p, cb, oy);
  if (cb.nv == 1) block<R, 1, D, EDGE>(p, cb, oy);
}

template <int R, int NV, int P>
void run_block_s2(const Plane& p, const ColBlock& cb, int64_t oy) {
  const int64_t r0 = oy * 2 - p.s.pH;
  const bool left = cb.ox0 == 0, rows_in = r0 >= 0 && r0 + 2 * R + 1 <= p.s.H;
  if (left && rows_in) block_s2<R, NV, P, true, true>(p, cb, oy);
  if (left && !rows_in) block_s2<R, NV, P, true, false>(p, cb, oy);
  if (!left) block_s2<R, NV, P, false, false>(p, cb, oy);  // wide rows: the tests cost little
}

template <int R, int SW, int D>
void rows(const Plane& p, const std::vector<ColBlock>& cbs, int64_t oy) {
  for (const ColBlock& cb : cbs) {
    if constexpr (SW == 2) {
      if (p.s.pW == 0)
        cb.nv == 2 ? run_block_s2<R, 2, 0>(p, cb, oy) : run_block_s2<R, 1, 0>(p, cb, oy);
      if (p.s.pW == 1)
        cb.nv == 2 ? run_block_s2<R, 2, 1>(p, cb, oy) : run_block_s2<R, 1, 1>(p, cb, oy);
      if (p.s.pW == 2)
        cb.nv == 2 ? run_block_s2<R, 2, 2>(p, cb, oy) : run_block_s2<R, 1, 2>(p, cb, oy);
    } else if (cb.edge) {
      run_block<R, D, true>(p, cb, oy);
    } else {
      run_block<R, D, false>(p, cb, oy);
    }
  }
}

template <int SW, int D>
void plane(const Plane& p, const std::vector<ColBlock>& cbs) {
  int64_t oy = 0;
  for (; oy + 4 <= p.s.OH; oy += 4) rows<4, SW, D>(p, cbs, oy);  // an input row feeds up to 3
  for (; oy < p.s.OH; ++oy) rows<1, SW, D>(p, cbs, oy);
}

}  // namespace

bool conv_depthwise_suits(const DepthwiseConv& s) {
  if (s.N <= 0 || s.C <= 0 || s.H <= 0 || s.W <= 0 || s.OH <= 0 || s.OW <= 0 || s.pH < 0 ||
      s.pW < 0)
    return false;
  if (s.kH != 3 || s.kW != 3 || s.sH != s.sW || s.dH != s.dW) return false;
  return (s.sW == 1 && (s.dW == 1 || s.dW == 2)) || (s.sW == 2 && s.dW == 1 && s.pW <= 2);
}

void conv_depthwise_fwd(const DepthwiseConv& s, const float* x, const float* w, const float* bias,
                        int act, bool accumulate, float* y) {
  const int64_t K = s.kH * s.kW, planes = s.N * s.C;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, s.OH * s.OW));
  const std::vector<ColBlock> cbs = col_blocks(s);
  parallel_for(planes, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t c = i % s.C;
      const Plane p{
          s,   x + i * s.H * s.W, w + c * K,          _mm512_set1_ps(bias ? bias[c] : 0.f),
          act, accumulate,        y + i * s.OH * s.OW};
      if (s.sW == 1 && s.dW == 1)
        plane<1, 1>(p, cbs);
      else if (s.sW == 1)
        plane<1, 2>(p, cbs);
      else
        plane<2, 1>(p, cbs);
    }
  });
}

#else  // no AVX-512: oneDNN's kernels run every depthwise convolution

bool conv_depthwise_suits(const DepthwiseConv&) { return false; }
void conv_depthwise_fwd(const DepthwiseConv&, const float*, const float*, const float*, int, bool,
                        float*) {}

#endif

}  // namespace kiln::cpu
