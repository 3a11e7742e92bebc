// Shared by the elementwise op families (elementwise*.cpp, activation*.cpp, ...): broadcasting
// shape and dtype inference, the adapters from scalar functors to the vectorized CPU loops, and
// dtype promotion of operands.
#pragma once
#include <cmath>
#include <span>
#include <utility>

#include "kiln/ops/op_util.h"

namespace kiln::detail::elementwise_util {

using op_util::one;
using op_util::scalar_like;

/// A stateless scalar functor NAME computing EXPR of `x` (type T), the form the vectorized loops
/// below take: `KILN_UNARY_F(SquareF, x * x)`. Shared by the elementwise and activation families.
#define KILN_UNARY_F(NAME, EXPR)                     \
  struct NAME {                                      \
    explicit NAME(const Attrs&) {}                   \
    template <class T>                               \
    [[gnu::always_inline]] T operator()(T x) const { \
      return EXPR;                                   \
    }                                                \
  };

/// Traits of an ordinary elementwise op.
inline constexpr uint32_t kEw = kElementwise | kFusable | kInplaceable;

// ---- inference ------------------------------------------------------------------------------

inline MetaList infer_binary(const char* op, std::span<const Tensor> in) {
  op_util::require_same_dtype(op, in[0], in[1]);
  const Shape& a = in[0].shape();
  if (a == in[1].shape()) return one(in[0].dtype(), a);
  return one(in[0].dtype(), broadcast_shapes(a, in[1].shape(), op));
}
template <const char* Name>
MetaList infer_binary_num(std::span<const Tensor> in, const Attrs&) {
  op_util::require_numeric(Name, in[0]);
  return infer_binary(Name, in);
}
template <const char* Name>
MetaList infer_binary_float(std::span<const Tensor> in, const Attrs&) {
  op_util::require_float(Name, in[0]);
  return infer_binary(Name, in);
}
template <const char* Name>
MetaList infer_compare(std::span<const Tensor> in, const Attrs&) {
  auto m = infer_binary(Name, in);
  m[0].dtype = Bool;
  return m;
}
template <const char* Name>
MetaList infer_logical(std::span<const Tensor> in, const Attrs&) {
  for (const auto& t : in)
    if (t.dtype() != Bool) fail(Name, "inputs must be bool, got ", t.dtype(), " ", t.shape());
  if (in.size() == 1) return one(Bool, in[0].shape());
  return infer_binary(Name, in);
}
template <const char* Name>
MetaList infer_unary_float(std::span<const Tensor> in, const Attrs&) {
  op_util::require_float(Name, in[0]);
  return one(in[0].dtype(), in[0].shape());
}
template <const char* Name>
MetaList infer_unary_num(std::span<const Tensor> in, const Attrs&) {
  op_util::require_numeric(Name, in[0]);
  return one(in[0].dtype(), in[0].shape());
}

// ---- kernel adapters ------------------------------------------------------------------------

template <typename F>
void k_binary_num(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  KILN_DISPATCH_NUMERIC(in[0].dtype(), "binary", [&] {
    cpu::binary_loop<scalar_t, scalar_t, scalar_t>(in[0], in[1], out[0], F{});
  });
}
template <typename F>
void k_binary_float(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  KILN_DISPATCH_FLOAT(in[0].dtype(), "binary", [&] {
    cpu::binary_loop<scalar_t, scalar_t, scalar_t>(in[0], in[1], out[0], F{});
  });
}
template <typename F>
void k_compare(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  KILN_DISPATCH_ALL(in[0].dtype(), "compare",
                    [&] { cpu::binary_loop<scalar_t, scalar_t, bool>(in[0], in[1], out[0], F{}); });
}
template <typename F>
void k_unary_float(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  KILN_DISPATCH_FLOAT(in[0].dtype(), "unary", [&] {
    F f(a);
    cpu::unary_loop<scalar_t, scalar_t>(
        in[0], out[0], [f](scalar_t x) __attribute__((always_inline)) { return f(x); });
  });
}
template <typename F>
void k_unary_num(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  KILN_DISPATCH_NUMERIC(in[0].dtype(), "unary", [&] {
    F f(a);
    cpu::unary_loop<scalar_t, scalar_t>(
        in[0], out[0], [f](scalar_t x) __attribute__((always_inline)) { return f(x); });
  });
}

// Promotes two operands to their result_type (kiln/core/promotion.h: a 0-d tensor does not
// widen a tensor with dims within its category), casting only when they differ.
inline std::pair<Tensor, Tensor> promoted(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) fail("binary", "undefined operand");
  if (a.dtype() == b.dtype()) return {a, b};
  DType t = result_type(a, b);
  return {a.dtype() == t ? a : cast(a, t), b.dtype() == t ? b : cast(b, t)};
}

// A host scalar next to a tensor: both take result_type(a, b) (promotion.h), the scalar wrapped
// into the narrow integers as torch does (torch.tensor([1], dtype=torch.int8) + 300 is 45).
inline std::pair<Tensor, Tensor> with_scalar(const Tensor& a, const Scalar& b) {
  if (!a.defined()) fail("binary", "undefined operand");
  const DType t = result_type(a, b);
  double v = b.to_double();
  if (is_integral(t)) {
    const int64_t i = b.to_int();
    v = t == Int8    ? static_cast<int8_t>(i)
        : t == UInt8 ? static_cast<uint8_t>(i)
        : t == Int16 ? static_cast<int16_t>(i)
        : t == Int32 ? static_cast<int32_t>(i)
                     : static_cast<double>(i);
  }
  return {a.dtype() == t ? a : cast(a, t), scalar_tensor(v, t)};
}

/// Integer and bool inputs of float-only ops compute in float32, as in PyTorch.
inline Tensor float_in(const Tensor& a) {
  if (!a.defined()) fail("unary", "undefined operand");
  return is_floating(a.dtype()) ? a : cast(a, Float32);
}

}  // namespace kiln::detail::elementwise_util
