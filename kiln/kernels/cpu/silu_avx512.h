// SiLU (x sigmoid(x)) sixteen lanes at a time for the convolution epilogues that apply it
// themselves (conv_depthwise; the oneDNN convolutions, whose own swish post-op took 2.5x as
// long: 377 us against ~210 on efficientnet's 96 x 112 x 112 expansion). AVX-512 builds only.
#pragma once
#include <cstdint>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace kiln::cpu {

#if defined(__AVX512F__)
/// x sigmoid(x), max relative error ~2e-7 against double (NaN in, NaN out; -inf gives NaN, as
/// x / (1 + exp(-x)) does). sigmoid from z = exp(-|x|) in (0, 1], which never overflows:
/// 1 / (1 + z) for x >= 0, z / (1 + z) below. 2^f by a degree-6 polynomial, scaled by 2^n with
/// vscalefps; 1 / (1 + z) by rcp14 and one Newton step, not a division (the divider's
/// throughput bounded the plain form at twice the time).
[[gnu::always_inline]] inline __m512 silu16(__m512 x) {
  // z = 2^-(|x| log2 e) = 2^(n + f), f in [-1/2, 1/2]; f from |x| by two FMAs with log2 e in two
  // parts, so that it keeps its accuracy for large |x| (one part left 3.5e-6 error at x = -76).
  // Past |x| = 104, z is below float's range either way.
  const __m512 ax =
      _mm512_min_ps(_mm512_abs_ps(x), _mm512_set1_ps(104.f));  // (NaN: 104, x keeps it)
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(ax, _mm512_set1_ps(-1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 f = _mm512_fnmadd_ps(ax, _mm512_set1_ps(1.44269502162933350f),
                              _mm512_sub_ps(_mm512_setzero_ps(), n));
  f = _mm512_fnmadd_ps(ax, _mm512_set1_ps(1.92596303e-8f), f);
  __m512 p = _mm512_set1_ps(1.535336188319500e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.339887440266574e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618437357674640e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550332471162809e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402264791363012e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931472028550421e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
  const __m512 z = _mm512_scalef_ps(p, n);
  const __m512 d = _mm512_add_ps(z, _mm512_set1_ps(1.f));
  __m512 q = _mm512_rcp14_ps(d);
  q = _mm512_mul_ps(q, _mm512_fnmadd_ps(d, q, _mm512_set1_ps(2.f)));
  const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  q = _mm512_mask_mul_ps(q, neg, q, z);
  return _mm512_mul_ps(x, q);
}
#endif

/// y[i] = silu(y[i]) for i < n on the threads (silu16 where AVX-512 is built in, else
/// x / (1 + exp(-x))).
void silu_inplace(float* y, int64_t n);

}  // namespace kiln::cpu
