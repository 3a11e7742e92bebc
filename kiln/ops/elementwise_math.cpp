// Elementwise math with PyTorch's semantics beyond the arithmetic of elementwise.cpp: rounding,
// fmod / remainder, reciprocal, square, log2 / log10 / exp2, trigonometric and hyperbolic
// functions, atan2, nan_to_num, lerp; the composites addcmul, addcdiv and clamp with tensor
// bounds. Every op carries an `expr` so the fusion pass and codegen fuse them like exp and sin
// (libm in kernel and generated code alike). Bool-valued and integer ops: bitwise_ops.cpp.
#include <cmath>
#include <limits>

#include "kiln/ops/elementwise_util.h"
#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using namespace detail::elementwise_util;

using op_util::one;
using op_util::scalar_like;

KILN_UNARY_F(FloorF, std::floor(x))
KILN_UNARY_F(CeilF, std::ceil(x))
KILN_UNARY_F(TruncF, std::trunc(x))
KILN_UNARY_F(FracF, x - std::trunc(x))
KILN_UNARY_F(ReciprocalF, T(1) / x)
KILN_UNARY_F(SquareF, x* x)
KILN_UNARY_F(Log2F, std::log2(x))
KILN_UNARY_F(Log10F, std::log10(x))
KILN_UNARY_F(Exp2F, std::exp2(x))
KILN_UNARY_F(TanF, std::tan(x))
KILN_UNARY_F(AsinF, std::asin(x))
KILN_UNARY_F(AcosF, std::acos(x))
KILN_UNARY_F(AtanF, std::atan(x))
KILN_UNARY_F(SinhF, std::sinh(x))
KILN_UNARY_F(CoshF, std::cosh(x))
KILN_UNARY_F(AsinhF, std::asinh(x))
KILN_UNARY_F(AcoshF, std::acosh(x))
KILN_UNARY_F(AtanhF, std::atanh(x))

// torch.round(x, decimals): nearbyint (half to even in the default rounding mode) of x scaled
// by 10^decimals, computed in the input's type as torch does.
struct RoundF {
  int64_t d;
  explicit RoundF(const Attrs& a) : d(static_cast<int64_t>(a.f(0))) {}
  template <class T>
  [[gnu::always_inline]] T operator()(T x) const {
    if (d == 0) return std::nearbyint(x);
    if (d > 0) {
      const T p = static_cast<T>(std::pow(10.0, static_cast<double>(d)));
      return std::nearbyint(x * p) / p;
    }
    const T p = static_cast<T>(std::pow(10.0, static_cast<double>(-d)));
    return std::nearbyint(x / p) * p;
  }
};

struct NanToNumF {
  double nan, pos, neg;
  explicit NanToNumF(const Attrs& a) : nan(a.f(0)), pos(a.f(1)), neg(a.f(2)) {}
  template <class T>
  [[gnu::always_inline]] T operator()(T x) const {
    return x != x ? T(nan) : (x == T(INFINITY) ? T(pos) : (x == T(-INFINITY) ? T(neg) : x));
  }
};

// fmod: the sign of the dividend (C's fmod); remainder: the sign of the divisor (Python's %).
// Integer division by zero is refused in the wrappers; INT_MIN % -1 is 0 (x86's idiv traps).
struct FmodF {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      if (b == 0 || b == T(-1)) return T(0);
      return a % b;
    } else {
      return std::fmod(a, b);
    }
  }
};
struct RemainderF {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      if (b == 0 || b == T(-1)) return T(0);
      T r = a % b;
      return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    } else {
      T r = std::fmod(a, b);
      return (r != 0 && ((b < 0) != (r < 0))) ? r + b : r;
    }
  }
};
struct Atan2F {
  template <class T>
  T operator()(T a, T b) const {
    return std::atan2(a, b);
  }
};

// ---- op definitions -------------------------------------------------------------------------

