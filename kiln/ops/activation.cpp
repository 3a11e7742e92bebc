// Activation family: relu, leaky_relu, sigmoid, tanh, gelu (and its one-pass gradient
// gelu_grad), silu, softplus, elu. Elementwise ops like the arithmetic family (elementwise_util.h),
// compiled with 512-bit vectors where the CPU has them (kiln/CMakeLists.txt): gelu's and sigmoid's
// kernels are bound by vector-op throughput, not memory.
#include <cmath>

#include "kiln/kernels/cpu/vec_math.h"
#include "kiln/ops/elementwise_util.h"
#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using namespace detail::elementwise_util;

constexpr char kReluN[] = "relu", kLeakyN[] = "leaky_relu", kSigN[] = "sigmoid", kTanhN[] = "tanh",
               kGeluN[] = "gelu", kGeluGradN[] = "gelu_grad", kSiluN[] = "silu",
               kSoftplusN[] = "softplus", kEluN[] = "elu";

// ---- scalar functors ------------------------------------------------------------------------

KILN_UNARY_F(ReluF, x <= T(0) ? T(0) : x)
KILN_UNARY_F(SigmoidF, vec_math::sigmoid<T>(x))
KILN_UNARY_F(TanhF, vec_math::tanh<T>(x))
KILN_UNARY_F(SiluF, x* vec_math::sigmoid<T>(x))

struct LeakyF {
  double s;
  explicit LeakyF(const Attrs& a) : s(a.f(0)) {}
  template <class T>
  [[gnu::always_inline]] T operator()(T x) const {
    return x < T(0) ? x * T(s) : x;
  }
};
// torch's softplus: log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (there
// the two agree to float precision and exp would overflow).
struct SoftplusF {
  double beta, thr;
  explicit SoftplusF(const Attrs& a) : beta(a.f(0)), thr(a.f(1)) {}
  template <class T>
  [[gnu::always_inline]] T operator()(T x) const {
    const T z = x * T(beta);
    return z > T(thr) ? x : std::log1p(vec_math::exp<T>(z)) / T(beta);
  }
};
struct EluF {
  double alpha;
  explicit EluF(const Attrs& a) : alpha(a.f(0)) {}
  template <class T>
  [[gnu::always_inline]] T operator()(T x) const {
    return x > T(0) ? x : T(alpha) * std::expm1(x);
  }
};
// The two gelu forms are separate functors: a branch on the flag inside the loop stops GCC
// from vectorizing it.
struct GeluErfF {
  explicit GeluErfF(const Attrs&) {}
  template <class T>
  [[gnu::always_inline]] T operator()(T x) const {
    return vec_math::gelu_erf<T>(x);
  }
};
struct GeluTanhF {
  explicit GeluTanhF(const Attrs&) {}
  template <class T>
  [[gnu::always_inline]] T operator()(T x) const {
    return vec_math::gelu_tanh<T>(x);
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
    return g * vec_math::gelu_erf_grad<T>(x);
  }
};
struct GeluGradTanhF {
  template <class T>
  [[gnu::always_inline]] T operator()(T g, T x) const {
    const T k = T(0.7978845608028654), a = T(0.044715);
    const T x2 = x * x;
    const T t = vec_math::tanh<T>(k * (x + a * x2 * x));
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
                  // torch: slope at 0 too (x > 0 ? g : slope g)
                  return TensorList{where(gt(c.in(0), 0.0), c.g(), mul(c.g(), c.attrs.f(0)))};
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

// d softplus = sigmoid(beta x) below the threshold, 1 above (where the op is the identity).
const OpDef& kSoftplus =
    def_op({.name = kSoftplusN,
            .attr_names = {"beta", "threshold"},
            .traits = kEw,
            .infer =
                [](std::span<const Tensor> in, const Attrs& a) {
                  if (!(a.f(0) != 0) || !std::isfinite(a.f(0)))
                    fail(kSoftplusN, "beta must be finite and nonzero, got ", a.f(0), " (input ",
                         in[0].dtype(), in[0].shape(), ")");
                  if (std::isnan(a.f(1))) fail(kSoftplusN, "threshold must not be NaN");
                  return infer_unary_float<kSoftplusN>(in, a);
                },
            .kernel = k_unary_float<SoftplusF>,
            .grad =
                [](const GradCtx& c) {
                  const Tensor z = mul(c.in(0), c.attrs.f(0));
                  return TensorList{where(gt(z, c.attrs.f(1)), c.g(), mul(c.g(), sigmoid(z)))};
                },
            .expr = "($0 * T(@0) > T(@1) ? $0 : std::log1p(exp($0 * T(@0))) / T(@0))"});
// d elu = 1 for x > 0, alpha exp(x) = elu(x) + alpha below.
const OpDef& kElu = def_op({.name = kEluN,
                            .attr_names = {"alpha"},
                            .traits = kEw,
                            .infer =
                                [](std::span<const Tensor> in, const Attrs& a) {
                                  if (!std::isfinite(a.f(0)))
                                    fail(kEluN, "alpha must be finite, got ", a.f(0), " (input ",
                                         in[0].dtype(), in[0].shape(), ")");
                                  return infer_unary_float<kEluN>(in, a);
                                },
                            .kernel = k_unary_float<EluF>,
                            .grad =
                                [](const GradCtx& c) {
                                  return TensorList{where(gt(c.in(0), 0.0), c.g(),
                                                          mul(c.g(), add(c.out(0), c.attrs.f(0))))};
                                },
                            .expr = "($0 > T(0) ? $0 : T(@0) * std::expm1($0))"});

}  // namespace

Tensor relu(const Tensor& a) { return call1(kRelu, {a}); }
Tensor& Tensor::relu_() {
  const Tensor in[1] = {*this};
  return op_util::write_in_place("relu_", *this, kRelu, in);
}
Tensor leaky_relu(const Tensor& a, double s) { return call1(kLeaky, {float_in(a)}, {s}); }
Tensor sigmoid(const Tensor& a) { return call1(kSigmoid, {float_in(a)}); }
Tensor tanh(const Tensor& a) { return call1(kTanh, {float_in(a)}); }
Tensor gelu(const Tensor& a, bool approximate) {
  return call1(kGelu, {float_in(a)}, {approximate});
}
Tensor detail::gelu_grad(const Tensor& g, const Tensor& x, bool approximate) {
  auto [a, b] = promoted(float_in(g), float_in(x));
  return call1(kGeluGrad, {a, b}, {approximate});
}
Tensor silu(const Tensor& a) { return call1(kSilu, {float_in(a)}); }
Tensor softplus(const Tensor& a, double beta, double threshold) {
  return call1(kSoftplus, {float_in(a)}, {beta, threshold});
}
Tensor elu(const Tensor& a, double alpha) { return call1(kElu, {float_in(a)}, {alpha}); }

}  // namespace kiln
