// Vectorizable float math: exp, tanh, erf written as plain arithmetic so that `omp simd` loops
// vectorize them (libm's scalar calls would not). float64 uses libm (references, gradcheck).
// Every multiply-add here is an explicit std::fma: the library compiles with GCC's default
// contraction and generated fused kernels without any (kiln/codegen), and both inline these
// functions, so a plain a * b + c would round differently in the two and a fused kernel's
// interpreted and compiled runs would disagree in the last bit.
#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace kiln::vec_math {

/// exp(x) for float, max rel. error ~2 ulp; underflows to 0 below -87.3, overflows to inf
/// above 88.72; NaN in, NaN out. Written so GCC vectorizes it: rounding by the 1.5*2^23 trick
/// (std::nearbyint blocks vectorization in GCC 12) and the exponent built with bit_cast.
[[gnu::always_inline]] inline float expf_fast(float x) {
  // Cody-Waite range reduction: x = n ln2 + r, |r| <= ln2/2; exp(r) by a degree-6 polynomial.
  float xc = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
  float n = std::fma(xc, 1.44269504088896341f, 12582912.0f) - 12582912.0f;
  float r = std::fma(n, -0.693359375f, xc);
  r = std::fma(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  p = std::fma(p * r, r, r) + 1.0f;
  float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  float res = p * scale;
  res = x < -87.3f ? 0.0f : res;
  res = x > 88.72f ? std::numeric_limits<float>::infinity() : res;
  return x != x ? x : res;
}

[[gnu::always_inline]] inline float tanhf_fast(float x) {
  // tanh(x) = 1 - 2 / (exp(2x) + 1); small |x| by its odd polynomial to keep relative accuracy.
  float ax = std::fabs(x);
  float e = expf_fast(2.0f * ax);
  float big = 1.0f - 2.0f / (e + 1.0f);
  float x2 = x * x;
  float small =
      ax *
      std::fma(x2, std::fma(x2, std::fma(x2, -0.0539682540f, 0.133333333f), -0.333333333f), 1.0f);
  float t = ax < 0.0625f ? small : big;
  return std::copysign(t, x);
}

[[gnu::always_inline]] inline float erff_fast(float x) {
  // erf(x) = x P(x^2) / Q(x^2) on [-4, 4] (the odd/even rational minimax fit Eigen and XLA use
  // for float; erf(4) rounds to 1.0f, so clamping there is exact in float). Max abs. and rel.
  // error 3.3e-7 over [-10, 10] against double erf, including near 0 where the old
  // 1 - t*exp(..) form lost relative accuracy to cancellation. About 12 FMAs and one divide,
  // against the old form's divide, 10 FMAs and an exp: ~3x faster, which is what lets a fused
  // gelu approach the memory bound (W2). erf is odd, so it works on |x| and puts the sign back;
  // the clamp is an integer min on the bits (one vpminud: float ternaries become compare+blend
  // chains without -ffinite-math-only), and NaN is restored at the end.
  const uint32_t b = std::bit_cast<uint32_t>(x);
  uint32_t a = b & 0x7fffffffu;
  a = a < 0x40800000u ? a : 0x40800000u;  // 0x40800000 = 4.0f
  const float c = std::bit_cast<float>(a);
  const float x2 = c * c;
  float p = std::fma(x2, -2.72614225801306e-10f, 2.77068142495902e-08f);
  p = std::fma(x2, p, -2.10102402082508e-06f);
  p = std::fma(x2, p, -5.69250639462346e-05f);
  p = std::fma(x2, p, -7.34990630326855e-04f);
  p = std::fma(x2, p, -2.95459980854025e-03f);
  p = std::fma(x2, p, -1.60960333262415e-02f);
  float q = std::fma(x2, -1.45660718464996e-05f, -2.13374055278905e-04f);
  q = std::fma(x2, q, -1.68282697438203e-03f);
  q = std::fma(x2, q, -7.37332916720468e-03f);
  q = std::fma(x2, q, -1.42647390514189e-02f);
  // (the fit overshoots 1 by an ulp near 4: 1 + erf(-30) must be 0, or gelu(-30) = +1.8e-6)
  const float r = std::min(c * p / q, 1.0f);
  const float s = std::bit_cast<float>(std::bit_cast<uint32_t>(r) | (b & 0x80000000u));
  return x != x ? x : s;
}

[[gnu::always_inline]] inline float sigmoidf_fast(float x) { return 1.0f / (1.0f + expf_fast(-x)); }

template <typename T>
inline T exp(T x) {
  return std::exp(x);
}
template <>
[[gnu::always_inline]] inline float exp<float>(float x) {
  return expf_fast(x);
}
template <typename T>
inline T tanh(T x) {
  return std::tanh(x);
}
template <>
[[gnu::always_inline]] inline float tanh<float>(float x) {
  return tanhf_fast(x);
}
template <typename T>
inline T erf(T x) {
  return std::erf(x);
}
template <>
[[gnu::always_inline]] inline float erf<float>(float x) {
  return erff_fast(x);
}
template <typename T>
[[gnu::always_inline]] inline T sigmoid(T x) {
  return T(1) / (T(1) + exp<T>(-x));
}

/// erf(|x| / sqrt 2) for float, |x| clamped to 4 sqrt(2) (where it is 1.0f): the rational of
/// erff_fast with the 1/sqrt(2) folded into the coefficients (P(y/2) and Q(y/2) with y = x^2:
/// the k-th coefficient divided by 2^k, P's also by sqrt(2), both negated so that they are
/// positive). Also returns the clamped |x| and its square, which gelu's derivative reuses.
[[gnu::always_inline]] inline float erf_abs_over_sqrt2(float x, float* c_out, float* y_out) {
  uint32_t a = std::bit_cast<uint32_t>(x) & 0x7fffffffu;
  a = a < 0x40b504f3u ? a : 0x40b504f3u;  // 4 sqrt(2)
  const float c = std::bit_cast<float>(a);
  const float y = c * c;
  float p = std::fma(y, 3.011990120500377e-12f, -6.122398825300404e-10f);
  p = std::fma(y, p, 9.285302078507751e-08f);
  p = std::fma(y, p, 5.031512341982542e-06f);
  p = std::fma(y, p, 1.299292147031735e-04f);
  p = std::fma(y, p, 1.044608780155643e-03f);
  p = std::fma(y, p, 1.138161431519002e-02f);
  float q = std::fma(y, 9.103794904062250e-07f, 2.667175690986312e-05f);
  q = std::fma(y, q, 4.207067435955075e-04f);
  q = std::fma(y, q, 3.686664583602340e-03f);
  q = std::fma(y, q, 1.426473905141890e-02f);
  *c_out = c;
  *y_out = y;
  // (capped at 1: the fit overshoots by an ulp near the clamp, and 1 - erf must not go
  // negative: gelu(-30) was +1.8e-6 where torch gives 0)
  return std::min(c * p / q, 1.0f);
}

/// gelu, erf form: x * Phi(x) = h + h * erf(x / sqrt(2)) with h = x / 2 (one FMA fewer than
/// 0.5 x (1 + erf)). Shared by the eager kernel, the fused interpreter and generated code.
template <typename T>
[[gnu::always_inline]] inline T gelu_erf(T x) {
  const T h = T(0.5) * x;
  return std::fma(h, erf<T>(x * T(0.7071067811865476)), h);
}
template <>
[[gnu::always_inline]] inline float gelu_erf<float>(float x) {
  // erf_abs_over_sqrt2 (erff_fast's rational with the scaling folded in, clamp at 4 sqrt(2)).
  // No NaN fix-up: h carries a NaN through the final FMA. Three vector ops fewer than gelu_erf over
  // erff_fast (about 22 per vector), the same error (max abs 1.1e-6 over [-12, 12] against double).
  const float h = 0.5f * x;
  const uint32_t b = std::bit_cast<uint32_t>(x);
  float c, y;
  const float r = erf_abs_over_sqrt2(x, &c, &y);
  const float e = std::bit_cast<float>(std::bit_cast<uint32_t>(r) | (b & 0x80000000u));
  return std::fma(h, e, h);
}
/// gelu's derivative, erf form: Phi(x) + x phi(x).
template <typename T>
[[gnu::always_inline]] inline T gelu_erf_grad(T x) {
  return std::fma(x * std::exp(T(-0.5) * x * x), T(0.3989422804014327),
                  std::fma(T(0.5), erf<T>(x * T(0.7071067811865476)), T(0.5)));
}
template <>
[[gnu::always_inline]] inline float gelu_erf_grad<float>(float x) {
  // 0.5 + sign(x) (0.5 erf(|x|/sqrt 2) + |x| phi(|x|)) with |x| clamped at 4 sqrt(2) (erf is 1
  // and x phi(x) below 2.5e-7 beyond): the erf of gelu_erf<float> (folded coefficients), and
  // exp(-x^2/2) on [-16, 0] needs none of exp's range checks. 25% faster than erf + exp
  // (W8's expert backward); max abs error 3e-7 against double.
  const uint32_t b = std::bit_cast<uint32_t>(x);
  float c, y;
  const float r = erf_abs_over_sqrt2(x, &c, &y);
  const float z = -0.5f * y;
  const float n = std::fma(z, 1.44269504088896341f, 12582912.0f) - 12582912.0f;
  float rr = std::fma(n, -0.693359375f, z);
  rr = std::fma(n, 2.12194440e-4f, rr);
  float e = 1.9875691500e-4f;
  e = std::fma(e, rr, 1.3981999507e-3f);
  e = std::fma(e, rr, 8.3334519073e-3f);
  e = std::fma(e, rr, 4.1665795894e-2f);
  e = std::fma(e, rr, 1.6666665459e-1f);
  e = std::fma(e, rr, 5.0000001201e-1f);
  e = std::fma(e * rr, rr, rr) + 1.0f;
  e = e * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  const float h = std::fma(c * 0.3989422804014327f, e, 0.5f * r);
  const float sh = std::bit_cast<float>(std::bit_cast<uint32_t>(h) | (b & 0x80000000u));
  return x != x ? x : 0.5f + sh;
}

/// gelu, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename T>
[[gnu::always_inline]] inline T gelu_tanh(T x) {
  const T k = T(0.7978845608028654);  // sqrt(2/pi)
  return T(0.5) * x * (T(1) + tanh<T>(k * std::fma(T(0.044715) * x * x, x, x)));
}

}  // namespace kiln::vec_math
