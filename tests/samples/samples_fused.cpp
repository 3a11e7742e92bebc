// Sample for the `fused` op (what the fusion pass makes): a broadcast affine + gelu program.
#include <cmath>

#include "kiln/dispatch/dispatch.h"
#include "kiln/ops/fused.h"
#include "samples/op_samples.h"

using namespace kiln::detail;

namespace kiln::testing {
namespace {

SampleRegistrar reg({OpSample{
    .ops = {"fused"},
    .name = "gelu_affine_broadcast",
    .inputs =
        [] {
          return std::vector<Tensor>{rnd({4, 5}, 1), rnd({5}, 2), rnd({1}, 3)};
        },
    .run =
        [](const std::vector<Tensor>& in) {
          return fused::call("mul(i0,i1);add(t0,i2);gelu(t1|0)", in)[0];
        },
    .reference =
        [](const std::vector<Tensor>& in) {
          return ref_elementwise(in, [](const std::vector<double>& v) {
            double x = v[0] * v[1] + v[2];
            return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
          });
        },
    .differentiable = false,
}});

}  // namespace
}  // namespace kiln::testing
