// Gradient clipping: the norm is a host loop in float64 (one pass over each gradient); the
// scaling is one op per gradient so it bumps the version counter like any in-place write.
#include "kiln/optim/clip.h"

#include <cmath>

#include "kiln/dispatch/dispatch.h"
#include "kiln/ops/ops.h"

using namespace kiln::detail;

namespace kiln::optim {
namespace {

std::vector<Tensor> grads_of(const std::vector<Tensor>& params, const char* op) {
  std::vector<Tensor> gs;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    if (!p.defined() || !p.is_concrete())
      fail(op, "parameter ", i, " must be a concrete tensor (clipping is eager-only)");
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (!is_floating(g.dtype()))
      fail(op, "gradient of parameter ", i, " has dtype ", g.dtype(), ", expected a float dtype");
    gs.push_back(g);
  }
  return gs;
}

}  // namespace

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  const char* op = "clip_grad_norm";
  if (!(max_norm >= 0)) fail(op, "max_norm must be >= 0, got ", max_norm);
  if (!(norm_type > 0)) fail(op, "norm_type must be > 0 or INFINITY, got ", norm_type);
  std::vector<Tensor> gs = grads_of(params, op);
  if (gs.empty()) return 0.0;
  const bool inf = std::isinf(norm_type);
  double acc = 0;
  for (const Tensor& g0 : gs) {
    Tensor g = g0.is_contiguous() ? g0 : raw_contiguous_copy(g0);
    const int64_t n = g.numel();
    KILN_DISPATCH_FLOAT(g.dtype(), op, [&] {
      const scalar_t* p = g.data_ptr<scalar_t>();
      for (int64_t i = 0; i < n; ++i) {
        const double a = std::fabs(static_cast<double>(p[i]));
        if (inf)
          acc = (a > acc || std::isnan(a)) ? a : acc;
        else if (norm_type == 2.0)
          acc += a * a;
        else if (norm_type == 1.0)
          acc += a;
        else
          acc += std::pow(a, norm_type);
      }
    });
  }
  const double total = inf                ? acc
                       : norm_type == 2.0 ? std::sqrt(acc)
                       : norm_type == 1.0 ? acc
                                          : std::pow(acc, 1.0 / norm_type);
  const double coef = max_norm / (total + 1e-6);
  if (!(coef >= 1.0)) {  // NaN included, as PyTorch's clamp(max=1) keeps NaN
    NoGradGuard ng;
    for (Tensor& g : gs) g.copy_(mul(g, coef));
  }
  return total;
}

void clip_grad_value(const std::vector<Tensor>& params, double clip_value) {
  const char* op = "clip_grad_value";
  if (!(clip_value >= 0)) fail(op, "clip_value must be >= 0, got ", clip_value);
  std::vector<Tensor> gs = grads_of(params, op);
  NoGradGuard ng;
  for (Tensor& g : gs) g.copy_(clamp(g, -clip_value, clip_value));
}

}  // namespace kiln::optim
