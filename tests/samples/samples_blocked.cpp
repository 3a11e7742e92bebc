// Samples for the channel-blocked inference ops (kiln/ops/conv_blocked.cpp), which only the
// block_layout pass and the ONNX importer build: the squeeze-excite pair (mean over H and W,
// per-channel scale), the values-only max and average pools with padding per side and the
// channel gather, each checked against plain loops on the NCHW data. No public wrappers, so the
// samples call the registered ops.
#include <cmath>

#include "samples/op_samples.h"

namespace kiln::testing {
namespace {

using In = std::vector<Tensor>;

const OpDef& op_named(const char* name) { return OpRegistry::get().at(name); }

std::vector<OpSample> make_samples() {
  std::vector<OpSample> v;
  for (int64_t b : {8, 16}) {
    OpSample s;
    s.ops = {"mean_hw_blocked"};
    s.name = "mean_hw_b" + std::to_string(b);
    s.inputs = [] { return In{rnd({2, 16, 3, 4}, 611)}; };
    s.run = [b](const In& in) {
      return from_channel_blocks(call1(op_named("mean_hw_blocked"), {to_channel_blocks(in[0], b)}));
    };
    s.reference = [](const In& in) {
      std::vector<double> x = vals(in[0]), y(32, 0.0);
      for (size_t i = 0; i < x.size(); ++i) y[i / 12] += x[i] / 12.0;
      return from_vals(y, Shape{2, 16, 1, 1});
    };
    s.differentiable = false;
    s.eager_only = true;  // blocked layouts exist only inside inference programs
    v.push_back(std::move(s));
  }
  {
    OpSample s;
    s.ops = {"scale_channels_blocked"};
    s.name = "squeeze_excite_scale";
    s.inputs = [] { return In{rnd({2, 16, 3, 3}, 612), rnd({2, 16, 1, 1}, 613)}; };
    s.run = [](const In& in) {
      return from_channel_blocks(call1(op_named("scale_channels_blocked"),
                                       {to_channel_blocks(in[0], 8), to_channel_blocks(in[1], 8)}));
    };
    s.reference = [](const In& in) {
      return ref_elementwise(in, [](const std::vector<double>& a) { return a[0] * a[1]; });
    };
    s.differentiable = false;
    s.eager_only = true;
    v.push_back(std::move(s));
  }
  for (int64_t b : {0, 8}) {  // NCHW and blocked; ceil_mode-style padding on the far sides
    OpSample s;
    s.ops = {"max_pool2d_values"};
    s.name = b ? "pad_end_blocked" : "pad_end_nchw";
    s.inputs = [] { return In{rnd({1, 8, 5, 6}, 614)}; };
    s.run = [b](const In& in) {
      Attrs a{std::vector<int64_t>{3, 3}, std::vector<int64_t>{2, 2}, std::vector<int64_t>{1, 0},
              std::vector<int64_t>{1, 1}, b};
      Tensor x = b ? to_channel_blocks(in[0], b) : in[0];
      Tensor y = call1(op_named("max_pool2d_values"), {x}, a);
      return b ? from_channel_blocks(y) : y;
    };
    s.reference = [](const In& in) {
      // Output 3 x 3: rows from -1 (pad 1 before, 1 after), columns from 0 (pad 1 after).
      const int64_t C = 8, H = 5, W = 6, OH = (H + 2 - 3) / 2 + 1, OW = (W + 1 - 3) / 2 + 1;
      std::vector<double> x = vals(in[0]), y;
      for (int64_t c = 0; c < C; ++c)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            double m = -INFINITY;
            for (int64_t h = oh * 2 - 1; h < oh * 2 + 2; ++h)
              for (int64_t w = ow * 2; w < ow * 2 + 3; ++w)
                if (h >= 0 && h < H && w >= 0 && w < W)
                  m = std::max(m, x[static_cast<size_t>((c * H + h) * W + w)]);
            y.push_back(m);
          }
      return from_vals(y, Shape{1, C, OH, OW});
    };
    s.differentiable = false;
    s.eager_only = true;
    v.push_back(std::move(s));
  }
  for (int64_t b : {0, 8}) {  // inception's pool: zero padding 1 counted in the divisor
    OpSample s;
    s.ops = {"avg_pool2d_values"};
    s.name = b ? "avg_pad_blocked" : "avg_pad_nchw";
    s.inputs = [] { return In{rnd({1, 8, 5, 6}, 617)}; };
    s.run = [b](const In& in) {
      Attrs a{std::vector<int64_t>{3, 3}, std::vector<int64_t>{1, 2}, std::vector<int64_t>{1, 1},
              std::vector<int64_t>{1, 0}, b};
      Tensor x = b ? to_channel_blocks(in[0], b) : in[0];
      Tensor y = call1(op_named("avg_pool2d_values"), {x}, a);
      return b ? from_channel_blocks(y) : y;
    };
    s.reference = [](const In& in) {
      // Output 5 x 2: rows from -1 (stride 1), columns from -1 (stride 2, no pad after).
      const int64_t C = 8, H = 5, W = 6, OH = (H + 2 - 3) + 1, OW = (W + 1 - 3) / 2 + 1;
      std::vector<double> x = vals(in[0]), y;
      for (int64_t c = 0; c < C; ++c)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            double sum = 0;
            for (int64_t h = oh - 1; h < oh + 2; ++h)
              for (int64_t w = ow * 2 - 1; w < ow * 2 + 2; ++w)
                if (h >= 0 && h < H && w >= 0 && w < W)
                  sum += x[static_cast<size_t>((c * H + h) * W + w)];
            y.push_back(sum / 9.0);
          }
      return from_vals(y, Shape{1, C, OH, OW});
    };
    s.differentiable = false;
    s.eager_only = true;
    v.push_back(std::move(s));
  }
  for (int64_t b : {8, 16}) {  // 24 of input 0's 32 lanes and input 1's 16, 20 picked
    OpSample s;
    s.ops = {"gather_channels_blocked"};
    s.name = "gather_b" + std::to_string(b);
    s.inputs = [] { return In{rnd({2, 32, 3, 3}, 615), rnd({2, 16, 3, 3}, 616)}; };
    std::vector<int64_t> index;
    for (int64_t c = 0; c < 20; ++c) index.push_back(c * 7 % 40);
    s.run = [b, index](const In& in) {
      Attrs a{std::vector<int64_t>{24, 16}, index};
      return from_channel_blocks(call1(op_named("gather_channels_blocked"),
                                       {to_channel_blocks(in[0], b), to_channel_blocks(in[1], b)},
                                       a));
    };
    s.reference = [b, index](const In& in) {
      const int64_t CP = (20 + b - 1) / b * b, HW = 9;
      std::vector<double> x0 = vals(in[0]), x1 = vals(in[1]), y;
      for (int64_t n = 0; n < 2; ++n)
        for (int64_t c = 0; c < CP; ++c)
          for (int64_t q = 0; q < HW; ++q) {
            if (c >= 20) {
              y.push_back(0.0);  // padded lanes
              continue;
            }
            const int64_t i = index[static_cast<size_t>(c)];
            y.push_back(i < 24 ? x0[static_cast<size_t>((n * 32 + i) * HW + q)]
                               : x1[static_cast<size_t>((n * 16 + i - 24) * HW + q)]);
          }
      return from_vals(y, Shape{2, CP, 3, 3});
    };
    s.differentiable = false;
    s.eager_only = true;
    v.push_back(std::move(s));
  }
  return v;
}

SampleRegistrar reg(make_samples());

}  // namespace
}  // namespace kiln::testing
