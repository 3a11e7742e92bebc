// Vectorizable float math: exp, tanh, erf written as plain arithmetic so that `omp simd` loops
// vectorize them (libm's scalar calls would not). float64 uses libm (references, gradcheck).
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace kiln::vm {

/// exp(x) for float, max rel. error ~2 ulp; underflows to 0 below -87.3, overflows to inf
/// above 88.72; NaN in, NaN out. Written so GCC vectorizes it: rounding by the 1.5*2^23 trick
/// (std::nearbyint blocks vectorization in GCC 12) and the exponent built with bit_cast.
[[gnu::always_inline]] inline float expf_fast(float x) {
  // Cody-Waite range reduction: x = n ln2 + r, |r| <= ln2/2; exp(r) by a degree-6 polynomial.
  float xc = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
  float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
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
  float small = ax * (1.0f + x2 * (-0.333333333f + x2 * (0.133333333f + x2 * -0.0539682540f)));
  float t = ax < 0.0625f ? small : big;
  return std::copysign(t, x);
}

[[gnu::always_inline]] inline float erff_fast(float x) {
  // Abramowitz & Stegun 7.1.26 refined: |error| < 1.2e-7 via erfc = t*exp(-x^2+poly(t)).
  float ax = std::fabs(x);
  float t = 1.0f / (1.0f + 0.5f * ax);
  float poly =
      -1.26551223f +
      t * (1.00002368f +
           t * (0.37409196f +
                t * (0.09678418f +
                     t * (-0.18628806f +
                          t * (0.27886807f +
                               t * (-1.13520398f +
                                    t * (1.48851587f + t * (-0.82215223f + t * 0.17087277f))))))));
  float erfc = t * expf_fast(-ax * ax + poly);
  float r = 1.0f - erfc;
  return std::copysign(r, x);
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

}  // namespace kiln::vm
