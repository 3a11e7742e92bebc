// Sample for sum_to_like: a broadcast gradient reduced to another tensor's run-time shape.
#include "samples/op_samples.h"

namespace kiln::testing {
namespace {

SampleRegistrar reg({OpSample{
    .ops = {"sum_to_like"},
    .name = "rows_and_lead_dim",
    .inputs =
        [] {
          return std::vector<Tensor>{rnd({2, 3, 4}, 31), rnd({1, 4}, 32)};
        },
    .run = [](const std::vector<Tensor>& in) { return sum_to_like(in[0], in[1]); },
    .reference =
        [](const std::vector<Tensor>& in) {
          std::vector<double> a = vals(in[0]), out(4, 0.0);
          for (size_t i = 0; i < a.size(); ++i) out[i % 4] += a[i];
          return from_vals(out, {1, 4});
        },
    .noncontig_inputs = {0},
}});

}  // namespace
}  // namespace kiln::testing