constexpr char kFloorN[] = "floor", kCeilN[] = "ceil", kTruncN[] = "trunc", kRoundN[] = "round",
               kFracN[] = "frac", kFmodN[] = "fmod", kRemainderN[] = "remainder",
               kReciprocalN[] = "reciprocal", kSquareN[] = "square", kLog2N[] = "log2",
               kLog10N[] = "log10", kExp2N[] = "exp2", kTanN[] = "tan", kAsinN[] = "asin",
               kAcosN[] = "acos", kAtanN[] = "atan", kAtan2N[] = "atan2", kSinhN[] = "sinh",
               kCoshN[] = "cosh", kAsinhN[] = "asinh", kAcoshN[] = "acosh", kAtanhN[] = "atanh",
               kNanToNumN[] = "nan_to_num", kLerpN[] = "lerp";

Tensor zero_grad(const GradCtx& c) { return zeros_like(c.g().detach()); }

const OpDef& kFloor = def_op({.name = kFloorN,
                              .traits = kEw,
                              .infer = infer_unary_float<kFloorN>,
                              .kernel = k_unary_float<FloorF>,
                              .grad = [](const GradCtx& c) { return TensorList{zero_grad(c)}; },
                              .expr = "std::floor($0)"});
const OpDef& kCeil = def_op({.name = kCeilN,
                             .traits = kEw,
                             .infer = infer_unary_float<kCeilN>,
                             .kernel = k_unary_float<CeilF>,
                             .grad = [](const GradCtx& c) { return TensorList{zero_grad(c)}; },
                             .expr = "std::ceil($0)"});
const OpDef& kTrunc = def_op({.name = kTruncN,
                              .traits = kEw,
                              .infer = infer_unary_float<kTruncN>,
                              .kernel = k_unary_float<TruncF>,
                              .grad = [](const GradCtx& c) { return TensorList{zero_grad(c)}; },
                              .expr = "std::trunc($0)"});
const OpDef& kRound = def_op(
    {.name = kRoundN,
     .attr_names = {"decimals"},
     .traits = kEw,
     .infer =
         [](std::span<const Tensor> in, const Attrs& a) {
           // decimals is a double attribute (a whole number): fused groups carry only doubles
           if (!(std::fabs(a.f(0)) <= 300) || a.f(0) != std::trunc(a.f(0)))
             fail(kRoundN, "decimals must be a whole number in [-300, 300], got ", a.f(0));
           return infer_unary_float<kRoundN>(in, a);
         },
     .kernel = k_unary_float<RoundF>,
     .grad = [](const GradCtx& c) { return TensorList{zero_grad(c)}; },
     .expr = "(@0 == 0 ? std::nearbyint($0) : (@0 > 0 ? std::nearbyint($0 * T(std::pow(10.0, @0))) "
             "/ T(std::pow(10.0, @0)) : std::nearbyint($0 / T(std::pow(10.0, -@0))) * "
             "T(std::pow(10.0, -@0))))"});
const OpDef& kFrac = def_op({.name = kFracN,
                             .traits = kEw,
                             .infer = infer_unary_float<kFracN>,
                             .kernel = k_unary_float<FracF>,
                             .grad = [](const GradCtx& c) { return TensorList{c.g()}; },
                             .expr = "($0 - std::trunc($0))"});
const OpDef& kReciprocal = def_op(
    {.name = kReciprocalN,
     .traits = kEw,
     .infer = infer_unary_float<kReciprocalN>,
     .kernel = k_unary_float<ReciprocalF>,
     // d 1/x = -1/x^2 = -out^2
     .grad = [](const GradCtx& c) { return TensorList{neg(mul(c.g(), mul(c.out(0), c.out(0))))}; },
     .expr = "(T(1) / $0)"});
const OpDef& kSquare =
    def_op({.name = kSquareN,
            .traits = kEw,
            .infer = infer_unary_num<kSquareN>,
            .kernel = k_unary_num<SquareF>,
            .grad = [](const GradCtx& c) { return TensorList{mul(c.g(), mul(c.in(0), 2.0))}; },
            .expr = "($0 * $0)"});
