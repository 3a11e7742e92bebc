// Sample registry and helpers.
#include "samples/op_samples.h"

namespace kiln::testing {

std::vector<OpSample>& sample_registry() {
  static std::vector<OpSample> r;
  return r;
}

Tensor rnd(const Shape& s, uint64_t seed, double scale) {
  manual_seed(seed);
  return mul(randn(s, Float64), scale);
}

Tensor uni(const Shape& s, uint64_t seed, double lo, double hi) {
  manual_seed(seed);
  return add(mul(rand(s, Float64), hi - lo), lo);
}

std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

Tensor from_vals(const std::vector<double>& v, const Shape& s) {
  // tensor(v, {}) means "1-D"; a 0-d shape with one value is a scalar here.
  if (s.rank() == 0 && v.size() == 1) return scalar_tensor(v[0], Float64);
  return tensor(v, s);
}

Tensor ref_elementwise(const std::vector<Tensor>& in,
                       const std::function<double(const std::vector<double>&)>& f) {
  Shape out = in[0].shape();
  for (size_t k = 1; k < in.size(); ++k) out = broadcast_shapes(out, in[k].shape(), "reference");
  std::vector<std::vector<double>> data;
  for (const auto& t : in) data.push_back(t.to_vector<double>());
  int64_t n = out.numel();
  std::vector<double> res(static_cast<size_t>(n));
  std::vector<double> args(in.size());
  for (int64_t i = 0; i < n; ++i) {
    // Unravel i in `out`, then ravel into each input with broadcasting.
    for (size_t k = 0; k < in.size(); ++k) {
      const Shape& s = in[k].shape();
      int64_t rem = i, idx = 0, mulk = 1;
      for (int64_t d = out.rank() - 1; d >= 0; --d) {
        int64_t c = rem % out[d];
        rem /= out[d];
        int64_t sd = d - (out.rank() - s.rank());
        if (sd >= 0) {
          idx += (s[sd] == 1 ? 0 : c) * mulk;
          mulk *= s[sd];
        }
      }
      args[k] = data[k][static_cast<size_t>(idx)];
    }
    res[static_cast<size_t>(i)] = f(args);
  }
  return tensor(res, out);
}

}  // namespace kiln::testing
