// Elementwise family: arithmetic, math, comparisons, logic, where and activations. Each op is
// an OpDef with broadcasting inference, a vectorized kernel and a gradient rule in Kiln ops.
#include <bit>
#include <cmath>

#include "kiln/kernels/cpu/vec_math.h"
#include "kiln/ops/op_util.h"

namespace kiln {
namespace {

using opu::one;
using opu::scalar_like;

// ---- inference ------------------------------------------------------------------------------

MetaList infer_binary(const char* op, std::span<const Tensor> in) {
  opu::require_same_dtype(op, in[0], in[1]);
  const Shape& a = in[0].shape();
  if (a == in[1].shape()) return one(in[0].dtype(), a);
  return one(in[0].dtype(), broadcast_shapes(a, in[1].shape(), op));
}
template <const char* Name>
MetaList infer_binary_num(std::span<const Tensor> in, const Attrs&) {
  opu::require_numeric(Name, in[0]);
  return infer_binary(Name, in);
}
template <const char* Name>
MetaList infer_binary_float(std::span<const Tensor> in, const Attrs&) {
  opu::require_float(Name, in[0]);
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
  opu::require_float(Name, in[0]);
  return one(in[0].dtype(), in[0].shape());
}
template <const char* Name>
MetaList infer_unary_num(std::span<const Tensor> in, const Attrs&) {
  opu::require_numeric(Name, in[0]);
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
      return b == 0 ? T(0) : a / b;  // checked in the op: integer division by zero raises
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

#define KILN_UNARY_F(NAME, EXPR)                     \
  struct NAME {                                      \
    explicit NAME(const Attrs&) {}                   \
    template <class T>                               \
    [[gnu::always_inline]] T operator()(T x) const { \
      return EXPR;                                   \
    }                                                \
  };
KILN_UNARY_F(NegF, -x)
KILN_UNARY_F(ExpF, vm::exp<T>(x))
KILN_UNARY_F(LogF, std::log(x))
KILN_UNARY_F(SqrtF, std::sqrt(x))
KILN_UNARY_F(RsqrtF, T(1) / std::sqrt(x))
KILN_UNARY_F(AbsF, x < 0 ? -x : x)
KILN_UNARY_F(SignF, x != x ? x : T((x > 0) - (x < 0)))
KILN_UNARY_F(ErfF, vm::erf<T>(x))
KILN_UNARY_F(ReluF, x <= T(0) ? T(0) : x)
KILN_UNARY_F(SigmoidF, vm::sigmoid<T>(x))
KILN_UNARY_F(TanhF, vm::tanh<T>(x))
KILN_UNARY_F(SiluF, x* vm::sigmoid<T>(x))
#undef KILN_UNARY_F

struct LeakyF {
  double s;
  explicit LeakyF(const Attrs& a) : s(a.f(0)) {}
  template <class T>
  [[gnu::always_inline]] T operator()(T x) const {
    return x < T(0) ? x * T(s) : x;
  }
};
struct ClampF {
  double lo, hi;
  explicit ClampF(const Attrs& a) : lo(a.f(0)), hi(a.f(1)) {}
  template <class T>
  [[gnu::always_inline]] T operator()(T x) const {
    return x < T(lo) ? T(lo) : (x > T(hi) ? T(hi) : x);
  }
};
// The two gelu forms are separate functors: a branch on the flag inside the loop stops GCC
// from vectorizing it.
struct GeluErfF {
  explicit GeluErfF(const Attrs&) {}
  template <class T>
  [[gnu::always_inline]] T operator()(T x) const {
    return vm::gelu_erf<T>(x);
  }
};
struct GeluTanhF {
  explicit GeluTanhF(const Attrs&) {}
  template <class T>
  [[gnu::always_inline]] T operator()(T x) const {
    return vm::gelu_tanh<T>(x);
  }
};
void k_gelu(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (a.b(0))
    k_unary_float<GeluTanhF>(in, out, a);
  else
    k_unary_float<GeluErfF>(in, out, a);
}

// gelu_grad(g, x) = g * gelu'(x). Erf form: gelu' = Phi(x) + x phi(x). Tanh form, with
// u = k (x + a x^3), t = tanh u: gelu' = (1 + t)/2 + x/2 (1 - t^2) k (1 + 3 a x^2).
struct GeluGradErfF {
  template <class T>
  [[gnu::always_inline]] T operator()(T g, T x) const {
    return g * vm::gelu_erf_grad<T>(x);
  }
};
struct GeluGradTanhF {
  template <class T>
  [[gnu::always_inline]] T operator()(T g, T x) const {
    const T k = T(0.7978845608028654), a = T(0.044715);
    const T x2 = x * x;
    const T t = vm::tanh<T>(k * (x + a * x2 * x));
    const T d = T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * a * x2);
    return g * d;
  }
};
void k_gelu_grad(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (a.b(0))
    k_binary_float<GeluGradTanhF>(in, out, a);
  else
    k_binary_float<GeluGradErfF>(in, out, a);
}

// ---- op definitions -------------------------------------------------------------------------

constexpr char kAddN[] = "add", kSubN[] = "sub", kMulN[] = "mul", kDivN[] = "div", kPowN[] = "pow",
               kMaxN[] = "maximum", kMinN[] = "minimum", kLtN[] = "lt", kLeN[] = "le",
               kGtN[] = "gt", kGeN[] = "ge", kEqN[] = "eq", kNeN[] = "ne", kAndN[] = "logical_and",
               kOrN[] = "logical_or", kNotN[] = "logical_not", kNegN[] = "neg", kExpN[] = "exp",
               kLogN[] = "log", kSqrtN[] = "sqrt", kRsqrtN[] = "rsqrt", kAbsN[] = "abs",
               kSignN[] = "sign", kErfN[] = "erf", kReluN[] = "relu", kLeakyN[] = "leaky_relu",
               kSigN[] = "sigmoid", kTanhN[] = "tanh", kGeluN[] = "gelu", kSiluN[] = "silu",
               kGeluGradN[] = "gelu_grad", kClampN[] = "clamp";

constexpr uint32_t kEw = kElementwise | kFusable | kInplaceable;

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
           opu::require_same_dtype("where", in[1], in[2]);
           Shape s = broadcast_shapes(in[1].shape(), in[2].shape(), "where");
           return one(in[1].dtype(), broadcast_shapes(in[0].shape(), s, "where"));
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
           KILN_DISPATCH_ALL(in[1].dtype(), "where", [&] {
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
     .doc = "cond ? a : b"});

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
const OpDef& kClamp =
    def_op({.name = kClampN,
            .attr_names = {"min", "max"},
            .traits = kEw,
            .infer =
                [](std::span<const Tensor> in, const Attrs& a) {
                  opu::require_numeric(kClampN, in[0]);
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

const OpDef& kRelu =
    def_op({.name = kReluN,
            .traits = kEw,
            .infer = infer_unary_num<kReluN>,
            .kernel = k_unary_num<ReluF>,
            .grad =
                [](const GradCtx& c) {
                  return TensorList{where(gt(c.out(0), 0.0), c.g(), scalar_like(c.g(), 0))};
                },
            .expr = "relu($0)"});
const OpDef& kLeaky =
    def_op({.name = kLeakyN,
            .attr_names = {"negative_slope"},
            .traits = kEw,
            .infer = infer_unary_float<kLeakyN>,
            .kernel = k_unary_float<LeakyF>,
            .grad =
                [](const GradCtx& c) {
                  return TensorList{where(lt(c.in(0), 0.0), mul(c.g(), c.attrs.f(0)), c.g())};
                },
            .expr = "leaky_relu($0, @0)"});
const OpDef& kSigmoid = def_op({.name = kSigN,
                                .traits = kEw,
                                .infer = infer_unary_float<kSigN>,
                                .kernel = k_unary_float<SigmoidF>,
                                // d s(x) = s (1 - s)
                                .grad =
                                    [](const GradCtx& c) {
                                      Tensor s = c.out(0);
                                      return TensorList{mul(c.g(), mul(s, sub(1.0, s)))};
                                    },
                                .expr = "sigmoid($0)"});
const OpDef& kTanh = def_op({.name = kTanhN,
                             .traits = kEw,
                             .infer = infer_unary_float<kTanhN>,
                             .kernel = k_unary_float<TanhF>,
                             // d tanh(x) = 1 - tanh^2
                             .grad =
                                 [](const GradCtx& c) {
                                   Tensor t = c.out(0);
                                   return TensorList{mul(c.g(), sub(1.0, mul(t, t)))};
                                 },
                             .expr = "tanh($0)"});
const OpDef& kGelu = def_op({.name = kGeluN,
                             .attr_names = {"approximate"},
                             .traits = kEw,
                             .infer = infer_unary_float<kGeluN>,
                             .kernel = k_gelu,
                             .grad =
                                 [](const GradCtx& c) {
                                   // One kernel in every mode (gelu_grad, with its own rule for
                                   // higher orders). In graphs it replaced the decomposition (erf,
                                   // exp, five products) that codegen fused; in W8's step both are
                                   // memory-bound on the pre-activation and measured alike (~240 vs
                                   // ~215 us per expert).
                                   return TensorList{gelu_grad(c.g(), c.in(0), c.attrs.b(0))};
                                 },
                             .expr = "gelu($0, @0)"});
// Second derivatives: erf form gelu'' = phi(x) (2 - x^2); tanh form (with u' = k (1 + 3 a x^2))
// gelu'' = (1 - t^2) (u' - x t u'^2 + 3 a k x^2).
const OpDef& kGeluGrad =
    def_op({.name = "gelu_grad",
            .num_inputs = 2,
            .attr_names = {"approximate"},
            .traits = kElementwise | kInplaceable,
            .infer = infer_binary_float<kGeluGradN>,
            .kernel = k_gelu_grad,
            .grad =
                [](const GradCtx& c) {
                  const Tensor &g = c.in(0), &x = c.in(1), &gg = c.g();
                  const bool approx = c.attrs.b(0);
                  Tensor dg = c.need(0) ? gelu_grad(gg, x, approx) : Tensor();
                  if (!c.need(1)) return TensorList{dg, Tensor()};
                  Tensor x2 = mul(x, x);
                  Tensor d2;
                  if (approx) {
                    const double k = 0.7978845608028654, a = 0.044715;
                    Tensor t = tanh(mul(add(x, mul(mul(x2, x), a)), k));
                    Tensor up = add(mul(x2, 3 * a * k), k);
                    d2 = mul(sub(1.0, mul(t, t)),
                             add(sub(up, mul(mul(x, t), mul(up, up))), mul(x2, 3 * a * k)));
                  } else {
                    d2 = mul(mul(exp(mul(x2, -0.5)), 0.3989422804014327), sub(2.0, x2));
                  }
                  return TensorList{dg, mul(mul(gg, g), d2)};
                },
            .doc = "g * d gelu(x) / dx (gelu's gradient in one pass)"});
const OpDef& kSilu =
    def_op({.name = kSiluN,
            .traits = kEw,
            .infer = infer_unary_float<kSiluN>,
            .kernel = k_unary_float<SiluF>,
            // d x s(x) = s + x s (1 - s)
            .grad =
                [](const GradCtx& c) {
                  Tensor s = sigmoid(c.in(0));
                  return TensorList{mul(c.g(), add(s, mul(mul(c.in(0), s), sub(1.0, s))))};
                },
            .expr = "silu($0)"});

// Promotes two operands to a common dtype (NumPy rules), casting only when they differ.
std::pair<Tensor, Tensor> promoted(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) fail("binary", "undefined operand");
  if (a.dtype() == b.dtype()) return {a, b};
  DType t = promote(a.dtype(), b.dtype());
  return {a.dtype() == t ? a : cast(a, t), b.dtype() == t ? b : cast(b, t)};
}

// A host scalar next to a tensor takes the tensor's dtype, unless the tensor is integral and
// the scalar is not (then both become float32), as in PyTorch.
std::pair<Tensor, Tensor> with_scalar(const Tensor& a, double b) {
  if (!a.defined()) fail("binary", "undefined operand");
  if (!is_floating(a.dtype()) && b != std::floor(b)) {
    return {cast(a, Float32), scalar_tensor(b, Float32)};
  }
  DType t = a.dtype() == Bool ? Int64 : a.dtype();
  return {a.dtype() == t ? a : cast(a, t), scalar_tensor(b, t)};
}

Tensor float_in(const Tensor& a) {
  if (!a.defined()) fail("unary", "undefined operand");
  return is_floating(a.dtype()) ? a : cast(a, Float32);
}

Tensor bin(const OpDef& op, const Tensor& a, const Tensor& b) {
  if (a.defined() && b.defined() && a.dtype() == b.dtype()) return call1(op, {a, b});
  auto [x, y] = promoted(a, b);
  return call1(op, {x, y});
}
Tensor bin(const OpDef& op, const Tensor& a, double b) {
  auto [x, y] = with_scalar(a, b);
  return call1(op, {x, y});
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
Tensor relu(const Tensor& a) { return call1(kRelu, {a}); }
Tensor leaky_relu(const Tensor& a, double s) { return call1(kLeaky, {float_in(a)}, {s}); }
Tensor sigmoid(const Tensor& a) { return call1(kSigmoid, {float_in(a)}); }
Tensor tanh(const Tensor& a) { return call1(kTanh, {float_in(a)}); }
Tensor gelu(const Tensor& a, bool approximate) {
  return call1(kGelu, {float_in(a)}, {approximate});
}
Tensor gelu_grad(const Tensor& g, const Tensor& x, bool approximate) {
  auto [a, b] = promoted(float_in(g), float_in(x));
  return call1(kGeluGrad, {a, b}, {approximate});
}
Tensor silu(const Tensor& a) { return call1(kSilu, {float_in(a)}); }

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
