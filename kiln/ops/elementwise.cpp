// Elementwise family: arithmetic, math and logic (comparisons and where are in
// compare_ops.cpp, activations in activation.cpp). Each op is an OpDef with broadcasting inference,
// a vectorized kernel and a gradient rule in Kiln ops.
#include <bit>
#include <cmath>

#include "kiln/kernels/cpu/vec_math.h"
#include "kiln/ops/elementwise_util.h"
#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using namespace detail::elementwise_util;

using op_util::one;
using op_util::scalar_like;

// ---- scalar functors ------------------------------------------------------------------------

struct AddF {
  template <class T>
  T operator()(T a, T b) const {
    return a + b;
  }
};
struct SubF {
  template <class T>
  T operator()(T a, T b) const {
    return a - b;
  }
};
struct MulF {
  template <class T>
  T operator()(T a, T b) const {
    return a * b;
  }
};
struct DivF {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      if (b == 0) return T(0);  // checked in the op: integer division by zero raises
      // INT_MIN / -1 overflows, and x86's idiv traps on it (SIGFPE killed the process); it wraps
      // to INT_MIN instead, as NumPy's result (unsigned negation is defined for every value).
      if (b == T(-1)) return static_cast<T>(T(0) - static_cast<std::make_unsigned_t<T>>(a));
      return a / b;
    } else {
      return a / b;
    }
  }
};
struct PowF {
  template <class T>
  T operator()(T a, T b) const {
    return static_cast<T>(std::pow(a, b));
  }
};
struct MaxF {
  template <class T>
  T operator()(T a, T b) const {
    return a != a ? a : (a > b ? a : b);
  }
};
struct MinF {
  template <class T>
  T operator()(T a, T b) const {
    return a != a ? a : (a < b ? a : b);
  }
};
struct AndF {
  bool operator()(bool a, bool b) const { return a && b; }
};
struct OrF {
  bool operator()(bool a, bool b) const { return a || b; }
};

KILN_UNARY_F(NegF, -x)
KILN_UNARY_F(ExpF, vec_math::exp<T>(x))
KILN_UNARY_F(LogF, std::log(x))
KILN_UNARY_F(SqrtF, std::sqrt(x))
KILN_UNARY_F(RsqrtF, T(1) / std::sqrt(x))
KILN_UNARY_F(AbsF, x < 0 ? -x : x)
// torch.sign: (x > 0) - (x < 0), so NaN gives 0.
KILN_UNARY_F(SignF, T((x > 0) - (x < 0)))
KILN_UNARY_F(ErfF, vec_math::erf<T>(x))
KILN_UNARY_F(SinF, std::sin(x))
KILN_UNARY_F(CosF, std::cos(x))
KILN_UNARY_F(Log1pF, std::log1p(x))
KILN_UNARY_F(Expm1F, std::expm1(x))

struct ClampF {
  double lo, hi;
  explicit ClampF(const Attrs& a) : lo(a.f(0)), hi(a.f(1)) {}
  template <class T>
  [[gnu::always_inline]] T operator()(T x) const {
    // Integers compare in double, so an open side (+-inf) is never converted to T (undefined
    // behaviour: clamp(int, min=2) once returned INT_MIN where x > 2).
    if constexpr (std::is_integral_v<T>) {
      const double v = static_cast<double>(x);
      return v < lo ? static_cast<T>(lo) : (v > hi ? static_cast<T>(hi) : x);
    } else {
      return x < T(lo) ? T(lo) : (x > T(hi) ? T(hi) : x);
    }
  }
};
// ---- op definitions -------------------------------------------------------------------------

constexpr char kAddN[] = "add", kSubN[] = "sub", kMulN[] = "mul", kDivN[] = "div", kPowN[] = "pow",
               kMaxN[] = "maximum", kMinN[] = "minimum", kAndN[] = "logical_and",
               kOrN[] = "logical_or", kNotN[] = "logical_not", kNegN[] = "neg", kExpN[] = "exp",
               kLogN[] = "log", kSqrtN[] = "sqrt", kRsqrtN[] = "rsqrt", kAbsN[] = "abs",
               kSignN[] = "sign", kErfN[] = "erf", kClampN[] = "clamp", kSinN[] = "sin",
               kCosN[] = "cos", kLog1pN[] = "log1p", kExpm1N[] = "expm1";

