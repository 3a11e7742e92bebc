// 16 x 16 float transpose in registers, shared by the kernels that change layouts on the fly
// (attention's K^T / V^T per head, conv_lanes' samples-in-lanes operands, the per-tap weights of
// conv_tap_gemm).
#pragma once
#include <cstdint>
#include <cstring>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace kiln::cpu {

typedef float Vec16 __attribute__((vector_size(64)));

/// r[c][i] = r[i][c] for i, c < 16. For each bit s of the index, rows i and i + s (bit s clear
/// in i) swap their blocks at columns with bit s set, (r, c) -> (c, r) bit by bit: 64 two-input
/// shuffles against 256 scalar loads and stores. GCC vector extensions, so it compiles to AVX-512
/// permutes where available and to narrower shuffles elsewhere.
[[gnu::always_inline]] inline void transpose16_regs(Vec16 (&r)[16]) {
  typedef Vec16 V;
  for (int i = 0; i < 16; i += 2) {
    const V a = r[i], b = r[i + 1];
    r[i] = __builtin_shufflevector(a, b, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
    r[i + 1] =
        __builtin_shufflevector(a, b, 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
  }
  for (int i = 0; i < 16; ++i) {
    if (i & 2) continue;
    const V a = r[i], b = r[i + 2];
    r[i] = __builtin_shufflevector(a, b, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
    r[i + 2] =
        __builtin_shufflevector(a, b, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
  }
  for (int i = 0; i < 16; ++i) {
    if (i & 4) continue;
    const V a = r[i], b = r[i + 4];
    r[i] = __builtin_shufflevector(a, b, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
    r[i + 4] =
        __builtin_shufflevector(a, b, 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  }
  for (int i = 0; i < 8; ++i) {
    const V a = r[i], b = r[i + 8];
    r[i] = __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    r[i + 8] =
        __builtin_shufflevector(a, b, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  }
}

/// dst[c * ld + r] = src[r * rs + c] for r, c < 16.
[[gnu::always_inline]] inline void transpose16(const float* src, int64_t rs, float* dst,
                                               int64_t ld) {
  Vec16 r[16];
  for (int i = 0; i < 16; ++i) std::memcpy(&r[i], src + i * rs, sizeof(Vec16));
  transpose16_regs(r);
  for (int i = 0; i < 16; ++i) std::memcpy(dst + i * ld, &r[i], sizeof(Vec16));
}

/// dst[c * ld + r] = src[r * rs + c] for r < 16, c < cols (at most 16): reads and writes only
/// those (a row of cols floats can end the buffer).
[[gnu::always_inline]] inline void transpose16_narrow(const float* src, int64_t rs, int cols,
                                                      float* dst, int64_t ld) {
  Vec16 r[16];
#if defined(__AVX512F__)
  const __mmask16 m = static_cast<__mmask16>((1u << cols) - 1);
  for (int i = 0; i < 16; ++i) r[i] = (Vec16)_mm512_maskz_loadu_ps(m, src + i * rs);
#else
  for (int i = 0; i < 16; ++i) {
    r[i] = Vec16{};
    std::memcpy(&r[i], src + i * rs, sizeof(float) * static_cast<size_t>(cols));
  }
#endif
  transpose16_regs(r);
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i)  // (constant indices: with i < cols as the bound, r went to memory)
    if (i < cols) std::memcpy(dst + i * ld, &r[i], sizeof(Vec16));
}

}  // namespace kiln::cpu
