// Sample for jit_call: a jitted function called on tensors that require grad runs as one
// jit_call op whose gradient is the compiled backward graph.
#include <cmath>

#include "kiln/jit/jit.h"
#include "samples/op_samples.h"

namespace kiln::testing {
namespace {

Tensor jitted(const Tensor& a, const Tensor& b) {
  static auto f = jit([](const Tensor& x, const Tensor& y) { return mul(tanh(x), add(y, 1.0)); });
  return f(a, b);
}

SampleRegistrar reg({OpSample{
    .ops = {"jit_call"},
    .name = "tanh_mul_broadcast",
    .inputs =
        [] {
          return std::vector<Tensor>{rnd({2, 3}, 1), rnd({3}, 2)};
        },
    .run = [](const std::vector<Tensor>& in) { return jitted(in[0], in[1]); },
    .reference =
        [](const std::vector<Tensor>& in) {
          return ref_elementwise(
              in, [](const std::vector<double>& v) { return std::tanh(v[0]) * (v[1] + 1); });
        },
}});

}  // namespace
}  // namespace kiln::testing