const OpDef& kAdd = def_op({.name = kAddN,
                            .num_inputs = 2,
                            .traits = kEw,
                            .infer = infer_binary_num<kAddN>,
                            .kernel = k_binary_num<AddF>,
                            .grad =
                                [](const GradCtx& c) {
                                  return TensorList{c.g(), c.g()};
                                },
                            .expr = "($0 + $1)",
                            .doc = "a + b",
                            .grad_reads_inputs = 0});
const OpDef& kSub = def_op({.name = kSubN,
                            .num_inputs = 2,
                            .traits = kEw,
                            .infer = infer_binary_num<kSubN>,
                            .kernel = k_binary_num<SubF>,
                            .grad =
                                [](const GradCtx& c) {
                                  return TensorList{c.g(), c.need(1) ? neg(c.g()) : Tensor()};
                                },
                            .expr = "($0 - $1)",
                            .doc = "a - b",
                            .grad_reads_inputs = 0});
const OpDef& kMul = def_op({.name = kMulN,
                            .num_inputs = 2,
                            .traits = kEw,
                            .infer = infer_binary_num<kMulN>,
                            .kernel = k_binary_num<MulF>,
                            // d(ab)/da = b, d(ab)/db = a
                            .grad =
                                [](const GradCtx& c) {
                                  return TensorList{c.need(0) ? mul(c.g(), c.in(1)) : Tensor(),
                                                    c.need(1) ? mul(c.g(), c.in(0)) : Tensor()};
                                },
                            .expr = "($0 * $1)",
                            .doc = "a * b",
                            .grad_reads_inputs = 0});
const OpDef& kDiv =
    def_op({.name = kDivN,
            .num_inputs = 2,
            .traits = kEw,
            .infer = infer_binary_num<kDivN>,
            .kernel = k_binary_num<DivF>,
            // d(a/b)/da = 1/b, d(a/b)/db = -a/b^2
            .grad =
                [](const GradCtx& c) {
                  return TensorList{
                      c.need(0) ? div(c.g(), c.in(1)) : Tensor(),
                      c.need(1) ? neg(div(mul(c.g(), c.in(0)), mul(c.in(1), c.in(1)))) : Tensor()};
                },
            .expr = "($0 / $1)",
            .doc = "a / b",
            .grad_reads_inputs = 0});
const OpDef& kPow =
    def_op({.name = kPowN,
            .num_inputs = 2,
            .traits = kEw,
            .infer = infer_binary_float<kPowN>,
            .kernel = k_binary_float<PowF>,
            // d(a^b)/da = b a^(b-1); d(a^b)/db = a^b ln a (taken as 0 where a == 0 and b >= 0)
            .grad =
                [](const GradCtx& c) {
                  Tensor ga, gb;
                  if (c.need(0)) ga = mul(c.g(), mul(c.in(1), pow(c.in(0), sub(c.in(1), 1.0))));
                  if (c.need(1)) {
                    Tensor safe = where(eq(c.in(0), 0.0), ones_like(c.in(0).detach()), c.in(0));
                    gb = mul(c.g(), mul(c.out(0), log(safe)));
                  }
                  return TensorList{ga, gb};
                },
            .expr = "pow($0, $1)",
            .doc = "a ** b"});
// maximum/minimum's gradient: all of it to the winning input, half to each where they tie (as
// torch), none where a NaN makes neither win nor tie.
TensorList split_at_ties(const GradCtx& c, const Tensor& a_wins, const Tensor& b_wins) {
  const Tensor z = scalar_like(c.g(), 0);
  const Tensor tie = eq(c.in(0), c.in(1));
  const Tensor half = where(tie, mul(c.g(), 0.5), z);
  return TensorList{c.need(0) ? where(a_wins, c.g(), half) : Tensor(),
                    c.need(1) ? where(b_wins, c.g(), half) : Tensor()};
}
const OpDef& kMaximum =
    def_op({.name = kMaxN,
            .num_inputs = 2,
            .traits = kEw,
            .infer = infer_binary_num<kMaxN>,
            .kernel = k_binary_num<MaxF>,
            // the gradient goes to the larger input, half to each on ties
            .grad =
                [](const GradCtx& c) {
                  return split_at_ties(c, gt(c.in(0), c.in(1)), lt(c.in(0), c.in(1)));
                },
            .expr = "max($0, $1)",
            .doc = "elementwise max (NaN propagates)"});
