// Samples for symbolic sizes (kiln/ops/sym_ops.cpp): sym_size, and the size-taking ops with a
// size computed from another tensor's (slice, reshape, expand, arange, full). Eagerly the sizes
// are numbers; in the mode-agreement suite's dynamic graphs and under jit they are symbols, so
// one graph serves both fed sizes, and the gradients go through the patched rules.
#include "samples/op_samples.h"

namespace kiln::testing {
namespace {

using In = std::vector<Tensor>;

std::vector<OpSample> make_samples() {
  std::vector<OpSample> v;
  {  // the first half (rounded up) of the rows: slice to a size computed from dim 0
    OpSample s;
    s.ops = {"sym_size", "slice"};
    s.name = "slice_to_half";
    s.inputs = [] { return In{rnd({5, 3}, 501)}; };
    s.run = [](const In& in) {
      const SymInt n = sym_size(in[0], 0);
      return slice(in[0], 0, 0, floordiv(n + 1, 2));
    };
    s.reference = [](const In& in) {
      const int64_t n = in[0].size(0), h = (n + 1) / 2, c = in[0].size(1);
      std::vector<double> x = vals(in[0]);
      x.resize(static_cast<size_t>(h * c));
      return from_vals(x, Shape{h, c});
    };
    v.push_back(std::move(s));
  }
  {  // rows times columns flattened, then split again: reshape to symbolic sizes
    OpSample s;
    s.ops = {"sym_size", "reshape"};
    s.name = "reshape_flatten_symbolic";
    s.inputs = [] { return In{rnd({4, 3, 2}, 502)}; };
    s.run = [](const In& in) {
      const SymInt n = sym_size(in[0], 0);
      Tensor flat = reshape_symint(in[0], {n * 3, SymInt(2)});
      return reshape_symint(flat, {n, SymInt(6)});
    };
    s.reference = [](const In& in) { return from_vals(vals(in[0]), Shape{in[0].size(0), 6}); };
    v.push_back(std::move(s));
  }
  {  // a row broadcast to as many rows as x has, plus x
    OpSample s;
    s.ops = {"sym_size", "expand"};
    s.name = "expand_to_rows";
    s.inputs = [] { return In{rnd({4, 3}, 503), rnd({1, 3}, 504)}; };
    s.run = [](const In& in) {
      return add(in[0], expand_symint(in[1], {sym_size(in[0], 0), SymInt(3)}));
    };
    s.reference = [](const In& in) {
      return ref_elementwise(in, [](const std::vector<double>& a) { return a[0] + a[1]; });
    };
    s.noncontig_inputs = {0};  // a [1, 3] row stored transposed is still contiguous
    v.push_back(std::move(s));
  }
  {  // x + [0, 1, ..., n-1] down the rows
    OpSample s;
    s.ops = {"sym_size", "arange"};
    s.name = "arange_rows";
    s.inputs = [] { return In{rnd({5, 2}, 505)}; };
    s.run = [](const In& in) {
      Tensor r = arange_symint(0, sym_size(in[0], 0), 1, in[0].dtype());
      return add(in[0], reshape_symint(r, {sym_size(in[0], 0), SymInt(1)}));
    };
    s.reference = [](const In& in) {
      std::vector<double> x = vals(in[0]);
      for (size_t i = 0; i < x.size(); ++i) x[i] += static_cast<double>(i / 2);
      return from_vals(x, in[0].shape());
    };
    v.push_back(std::move(s));
  }
  {  // x * a tensor of 2s of x's (symbolic) shape
    OpSample s;
    s.ops = {"sym_size", "full"};
    s.name = "full_like_shape";
    s.inputs = [] { return In{rnd({3, 4}, 506)}; };
    s.run = [](const In& in) {
      return mul(in[0], full_symint(sym_sizes(in[0]), 2.0, in[0].dtype()));
    };
    s.reference = [](const In& in) {
      std::vector<double> x = vals(in[0]);
      for (auto& e : x) e *= 2;
      return from_vals(x, in[0].shape());
    };
    v.push_back(std::move(s));
  }
  return v;
}

SampleRegistrar reg(make_samples());

}  // namespace
}  // namespace kiln::testing
