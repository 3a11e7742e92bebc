// Piecewise activations with PyTorch's formulas and gradients: hardtanh, hardsigmoid, hardswish
// (piecewise linear), selu and celu (linear and exponential pieces), with the smooth mish and
// logsigmoid; glu is a composite. Each primitive has an `expr`, so it fuses like the hot-path
// activations of activation.cpp (which alone is compiled with 512-bit vectors).
#include <cmath>

#include "kiln/ops/elementwise_util.h"
#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using namespace detail::elementwise_util;

constexpr char kHardtanhN[] = "hardtanh", kHardswishN[] = "hardswish",
               kHardsigmoidN[] = "hardsigmoid", kMishN[] = "mish", kSeluN[] = "selu",
               kCeluN[] = "celu", kLogsigmoidN[] = "logsigmoid";

// torch's SELU constants.
constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
constexpr double kSeluScale = 1.0507009873554804934193349852946;

struct HardtanhF {
  double lo, hi;
  explicit HardtanhF(const Attrs& a) : lo(a.f(0)), hi(a.f(1)) {}
  template <class T>
  [[gnu::always_inline]] T operator()(T x) const {
    return x < T(lo) ? T(lo) : (x > T(hi) ? T(hi) : x);
  }
};
// As torch: min(max(x + 3, 0), 6) / 6, in that order (the rounding matches).
KILN_UNARY_F(HardsigmoidF, std::min(std::max(x + T(3), T(0)), T(6)) / T(6))
KILN_UNARY_F(HardswishF, x* std::min(std::max(x + T(3), T(0)), T(6)) / T(6))
KILN_UNARY_F(MishF, x* std::tanh(std::log1p(std::exp(x))))
KILN_UNARY_F(SeluF, x > T(0) ? T(kSeluScale) * x : T(kSeluScale) * T(kSeluAlpha) * std::expm1(x))
// log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)): no overflow either way.
KILN_UNARY_F(LogsigmoidF, std::min(x, T(0)) - std::log1p(std::exp(-std::abs(x))))
struct CeluF {
  double alpha;
  explicit CeluF(const Attrs& a) : alpha(a.f(0)) {}
  template <class T>
  [[gnu::always_inline]] T operator()(T x) const {
    return x > T(0) ? x : T(alpha) * std::expm1(x / T(alpha));
  }
};

Tensor zero_like_g(const GradCtx& c) { return op_util::scalar_like(c.g(), 0); }

// torch: no gradient at or beyond the bounds (clamp passes it at the bounds).
const OpDef& kHardtanh =
    def_op({.name = kHardtanhN,
            .attr_names = {"min_val", "max_val"},
            .traits = kEw,
            .infer =
                [](std::span<const Tensor> in, const Attrs& a) {
                  op_util::require_numeric(kHardtanhN, in[0]);
                  if (a.f(0) > a.f(1))
                    fail(kHardtanhN, "min_val ", a.f(0), " must not be greater than max_val ",
                         a.f(1), " (input ", in[0].shape(), ")");
                  return op_util::one(in[0].dtype(), in[0].shape());
                },
            .kernel = k_unary_num<HardtanhF>,
            .grad =
                [](const GradCtx& c) {
                  Tensor inside = logical_and(gt(c.in(0), c.attrs.f(0)), lt(c.in(0), c.attrs.f(1)));
                  return TensorList{where(inside, c.g(), zero_like_g(c))};
                },
            .expr = "clamp($0, @0, @1)"});
const OpDef& kHardsigmoid =
    def_op({.name = kHardsigmoidN,
            .traits = kEw,
            .infer = infer_unary_float<kHardsigmoidN>,
            .kernel = k_unary_float<HardsigmoidF>,
            .grad =
                [](const GradCtx& c) {
                  Tensor inside = logical_and(gt(c.in(0), -3.0), lt(c.in(0), 3.0));
                  return TensorList{where(inside, mul(c.g(), 1.0 / 6.0), zero_like_g(c))};
                },
            .expr = "(min(max($0 + T(3), T(0)), T(6)) / T(6))"});
// torch: 0 below -3, g (x / 3 + 1/2) on [-3, 3), g from 3 on.
const OpDef& kHardswish = def_op(
    {.name = kHardswishN,
     .traits = kEw,
     .infer = infer_unary_float<kHardswishN>,
     .kernel = k_unary_float<HardswishF>,
     .grad =
         [](const GradCtx& c) {
           const Tensor& x = c.in(0);
           Tensor mid = mul(c.g(), add(div(x, 3.0), 0.5));
           // torch 1.13's vectorized kernel (every element but a short tail) takes the middle
           // piece on [-3, 3): g at x = 3. Its scalar tail uses [-3, 3] (1.5 g at 3): torch
           // disagrees with itself there, so Kiln follows the vector body.
           return TensorList{where(lt(x, -3.0), zero_like_g(c), where(lt(x, 3.0), mid, c.g()))};
         },
     .expr = "($0 * min(max($0 + T(3), T(0)), T(6)) / T(6))"});
