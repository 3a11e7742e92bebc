// Elementwise family: arithmetic, math, comparisons, logic and where (activations are in
// activation.cpp). Each op is an OpDef with broadcasting inference, a vectorized kernel and a
// gradient rule in Kiln ops.
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
struct LtF {
  template <class T>
  bool operator()(T a, T b) const {
    return a < b;
  }
};
struct LeF {
  template <class T>
  bool operator()(T a, T b) const {
    return a <= b;
  }
};
struct GtF {
  template <class T>
  bool operator()(T a, T b) const {
    return a > b;
  }
};
struct GeF {
  template <class T>
  bool operator()(T a, T b) const {
    return a >= b;
  }
};
struct EqF {
  template <class T>
  bool operator()(T a, T b) const {
    return a == b;
  }
};
struct NeF {
  template <class T>
  bool operator()(T a, T b) const {
    return a != b;
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
KILN_UNARY_F(SignF, x != x ? x : T((x > 0) - (x < 0)))
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
    return x < T(lo) ? T(lo) : (x > T(hi) ? T(hi) : x);
  }
};
// ---- op definitions -------------------------------------------------------------------------

constexpr char kAddN[] = "add", kSubN[] = "sub", kMulN[] = "mul", kDivN[] = "div", kPowN[] = "pow",
               kMaxN[] = "maximum", kMinN[] = "minimum", kLtN[] = "lt", kLeN[] = "le",
               kGtN[] = "gt", kGeN[] = "ge", kEqN[] = "eq", kNeN[] = "ne", kAndN[] = "logical_and",
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
                            .doc = "a + b"});
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
                            .doc = "a - b"});
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
                            .doc = "a * b"});
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
            .doc = "a / b"});
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
const OpDef& kMaximum = def_op({.name = kMaxN,
                                .num_inputs = 2,
                                .traits = kEw,
                                .infer = infer_binary_num<kMaxN>,
                                .kernel = k_binary_num<MaxF>,
                                // the gradient goes to the larger input (to a on ties)
                                .grad =
                                    [](const GradCtx& c) {
                                      Tensor m = ge(c.in(0), c.in(1));
                                      Tensor z = scalar_like(c.g(), 0);
                                      return TensorList{c.need(0) ? where(m, c.g(), z) : Tensor(),
                                                        c.need(1) ? where(m, z, c.g()) : Tensor()};
                                    },
                                .expr = "max($0, $1)",
                                .doc = "elementwise max (NaN propagates)"});
const OpDef& kMinimum = def_op({.name = kMinN,
                                .num_inputs = 2,
                                .traits = kEw,
                                .infer = infer_binary_num<kMinN>,
                                .kernel = k_binary_num<MinF>,
                                .grad =
                                    [](const GradCtx& c) {
                                      Tensor m = le(c.in(0), c.in(1));
                                      Tensor z = scalar_like(c.g(), 0);
                                      return TensorList{c.need(0) ? where(m, c.g(), z) : Tensor(),
                                                        c.need(1) ? where(m, z, c.g()) : Tensor()};
                                    },
                                .expr = "min($0, $1)",
                                .doc = "elementwise min (NaN propagates)"});

const OpDef& kLt = def_op({.name = kLtN,
                           .num_inputs = 2,
                           .traits = kEw,
                           .infer = infer_compare<kLtN>,
                           .kernel = k_compare<LtF>,
                           .expr = "($0 < $1)"});
const OpDef& kLe = def_op({.name = kLeN,
                           .num_inputs = 2,
                           .traits = kEw,
                           .infer = infer_compare<kLeN>,
                           .kernel = k_compare<LeF>,
                           .expr = "($0 <= $1)"});
const OpDef& kGt = def_op({.name = kGtN,
                           .num_inputs = 2,
                           .traits = kEw,
                           .infer = infer_compare<kGtN>,
                           .kernel = k_compare<GtF>,
                           .expr = "($0 > $1)"});