const OpDef& kLog2 = def_op(
    {.name = kLog2N,
     .traits = kEw,
     .infer = infer_unary_float<kLog2N>,
     .kernel = k_unary_float<Log2F>,
     .grad =
         [](const GradCtx& c) { return TensorList{div(c.g(), mul(c.in(0), 0.6931471805599453))}; },
     .expr = "std::log2($0)"});
const OpDef& kLog10 = def_op(
    {.name = kLog10N,
     .traits = kEw,
     .infer = infer_unary_float<kLog10N>,
     .kernel = k_unary_float<Log10F>,
     .grad =
         [](const GradCtx& c) { return TensorList{div(c.g(), mul(c.in(0), 2.302585092994046))}; },
     .expr = "std::log10($0)"});
const OpDef& kExp2 = def_op(
    {.name = kExp2N,
     .traits = kEw,
     .infer = infer_unary_float<kExp2N>,
     .kernel = k_unary_float<Exp2F>,
     .grad =
         [](const GradCtx& c) { return TensorList{mul(c.g(), mul(c.out(0), 0.6931471805599453))}; },
     .expr = "std::exp2($0)"});
// d tan = 1 + tan^2
const OpDef& kTan = def_op(
    {.name = kTanN,
     .traits = kEw,
     .infer = infer_unary_float<kTanN>,
     .kernel = k_unary_float<TanF>,
     .grad =
         [](const GradCtx& c) { return TensorList{mul(c.g(), add(mul(c.out(0), c.out(0)), 1.0))}; },
     .expr = "std::tan($0)"});
// d asin = 1 / sqrt(1 - x^2), d acos = -1 / sqrt(1 - x^2)
const OpDef& kAsin =
    def_op({.name = kAsinN,
            .traits = kEw,
            .infer = infer_unary_float<kAsinN>,
            .kernel = k_unary_float<AsinF>,
            .grad =
                [](const GradCtx& c) {
                  return TensorList{mul(c.g(), rsqrt(sub(1.0, mul(c.in(0), c.in(0)))))};
                },
            .expr = "std::asin($0)"});
const OpDef& kAcos =
    def_op({.name = kAcosN,
            .traits = kEw,
            .infer = infer_unary_float<kAcosN>,
            .kernel = k_unary_float<AcosF>,
            .grad =
                [](const GradCtx& c) {
                  return TensorList{neg(mul(c.g(), rsqrt(sub(1.0, mul(c.in(0), c.in(0))))))};
                },
            .expr = "std::acos($0)"});
const OpDef& kAtan = def_op(
    {.name = kAtanN,
     .traits = kEw,
     .infer = infer_unary_float<kAtanN>,
     .kernel = k_unary_float<AtanF>,
     .grad =
         [](const GradCtx& c) { return TensorList{div(c.g(), add(mul(c.in(0), c.in(0)), 1.0))}; },
     .expr = "std::atan($0)"});
const OpDef& kSinh =
    def_op({.name = kSinhN,
            .traits = kEw,
            .infer = infer_unary_float<kSinhN>,
            .kernel = k_unary_float<SinhF>,
            .grad = [](const GradCtx& c) { return TensorList{mul(c.g(), cosh(c.in(0)))}; },
            .expr = "std::sinh($0)"});
const OpDef& kCosh =
    def_op({.name = kCoshN,
            .traits = kEw,
            .infer = infer_unary_float<kCoshN>,
            .kernel = k_unary_float<CoshF>,
            .grad = [](const GradCtx& c) { return TensorList{mul(c.g(), sinh(c.in(0)))}; },
            .expr = "std::cosh($0)"});
