// The one dtype promotion table: PyTorch's result_type rules (bool < integer < floating
// categories; tensors with dims, 0-d tensors and host scalars promote in that order of priority;
// a host scalar never widens a tensor within its category), true division and integer
// accumulation. Every op wrapper, in every mode, computes result dtypes through these functions.
#pragma once
#include <cstdint>
#include <optional>

#include "kiln/core/dtype.h"
#include "kiln/core/scalar.h"

namespace kiln {

class Tensor;

enum class DTypeCategory : uint8_t { Bool = 0, Integral = 1, Floating = 2 };

constexpr DTypeCategory category(DType t) {
  return t == DType::Bool ? DTypeCategory::Bool
         : is_floating(t) ? DTypeCategory::Floating
                          : DTypeCategory::Integral;
}
constexpr DTypeCategory category(Scalar::Kind k) {
  return k == Scalar::Kind::Bool  ? DTypeCategory::Bool
         : k == Scalar::Kind::Int ? DTypeCategory::Integral
                                  : DTypeCategory::Floating;
}

/// The floating dtype results take when no input decides it (torch.get_default_dtype()).
inline constexpr DType kDefaultFloat = DType::Float32;

/// The dtype a host scalar has on its own: bool, int64, or the default float.
constexpr DType scalar_dtype(Scalar::Kind k) {
  return k == Scalar::Kind::Bool  ? DType::Bool
         : k == Scalar::Kind::Int ? DType::Int64
                                  : kDefaultFloat;
}

/// torch.result_type over any number of operands: add each tensor (its rank decides whether it
/// counts as a dimensioned or a 0-d tensor) and each host scalar, then read dtype().
class ResultType {
 public:
  ResultType& add(DType t, int64_t rank);
  ResultType& add(const Tensor& t);
  ResultType& add(const Scalar& s);
  /// The promoted dtype; `fallback` when nothing was added.
  DType dtype(DType fallback = kDefaultFloat) const;

 private:
  std::optional<DType> dim_, zero_, wrapped_;
};

DType result_type(const Tensor& a, const Tensor& b);
DType result_type(const Tensor& a, const Scalar& b);

/// What true division (and other ops that always give a float, such as mean of a float and
/// sqrt) computes in: floating dtypes stay, bool and integers become the default float.
constexpr DType float_result(DType t) { return is_floating(t) ? t : kDefaultFloat; }

/// What sum, prod, cumsum and cumprod accumulate and return: bool and every integer dtype give
/// int64 (no wrap-around at 32 bits), floating dtypes stay.
constexpr DType accumulate_result(DType t) { return is_floating(t) ? t : DType::Int64; }

}  // namespace kiln
