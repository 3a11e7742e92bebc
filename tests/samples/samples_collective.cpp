// Samples for the collective family (kiln/ops/collective.cpp): all_reduce as a graph op. The
// registry suites run in one process (no MPI launcher), where the sum and the mean over the one
// process are the input itself; tests/test_dist_*.cpp check the values over two processes.
#include "kiln/ops/collective.h"
#include "samples/op_samples.h"

using namespace kiln::detail;

namespace kiln::testing {
namespace {

using In = std::vector<Tensor>;

Tensor same(const In& in) { return from_vals(vals(in[0]), in[0].shape()); }

std::vector<OpSample> make_samples() {
  std::vector<OpSample> v;
  {
    OpSample s;
    s.ops = {"all_reduce"};
    s.name = "sum_2d";
    s.inputs = [] { return In{rnd({3, 5}, 501)}; };
    s.run = [](const In& in) { return all_reduce_value(in[0], "sum"); };
    s.reference = same;
    v.push_back(std::move(s));
  }
  {
    OpSample s;
    s.ops = {"all_reduce"};
    s.name = "mean_odd_size_then_scaled";
    s.inputs = [] { return In{rnd({7}, 502)}; };
    s.run = [](const In& in) { return mul(all_reduce_value(in[0], "mean"), 2.0); };
    s.reference = [](const In& in) {
      std::vector<double> x = vals(in[0]);
      for (double& e : x) e *= 2.0;
      return from_vals(x, in[0].shape());
    };
    v.push_back(std::move(s));
  }
  {
    OpSample s;
    s.ops = {"all_reduce"};
    s.name = "sum_int64";
    s.inputs = [] { return In{arange(0, 6, 1, Int64).reshape({2, 3})}; };
    s.run = [](const In& in) { return all_reduce_value(in[0], "sum"); };
    s.reference = same;
    s.differentiable = false;
    v.push_back(std::move(s));
  }
  {
    OpSample s;
    s.ops = {"all_reduce"};
    s.name = "sum_empty";
    s.inputs = [] { return In{rnd({0, 4}, 503)}; };
    s.run = [](const In& in) { return all_reduce_value(in[0], "sum"); };
    s.reference = same;
    v.push_back(std::move(s));
  }
  return v;
}

SampleRegistrar reg(make_samples());

}  // namespace
}  // namespace kiln::testing