// d asinh = 1 / sqrt(x^2 + 1), d acosh = 1 / sqrt(x^2 - 1), d atanh = 1 / (1 - x^2)
const OpDef& kAsinh =
    def_op({.name = kAsinhN,
            .traits = kEw,
            .infer = infer_unary_float<kAsinhN>,
            .kernel = k_unary_float<AsinhF>,
            .grad =
                [](const GradCtx& c) {
                  return TensorList{mul(c.g(), rsqrt(add(mul(c.in(0), c.in(0)), 1.0)))};
                },
            .expr = "std::asinh($0)"});
const OpDef& kAcosh =
    def_op({.name = kAcoshN,
            .traits = kEw,
            .infer = infer_unary_float<kAcoshN>,
            .kernel = k_unary_float<AcoshF>,
            .grad =
                [](const GradCtx& c) {
                  return TensorList{mul(c.g(), rsqrt(sub(mul(c.in(0), c.in(0)), 1.0)))};
                },
            .expr = "std::acosh($0)"});
const OpDef& kAtanh = def_op(
    {.name = kAtanhN,
     .traits = kEw,
     .infer = infer_unary_float<kAtanhN>,
     .kernel = k_unary_float<AtanhF>,
     .grad =
         [](const GradCtx& c) { return TensorList{div(c.g(), sub(1.0, mul(c.in(0), c.in(0))))}; },
     .expr = "std::atanh($0)"});
// torch: the gradient passes where the input is finite and is zero at NaN and +-inf.
const OpDef& kNanToNum = def_op(
    {.name = kNanToNumN,
     .attr_names = {"nan", "posinf", "neginf"},
     .traits = kEw,
     .infer = infer_unary_float<kNanToNumN>,
     .kernel = k_unary_float<NanToNumF>,
     .grad =
         [](const GradCtx& c) {
           return TensorList{where(isfinite(c.in(0)), c.g(), scalar_like(c.g(), 0))};
         },
     .expr =
         "($0 != $0 ? T(@0) : ($0 == T(INFINITY) ? T(@1) : ($0 == T(-INFINITY) ? T(@2) : $0)))"});

// Gradients as torch's: fmod's divisor gets -g trunc(a / b), remainder's -g floor(a / b).
const OpDef& kFmod =
    def_op({.name = kFmodN,
            .num_inputs = 2,
            .traits = kEw,
            .infer = infer_binary_num<kFmodN>,
            .kernel = k_binary_num<FmodF>,
            .grad =
                [](const GradCtx& c) {
                  return TensorList{
                      c.g(), c.need(1) ? neg(mul(c.g(), trunc(div(c.in(0), c.in(1))))) : Tensor()};
                },
            .expr = "std::fmod($0, $1)"});
const OpDef& kRemainder = def_op(
    {.name = kRemainderN,
     .num_inputs = 2,
     .traits = kEw,
     .infer = infer_binary_num<kRemainderN>,
     .kernel = k_binary_num<RemainderF>,
     .grad =
         [](const GradCtx& c) {
           return TensorList{c.g(),
                             c.need(1) ? neg(mul(c.g(), floor(div(c.in(0), c.in(1))))) : Tensor()};
         },
     .expr = "(std::fmod($0, $1) != 0 && (($1 < 0) != (std::fmod($0, $1) < 0)) ? std::fmod($0, $1) "
             "+ $1 : std::fmod($0, $1))"});
// d atan2(a, b) = (b da - a db) / (a^2 + b^2)
const OpDef& kAtan2 = def_op({.name = kAtan2N,
                              .num_inputs = 2,
                              .traits = kEw,
                              .infer = infer_binary_float<kAtan2N>,
                              .kernel = k_binary_float<Atan2F>,
                              .grad =
                                  [](const GradCtx& c) {
                                    const Tensor &a = c.in(0), &b = c.in(1);
                                    Tensor r = div(c.g(), add(mul(a, a), mul(b, b)));
                                    return TensorList{c.need(0) ? mul(r, b) : Tensor(),
                                                      c.need(1) ? neg(mul(r, a)) : Tensor()};
                                  },
                              .expr = "std::atan2($0, $1)"});

