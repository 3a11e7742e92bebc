// Half (IEEE binary16) and BFloat16 (the top half of a float32): the 2-byte storage types of
// float16 and bfloat16 tensors. Arithmetic goes through float (implicit conversions both ways),
// as c10::Half and c10::BFloat16 do: float -> half rounds to nearest even, half -> float is exact.
#pragma once
#include <cstdint>
#include <cstring>
#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace kiln {

/// Conversions between float and the bit patterns (uint16_t) of binary16 and bfloat16: what
/// Half and BFloat16 convert with, for code that works on raw 2-byte storage. The `_scalar`
/// forms are the portable paths, bit for bit what F16C gives.
namespace half_bits {
inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Scalar binary16 conversions (the F16C instructions' results, bit for bit): exact widening,
// round-to-nearest-even narrowing with overflow to inf, subnormals kept, NaN stays a quiet NaN.
inline float half_to_float_scalar(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));  // inf / NaN
  if (exp == 0) {
    if (man == 0) return bits_float(sign);
    // Subnormal: man * 2^-24, exact in float.
    float v = static_cast<float>(man) * bits_float(0x33800000u);
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112) << 23) | (man << 13));
}

inline uint16_t float_to_half_scalar(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (a < 0x38800000u) {
    // Result is subnormal (or zero): add 0.5 so the float adder rounds the mantissa to even at
    // half's 2^-24 quantum, then read the low bits.
    float v = bits_float(a) + 0.5f;
    return static_cast<uint16_t>(sign | (float_bits(v) - 0x3f000000u));
  }
  // Normal: rebias the exponent and round the 13 dropped mantissa bits to nearest even.
  uint32_t r = a - (112u << 23);
  r += 0xfffu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | (r >> 13));
}

inline float half_to_float(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  return half_to_float_scalar(h);
#endif
}
inline uint16_t float_to_half(float f) {
#if defined(__F16C__)
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
#else
  return float_to_half_scalar(f);
#endif
}

inline float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }
// Round to nearest even on the dropped 16 bits; NaN becomes the quiet NaN 0x7fc0 (as torch).
inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>(((u >> 16) & 0x8000u) | 0x7fc0u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
}  // namespace half_bits

struct FromBits {};
inline constexpr FromBits from_bits{};

struct Half {
  uint16_t x = 0;
  Half() = default;
  constexpr Half(uint16_t bits, FromBits) : x(bits) {}
  Half(float f) : x(half_bits::float_to_half(f)) {}
  operator float() const { return half_bits::half_to_float(x); }
};

struct BFloat16 {
  uint16_t x = 0;
  BFloat16() = default;
  constexpr BFloat16(uint16_t bits, FromBits) : x(bits) {}
  BFloat16(float f) : x(half_bits::float_to_bf16(f)) {}
  operator float() const { return half_bits::bf16_to_float(x); }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

}  // namespace kiln
