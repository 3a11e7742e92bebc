// Samples for pad (torch.nn.functional.pad: constant in kiln/ops/shape_ops.cpp, reflect,
// replicate and circular in kiln/ops/pool.cpp). pad is a composition, so the samples name the ops
// it runs on; the mode-agreement suite feeds them with a dynamic leading dim (a batch, or a padded
// dim). The reference maps every output position to its source with torch's rules.
#include <algorithm>
#include <string>

#include "samples/op_samples.h"

namespace kiln::testing {
namespace {

using In = std::vector<Tensor>;
using Idx = std::vector<int64_t>;

// Source position of output position q along a dim of size L padded by lo before, or -1 where
// constant padding fills it.
int64_t pad_src(int64_t q, int64_t L, int64_t lo, const std::string& mode) {
  const int64_t p = q - lo;
  if (p >= 0 && p < L) return p;
  if (mode == "constant") return -1;
  if (mode == "reflect") return p < 0 ? -p : 2 * (L - 1) - p;
  if (mode == "replicate") return std::clamp<int64_t>(p, 0, L - 1);
  return ((p % L) + L) % L;  // circular
}

Tensor ref_pad(const Tensor& x, const Idx& pads, const std::string& mode, double value) {
  const Shape& xs = x.shape();
  const int64_t r = xs.rank();
  Idx lo(static_cast<size_t>(r), 0), hi(static_cast<size_t>(r), 0);
  for (size_t k = 0; 2 * k < pads.size(); ++k) {
    lo[static_cast<size_t>(r - 1) - k] = pads[2 * k];
    hi[static_cast<size_t>(r - 1) - k] = pads[2 * k + 1];
  }
  Shape ys = xs;
  for (int64_t d = 0; d < r; ++d)
    ys[d] = xs[d] + lo[static_cast<size_t>(d)] + hi[static_cast<size_t>(d)];
  const auto xv = vals(x);
  std::vector<double> y(static_cast<size_t>(ys.numel()));
  for (int64_t i = 0; i < ys.numel(); ++i) {
    int64_t rest = i, src = 0, stride = 1;
    bool fill = false;
    for (int64_t d = r - 1; d >= 0; --d) {
      const int64_t q = rest % ys[d];
      rest /= ys[d];
      const int64_t s = pad_src(q, xs[d], lo[static_cast<size_t>(d)], mode);
      fill = fill || s < 0;
      src += s * stride;
      stride *= xs[d];
    }
    y[static_cast<size_t>(i)] = fill ? value : xv[static_cast<size_t>(src)];
  }
  return from_vals(y, ys);
}

OpSample pad_sample(std::vector<std::string> ops, std::string name, Shape xs, Idx pads,
                    std::string mode, double value, uint64_t seed) {
  OpSample s;
  s.ops = std::move(ops);
  s.name = std::move(name);
  s.inputs = [xs, seed] { return In{rnd(xs, seed)}; };
  s.run = [pads, mode, value](const In& in) { return pad(in[0], pads, mode, value); };
  s.reference = [pads, mode, value](const In& in) { return ref_pad(in[0], pads, mode, value); };
  return s;
}

std::vector<OpSample> make_pad_samples() {
  std::vector<OpSample> v;
  // constant: the leading (batch) dim is not padded; growth on two dims, then crops.
  v.push_back(pad_sample({"as_strided_scatter", "cat"}, "constant_two_dims", {3, 2, 5},
                         {2, 1, 1, 0}, "constant", 0.5, 3101));
  v.push_back(pad_sample({"as_strided_scatter", "slice"}, "constant_crop_and_grow", {3, 4}, {-1, 2},
                         "constant", -2.0, 3102));
  // constant on the leading dim itself (a dynamic padded dim in the dynamic graph).
  v.push_back(pad_sample({"as_strided_scatter", "cat"}, "constant_leading_dim", {4, 3},
                         {1, 1, 2, -1}, "constant", 0.0, 3103));
  // the other modes on a batched input: the padded dims follow the batch and channel dims.
  v.push_back(
      pad_sample({"index_select", "cat"}, "reflect_1d", {3, 2, 6}, {2, 1}, "reflect", 0, 3104));
  v.push_back(pad_sample({"index_select", "cat"}, "replicate_2d", {3, 2, 4, 5}, {1, 2, 2, 0},
                         "replicate", 0, 3105));
  v.push_back(
      pad_sample({"index_select", "cat"}, "circular_1d", {3, 2, 5}, {2, 3}, "circular", 0, 3106));
  return v;
}

static SampleRegistrar reg(make_pad_samples());

}  // namespace
}  // namespace kiln::testing