// d mish = tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2), sp = softplus(x), as torch's backward.
const OpDef& kMish = def_op({.name = kMishN,
                             .traits = kEw,
                             .infer = infer_unary_float<kMishN>,
                             .kernel = k_unary_float<MishF>,
                             .grad =
                                 [](const GradCtx& c) {
                                   const Tensor& x = c.in(0);
                                   Tensor t = tanh(softplus(x));
                                   Tensor d = add(t, mul(mul(x, sigmoid(x)), sub(1.0, mul(t, t))));
                                   return TensorList{mul(c.g(), d)};
                                 },
                             .expr = "($0 * std::tanh(std::log1p(std::exp($0))))"});
const OpDef& kSelu =
    def_op({.name = kSeluN,
            .traits = kEw,
            .infer = infer_unary_float<kSeluN>,
            .kernel = k_unary_float<SeluF>,
            // scale for x > 0; scale alpha exp(x) below (not out + scale alpha: it cancels)
            .grad =
                [](const GradCtx& c) {
                  return TensorList{where(gt(c.in(0), 0.0), mul(c.g(), kSeluScale),
                                          mul(c.g(), mul(exp(c.in(0)), kSeluScale * kSeluAlpha)))};
                },
            .expr = "($0 > T(0) ? T(1.0507009873554804934) * $0 : T(1.0507009873554804934) * "
                    "T(1.6732632423543772848) * std::expm1($0))"});
const OpDef& kCelu =
    def_op({.name = kCeluN,
            .attr_names = {"alpha"},
            .traits = kEw,
            .infer =
                [](std::span<const Tensor> in, const Attrs& a) {
                  if (a.f(0) == 0 || !std::isfinite(a.f(0)))
                    fail(kCeluN, "alpha must be finite and nonzero, got ", a.f(0), " (input ",
                         in[0].dtype(), in[0].shape(), ")");
                  return infer_unary_float<kCeluN>(in, a);
                },
            .kernel = k_unary_float<CeluF>,
            // 1 for x > 0; exp(x / alpha) below (not out / alpha + 1: it cancels)
            .grad =
                [](const GradCtx& c) {
                  return TensorList{
                      where(gt(c.in(0), 0.0), c.g(), mul(c.g(), exp(div(c.in(0), c.attrs.f(0)))))};
                },
            .expr = "($0 > T(0) ? $0 : T(@0) * std::expm1($0 / T(@0)))"});
// d log sigmoid(x) = sigmoid(-x)
const OpDef& kLogsigmoid =
    def_op({.name = kLogsigmoidN,
            .traits = kEw,
            .infer = infer_unary_float<kLogsigmoidN>,
            .kernel = k_unary_float<LogsigmoidF>,
            .grad = [](const GradCtx& c) { return TensorList{mul(c.g(), sigmoid(neg(c.in(0))))}; },
            .expr = "(min($0, T(0)) - std::log1p(std::exp(-abs($0))))"});

}  // namespace

Tensor hardtanh(const Tensor& a, double min_val, double max_val) {
  if (!a.defined()) fail(kHardtanhN, "input is an undefined tensor");
  return call1(kHardtanh, {a.dtype() == Bool ? cast(a, Float32) : a}, {min_val, max_val});
}
Tensor hardswish(const Tensor& a) { return call1(kHardswish, {float_in(a)}); }
Tensor hardsigmoid(const Tensor& a) { return call1(kHardsigmoid, {float_in(a)}); }
Tensor mish(const Tensor& a) { return call1(kMish, {float_in(a)}); }
Tensor selu(const Tensor& a) { return call1(kSelu, {float_in(a)}); }
Tensor celu(const Tensor& a, double alpha) { return call1(kCelu, {float_in(a)}, {alpha}); }
Tensor logsigmoid(const Tensor& a) { return call1(kLogsigmoid, {float_in(a)}); }
Tensor glu(const Tensor& a, int64_t dim) {
  if (!a.defined()) fail("glu", "input is an undefined tensor");
  if (a.dim() == 0) fail("glu", "glu does not support scalars (0-d input)");
  const int64_t d = dim < 0 ? dim + a.dim() : dim;
  if (d < 0 || d >= a.dim())
    fail("glu", "dim ", dim, " is out of range for an input of shape ", a.shape());
  const int64_t n = a.shape()[d];
  if (n >= 0 && n % 2 != 0)
    fail("glu", "halving dimension must be even, but dimension ", d, " is size ", n,
         " (input shape ", a.shape(), ")");
  if (n < 0) {  // a dynamic dim: halves at run time
    auto halves = chunk(a, 2, d);
    return mul(halves[0], sigmoid(halves[1]));
  }
  // slices, not chunk: an empty dim gives two empty halves (chunk gives fewer pieces)
  return mul(slice(a, d, 0, n / 2), sigmoid(slice(a, d, n / 2, n)));
}

}  // namespace kiln