// lerp as torch computes it: from the nearer end, so that weight 1 gives `end` exactly.
struct LerpF {
  template <class T>
  [[gnu::always_inline]] T operator()(T a, T b, T w) const {
    return (w < T(0) ? -w : w) < T(0.5) ? a + w * (b - a) : b - (b - a) * (T(1) - w);
  }
};
const OpDef& kLerp = def_op(
    {.name = kLerpN,
     .num_inputs = 3,
     .traits = kEw,
     .infer =
         [](std::span<const Tensor> in, const Attrs&) {
           for (const auto& t : in) op_util::require_float(kLerpN, t);
           if (in[0].dtype() != in[1].dtype() || in[0].dtype() != in[2].dtype())
             fail(kLerpN, "expected start, end and weight of one dtype, got ", in[0].dtype(), ", ",
                  in[1].dtype(), " and ", in[2].dtype());
           Shape s = broadcast_shapes(in[0].shape(), in[1].shape(), kLerpN);
           return one(in[0].dtype(), broadcast_shapes(s, in[2].shape(), kLerpN));
         },
     .kernel =
         [](std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
           KILN_DISPATCH_FLOAT(in[0].dtype(), kLerpN, [&] {
             cpu::ternary_loop<scalar_t, scalar_t, scalar_t, scalar_t>(in[0], in[1], in[2], out[0],
                                                                       LerpF{});
           });
         },
     .grad =
         [](const GradCtx& c) {
           const Tensor& w = c.in(2);
           return TensorList{c.need(0) ? mul(c.g(), sub(1.0, w)) : Tensor(),
                             c.need(1) ? mul(c.g(), w) : Tensor(),
                             c.need(2) ? mul(c.g(), sub(c.in(1), c.in(0))) : Tensor()};
         },
     .expr = "((($2 < T(0) ? -$2 : $2) < T(0.5)) ? $0 + $2 * ($1 - $0) : $1 - ($1 - $0) * (T(1) - "
             "$2))"});

// ---- wrappers' helpers ----------------------------------------------------------------------

void need(const char* op, const Tensor& t) {
  if (!t.defined()) fail(op, "input is an undefined tensor");
}
// A host scalar next to a tensor: both take result_type(a, b), as elementwise.cpp's arithmetic.
std::pair<Tensor, Tensor> with_scalar(const char* op, const Tensor& a, const Scalar& b) {
  need(op, a);
  const DType t = result_type(a, b);
  const double v = is_integral(t) ? static_cast<double>(b.to_int()) : b.to_double();
  return {a.dtype() == t ? a : cast(a, t), scalar_tensor(v, t)};
}
std::pair<Tensor, Tensor> both(const char* op, const Tensor& a, const Tensor& b) {
  need(op, a);
  need(op, b);
  return promoted(a, b);
}
// Integer fmod / remainder by zero raises, as torch's ZeroDivisionError.
Tensor int_mod(const OpDef& op, const Tensor& x, const Tensor& y) {
  if (is_integral(y.dtype()) && y.is_concrete())
    for (auto v : y.to_vector<int64_t>())
      if (v == 0)
        fail(op.name.c_str(), "integer division by zero (", x.shape(), " % ", y.shape(), ")");
  return call1(op, {x, y});
}
// torch has no bool kernel for fmod / remainder (nor pow, floor_divide): refused alike.
void no_bool(const char* op, const Tensor& x) {
  if (x.dtype() == Bool)
    fail(op, "is not implemented for bool operands (", x.shape(), "), as in torch; cast first");
}
Tensor mod_tt(const OpDef& op, const Tensor& a, const Tensor& b) {
  auto [x, y] = both(op.name.c_str(), a, b);
  no_bool(op.name.c_str(), x);
  return int_mod(op, x, y);
}
Tensor mod_ts(const OpDef& op, const Tensor& a, const Scalar& b) {
  auto [x, y] = with_scalar(op.name.c_str(), a, b);
  no_bool(op.name.c_str(), x);
  return int_mod(op, x, y);
}
// Rounding an integer tensor is the identity (a copy, as torch returns a new tensor).
Tensor rounding(const OpDef& op, const Tensor& a, Attrs attrs = {}) {
  need(op.name.c_str(), a);
  if (!is_floating(a.dtype())) {
    if (a.dtype() == Bool) fail(op.name.c_str(), "expected a numeric tensor, got bool ", a.shape());
    return clone(a);
  }
  return call1(op, {a}, std::move(attrs));
}

}  // namespace