const OpDef& kMinimum =
    def_op({.name = kMinN,
            .num_inputs = 2,
            .traits = kEw,
            .infer = infer_binary_num<kMinN>,
            .kernel = k_binary_num<MinF>,
            .grad =
                [](const GradCtx& c) {
                  return split_at_ties(c, lt(c.in(0), c.in(1)), gt(c.in(0), c.in(1)));
                },
            .expr = "min($0, $1)",
            .doc = "elementwise min (NaN propagates)"});

const OpDef& kAnd =
    def_op({.name = kAndN,
            .num_inputs = 2,
            .traits = kEw,
            .infer = infer_logical<kAndN>,
            .kernel =
                [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
                  cpu::binary_loop<bool, bool, bool>(in[0], in[1], out[0], AndF{});
                },
            .expr = "($0 && $1)"});
const OpDef& kOr = def_op({.name = kOrN,
                           .num_inputs = 2,
                           .traits = kEw,
                           .infer = infer_logical<kOrN>,
                           .kernel =
                               [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
                                 cpu::binary_loop<bool, bool, bool>(in[0], in[1], out[0], OrF{});
                               },
                           .expr = "($0 || $1)"});
const OpDef& kNot =
    def_op({.name = kNotN,
            .num_inputs = 1,
            .traits = kEw,
            .infer = infer_logical<kNotN>,
            .kernel =
                [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
                  cpu::unary_loop<bool, bool>(in[0], out[0], [](bool x) { return !x; });
                },
            .expr = "(!$0)"});

const OpDef& kNeg = def_op({.name = kNegN,
                            .traits = kEw,
                            .infer = infer_unary_num<kNegN>,
                            .kernel = k_unary_num<NegF>,
                            .grad = [](const GradCtx& c) { return TensorList{neg(c.g())}; },
                            .expr = "(-$0)",
                            .grad_reads_inputs = 0});
const OpDef& kExp =
    def_op({.name = kExpN,
            .traits = kEw,
            .infer = infer_unary_float<kExpN>,
            .kernel = k_unary_float<ExpF>,
            .grad = [](const GradCtx& c) { return TensorList{mul(c.g(), c.out(0))}; },
            .expr = "exp($0)"});
const OpDef& kLog =
    def_op({.name = kLogN,
            .traits = kEw,
            .infer = infer_unary_float<kLogN>,
            .kernel = k_unary_float<LogF>,
            .grad = [](const GradCtx& c) { return TensorList{div(c.g(), c.in(0))}; },
            .expr = "log($0)"});
const OpDef& kSqrt =
    def_op({.name = kSqrtN,
            .traits = kEw,
            .infer = infer_unary_float<kSqrtN>,
            .kernel = k_unary_float<SqrtF>,
            // d sqrt(x) = 1 / (2 sqrt(x))
            .grad = [](const GradCtx& c) { return TensorList{div(mul(c.g(), 0.5), c.out(0))}; },
            .expr = "sqrt($0)"});
const OpDef& kRsqrt = def_op({.name = kRsqrtN,
                              .traits = kEw,
                              .infer = infer_unary_float<kRsqrtN>,
                              .kernel = k_unary_float<RsqrtF>,
                              // d x^-1/2 = -1/2 x^-3/2 = -1/2 rsqrt(x)^3
                              .grad =
                                  [](const GradCtx& c) {
                                    Tensor o = c.out(0);
                                    return TensorList{mul(c.g(), mul(mul(o, mul(o, o)), -0.5))};
                                  },
                              .expr = "(1 / sqrt($0))"});
const OpDef& kAbs =
    def_op({.name = kAbsN,
            .traits = kEw,
            .infer = infer_unary_num<kAbsN>,
            .kernel = k_unary_num<AbsF>,
            .grad = [](const GradCtx& c) { return TensorList{mul(c.g(), sign(c.in(0)))}; },
            .expr = "abs($0)"});
const OpDef& kSign =
    def_op({.name = kSignN,
            .traits = kEw,
            .infer = infer_unary_num<kSignN>,
            .kernel = k_unary_num<SignF>,
            .grad = [](const GradCtx& c) { return TensorList{zeros_like(c.g().detach())}; },
            .expr = "sign($0)"});
