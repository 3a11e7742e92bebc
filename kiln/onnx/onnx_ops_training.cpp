// ONNX converters for the optimizer steps of the ai.onnx.preview.training domain: Adagrad, Adam
// and Momentum (standard and Nesterov), each over n tensors (inputs R, T, X1..n, G1..n, then the
// states; outputs the new X and states), as the ONNX reference implementations compute them.
#include <cmath>

#include "kiln/onnx/onnx_internal.h"

namespace kiln::onnx::detail {
namespace {

// Registered under "<domain>.<op>", the key the importer looks up for nodes of that domain.
#define KILN_ONNX_TRAINING_OP(NAME)                                                   \
  std::vector<Tensor> conv_##NAME(NodeIn& n);                                         \
  const RegisterConverter reg_##NAME("ai.onnx.preview.training." #NAME, conv_##NAME); \
  std::vector<Tensor> conv_##NAME(NodeIn& n)

// The number of optimized tensors: inputs are R, T and `groups` lists of n tensors.
size_t tensors(const NodeIn& n, size_t groups) {
  const size_t k = n.in.size();
  if (k < 2 + groups || (k - 2) % groups != 0)
    n.fail("takes R, T and ", groups, " lists of equal length, got ", k, " inputs");
  return (k - 2) / groups;
}

// T > 0 as a float mask of x's dtype, to pick between the two formulas.
Tensor t_positive(const NodeIn& n, const Tensor& x) { return cast(gt(n.req(1), 0), x.dtype()); }

KILN_ONNX_TRAINING_OP(Adagrad) {
  const size_t k = tensors(n, 3);
  const double decay = n.f("decay_factor", 0), eps = n.f("epsilon", 0),
               norm = n.f("norm_coefficient", 0);
  TL xs, hs;
  for (size_t j = 0; j < k; ++j) {
    const Tensor &x = n.req(2 + j), &g = n.req(2 + k + j), &h = n.req(2 + 2 * k + j);
    Tensor r = div(n.req(0), add(mul(cast(n.req(1), x.dtype()), decay), 1.0));
    Tensor gr = add(mul(x, norm), g);
    Tensor h_new = add(h, mul(gr, gr));
    xs.push_back(sub(x, div(mul(r, gr), add(sqrt(h_new), eps))));
    hs.push_back(h_new);
  }
  xs.insert(xs.end(), hs.begin(), hs.end());
  return xs;
}

KILN_ONNX_TRAINING_OP(Momentum) {
  const size_t k = tensors(n, 3);
  const double alpha = n.f("alpha", 0), beta = n.f("beta", 0), norm = n.f("norm_coefficient", 0);
  const std::string mode = n.s("mode", "");
  if (mode != "standard" && mode != "nesterov")
    n.fail("mode must be standard or nesterov, got '", mode, "'");
  TL xs, vs;
  for (size_t j = 0; j < k; ++j) {
    const Tensor &x = n.req(2 + j), &g = n.req(2 + k + j), &v = n.req(2 + 2 * k + j);
    Tensor gr = add(mul(x, norm), g);
    // beta once T > 0, else 1: 1 + (beta - 1) [T > 0].
    Tensor b = add(mul(t_positive(n, x), beta - 1), 1.0);
    Tensor v_new = add(mul(v, alpha), mul(b, gr));
    Tensor step = mode == "standard" ? v_new : add(gr, mul(v_new, alpha));
    xs.push_back(sub(x, mul(n.req(0), step)));
    vs.push_back(v_new);
  }
  xs.insert(xs.end(), vs.begin(), vs.end());
  return xs;
}

KILN_ONNX_TRAINING_OP(Adam) {
  const size_t k = tensors(n, 4);
  const double alpha = n.f("alpha", 0.9), beta = n.f("beta", 0.999), eps = n.f("epsilon", 0),
               norm = n.f("norm_coefficient", 0), post = n.f("norm_coefficient_post", 0);
  TL xs, vs, hs;
  for (size_t j = 0; j < k; ++j) {
    const Tensor &x = n.req(2 + j), &g = n.req(2 + k + j), &v = n.req(2 + 2 * k + j),
                 &h = n.req(2 + 3 * k + j);
    Tensor gr = add(mul(x, norm), g);
    Tensor v_new = add(mul(v, alpha), mul(gr, 1 - alpha));
    Tensor h_new = add(mul(h, beta), mul(mul(gr, gr), 1 - beta));
    Tensor h_sqrt = add(sqrt(h_new), eps);
    // Bias correction once T > 0: r sqrt(1 - beta^T) / (1 - alpha^T), in float64.
    Tensor t = cast(n.req(1), Float64);
    Tensor corr =
        div(sqrt(sub(1.0, exp(mul(t, std::log(beta))))), sub(1.0, exp(mul(t, std::log(alpha)))));
    // (At T = 0 corr is 0 / 0: where, not a blend, picks 1 there.)
    Tensor factor = where(gt(n.req(1), 0), corr, ones(Shape{}, Float64));
    Tensor r = mul(n.req(0), cast(factor, x.dtype()));
    Tensor x_new = sub(x, mul(r, div(v_new, h_sqrt)));
    xs.push_back(mul(x_new, 1 - post));
    vs.push_back(v_new);
    hs.push_back(h_new);
  }
  xs.insert(xs.end(), vs.begin(), vs.end());
  xs.insert(xs.end(), hs.begin(), hs.end());
  return xs;
}

}  // namespace
}  // namespace kiln::onnx::detail
