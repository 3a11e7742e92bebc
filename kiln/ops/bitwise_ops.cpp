// Bool-valued and integer elementwise ops: isnan, isinf, isfinite, logical_xor, the bitwise ops
// and shifts (torch's semantics: shifts past the width give 0 or the sign). Not fused: codegen
// handles float and bool slots only.
#include <cmath>
#include <limits>

#include "kiln/ops/elementwise_util.h"
#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using namespace detail::elementwise_util;

using op_util::one;

// ---- bool-valued and integer ops (not fused: codegen handles float and bool slots only) ------

constexpr char kIsnanN[] = "isnan", kIsinfN[] = "isinf", kIsfiniteN[] = "isfinite",
               kXorN[] = "logical_xor", kBAndN[] = "bitwise_and", kBOrN[] = "bitwise_or",
               kBXorN[] = "bitwise_xor", kBNotN[] = "bitwise_not", kShlN[] = "bitwise_left_shift",
               kShrN[] = "bitwise_right_shift";

MetaList infer_to_bool(std::span<const Tensor> in, const Attrs&) {
  return one(Bool, in[0].shape());
}
template <int Kind>  // 0 isnan, 1 isinf, 2 isfinite
void k_classify(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  KILN_DISPATCH_ALL(in[0].dtype(), "classify", [&] {
    cpu::unary_loop<scalar_t, bool>(in[0], out[0], [](scalar_t x) {
      if constexpr (!std::is_floating_point_v<scalar_t>) {
        (void)x;
        return Kind == 2;
      } else if constexpr (Kind == 0) {
        return x != x;
      } else if constexpr (Kind == 1) {
        return x == scalar_t(INFINITY) || x == scalar_t(-INFINITY);
      } else {
        return x - x == scalar_t(0);
      }
    });
  });
}
const OpDef& kIsnan = def_op({.name = kIsnanN,
                              .traits = kElementwise,
                              .infer = infer_to_bool,
                              .kernel = k_classify<0>,
                              .doc = "x != x (bool)"});
const OpDef& kIsinf = def_op({.name = kIsinfN,
                              .traits = kElementwise,
                              .infer = infer_to_bool,
                              .kernel = k_classify<1>,
                              .doc = "x is +inf or -inf (bool)"});
const OpDef& kIsfinite = def_op({.name = kIsfiniteN,
                                 .traits = kElementwise,
                                 .infer = infer_to_bool,
                                 .kernel = k_classify<2>,
                                 .doc = "x is neither NaN nor infinite (bool)"});
const OpDef& kXor =
    def_op({.name = kXorN,
            .num_inputs = 2,
            .traits = kElementwise,
            .infer = infer_logical<kXorN>,
            .kernel = [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
              cpu::binary_loop<bool, bool, bool>(in[0], in[1], out[0],
                                                 [](bool a, bool b) { return a != b; });
            }});

template <const char* Name, bool AllowBool>
MetaList infer_bitwise(std::span<const Tensor> in, const Attrs&) {
  for (const auto& t : in)
    if (is_floating(t.dtype()) || (!AllowBool && t.dtype() == Bool))
      fail(Name, "expected integer", AllowBool ? " or bool" : "", " tensors, got ", t.dtype(), " ",
           t.shape());
  if (in.size() == 1) return one(in[0].dtype(), in[0].shape());
  return infer_binary(Name, in);
}
#define KILN_DISPATCH_BITS(dt, op, ...)                                    \
  switch (dt) {                                                            \
    KILN_CASE_(Int64, int64_t, __VA_ARGS__)                                \
    KILN_CASE_(Int32, int32_t, __VA_ARGS__)                                \
    KILN_CASE_(Bool, bool, __VA_ARGS__)                                    \
    default:                                                               \
      ::kiln::fail(op, "expected integers, got ", ::kiln::dtype_name(dt)); \
  }
