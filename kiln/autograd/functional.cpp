// Functional autodiff (grad, vjp) and gradcheck by central differences in float64.
#include <cmath>
#include <sstream>

#include "kiln/autograd/autograd.h"
#include "kiln/ops/ops.h"

namespace kiln {

namespace {
std::vector<Tensor> fresh_leaves(const std::vector<Tensor>& inputs) {
  std::vector<Tensor> xs;
  for (const auto& t : inputs) {
    Tensor x = t.detach();
    if (is_floating(x.dtype())) x.requires_grad_(true);
    xs.push_back(x);
  }
  return xs;
}
}  // namespace

namespace {
// Gradients of y (with cotangent v; undefined = ones for a scalar) for each leaf: zeros where y
// does not depend on it, undefined for non-floating leaves.
std::vector<Tensor> leaf_grads(const Tensor& y, const std::vector<Tensor>& xs, const Tensor& v) {
  std::vector<Tensor> diff;
  for (auto& x : xs)
    if (x.requires_grad()) diff.push_back(x);
  std::vector<Tensor> g = grad({y}, diff, {v}, false, false, true);
  std::vector<Tensor> out;
  size_t j = 0;
  for (auto& x : xs) {
    if (!x.requires_grad()) {
      out.emplace_back();
      continue;
    }
    Tensor gi = g[j++];
    out.push_back(gi.defined() ? gi : zeros_like(x));
  }
  return out;
}
}  // namespace

std::vector<Tensor> grad(const TensorFn& fn, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> xs = fresh_leaves(inputs);
  EnableGradGuard eg;
  Tensor y = fn(xs);
  if (y.numel() != 1) fail("grad", "fn must return a scalar, got shape ", y.shape());
  return leaf_grads(y, xs, Tensor());
}

std::pair<Tensor, std::vector<Tensor>> vjp(const TensorFn& fn, const std::vector<Tensor>& inputs,
                                           const Tensor& v) {
  std::vector<Tensor> xs = fresh_leaves(inputs);
  EnableGradGuard eg;
  Tensor y = fn(xs);
  std::vector<Tensor> g = leaf_grads(y, xs, v);
  return {y.detach(), g};
}

GradcheckResult gradcheck(const TensorFn& fn, const std::vector<Tensor>& inputs, double eps,
                          double atol, double rtol) {
  return gradcheck([&](const std::vector<Tensor>& xs) { return std::vector<Tensor>{fn(xs)}; },
                   inputs, eps, atol, rtol);
}

GradcheckResult gradcheck(const TensorsFn& fn, const std::vector<Tensor>& inputs, double eps,
                          double atol, double rtol) {
  GradcheckResult res;
  // float64 copies of floating inputs (keeping strides would be lost by a cast; callers that
  // test non-contiguous inputs build them inside fn).
  std::vector<Tensor> base;
  for (const auto& t : inputs) base.push_back(is_floating(t.dtype()) ? t.detach().to(Float64) : t);

  // Random cotangents, fixed per output.
  std::vector<Tensor> outs0;
  {
    NoGradGuard ng;
    outs0 = fn(base);
  }
  std::vector<Tensor> vs;
  for (const auto& o : outs0)
    vs.push_back(is_floating(o.dtype()) ? randn(o.shape(), Float64) : Tensor());

  auto scalar = [&](const std::vector<Tensor>& xs) {
    std::vector<Tensor> outs = fn(xs);
    Tensor acc = scalar_tensor(0.0, Float64);
    for (size_t k = 0; k < outs.size(); ++k)
      if (vs[k].defined()) acc = add(acc, sum(mul(outs[k].to(Float64), vs[k])));
    return acc;
  };

  // Analytic.
  std::vector<Tensor> xs;
  for (const auto& t : base) {
    Tensor x = t.clone().detach();
    if (is_floating(x.dtype())) x.requires_grad_(true);
    xs.push_back(x);
  }
  std::vector<Tensor> analytic(xs.size());
  {
    EnableGradGuard eg;
    Tensor s = scalar(xs);
    std::vector<Tensor> diff;
    for (auto& x : xs)
      if (x.requires_grad()) diff.push_back(x);
    if (!diff.empty() && s.requires_grad()) {
      std::vector<Tensor> g = grad({s}, diff, {}, false, false, true);
      size_t j = 0;
      for (size_t k = 0; k < xs.size(); ++k)
        if (xs[k].requires_grad()) analytic[k] = g[j++];
    }
  }

  // Numeric.
  NoGradGuard ng;
  for (size_t k = 0; k < base.size(); ++k) {
    if (!is_floating(base[k].dtype())) continue;
    Tensor xk = base[k].clone();
    double* p = xk.data_ptr<double>();
    std::vector<Tensor> args = base;
    args[k] = xk;
    std::vector<double> an = analytic[k].defined() ? analytic[k].to_vector<double>()
                                                   : std::vector<double>(xk.numel(), 0.0);
    for (int64_t i = 0; i < xk.numel(); ++i) {
      double orig = p[i];
      p[i] = orig + eps;
      double fp = scalar(args).item<double>();
      p[i] = orig - eps;
      double fm = scalar(args).item<double>();
      p[i] = orig;
      double num = (fp - fm) / (2 * eps);
      double err = std::fabs(num - an[i]);
      res.max_abs_err = std::max(res.max_abs_err, err);
      if (!(err <= atol + rtol * std::fabs(num)) && res.ok) {
        res.ok = false;
        std::ostringstream os;
        os << "input " << k << " (shape " << xk.shape() << ") element " << i << ": analytic "
           << an[i] << " vs numeric " << num;
        res.message = os.str();
      }
    }
  }
  return res;
}

}  // namespace kiln
