// Scalar: a host number together with its kind (bool, integer or floating), as a Python number
// or a C++ literal carries it. Dtype promotion (promotion.h) treats a Scalar by its kind, never
// by its value: int32 tensor + 2 stays int32, int32 tensor + 2.0 is float32, as in PyTorch.
#pragma once
#include <concepts>
#include <cstdint>

namespace kiln {

class Scalar {
 public:
  enum class Kind : uint8_t { Bool, Int, Float };

  Scalar() : Scalar(0.0) {}
  Scalar(double v) : kind_(Kind::Float), d_(v), i_(static_cast<int64_t>(0)) {}  // NOLINT
  Scalar(float v) : Scalar(static_cast<double>(v)) {}                           // NOLINT
  Scalar(bool v) : kind_(Kind::Bool), d_(v ? 1.0 : 0.0), i_(v ? 1 : 0) {}       // NOLINT
  template <std::integral T>
  requires(!std::same_as<T, bool>) Scalar(T v)
      : kind_(Kind::Int), d_(static_cast<double>(v)), i_(static_cast<int64_t>(v)) {}  // NOLINT

  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::Float; }
  bool is_integral() const { return kind_ == Kind::Int; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  /// The value as a double (integers past 2^53 round).
  double to_double() const { return d_; }
  /// The value as an integer: a floating value truncates toward zero and saturates (NaN: 0).
  int64_t to_int() const {
    if (kind_ != Kind::Float) return i_;
    if (!(d_ == d_)) return 0;
    if (d_ >= 9.2233720368547758e18) return INT64_MAX;
    if (d_ <= -9.2233720368547758e18) return INT64_MIN;
    return static_cast<int64_t>(d_);
  }

 private:
  Kind kind_;
  double d_;
  int64_t i_;
};

}  // namespace kiln