template <int Kind>  // 0 and, 1 or, 2 xor, 3 shift left, 4 shift right
struct BitF {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (Kind == 0) {
      return static_cast<T>(a & b);
    } else if constexpr (Kind == 1) {
      return static_cast<T>(a | b);
    } else if constexpr (Kind == 2) {
      return static_cast<T>(a ^ b);
    } else if constexpr (std::is_same_v<T, bool>) {
      return false;  // refused by inference
    } else {
      // torch: a shift by a negative count or by the width or more gives 0 (left) or the sign
      // fill (right); shifting C++ integers that far is undefined.
      using U = std::make_unsigned_t<T>;
      constexpr T kBits = static_cast<T>(sizeof(T) * 8);
      if constexpr (Kind == 3) {
        if (b < 0 || b >= kBits) return T(0);
        return static_cast<T>(static_cast<U>(a) << b);
      } else {
        if (b < 0 || b >= kBits) return a < 0 ? T(-1) : T(0);
        return static_cast<T>(a >> b);
      }
    }
  }
};
struct BitNotF {
  template <class T>
  T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>)
      return !x;
    else
      return static_cast<T>(~x);
  }
};
template <int Kind>
void k_bitwise(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  KILN_DISPATCH_BITS(in[0].dtype(), "bitwise", [&] {
    cpu::binary_loop<scalar_t, scalar_t, scalar_t>(in[0], in[1], out[0], BitF<Kind>{});
  });
}
const OpDef& kBAnd = def_op({.name = kBAndN,
                             .num_inputs = 2,
                             .traits = kElementwise,
                             .infer = infer_bitwise<kBAndN, true>,
                             .kernel = k_bitwise<0>});
const OpDef& kBOr = def_op({.name = kBOrN,
                            .num_inputs = 2,
                            .traits = kElementwise,
                            .infer = infer_bitwise<kBOrN, true>,
                            .kernel = k_bitwise<1>});
const OpDef& kBXor = def_op({.name = kBXorN,
                             .num_inputs = 2,
                             .traits = kElementwise,
                             .infer = infer_bitwise<kBXorN, true>,
                             .kernel = k_bitwise<2>});
const OpDef& kShl = def_op({.name = kShlN,
                            .num_inputs = 2,
                            .traits = kElementwise,
                            .infer = infer_bitwise<kShlN, false>,
                            .kernel = k_bitwise<3>});
const OpDef& kShr = def_op({.name = kShrN,
                            .num_inputs = 2,
                            .traits = kElementwise,
                            .infer = infer_bitwise<kShrN, false>,
                            .kernel = k_bitwise<4>});
const OpDef& kBNot =
    def_op({.name = kBNotN,
            .traits = kElementwise,
            .infer = infer_bitwise<kBNotN, true>,
            .kernel = [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
              KILN_DISPATCH_BITS(in[0].dtype(), kBNotN, [&] {
                cpu::unary_loop<scalar_t, scalar_t>(in[0], out[0], BitNotF{});
              });
            }});
#undef KILN_DISPATCH_BITS

// ---- wrappers' helpers ----------------------------------------------------------------------

void need(const char* op, const Tensor& t) {
  if (!t.defined()) fail(op, "input is an undefined tensor");
}

// Both operands defined, in their common dtype (result_type), as the arithmetic ops.
Tensor bits(const OpDef& op, const Tensor& a, const Tensor& b) {
  need(op.name.c_str(), a);
  need(op.name.c_str(), b);
  auto [x, y] = promoted(a, b);
  return call1(op, {x, y});
}
Tensor to_bool(const Tensor& t) { return t.dtype() == Bool ? t : ne(t, 0.0); }

}  // namespace

Tensor isnan(const Tensor& a) {
  need(kIsnanN, a);
  return call1(kIsnan, {a});
}
Tensor isinf(const Tensor& a) {
  need(kIsinfN, a);
  return call1(kIsinf, {a});
}
Tensor isfinite(const Tensor& a) {
  need(kIsfiniteN, a);
  return call1(kIsfinite, {a});
}

Tensor logical_xor(const Tensor& a, const Tensor& b) {
  need(kXorN, a);
  need(kXorN, b);
  return call1(kXor, {to_bool(a), to_bool(b)});
}
Tensor bitwise_and(const Tensor& a, const Tensor& b) { return bits(kBAnd, a, b); }
Tensor bitwise_or(const Tensor& a, const Tensor& b) { return bits(kBOr, a, b); }
Tensor bitwise_xor(const Tensor& a, const Tensor& b) { return bits(kBXor, a, b); }
Tensor bitwise_left_shift(const Tensor& a, const Tensor& b) { return bits(kShl, a, b); }
Tensor bitwise_right_shift(const Tensor& a, const Tensor& b) { return bits(kShr, a, b); }
Tensor bitwise_not(const Tensor& a) {
  need(kBNotN, a);
  return call1(kBNot, {a});
}

}  // namespace kiln