const OpDef& kGe = def_op({.name = kGeN,
                           .num_inputs = 2,
                           .traits = kEw,
                           .infer = infer_compare<kGeN>,
                           .kernel = k_compare<GeF>,
                           .expr = "($0 >= $1)"});
const OpDef& kEq = def_op({.name = kEqN,
                           .num_inputs = 2,
                           .traits = kEw,
                           .infer = infer_compare<kEqN>,
                           .kernel = k_compare<EqF>,
                           .expr = "($0 == $1)"});
const OpDef& kNe = def_op({.name = kNeN,
                           .num_inputs = 2,
                           .traits = kEw,
                           .infer = infer_compare<kNeN>,
                           .kernel = k_compare<NeF>,
                           .expr = "($0 != $1)"});
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

const OpDef& kWhere = def_op(
    {.name = "where",
     .num_inputs = 3,
     .traits = kEw,
     .infer =
         [](std::span<const Tensor> in, const Attrs&) {
           if (in[0].dtype() != Bool)
             fail("where", "condition must be bool, got ", in[0].dtype(), " ", in[0].shape());
           op_util::require_same_dtype("where", in[1], in[2]);
           Shape s = broadcast_shapes(in[1].shape(), in[2].shape(), "where");
           return one(in[1].dtype(), broadcast_shapes(in[0].shape(), s, "where"));
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
           KILN_DISPATCH_ALL_TYPES(in[1].dtype(), "where", [&] {
             // A select on the bits: "c ? a : b" on a bool loaded from memory stayed a branch
             // per element (unvectorized; ~3.6 ns per element on a random mask, which relu's
             // gradient is).
             using U = std::conditional_t<
                 sizeof(scalar_t) == 8, uint64_t,
                 std::conditional_t<sizeof(scalar_t) == 4, uint32_t,
                                    std::conditional_t<sizeof(scalar_t) == 2, uint16_t, uint8_t>>>;
             cpu::ternary_loop<bool, scalar_t, scalar_t, scalar_t>(
                 in[0], in[1], in[2], out[0], [](bool c, scalar_t a, scalar_t b) {
                   const U m = U(0) - static_cast<U>(c);
                   return std::bit_cast<scalar_t>(
                       static_cast<U>((std::bit_cast<U>(a) & m) | (std::bit_cast<U>(b) & ~m)));
                 });
           });
         },
     .grad =
         [](const GradCtx& c) {
           Tensor z = scalar_like(c.g(), 0);
           return TensorList{Tensor(), c.need(1) ? where(c.in(0), c.g(), z) : Tensor(),
                             c.need(2) ? where(c.in(0), z, c.g()) : Tensor()};
         },
     .expr = "($0 ? $1 : $2)",
     .doc = "cond ? a : b",
     .native_dtypes = kAllDTypes});

const OpDef& kNeg = def_op({.name = kNegN,
                            .traits = kEw,
                            .infer = infer_unary_num<kNegN>,
                            .kernel = k_unary_num<NegF>,
                            .grad = [](const GradCtx& c) { return TensorList{neg(c.g())}; },
                            .expr = "(-$0)"});
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

// A host scalar next to a tensor takes the tensor's dtype, unless the tensor is integral and
// the scalar is not (then both become float32), as in PyTorch.
std::pair<Tensor, Tensor> with_scalar(const Tensor& a, double b) {
  if (!a.defined()) fail("binary", "undefined operand");
  if (!is_floating(a.dtype()) && b != std::floor(b)) {
    return {cast(a, Float32), scalar_tensor(b, Float32)};
  }
  DType t = a.dtype() == Bool ? Int64 : a.dtype();
  // The scalar takes the tensor's dtype as in PyTorch, wrapping into the narrow integers
  // (torch.tensor([1], dtype=torch.int8) + 300 is 45).
  if (t == Int8) b = static_cast<int8_t>(static_cast<int64_t>(b));
  if (t == UInt8) b = static_cast<uint8_t>(static_cast<int64_t>(b));
  if (t == Int16) b = static_cast<int16_t>(static_cast<int64_t>(b));
  return {a.dtype() == t ? a : cast(a, t), scalar_tensor(b, t)};
}