Tensor floor(const Tensor& a) { return rounding(kFloor, a); }
Tensor ceil(const Tensor& a) { return rounding(kCeil, a); }
Tensor trunc(const Tensor& a) { return rounding(kTrunc, a); }
Tensor round(const Tensor& a, int64_t decimals) {
  if (decimals > 300 || decimals < -300)
    fail(kRoundN, "decimals must lie in [-300, 300], got ", decimals);
  return rounding(kRound, a, {static_cast<double>(decimals)});
}
Tensor frac(const Tensor& a) {
  need(kFracN, a);
  if (!is_floating(a.dtype()))
    fail(kFracN, "expected a float32 or float64 tensor, got ", a.dtype(), " ", a.shape());
  return call1(kFrac, {a});
}
Tensor fmod(const Tensor& a, const Tensor& b) { return mod_tt(kFmod, a, b); }
Tensor fmod(const Tensor& a, const Scalar& b) { return mod_ts(kFmod, a, b); }
Tensor remainder(const Tensor& a, const Tensor& b) { return mod_tt(kRemainder, a, b); }
Tensor remainder(const Tensor& a, const Scalar& b) { return mod_ts(kRemainder, a, b); }
Tensor reciprocal(const Tensor& a) { return call1(kReciprocal, {float_in(a)}); }
Tensor square(const Tensor& a) {
  need(kSquareN, a);
  return call1(kSquare, {a.dtype() == Bool ? cast(a, Int64) : a});
}
Tensor log2(const Tensor& a) { return call1(kLog2, {float_in(a)}); }
Tensor log10(const Tensor& a) { return call1(kLog10, {float_in(a)}); }
Tensor exp2(const Tensor& a) { return call1(kExp2, {float_in(a)}); }
Tensor tan(const Tensor& a) { return call1(kTan, {float_in(a)}); }
Tensor asin(const Tensor& a) { return call1(kAsin, {float_in(a)}); }
Tensor acos(const Tensor& a) { return call1(kAcos, {float_in(a)}); }
Tensor atan(const Tensor& a) { return call1(kAtan, {float_in(a)}); }
Tensor atan2(const Tensor& a, const Tensor& b) {
  auto [x, y] = both(kAtan2N, a, b);
  return call1(kAtan2, {float_in(x), float_in(y)});
}
Tensor sinh(const Tensor& a) { return call1(kSinh, {float_in(a)}); }
Tensor cosh(const Tensor& a) { return call1(kCosh, {float_in(a)}); }
Tensor asinh(const Tensor& a) { return call1(kAsinh, {float_in(a)}); }
Tensor acosh(const Tensor& a) { return call1(kAcosh, {float_in(a)}); }
Tensor atanh(const Tensor& a) { return call1(kAtanh, {float_in(a)}); }

Tensor nan_to_num(const Tensor& a, double nan, std::optional<double> posinf,
                  std::optional<double> neginf) {
  need(kNanToNumN, a);
  if (!is_floating(a.dtype())) return clone(a);
  // The dtype's own largest finite value (bfloat16's is 3.3895e38: float32's would round to inf).
  const DType t = a.dtype();
  const double hi = t == Float64   ? std::numeric_limits<double>::max()
                    : t == BF16    ? 3.3895313892515355e38
                    : t == Float16 ? 65504.0
                                   : static_cast<double>(std::numeric_limits<float>::max());
  return call1(kNanToNum, {a}, {nan, posinf.value_or(hi), neginf.value_or(-hi)});
}

