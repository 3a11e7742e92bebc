// DType: the element types Kiln tensors hold, their sizes, names and promotion.
#pragma once
#include <cstddef>
#include <cstdint>
#include <ostream>

namespace kiln {

enum class DType : uint8_t { Float32 = 0, Float64 = 1, Int64 = 2, Int32 = 3, Bool = 4 };
inline constexpr DType Float32 = DType::Float32;
inline constexpr DType Float64 = DType::Float64;
inline constexpr DType Int64 = DType::Int64;
inline constexpr DType Int32 = DType::Int32;
inline constexpr DType Bool = DType::Bool;

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
  }
  return 0;
}
const char* dtype_name(DType t);
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }
constexpr bool is_floating(DType t) { return t == DType::Float32 || t == DType::Float64; }
constexpr bool is_integral(DType t) { return t == DType::Int64 || t == DType::Int32; }
/// NumPy/PyTorch-style promotion: bool < int32 < int64 < float32 < float64.
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
#define KILN_DISPATCH_ALL(dt, op, ...)       \
  switch (dt) {                              \
    KILN_CASE_(Float32, float, __VA_ARGS__)  \
    KILN_CASE_(Float64, double, __VA_ARGS__) \
    KILN_CASE_(Int64, int64_t, __VA_ARGS__)  \
    KILN_CASE_(Int32, int32_t, __VA_ARGS__)  \
    KILN_CASE_(Bool, bool, __VA_ARGS__)      \
  }
