// Initializers: PyTorch's formulas over Kiln's rand/randn, written into the tensor with copy_
// under no-grad so a parameter stays a leaf.
#include "kiln/nn/init.h"

#include <cmath>
#include <limits>

#include "kiln/dispatch/dispatch.h"
#include "kiln/ops/ops.h"

using namespace kiln::detail;

namespace kiln::nn::init {
namespace {

void require_fillable(const char* op, const Tensor& t) {
  if (!t.defined()) fail(op, "tensor is undefined");
  if (!t.is_concrete())
    fail(op, "expects a concrete tensor, got a symbolic ", t.dtype(), " ", t.shape(),
         " (initialize parameters before building a graph or tracing)");
  if (!is_floating(t.dtype()))
    fail(op, "expects a floating tensor, got ", t.dtype(), " ", t.shape());
}

// fan_in_and_fan_out, but a tensor with too few dims is reported under the initializer's name.
std::pair<int64_t, int64_t> fans(const char* op, const Tensor& t) {
  require_fillable(op, t);
  if (t.dim() < 2)
    fail(op, "needs a tensor with at least 2 dims to compute fan in and fan out, got shape ",
         t.shape());
  return fan_in_and_fan_out(t);
}

int64_t fan(const char* op, const Tensor& t, FanMode mode) {
  auto [in, out] = fans(op, t);
  int64_t f = mode == FanMode::FanIn ? in : out;
  if (f <= 0) fail(op, "fan is zero for a tensor of shape ", t.shape());
  return f;
}

// Writes `src` (same shape) into t without recording autograd.
Tensor& assign_into(Tensor& t, const Tensor& src) {
  NoGradGuard ng;
  t.copy_(src);
  return t;
}

}  // namespace

double calculate_gain(Nonlinearity nl, double param) {
  switch (nl) {
    case Nonlinearity::Linear:
    case Nonlinearity::Conv:
    case Nonlinearity::Sigmoid:
      return 1.0;
    case Nonlinearity::Tanh:
      return 5.0 / 3.0;
    case Nonlinearity::ReLU:
      return std::sqrt(2.0);
    case Nonlinearity::LeakyReLU:
      return std::sqrt(2.0 / (1.0 + param * param));
    case Nonlinearity::SELU:
      return 0.75;
  }
  return 1.0;
}

std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& t) {
  if (!t.defined()) fail("fan_in_and_fan_out", "tensor is undefined");
  if (t.dim() < 2)
    fail("fan_in_and_fan_out", "needs a tensor with at least 2 dims, got shape ", t.shape());
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

Tensor& uniform_(Tensor& t, double a, double b) {
  require_fillable("uniform_", t);
  // Bounds the dtype cannot hold, or a range b - a past its largest value, would fill inf or
  // NaN (inf * 0, inf - inf); PyTorch refuses both.
  const double lim =
      t.dtype() == Float32 ? std::numeric_limits<float>::max() : std::numeric_limits<double>::max();
  if (!(a <= b) || !(std::fabs(a) <= lim) || !(std::fabs(b) <= lim) || !(b - a <= lim))
    fail("uniform_", "expects a <= b within ", t.dtype(),
         "'s range with b - a representable, got [", a, ", ", b, ")");
  NoGradGuard ng;
  return assign_into(t, add(mul(rand(t.shape(), t.dtype()), b - a), a));
}

Tensor& normal_(Tensor& t, double mean, double std) {
  require_fillable("normal_", t);
  if (!(std >= 0)) fail("normal_", "std must be >= 0, got ", std);
  NoGradGuard ng;
  return assign_into(t, add(mul(randn(t.shape(), t.dtype()), std), mean));
}

Tensor& constant_(Tensor& t, double value) {
  require_fillable("constant_", t);
  NoGradGuard ng;
  t.fill_(value);
  return t;
}
Tensor& zeros_(Tensor& t) { return constant_(t, 0.0); }
Tensor& ones_(Tensor& t) { return constant_(t, 1.0); }

Tensor& kaiming_uniform_(Tensor& t, double a, FanMode mode, Nonlinearity nl) {
  int64_t f = fan("kaiming_uniform_", t, mode);
  double bound = calculate_gain(nl, a) * std::sqrt(3.0 / static_cast<double>(f));
  return uniform_(t, -bound, bound);
}

Tensor& kaiming_normal_(Tensor& t, double a, FanMode mode, Nonlinearity nl) {
  int64_t f = fan("kaiming_normal_", t, mode);
  return normal_(t, 0.0, calculate_gain(nl, a) / std::sqrt(static_cast<double>(f)));
}

Tensor& xavier_uniform_(Tensor& t, double gain) {
  auto [in, out] = fans("xavier_uniform_", t);
  if (in + out <= 0) fail("xavier_uniform_", "fan is zero for a tensor of shape ", t.shape());
  double bound = gain * std::sqrt(6.0 / static_cast<double>(in + out));
  return uniform_(t, -bound, bound);
}

Tensor& xavier_normal_(Tensor& t, double gain) {
  auto [in, out] = fans("xavier_normal_", t);
  if (in + out <= 0) fail("xavier_normal_", "fan is zero for a tensor of shape ", t.shape());
  return normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(in + out)));
}

}  // namespace kiln::nn::init
