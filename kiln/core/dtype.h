// DType: the element types Kiln tensors hold, their sizes, names and promotion.
#pragma once
#include <cstddef>
#include <cstdint>
#include <ostream>

#include "kiln/core/half.h"

namespace kiln {

// The numeric values are stored in files and graphs (the cast op's attribute): append only.
enum class DType : uint8_t {
  Float32 = 0,
  Float64 = 1,
  Int64 = 2,
  Int32 = 3,
  Bool = 4,
  Float16 = 5,
  BFloat16 = 6,
  Int8 = 7,
  UInt8 = 8,
  Int16 = 9,
};
inline constexpr int kNumDTypes = 10;
inline constexpr DType Float32 = DType::Float32;
inline constexpr DType Float64 = DType::Float64;
inline constexpr DType Int64 = DType::Int64;
inline constexpr DType Int32 = DType::Int32;
inline constexpr DType Bool = DType::Bool;
inline constexpr DType Float16 = DType::Float16;
// kiln::BFloat16 is the element type (half.h); the dtype constant is BF16.
inline constexpr DType BF16 = DType::BFloat16;
inline constexpr DType Int8 = DType::Int8;
inline constexpr DType UInt8 = DType::UInt8;
inline constexpr DType Int16 = DType::Int16;

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32:
      return 4;
    case DType::Float64:
      return 8;
    case DType::Int64:
      return 8;
    case DType::Int32:
      return 4;
    case DType::Bool:
      return 1;
    case DType::Float16:
    case DType::BFloat16:
      return 2;
    case DType::Int8:
    case DType::UInt8:
      return 1;
    case DType::Int16:
      return 2;
  }
  return 0;
}
const char* dtype_name(DType t);
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }
constexpr bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}
/// Integer dtypes (not bool).
constexpr bool is_integral(DType t) {
  return t == DType::Int64 || t == DType::Int32 || t == DType::Int8 || t == DType::UInt8 ||
         t == DType::Int16;
}
/// The 2-byte floats and the 1-/2-byte integers: most kernels compute them in a wider type
/// (compute_dtype) and the dispatcher casts (see OpDef::native_dtypes).
constexpr bool is_reduced(DType t) { return static_cast<uint8_t>(t) >= 5; }
/// What a kernel without a native kernel for `t` computes it in: float16/bfloat16 in float32,
/// int8/uint8/int16 in int32 (cast back, integers wrap around as in PyTorch).
constexpr DType compute_dtype(DType t) {
  switch (t) {
    case DType::Float16:
    case DType::BFloat16:
      return DType::Float32;
    case DType::Int8:
    case DType::UInt8:
    case DType::Int16:
      return DType::Int32;
    default:
      return t;
  }
}
/// A bit per dtype, for dtype sets (OpDef::native_dtypes).
constexpr uint32_t dtype_bit(DType t) { return 1u << static_cast<uint8_t>(t); }
inline constexpr uint32_t kAllDTypes = (1u << kNumDTypes) - 1;
/// Whether a code (a cast attribute, a file's dtype field) names a dtype.
constexpr bool valid_dtype_code(int64_t c) { return c >= 0 && c < kNumDTypes; }
/// PyTorch's promotion (torch.result_type of two tensors): bool < uint8/int8/int16 < int32 <
/// int64 < float16/bfloat16 < float32 < float64; uint8 with int8 gives int16, float16 with
/// bfloat16 gives float32, an integer with a float gives the float.
DType promote(DType a, DType b);

template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = Float32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = Float64;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = Int64;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = Int32;
};
template <>
struct dtype_of<bool> {
  static constexpr DType value = Bool;
};
template <>
struct dtype_of<Half> {
  static constexpr DType value = DType::Float16;
};
template <>
struct dtype_of<BFloat16> {
  static constexpr DType value = DType::BFloat16;
};
template <>
struct dtype_of<int8_t> {
  static constexpr DType value = DType::Int8;
};
template <>
struct dtype_of<uint8_t> {
  static constexpr DType value = DType::UInt8;
};
template <>
struct dtype_of<int16_t> {
  static constexpr DType value = DType::Int16;
};

}  // namespace kiln

// Runs the body with `scalar_t` bound to the C++ type of a dtype.
#define KILN_CASE_(DT, T, ...) \
  case ::kiln::DType::DT: {    \
    using scalar_t = T;        \
    __VA_ARGS__();             \
    break;                     \
  }
#define KILN_DISPATCH_FLOAT(dt, op, ...)                                           \
  switch (dt) {                                                                    \
    KILN_CASE_(Float32, float, __VA_ARGS__)                                        \
    KILN_CASE_(Float64, double, __VA_ARGS__)                                       \
    default:                                                                       \
      ::kiln::fail(op, "expected a floating dtype, got ", ::kiln::dtype_name(dt)); \
  }
#define KILN_DISPATCH_NUMERIC(dt, op, ...)                                        \
  switch (dt) {                                                                   \
    KILN_CASE_(Float32, float, __VA_ARGS__)                                       \
    KILN_CASE_(Float64, double, __VA_ARGS__)                                      \
    KILN_CASE_(Int64, int64_t, __VA_ARGS__)                                       \
    KILN_CASE_(Int32, int32_t, __VA_ARGS__)                                       \
    default:                                                                      \
      ::kiln::fail(op, "expected a numeric dtype, got ", ::kiln::dtype_name(dt)); \
  }
#define KILN_DISPATCH_ALL(dt, op, ...)                                              \
  switch (dt) {                                                                     \
    KILN_CASE_(Float32, float, __VA_ARGS__)                                         \
    KILN_CASE_(Float64, double, __VA_ARGS__)                                        \
    KILN_CASE_(Int64, int64_t, __VA_ARGS__)                                         \
    KILN_CASE_(Int32, int32_t, __VA_ARGS__)                                         \
    KILN_CASE_(Bool, bool, __VA_ARGS__)                                             \
    default:                                                                        \
      ::kiln::fail(op, "dtype ", ::kiln::dtype_name(dt), " is not supported here"); \
  }
// Every dtype, the 2-byte floats as kiln::Half / kiln::BFloat16 (casts, copies).
#define KILN_DISPATCH_ALL_TYPES(dt, op, ...)            \
  switch (dt) {                                         \
    KILN_CASE_(Float32, float, __VA_ARGS__)             \
    KILN_CASE_(Float64, double, __VA_ARGS__)            \
    KILN_CASE_(Int64, int64_t, __VA_ARGS__)             \
    KILN_CASE_(Int32, int32_t, __VA_ARGS__)             \
    KILN_CASE_(Bool, bool, __VA_ARGS__)                 \
    KILN_CASE_(Float16, ::kiln::Half, __VA_ARGS__)      \
    KILN_CASE_(BFloat16, ::kiln::BFloat16, __VA_ARGS__) \
    KILN_CASE_(Int8, int8_t, __VA_ARGS__)               \
    KILN_CASE_(UInt8, uint8_t, __VA_ARGS__)             \
    KILN_CASE_(Int16, int16_t, __VA_ARGS__)             \
  }