const OpDef& kErf = def_op(
    {.name = kErfN,
     .traits = kEw,
     .infer = infer_unary_float<kErfN>,
     .kernel = k_unary_float<ErfF>,
     // d erf(x) = 2/sqrt(pi) exp(-x^2)
     .grad =
         [](const GradCtx& c) {
           return TensorList{mul(c.g(), mul(exp(neg(mul(c.in(0), c.in(0)))), 1.1283791670955126))};
         },
     .expr = "erf($0)"});
// sin and cos (positional encodings, rotary embeddings): libm in the kernels and in generated
// code, so fused and unfused results agree.
const OpDef& kSin =
    def_op({.name = kSinN,
            .traits = kEw,
            .infer = infer_unary_float<kSinN>,
            .kernel = k_unary_float<SinF>,
            .grad = [](const GradCtx& c) { return TensorList{mul(c.g(), cos(c.in(0)))}; },
            .expr = "std::sin($0)"});
const OpDef& kCos =
    def_op({.name = kCosN,
            .traits = kEw,
            .infer = infer_unary_float<kCosN>,
            .kernel = k_unary_float<CosF>,
            .grad = [](const GradCtx& c) { return TensorList{neg(mul(c.g(), sin(c.in(0))))}; },
            .expr = "std::cos($0)"});
// log1p and expm1 keep the digits that log(1 + x) and exp(x) - 1 lose near 0 (softplus, elu,
// stable losses). d log1p(x) = 1 / (1 + x); d expm1(x) = exp(x) = expm1(x) + 1.
const OpDef& kLog1p =
    def_op({.name = kLog1pN,
            .traits = kEw,
            .infer = infer_unary_float<kLog1pN>,
            .kernel = k_unary_float<Log1pF>,
            .grad = [](const GradCtx& c) { return TensorList{div(c.g(), add(c.in(0), 1.0))}; },
            .expr = "std::log1p($0)"});
const OpDef& kExpm1 =
    def_op({.name = kExpm1N,
            .traits = kEw,
            .infer = infer_unary_float<kExpm1N>,
            .kernel = k_unary_float<Expm1F>,
            .grad = [](const GradCtx& c) { return TensorList{mul(c.g(), add(c.out(0), 1.0))}; },
            .expr = "std::expm1($0)"});
const OpDef& kClamp =
    def_op({.name = kClampN,
            .attr_names = {"min", "max"},
            .traits = kEw,
            .infer =
                [](std::span<const Tensor> in, const Attrs& a) {
                  op_util::require_numeric(kClampN, in[0]);
                  if (a.f(0) > a.f(1))
                    fail("clamp", "min ", a.f(0), " is greater than max ", a.f(1), " (input shape ",
                         in[0].shape(), ")");
                  return one(in[0].dtype(), in[0].shape());
                },
            .kernel = k_unary_num<ClampF>,
            .grad =
                [](const GradCtx& c) {
                  Tensor inside = logical_and(ge(c.in(0), c.attrs.f(0)), le(c.in(0), c.attrs.f(1)));
                  return TensorList{where(inside, c.g(), scalar_like(c.g(), 0))};
                },
            .expr = "clamp($0, @0, @1)"});

// Arithmetic on bool operands follows torch: + and maximum are logical or, * and minimum
// logical and, - is refused.
Tensor bool_arith(const OpDef& op, const Tensor& x, const Tensor& y) {
  if (&op == &kAdd || &op == &kMaximum) return call1(kOr, {x, y});
  if (&op == &kMul || &op == &kMinimum) return call1(kAnd, {x, y});
  if (&op == &kSub)
    fail("sub", "subtraction of bool tensors (", x.shape(), " - ", y.shape(),
         ") is not supported; use logical_xor() or ^ instead");
  return call1(op, {x, y});  // comparisons, maximum, ...: the op's own inference decides
}

// An undefined operand is refused under the op's name (a dead one, from an eager switch_, is a
// valid operand: the dispatcher makes the result dead).
Tensor bin(const OpDef& op, const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined())
    fail(op.name.c_str(), "input ", a.defined() ? 1 : 0, " is an undefined tensor");
  auto [x, y] = promoted(a, b);
  if (x.dtype() == Bool) return bool_arith(op, x, y);
  return call1(op, {x, y});
}
Tensor bin(const OpDef& op, const Tensor& a, const Scalar& b) {
  if (!a.defined()) fail(op.name.c_str(), "input 0 is an undefined tensor");
  auto [x, y] = with_scalar(a, b);
  if (x.dtype() == Bool) return bool_arith(op, x, y);
  return call1(op, {x, y});
}

