// ONNX converters for elementwise math, activations, comparisons, reductions, softmax and the
// losses, each mapped onto Kiln ops (composed from them where Kiln has no single op).
#include <cmath>

#include "kiln/onnx/onnx_internal.h"

namespace kiln::onnx::detail {
namespace {

// Kiln promotes where ONNX keeps the input's type (integer sums, int pow): cast back.
Tensor keep(DType dt, const Tensor& t) { return cast(t, dt); }

Tensor float_like(const Tensor& x) { return is_floating(x.dtype()) ? x : cast(x, Float32); }

// Integer-valued float ops from casts: exact for |x| < 2^52, where every float that is not
// already an integer lies; beyond, x is returned (it is an integer, inf or NaN).
Tensor trunc_f(const Tensor& x) {
  Tensor t = cast(cast(x, Int64), x.dtype());
  // From 2^(mantissa bits) up every value of the type is an integer.
  const double big = x.dtype() == Float64   ? 4503599627370496.0
                     : x.dtype() == Float32 ? 8388608.0
                     : x.dtype() == Float16 ? 1024.0
                                            : 128.0;
  return where(lt(abs(x), big), t, x);
}
Tensor floor_f(const Tensor& x) {
  Tensor t = trunc_f(x);
  return sub(t, cast(gt(t, x), x.dtype()));
}
Tensor ceil_f(const Tensor& x) {
  Tensor t = trunc_f(x);
  return add(t, cast(lt(t, x), x.dtype()));
}
// Half to even, as ONNX Round (and numpy.round).
Tensor round_f(const Tensor& x) {
  Tensor r = floor_f(add(x, 0.5));
  Tensor tie = eq(sub(r, x), 0.5);
  Tensor odd = ne(sub(r, mul(floor_f(mul(r, 0.5)), 2.0)), 0.0);
  return where(logical_and(tie, odd), sub(r, 1.0), r);
}

void unary(const char* name, Tensor (*f)(const Tensor&)) {
  converters().emplace(name, [f](NodeIn& n) { return TL{f(n.req(0))}; });
}
void binary(const char* name, Tensor (*f)(const Tensor&, const Tensor&)) {
  converters().emplace(name, [f](NodeIn& n) { return TL{f(n.req(0), n.req(1))}; });
}

const bool registered = [] {
  unary("Neg", [](const Tensor& x) { return neg(x); });
  unary("Abs", [](const Tensor& x) { return abs(x); });
  unary("Sqrt", [](const Tensor& x) { return sqrt(x); });
  unary("Exp", [](const Tensor& x) { return exp(x); });
  unary("Log", [](const Tensor& x) { return log(x); });
  unary("Sin", [](const Tensor& x) { return sin(x); });
  unary("Cos", [](const Tensor& x) { return cos(x); });
  unary("Tan", [](const Tensor& x) { return div(sin(x), cos(x)); });
  unary("Tanh", [](const Tensor& x) { return tanh(x); });
  unary("Sigmoid", [](const Tensor& x) { return sigmoid(x); });
  unary("Relu", [](const Tensor& x) { return relu(x); });
  unary("Erf", [](const Tensor& x) { return erf(x); });
  unary("Sign", [](const Tensor& x) { return keep(x.dtype(), sign(x)); });
  unary("Reciprocal", [](const Tensor& x) { return div(1.0, x); });
  unary("Floor", floor_f);
  unary("Ceil", ceil_f);
  unary("Round", round_f);
  unary("Sinh", [](const Tensor& x) { return mul(sub(exp(x), exp(neg(x))), 0.5); });
  unary("Cosh", [](const Tensor& x) { return mul(add(exp(x), exp(neg(x))), 0.5); });
  unary("Asinh", [](const Tensor& x) { return log(add(x, sqrt(add(mul(x, x), 1.0)))); });
  unary("Acosh", [](const Tensor& x) { return log(add(x, sqrt(sub(mul(x, x), 1.0)))); });
  unary("Atanh", [](const Tensor& x) { return mul(log(div(add(x, 1.0), sub(1.0, x))), 0.5); });
  unary("Asin", [](const Tensor& x) { return asin(x); });
  unary("Acos", [](const Tensor& x) { return acos(x); });
  unary("Atan", [](const Tensor& x) { return atan(x); });
  unary("Det", [](const Tensor& x) { return linalg::det(x); });
  unary("Softsign", [](const Tensor& x) { return div(x, add(abs(x), 1.0)); });
  unary("IsNaN", [](const Tensor& x) { return ne(x, x); });
  unary("Not", [](const Tensor& x) { return logical_not(x); });
  unary("Identity", [](const Tensor& x) { return x; });
  unary("Softplus", [](const Tensor& x) { return softplus(x); });
  binary("Add", [](const Tensor& a, const Tensor& b) { return add(a, b); });
  binary("Sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); });
  binary("Mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); });
  binary("Equal", [](const Tensor& a, const Tensor& b) { return eq(a, b); });
  binary("Greater", [](const Tensor& a, const Tensor& b) { return gt(a, b); });
  binary("Less", [](const Tensor& a, const Tensor& b) { return lt(a, b); });
  binary("GreaterOrEqual", [](const Tensor& a, const Tensor& b) { return ge(a, b); });
  binary("LessOrEqual", [](const Tensor& a, const Tensor& b) { return le(a, b); });
  binary("And", [](const Tensor& a, const Tensor& b) { return logical_and(a, b); });
  binary("Or", [](const Tensor& a, const Tensor& b) { return logical_or(a, b); });
  binary("Xor", [](const Tensor& a, const Tensor& b) { return ne(a, b); });
  binary("MatMul", [](const Tensor& a, const Tensor& b) { return matmul(a, b); });
  return true;
}();

KILN_ONNX_OP(Div) {
  const Tensor &a = n.req(0), &b = n.req(1);
  // ONNX divides integers as C does (truncating), where Kiln's div is true division.
  const DType t = promote(a.dtype(), b.dtype());
  if (!is_floating(t)) return TL{keep(t, div(a, b, "trunc"))};
  return TL{keep(t, div(a, b))};
}

KILN_ONNX_OP(Pow) {
  const Tensor &a = n.req(0), &b = n.req(1);
  return TL{keep(a.dtype(), pow(float_like(a), float_like(b)))};
}

KILN_ONNX_OP(Mod) {
  const Tensor &a = n.req(0), &b = n.req(1);
  const bool fmod = n.i("fmod", 0) != 0;
  if (is_integral(a.dtype()) && is_integral(b.dtype())) {
    Tensor r = sub(a, mul(div(a, b, "trunc"), b));  // truncated quotient: r has a's sign
    if (fmod) return TL{r};
    Tensor fix = logical_and(ne(r, 0.0), ne(lt(r, 0.0), lt(b, 0.0)));
    return TL{where(fix, add(r, b), r)};
  }
  Tensor q = div(a, b);
  return TL{sub(a, mul(fmod ? trunc_f(q) : floor_f(q), b))};
}

KILN_ONNX_OP(BitShift) {
  const std::string dir = n.s("direction", "");
  if (dir == "LEFT") return TL{bitwise_left_shift(n.req(0), n.req(1))};
  if (dir == "RIGHT") return TL{bitwise_right_shift(n.req(0), n.req(1))};
  n.fail("direction must be LEFT or RIGHT, got '", dir, "'");
}

KILN_ONNX_OP(IsInf) {
  const Tensor& x = n.req(0);
  const bool pos = n.i("detect_positive", 1) != 0, negv = n.i("detect_negative", 1) != 0;
  Tensor p = eq(x, INFINITY), m = eq(x, -INFINITY);
  if (pos && negv) return TL{logical_or(p, m)};
  if (pos) return TL{p};
  if (negv) return TL{m};
  return TL{logical_and(p, m)};
}

KILN_ONNX_OP(LeakyRelu) { return TL{leaky_relu(n.req(0), n.f("alpha", 0.01))}; }
KILN_ONNX_OP(Elu) { return TL{elu(n.req(0), n.f("alpha", 1.0))}; }
KILN_ONNX_OP(Celu) {
  const Tensor& x = n.req(0);
  const double alpha = n.f("alpha", 1.0);
  return TL{mul(elu(div(x, alpha)), alpha)};
}
KILN_ONNX_OP(Selu) {
  const double alpha = n.f("alpha", 1.67326319217681884765625);
  const double gamma = n.f("gamma", 1.05070102214813232421875);
  return TL{mul(elu(n.req(0), alpha), gamma)};
}
KILN_ONNX_OP(ThresholdedRelu) {
  const Tensor& x = n.req(0);
  return TL{where(gt(x, n.f("alpha", 1.0)), x, zeros_like(x))};
}
KILN_ONNX_OP(HardSigmoid) {
  const double alpha = n.f("alpha", 0.2), beta = n.f("beta", 0.5);
  // torch's hardsigmoid (what torch exports) is alpha 1/6, beta 1/2: Kiln's op.
  if (std::fabs(alpha - 1.0 / 6) < 1e-7 && beta == 0.5 && is_floating(n.req(0).dtype()))
    return TL{hardsigmoid(n.req(0))};
  return TL{clamp(add(mul(n.req(0), alpha), beta), 0.0, 1.0)};
}
// ONNX's HardSwish is torch's (x relu6(x + 3) / 6): Kiln's op, which a convolution before it
// takes as its epilogue.
KILN_ONNX_OP(HardSwish) { return TL{hardswish(n.req(0))}; }
KILN_ONNX_OP(Shrink) {
  const Tensor& x = n.req(0);
  const double lambd = n.f("lambd", 0.5), bias = n.f("bias", 0.0);
  Tensor out = where(lt(x, -lambd), add(x, bias), where(gt(x, lambd), sub(x, bias), zeros_like(x)));
  return TL{keep(x.dtype(), out)};
}
KILN_ONNX_OP(PRelu) {
  const Tensor &x = n.req(0), &slope = n.req(1);
  return TL{where(lt(x, 0.0), mul(x, slope), x)};
}
KILN_ONNX_OP(Where) { return TL{where(n.req(0), n.req(1), n.req(2))}; }

std::vector<Tensor> variadic(NodeIn& n, Tensor (*f)(const Tensor&, const Tensor&)) {
  Tensor acc = n.req(0);
  for (size_t k = 1; k < n.in.size(); ++k) acc = f(acc, n.req(k));
  return TL{acc};
}
KILN_ONNX_OP(Max) {
  return variadic(n, [](const Tensor& a, const Tensor& b) { return maximum(a, b); });
}
KILN_ONNX_OP(Min) {
  return variadic(n, [](const Tensor& a, const Tensor& b) { return minimum(a, b); });
}
KILN_ONNX_OP(Sum) {
  return variadic(n, [](const Tensor& a, const Tensor& b) { return add(a, b); });
}
KILN_ONNX_OP(Mean) {
  Tensor s = variadic(n, [](const Tensor& a, const Tensor& b) { return add(a, b); })[0];
  return TL{div(s, static_cast<double>(n.in.size()))};
}

KILN_ONNX_OP(Clip) {
  Tensor x = n.req(0);
  if (n.opset < 11) return TL{clamp(x, n.f("min", -INFINITY), n.f("max", INFINITY))};
  if (n.has_input(1)) x = maximum(x, n.in[1]);
  if (n.has_input(2)) x = minimum(x, n.in[2]);
  return TL{x};
}

KILN_ONNX_OP(Cast) {
  const DType dt = dtype_from_onnx(static_cast<int32_t>(n.req_i("to")), "Cast 'to'");
  return TL{cast(n.req(0), dt)};
}
KILN_ONNX_OP(CastLike) { return TL{cast(n.req(0), n.req(1).dtype())}; }

KILN_ONNX_OP(Dropout) {
  const Tensor& x = n.req(0);
  if (n.has_input(2)) {
    const Tensor& tm = n.in[2];
    if (!tm.is_concrete() || tm.numel() != 1 || tm.to_vector<int64_t>()[0] != 0) {
      double ratio = n.has_input(1) && n.in[1].is_concrete() && n.in[1].numel() == 1
                         ? n.in[1].to_vector<double>()[0]
                         : 0.5;
      if (!tm.is_concrete() || (n.has_input(1) && !n.in[1].is_concrete()))
        n.fail("training_mode and the ratio must be known at import (constants)");
      if (ratio != 0) n.fail("training mode (random dropout) is not supported");
    }
  }
  // The mask is all true in inference; eq || ne is true for NaN too and works symbolically.
  Tensor mask = n.proto.output_size() > 1 ? logical_or(eq(x, x), ne(x, x)) : Tensor();
  return TL{x, mask};
}

// ---- reductions ------------------------------------------------------------------------------

// Axes from the attribute (older opsets) or input 1 (ReduceSum from 13, the others from 18).
std::vector<int64_t> reduce_axes(NodeIn& n, bool* noop) {
  *noop = false;
  if (n.has("axes")) return n.ints("axes");
  std::vector<int64_t> axes;
  // An empty axes input is as an absent one.
  if (n.has_input(1) && !(n.in[1].shape().is_static() && n.in[1].numel() == 0))
    axes = const_ints(n, 1, "axes");
  *noop = axes.empty() && n.i("noop_with_empty_axes", 0) != 0;
  return axes;
}

TL reduce(NodeIn& n,
          const std::function<Tensor(const Tensor&, const std::vector<int64_t>&, bool)>& f) {
  const Tensor& x = n.req(0);
  bool noop = false;
  std::vector<int64_t> axes = reduce_axes(n, &noop);
  if (noop) return TL{x};
  const bool keep_dims = n.i("keepdims", 1) != 0;
  if (axes.empty())
    for (int64_t d = 0; d < x.dim(); ++d) axes.push_back(d);
  if (x.dim() == 0) return TL{f(x, {}, keep_dims)};
  return TL{f(x, axes, keep_dims)};
}

KILN_ONNX_OP(ReduceSum) {
  const DType dt = n.req(0).dtype();
  return reduce(n, [dt](const Tensor& x, const std::vector<int64_t>& a, bool k) {
    return keep(dt, sum(x, a, k));
  });
}
KILN_ONNX_OP(ReduceMean) {
  return reduce(n, [](const Tensor& x, const std::vector<int64_t>& a, bool k) {
    return keep(x.dtype(), mean(float_like(x), a, k));
  });
}
KILN_ONNX_OP(ReduceMax) {
  return reduce(
      n, [](const Tensor& x, const std::vector<int64_t>& a, bool k) { return max(x, a, k); });
}
KILN_ONNX_OP(ReduceMin) {
  return reduce(
      n, [](const Tensor& x, const std::vector<int64_t>& a, bool k) { return min(x, a, k); });
}
KILN_ONNX_OP(ReduceL1) {
  return reduce(n, [](const Tensor& x, const std::vector<int64_t>& a, bool k) {
    return keep(x.dtype(), sum(abs(x), a, k));
  });
}
KILN_ONNX_OP(ReduceL2) {
  return reduce(n, [](const Tensor& x, const std::vector<int64_t>& a, bool k) {
    return keep(x.dtype(), sqrt(sum(mul(float_like(x), float_like(x)), a, k)));
  });
}
KILN_ONNX_OP(ReduceSumSquare) {
  return reduce(n, [](const Tensor& x, const std::vector<int64_t>& a, bool k) {
    return keep(x.dtype(), sum(mul(x, x), a, k));
  });
}
KILN_ONNX_OP(ReduceLogSum) {
  return reduce(
      n, [](const Tensor& x, const std::vector<int64_t>& a, bool k) { return log(sum(x, a, k)); });
}
KILN_ONNX_OP(ReduceLogSumExp) {
  return reduce(n, [](const Tensor& x, const std::vector<int64_t>& a, bool k) {
    return keep(x.dtype(), logsumexp(float_like(x), a, k));
  });
}
KILN_ONNX_OP(ReduceProd) {
  // Kiln has no product reduction: sign and magnitude apart, exp(sum(log|x|)) times the parity
  // of the negative count, and 0 wherever a zero occurs.
  return reduce(n, [](const Tensor& x, const std::vector<int64_t>& a, bool k) {
    Tensor xf = float_like(x);
    Tensor mag = exp(sum(log(abs(xf)), a, k));
    Tensor negc = cast(sum(cast(lt(xf, 0.0), Int64), a, k), Float64);
    Tensor odd = ne(sub(negc, mul(floor_f(mul(negc, 0.5)), 2.0)), 0.0);
    Tensor r = where(odd, neg(mag), mag);
    if (is_integral(x.dtype())) r = round_f(r);
    return keep(x.dtype(), r);
  });
}

TL arg_reduce(NodeIn& n, bool is_max) {
  const Tensor& x = n.req(0);
  const int64_t axis = wrap_dim(n.i("axis", 0), x.dim(), kOp);
  const bool keep_dims = n.i("keepdims", 1) != 0;
  if (n.i("select_last_index", 0) != 0) {
    if (x.size(axis) < 0) n.fail("select_last_index needs a static size");
    Tensor f = flip(x, {axis});
    Tensor i = is_max ? argmax(f, axis, keep_dims) : argmin(f, axis, keep_dims);
    return TL{sub(x.size(axis) - 1, i)};
  }
  return TL{is_max ? argmax(x, axis, keep_dims) : argmin(x, axis, keep_dims)};
}
KILN_ONNX_OP(ArgMax) { return arg_reduce(n, true); }
KILN_ONNX_OP(ArgMin) { return arg_reduce(n, false); }

// ---- softmax family --------------------------------------------------------------------------

// Before opset 13 the softmax family flattens to 2-D at `axis` (default 1) and works on rows.
TL softmax_like(NodeIn& n, const std::function<Tensor(const Tensor&, int64_t)>& f) {
  const Tensor& x = n.req(0);
  if (n.opset >= 13) return TL{f(x, wrap_dim(n.i("axis", -1), x.dim(), kOp))};
  const int64_t axis = wrap_dim(n.i("axis", 1), x.dim() + 1, kOp);
  if (!x.shape().is_static()) n.fail("needs static sizes before opset 13");
  int64_t rows = 1, cols = 1;
  for (int64_t d = 0; d < x.dim(); ++d) (d < axis ? rows : cols) *= x.size(d);
  Tensor y = f(reshape(x, Shape{rows, cols}), 1);
  return TL{reshape(y, x.shape())};
}
KILN_ONNX_OP(Softmax) {
  return softmax_like(n, [](const Tensor& x, int64_t d) { return softmax(x, d); });
}
KILN_ONNX_OP(LogSoftmax) {
  return softmax_like(n, [](const Tensor& x, int64_t d) { return log_softmax(x, d); });
}
KILN_ONNX_OP(Hardmax) {
  return softmax_like(n, [](const Tensor& x, int64_t d) {
    if (x.size(d) < 0) fail(kOp, "Hardmax needs a static size along its axis");
    if (x.size(d) > (int64_t(1) << 24)) fail(kOp, "Hardmax: axis of ", x.size(d), " elements");
    Tensor idx = argmax(x, d, true);
    Shape s(x.dim(), 1);
    s[d] = x.size(d);
    Tensor r = reshape(arange(0, static_cast<double>(x.size(d))), s);
    return cast(eq(idx, r), x.dtype());
  });
}

// ---- losses ----------------------------------------------------------------------------------

// NegativeLogLikelihoodLoss: input [N, C, d...], target [N, d...], optional weight [C].
Tensor nll(NodeIn& n, const Tensor& input, const Tensor& target, const Tensor& weight) {
  const std::string red = n.s("reduction", "mean");
  if (red != "mean" && red != "sum" && red != "none") n.fail("unknown reduction '", red, "'");
  if (input.dim() < 2) n.fail("input must have rank >= 2, got ", input.shape());
  const bool has_ignore = n.has("ignore_index");
  const int64_t ignore = n.i("ignore_index", -100);
  Tensor t = cast(target, Int64);
  Tensor valid = has_ignore ? ne(t, static_cast<double>(ignore)) : Tensor();
  Tensor safe = has_ignore ? where(valid, t, zeros_like(t)) : t;
  Tensor picked = squeeze(gather(input, 1, unsqueeze(safe, 1)), 1);
  Tensor w;
  if (weight.defined()) w = index_select(weight, 0, reshape(safe, Shape{-1}));
  if (w.defined()) w = reshape(w, safe.shape());
  if (valid.defined()) {
    Tensor v = cast(valid, input.dtype());
    w = w.defined() ? mul(w, v) : v;
  }
  Tensor loss = neg(picked);
  if (w.defined()) loss = mul(loss, w);
  if (red == "none") return loss;
  if (red == "sum") return sum(loss);
  if (!w.defined()) return mean(loss);
  return div(sum(loss), sum(w));
}
KILN_ONNX_OP(NegativeLogLikelihoodLoss) { return TL{nll(n, n.req(0), n.req(1), n.input(2))}; }
KILN_ONNX_OP(SoftmaxCrossEntropyLoss) {
  Tensor lp = log_softmax(n.req(0), 1);
  return TL{nll(n, lp, n.req(1), n.input(2)), lp};
}

}  // namespace
}  // namespace kiln::onnx::detail