// torch.lerp takes end (and a tensor weight) of start's dtype only.
void same_lerp_dtype(const Tensor& a, const Tensor& b) {
  if (a.defined() && b.defined() && a.dtype() != b.dtype())
    fail(kLerpN, "expected end of dtype ", a.dtype(), " (as start), got ", b.dtype(), " ",
         b.shape());
}
Tensor lerp(const Tensor& a, const Tensor& b, double weight) {
  same_lerp_dtype(a, b);
  auto [x, y] = both(kLerpN, a, b);
  return call1(kLerp, {x, y, scalar_tensor(weight, x.dtype())});
}
Tensor lerp(const Tensor& a, const Tensor& b, const Tensor& weight) {
  need(kLerpN, weight);
  same_lerp_dtype(a, b);
  auto [x, y] = both(kLerpN, a, b);
  if (weight.dtype() != x.dtype())
    fail(kLerpN, "expected weight of dtype ", x.dtype(), " (as start and end), got ",
         weight.dtype(), " ", weight.shape());
  return call1(kLerp, {x, y, weight});
}
// torch computes input + (value * t1) * t2 (and / t2): the same rounding order here.
namespace {
// The three operands in their common dtype first, as torch promotes before it multiplies.
std::tuple<Tensor, Tensor, Tensor> promoted3(const char* op, const Tensor& a, const Tensor& b,
                                             const Tensor& c) {
  need(op, a);
  need(op, b);
  need(op, c);
  const DType t = ResultType().add(a).add(b).add(c).dtype();
  auto to = [t](const Tensor& x) { return x.dtype() == t ? x : cast(x, t); };
  return {to(a), to(b), to(c)};
}
}  // namespace
Tensor addcmul(const Tensor& input_, const Tensor& t1_, const Tensor& t2_, double value) {
  auto [input, t1, t2] = promoted3("addcmul", input_, t1_, t2_);
  return add(input, mul(value == 1.0 ? t1 : mul(t1, value), t2));
}
Tensor addcdiv(const Tensor& input_, const Tensor& t1_, const Tensor& t2_, double value) {
  need("addcdiv", t1_);
  need("addcdiv", t2_);
  if (!is_floating(t1_.dtype()) && !is_floating(t2_.dtype()))
    fail("addcdiv", "integer division of tensor1 ", t1_.dtype(), t1_.shape(), " by tensor2 ",
         t2_.dtype(), t2_.shape(), " is not supported (as torch); use floats");
  auto [input, t1, t2] = promoted3("addcdiv", input_, t1_, t2_);
  return add(input, div(value == 1.0 ? t1 : mul(t1, value), t2));
}
// min(max(x, lo), hi): the gradient goes to x where lo <= x <= hi, to lo where x < lo and to hi
// where the result is hi, as torch's; NaN in any operand propagates.
Tensor clamp(const Tensor& a, const Tensor& lo, const Tensor& hi) {
  need("clamp", a);
  if (!lo.defined() && !hi.defined())
    fail("clamp", "at least one of min and max must be given (input ", a.shape(), ")");
  Tensor r = a;
  if (lo.defined()) r = maximum(r, lo);
  if (hi.defined()) r = minimum(r, hi);
  return r;
}
Tensor clamp_min(const Tensor& a, double lo) { return clamp(a, lo, INFINITY); }
Tensor clamp_max(const Tensor& a, double hi) { return clamp(a, -INFINITY, hi); }
Tensor clamp_min(const Tensor& a, const Tensor& lo) { return clamp(a, lo, Tensor()); }
Tensor clamp_max(const Tensor& a, const Tensor& hi) { return clamp(a, Tensor(), hi); }

}  // namespace kiln