// In-place forms: the operands promoted as the out-of-place op promotes them; when that casts
// self, write_in_place computes into a temporary and casts the result back (or refuses it).
Tensor& bin_(const char* name, const OpDef& op, Tensor& self, const Tensor& b) {
  if (!self.defined() || !b.defined()) fail(name, "undefined operand");
  auto [x, y] = promoted(self, b);
  const OpDef& o = x.dtype() == Bool ? (&op == &kAdd ? kOr : &op == &kMul ? kAnd : op) : op;
  if (x.dtype() == Bool && &op == &kSub) bool_arith(op, x, y);  // raises
  const Tensor in[2] = {x, y};
  return op_util::write_in_place(name, self, o, in);
}
Tensor& bin_(const char* name, const OpDef& op, Tensor& self, const Scalar& b) {
  if (!self.defined()) fail(name, "undefined operand");
  auto [x, y] = with_scalar(self, b);
  const OpDef& o = x.dtype() == Bool ? (&op == &kAdd ? kOr : &op == &kMul ? kAnd : op) : op;
  if (x.dtype() == Bool && &op == &kSub) bool_arith(op, x, y);  // raises
  const Tensor in[2] = {x, y};
  return op_util::write_in_place(name, self, o, in);
}

// True division: integer and bool operands divide as the default float (torch.div).
Tensor true_div(const Tensor& x, const Tensor& y) {
  if (is_floating(x.dtype())) return call1(kDiv, {x, y});
  return call1(kDiv, {cast(x, kDefaultFloat), cast(y, kDefaultFloat)});
}