// An undefined operand is refused under the op's name (a dead one, from an eager switch_, is a
// valid operand: the dispatcher makes the result dead).
Tensor bin(const OpDef& op, const Tensor& a, const Tensor& b) {
  if (a.defined() && b.defined() && a.dtype() == b.dtype()) return call1(op, {a, b});
  if (!a.defined() || !b.defined())
    fail(op.name.c_str(), "input ", a.defined() ? 1 : 0, " is an undefined tensor");
  auto [x, y] = promoted(a, b);
  return call1(op, {x, y});
}
Tensor bin(const OpDef& op, const Tensor& a, double b) {
  if (!a.defined()) fail(op.name.c_str(), "input 0 is an undefined tensor");
  auto [x, y] = with_scalar(a, b);
  return call1(op, {x, y});
}

// In-place forms: the operands promoted as the out-of-place op promotes them; when that casts
// self, write_in_place computes into a temporary and casts the result back (or refuses it).
Tensor& bin_(const char* name, const OpDef& op, Tensor& self, const Tensor& b) {
  if (!self.defined() || !b.defined()) fail(name, "undefined operand");
  if (self.dtype() == b.dtype()) {
    const Tensor in[2] = {self, b};
    return op_util::write_in_place(name, self, op, in);
  }
  auto [x, y] = promoted(self, b);
  const Tensor in[2] = {x, y};
  return op_util::write_in_place(name, self, op, in);
}
Tensor& bin_(const char* name, const OpDef& op, Tensor& self, double b) {
  if (!self.defined()) fail(name, "undefined operand");
  auto [x, y] = with_scalar(self, b);
  const Tensor in[2] = {x, y};
  return op_util::write_in_place(name, self, op, in);
}
// Comparisons with a host scalar promote like arithmetic: an integer tensor next to a
// fractional scalar compares as float (torch.tensor([2]) < 2.5 is True), and a bool tensor
// compares as int64 (True == 2 is False).
Tensor cmp(const OpDef& op, const Tensor& a, double b) {
  if (!a.defined()) fail(op.name.c_str(), "undefined operand");
  auto [x, y] = with_scalar(a, b);
  return call1(op, {x, y});
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return bin(kAdd, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return bin(kSub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return bin(kMul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) {
  auto [x, y] = promoted(a, b);
  if (is_integral(y.dtype()) && y.is_concrete()) {
    for (auto v : y.to_vector<int64_t>())
      if (v == 0) fail("div", "integer division by zero (", x.shape(), " / ", y.shape(), ")");
  }
  return call1(kDiv, {x, y});
}
Tensor add(const Tensor& a, double b) { return bin(kAdd, a, b); }
Tensor sub(const Tensor& a, double b) { return bin(kSub, a, b); }
Tensor mul(const Tensor& a, double b) { return bin(kMul, a, b); }
Tensor div(const Tensor& a, double b) {
  if (b == 0 && a.defined() && is_integral(a.dtype()))
    fail("div", "integer division by zero (", a.shape(), " / 0)");
  return bin(kDiv, a, b);
}
Tensor neg(const Tensor& a) { return call1(kNeg, {a}); }
Tensor& Tensor::add_(const Tensor& o) { return bin_("add_", kAdd, *this, o); }
Tensor& Tensor::add_(double o) { return bin_("add_", kAdd, *this, o); }
Tensor& Tensor::sub_(const Tensor& o) { return bin_("sub_", kSub, *this, o); }
Tensor& Tensor::sub_(double o) { return bin_("sub_", kSub, *this, o); }
Tensor& Tensor::mul_(const Tensor& o) { return bin_("mul_", kMul, *this, o); }
Tensor& Tensor::mul_(double o) { return bin_("mul_", kMul, *this, o); }
// Division as div(): integer operands divide as integers, and a zero divisor is refused.
Tensor& Tensor::div_(const Tensor& o) {
  if (defined() && o.defined() && is_integral(dtype()) && is_integral(o.dtype()) && o.is_concrete())
    for (auto v : o.to_vector<int64_t>())
      if (v == 0) fail("div_", "integer division by zero (", shape(), " / ", o.shape(), ")");
  return bin_("div_", kDiv, *this, o);
}
Tensor& Tensor::div_(double o) {
  if (o == 0 && defined() && is_integral(dtype()))
    fail("div_", "integer division by zero (", shape(), " / 0)");
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
Tensor pow(const Tensor& a, const Tensor& b) {
  auto [x, y] = promoted(float_in(a), b);
  return call1(kPow, {x, y});
}
Tensor pow(const Tensor& a, double e) {
  Tensor x = float_in(a);
  return call1(kPow, {x, scalar_tensor(e, x.dtype())});
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
Tensor sign(const Tensor& a) { return call1(kSign, {a}); }
Tensor clamp(const Tensor& a, double lo, double hi) { return call1(kClamp, {a}, {lo, hi}); }
Tensor maximum(const Tensor& a, const Tensor& b) { return bin(kMaximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return bin(kMinimum, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return bin(kLt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return bin(kLe, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return bin(kGt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return bin(kGe, a, b); }
Tensor eq(const Tensor& a, const Tensor& b) { return bin(kEq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return bin(kNe, a, b); }
Tensor lt(const Tensor& a, double b) { return cmp(kLt, a, b); }
Tensor le(const Tensor& a, double b) { return cmp(kLe, a, b); }
Tensor gt(const Tensor& a, double b) { return cmp(kGt, a, b); }
Tensor ge(const Tensor& a, double b) { return cmp(kGe, a, b); }
Tensor eq(const Tensor& a, double b) { return cmp(kEq, a, b); }
Tensor ne(const Tensor& a, double b) { return cmp(kNe, a, b); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return call1(kAnd, {a, b}); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return call1(kOr, {a, b}); }
Tensor logical_not(const Tensor& a) { return call1(kNot, {a}); }
Tensor where(const Tensor& c, const Tensor& a, const Tensor& b) {
  auto [x, y] = promoted(a, b);
  return call1(kWhere, {c, x, y});
}
Tensor masked_fill(const Tensor& a, const Tensor& mask, double value) {
  if (!a.defined() || !mask.defined()) fail("masked_fill", "undefined input");
  if (mask.dtype() != Bool)
    fail("masked_fill", "mask must be bool, got ", mask.dtype(), mask.shape(), " (input ",
         a.dtype(), a.shape(), ")");
  const Shape s = broadcast_shapes(a.shape(), mask.shape(), "masked_fill");
  bool fits = s.rank() == a.dim();
  for (int64_t d = 0; fits && d < s.rank(); ++d)
    fits = s[d] < 0 || a.shape()[d] < 0 || s[d] == a.shape()[d];  // (dynamic dims: at run time)
  if (!fits)
    fail("masked_fill", "mask ", mask.shape(), " must broadcast to the input's shape ", a.shape());
  return where(mask, scalar_tensor(value, a.dtype()), a);
}
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return div(a, b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(double a, const Tensor& b) { return sub(a, b); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(double a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator<(const Tensor& a, double b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, double b) { return le(a, b); }
Tensor operator>(const Tensor& a, double b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, double b) { return ge(a, b); }

}  // namespace kiln

namespace kiln {
Tensor sub(double a, const Tensor& b) { return neg(sub(b, a)); }
Tensor div(double a, const Tensor& b) {
  Tensor x = is_floating(b.dtype()) ? b : cast(b, Float32);
  return div(scalar_tensor(a, x.dtype()), x);
}
}  // namespace kiln