void check_int_divisor(const char* name, const Tensor& x, const Tensor& y) {
  if (!is_integral(y.dtype()) || !y.is_concrete()) return;
  for (auto v : y.to_vector<int64_t>())
    if (v == 0) fail(name, "integer division by zero (", x.shape(), " / ", y.shape(), ")");
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return bin(kAdd, a, b); }
// torch refuses subtraction with any bool operand (the result would read as xor or as -1).
Tensor sub(const Tensor& a, const Tensor& b) {
  if (a.defined() && b.defined() && (a.dtype() == Bool || b.dtype() == Bool))
    fail("sub", "subtraction with a bool tensor (", a.dtype(), a.shape(), " - ", b.dtype(),
         b.shape(), ") is not supported; use logical_xor() or ^ for bools");
  return bin(kSub, a, b);
}
Tensor mul(const Tensor& a, const Tensor& b) { return bin(kMul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined())
    fail("div", "input ", a.defined() ? 1 : 0, " is an undefined tensor");
  auto [x, y] = promoted(a, b);
  return true_div(x, y);
}
Tensor add(const Tensor& a, const Scalar& b) { return bin(kAdd, a, b); }
Tensor sub(const Tensor& a, const Scalar& b) {
  if (a.defined() && (a.dtype() == Bool || b.is_bool()))
    fail("sub", "subtraction with a bool (", a.dtype(), a.shape(), " - ",
         b.is_bool() ? "a bool" : "a number", ") is not supported; use logical_xor() or ^");
  return bin(kSub, a, b);
}
Tensor mul(const Tensor& a, const Scalar& b) { return bin(kMul, a, b); }
Tensor div(const Tensor& a, const Scalar& b) {
  if (!a.defined()) fail("div", "input 0 is an undefined tensor");
  auto [x, y] = with_scalar(a, b);
  return true_div(x, y);
}
Tensor div(const Tensor& a, const Tensor& b, const std::string& mode) {
  if (mode.empty() || mode == "true") return div(a, b);
  if (mode != "trunc" && mode != "floor")
    fail("div", "rounding_mode must be None, 'trunc' or 'floor', got '", mode, "'");
  if (!a.defined() || !b.defined())
    fail("div", "input ", a.defined() ? 1 : 0, " is an undefined tensor");
  auto [x, y] = promoted(a, b);
  if (x.dtype() == Bool)
    fail("div", "rounding division of bool operands (", x.shape(), ", ", y.shape(),
         ") is not implemented, as in torch; cast first");
  if (is_floating(x.dtype())) {
    const Tensor q = call1(kDiv, {x, y});
    return mode == "trunc" ? trunc(q) : floor(q);
  }
  check_int_divisor("div", x, y);
  const Tensor q = call1(kDiv, {x, y});  // integer division truncates
  if (mode == "trunc") return q;
  // floor: one less where the division was inexact and the signs differ. (fmod, not x - q * y:
  // INT64_MIN // -1 wraps to INT64_MIN, and q * y would overflow, undefined behaviour.)
  const Tensor adjust = logical_and(ne(fmod(x, y), 0), ne(lt(x, 0), lt(y, 0)));
  return sub(q, cast(adjust, q.dtype()));
}
Tensor floor_divide(const Tensor& a, const Tensor& b) { return div(a, b, "floor"); }
Tensor neg(const Tensor& a) {
  if (a.defined() && a.dtype() == Bool)
    fail("neg", "negation of a bool tensor (", a.shape(),
         ") is not supported; use ~ or "
         "logical_not() instead");
  return call1(kNeg, {a});
}
Tensor& Tensor::add_(const Tensor& o) { return bin_("add_", kAdd, *this, o); }
Tensor& Tensor::add_(const Scalar& o) { return bin_("add_", kAdd, *this, o); }
Tensor& Tensor::sub_(const Tensor& o) {
  if (defined() && o.defined() && (dtype() == Bool || o.dtype() == Bool))
    fail("sub_", "subtraction with a bool tensor (", dtype(), shape(), " - ", o.dtype(), o.shape(),
         ") is not supported");
  return bin_("sub_", kSub, *this, o);
}
Tensor& Tensor::sub_(const Scalar& o) {
  if (defined() && (dtype() == Bool || o.is_bool()))
    fail("sub_", "subtraction with a bool (", dtype(), shape(), ") is not supported");
  return bin_("sub_", kSub, *this, o);
}
Tensor& Tensor::mul_(const Tensor& o) { return bin_("mul_", kMul, *this, o); }
Tensor& Tensor::mul_(const Scalar& o) { return bin_("mul_", kMul, *this, o); }
// True division in place: an integer tensor cannot hold the float result (torch refuses too).
Tensor& Tensor::div_(const Tensor& o) {
  if (defined() && o.defined() && !is_floating(result_type(*this, o)))
    fail("div_", "the result type ", kDefaultFloat, " of dividing ", dtype(), shape(), " by ",
         o.dtype(), o.shape(), " cannot be written into a ", dtype(), " tensor");
  return bin_("div_", kDiv, *this, o);
}
Tensor& Tensor::div_(const Scalar& o) {
  if (defined() && !is_floating(result_type(*this, o)))
    fail("div_", "the result type ", kDefaultFloat, " of dividing ", dtype(), shape(),
         " by a number cannot be written into a ", dtype(), " tensor");
  return bin_("div_", kDiv, *this, o);
}
Tensor& Tensor::neg_() {
  const Tensor in[1] = {*this};
  return op_util::write_in_place("neg_", *this, kNeg, in);
}
Tensor& Tensor::clamp_(double lo, double hi) {
  const Tensor in[1] = {*this};
  return op_util::write_in_place("clamp_", *this, kClamp, in, {lo, hi});
}
// Integer powers stay integers (torch: int ** int is int); they are computed in float64, exact
// for results below 2^53 (torch wraps around past int64; Kiln's value then differs).
Tensor pow(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined())
    fail("pow", "input ", a.defined() ? 1 : 0, " is an undefined tensor");
  const DType t = result_type(a, b);
  if (t == Bool)
    fail("pow", "bool ** bool (", a.shape(), ", ", b.shape(), ") is not implemented, as in torch");
  if (is_floating(t)) {
    auto [x, y] = promoted(a, b);
    return call1(kPow, {x, y});
  }
  const Tensor r = call1(kPow, {cast(a, Float64), cast(b, Float64)});
  return cast(r, t == Bool ? Int64 : t);
}
Tensor pow(const Tensor& a, const Scalar& e) {
  if (!a.defined()) fail("pow", "input 0 is an undefined tensor");
  const DType t = result_type(a, e);
  if (t == Bool) fail("pow", "bool ** bool (", a.shape(), ") is not implemented, as in torch");
  if (is_floating(t)) {
    auto [x, y] = with_scalar(a, e);
    return call1(kPow, {x, y});
  }
  if (e.to_int() < 0)
    fail("pow", "integers to negative integer powers are not allowed (", a.dtype(), a.shape(),
         " ** ", e.to_int(), ")");
  const Tensor r = call1(kPow, {cast(a, Float64), scalar_tensor(e.to_double(), Float64)});
  return cast(r, t == Bool ? Int64 : t);
}
Tensor pow(const Scalar& base, const Tensor& e) {
  if (!e.defined()) fail("pow", "input 1 is an undefined tensor");
  const DType t = result_type(e, base);
  if (t == Bool) fail("pow", "bool ** bool (", e.shape(), ") is not implemented, as in torch");
  return pow(scalar_tensor(base.to_double(), t), e);
}
Tensor exp(const Tensor& a) { return call1(kExp, {float_in(a)}); }
Tensor log(const Tensor& a) { return call1(kLog, {float_in(a)}); }
Tensor sqrt(const Tensor& a) { return call1(kSqrt, {float_in(a)}); }
Tensor rsqrt(const Tensor& a) { return call1(kRsqrt, {float_in(a)}); }
Tensor erf(const Tensor& a) { return call1(kErf, {float_in(a)}); }
Tensor sin(const Tensor& a) { return call1(kSin, {float_in(a)}); }
Tensor cos(const Tensor& a) { return call1(kCos, {float_in(a)}); }
Tensor log1p(const Tensor& a) { return call1(kLog1p, {float_in(a)}); }
Tensor expm1(const Tensor& a) { return call1(kExpm1, {float_in(a)}); }
Tensor abs(const Tensor& a) { return call1(kAbs, {a}); }
Tensor sign(const Tensor& a) {
  if (a.defined() && a.dtype() == Bool) return clone(a);  // torch: a bool's sign is itself
  return call1(kSign, {a});
}
Tensor clamp(const Tensor& a, double lo, double hi) {
  // An integer tensor's finite bounds saturate to its range (the kernel casts a bound it takes).
  if (a.defined() && is_integral(a.dtype())) {
    const double tmin = a.dtype() == Int64 ? -9.2233720368547758e18 : -2147483648.0;
    const double tmax = a.dtype() == Int64 ? 9.2233714e18 : 2147483647.0;
    if (std::isfinite(lo)) lo = std::min(std::max(lo, tmin), tmax);
    if (std::isfinite(hi)) hi = std::min(std::max(hi, tmin), tmax);
  }
  return call1(kClamp, {a}, {lo, hi});
}
Tensor maximum(const Tensor& a, const Tensor& b) { return bin(kMaximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return bin(kMinimum, a, b); }
// Logical ops take any dtype: nonzero is true (torch.logical_and & co.).
namespace {
Tensor truth(const Tensor& a) {
  if (!a.defined()) fail("logical", "undefined operand");
  return a.dtype() == Bool ? a : ne(a, scalar_tensor(0, a.dtype()));
}
}  // namespace
Tensor logical_and(const Tensor& a, const Tensor& b) { return call1(kAnd, {truth(a), truth(b)}); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return call1(kOr, {truth(a), truth(b)}); }
Tensor logical_not(const Tensor& a) { return call1(kNot, {truth(a)}); }
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, const Scalar& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Scalar& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Scalar& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Scalar& b) { return div(a, b); }
Tensor operator+(const Scalar& a, const Tensor& b) { return add(b, a); }
Tensor operator-(const Scalar& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Scalar& a, const Tensor& b) { return mul(b, a); }
Tensor operator/(const Scalar& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& a) { return neg(a); }

// a - b and a / b with the scalar on the left: the scalar becomes a 0-d tensor of the result
// dtype, so the same promotion holds.
Tensor sub(const Scalar& a, const Tensor& b) {
  if (!b.defined()) fail("sub", "input 1 is an undefined tensor");
  if (b.dtype() == Bool || a.is_bool())
    fail("sub", "subtraction with a bool (a number - ", b.dtype(), b.shape(),
         ") is not supported; use logical_xor() or ^");
  const DType t = result_type(b, a);
  return sub(scalar_tensor(a.to_double(), t), b);
}
Tensor div(const Scalar& a, const Tensor& b) {
  if (!b.defined()) fail("div", "input 1 is an undefined tensor");
  const DType t = float_result(result_type(b, a));
  return div(scalar_tensor(a.to_double(), t), b.dtype() == t ? b : cast(b, t));
}

}  // namespace kiln
