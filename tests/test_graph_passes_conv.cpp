// Graph passes over convolutions: conv_epilogue (bias, residual add and activation into the
// convolution) and block_layout (inference programs in oneDNN's channel blocks, channel counts
// padded to the block, shufflenet's gathers), checked on Programs against a reference run and in
// a Session against the passes switched off.
#include <gtest/gtest.h>

#include <cmath>

#include "graph_pass_util.h"
#include "kiln/kernels/cpu/conv_dnnl.h"
#include "kiln/kiln.h"

using namespace kiln;
using namespace kiln::detail;
using namespace kiln_test;

namespace {

// ---- conv_epilogue and block_layout ----------------------------------------------------------

// A ResNet stem and basic block with a downsampling shortcut, as an imported model makes them:
// constant weights, conv -> bias -> relu, a max pool, residual adds, a global mean at the end.
struct ConvNet {
  Graph g;
  Tensor x, out, conv_fetched;
  explicit ConvNet(int64_t c_in = 3) {
    manual_seed(21);
    auto w = [&](int64_t o, int64_t i, int64_t k) {
      return g.constant(mul(randn({o, i, k, k}), 1.0 / std::sqrt(double(i * k * k))));
    };
    auto b = [&](int64_t o) { return g.constant(mul(randn({o}), 0.1)); };
    x = g.placeholder("x", Float32, {2, c_in, 18, 18});
    Tensor h = relu(conv2d(x, w(16, c_in, 3), b(16), {2, 2}, {1, 1}));
    h = max_pool2d(h, {3, 3}, {2, 2}, {1, 1});
    // Identity block: relu(conv(relu(conv(h))) + h).
    Tensor a = relu(conv2d(h, w(16, 16, 3), b(16), {1, 1}, {1, 1}));
    h = relu(add(conv2d(a, w(16, 16, 3), b(16), {1, 1}, {1, 1}), h));
    // Downsampling block: the shortcut is a strided 1x1 conv; no bias on the main path.
    Tensor d = conv2d(h, w(32, 16, 1), b(32), {2, 2});
    Tensor m = relu(conv2d(h, w(32, 16, 3), Tensor(), {2, 2}, {1, 1}));
    h = relu(add(d, conv2d(m, w(32, 32, 3), Tensor(), {1, 1}, {1, 1})));
    // A conv whose value is also fetched keeps its own node; conv(v) + v may not write over v.
    conv_fetched = conv2d(h, w(32, 32, 1), Tensor());
    Tensor self_res = relu(add(conv2d(h, w(32, 32, 3), Tensor(), {1, 1}, {1, 1}), h));
    out = mean(add(self_res, relu(conv_fetched)), {2, 3});
  }
};

TEST(PassConvLayout, ResNetBlocksFuseAndComputeInBlocksWithSameNumbers) {
  ConvNet net;
  Program p = program_of({net.out, net.conv_fetched});
  manual_seed(22);
  std::map<std::string, Tensor> feeds{{"x", randn({2, 3, 18, 18})}};
  const_fold(p);
  auto before = evaluate(p, feeds);
  // stem (bias, relu), block 1 conv 1 (bias, relu), conv 2 (bias, residual, relu), the
  // shortcut's bias and one of the downsampling block's convs taking the residual add, the
  // main path's first conv (relu), conv(h) + h (residual, relu).
  EXPECT_EQ(fuse_conv_epilogue(p), 6);
  verify_program(p, "fuse_conv_epilogue");
  EXPECT_EQ(count_op(p, "conv2d_fused_add"), 3);
  EXPECT_EQ(count_op(p, "relu"), 1);  // the one after the fetched conv
  EXPECT_EQ(count_op(p, "add"), 1);   // self_res + relu(conv_fetched)
  expect_close(before, evaluate(p, feeds), 1e-4);
  const int blocked = block_layout(p);
  verify_program(p, "block_layout");
  if (cpu::dnnl_channel_block() == 0) {
    EXPECT_EQ(blocked, 0);
    return;
  }
  // 8 convolutions, the max pool, the relu and add after them, the mean.
  EXPECT_EQ(blocked, 12);
  EXPECT_EQ(count_op(p, "max_pool2d_values"), 1);
  EXPECT_EQ(count_op(p, "max_pool2d"), 0);
  // The only NCHW copy: the fetched conv's value (the mean pools the blocks).
  EXPECT_EQ(count_op(p, "clone"), 1);
  EXPECT_EQ(count_op(p, "mean_hw_blocked"), 1);
  for (const auto& n : p.graph->nodes)
    if (n->kind == NodeKind::Op && n->op->name.rfind("conv2d_fused", 0) == 0) {
      EXPECT_EQ(n->attrs.i(7), cpu::dnnl_channel_block()) << "out_block";
      // Every conv after the stem reads blocks, with its weights blocked once here.
      const bool stem = n->inputs[0].node->kind == NodeKind::Placeholder;
      EXPECT_EQ(n->attrs.i(6), stem ? 0 : cpu::dnnl_channel_block()) << "in_block";
      // Bit 0: blocked; bit 1: a constant oneDNN lays out once.
      EXPECT_EQ(n->attrs.i(8), stem ? 2 : 3) << "w_blocked";
    }
  expect_close(before, evaluate(p, feeds), 1e-4);
}

// Channel counts the block does not divide (mnasnet's 24, 40 and 72; a squeeze-excite's 8) are
// padded to it: every convolution, depthwise included, computes in blocks on zero-padded
// weights, the squeeze-excite and the pools stay blocked, and only the fetched values leave
// blocks (the padded channels sliced off), with the numbers of the unpadded program.
TEST(PassConvLayout, ChannelCountsOffTheBlockArePadded) {
  manual_seed(24);
  Graph g;
  auto w = [&](int64_t o, int64_t i, int64_t k) {
    return g.constant(mul(randn({o, i, k, k}), 1.0 / std::sqrt(double(i * k * k))));
  };
  auto b = [&](int64_t o) { return g.constant(mul(randn({o}), 0.1)); };
  Tensor x = g.placeholder("x", Float32, {2, 3, 18, 18});
  Tensor h = relu(conv2d(x, w(24, 3, 3), b(24), {2, 2}, {1, 1}));
  h = hardswish(conv2d(h, w(24, 1, 3), Tensor(), {1, 1}, {1, 1}, {1, 1}, 24));
  Tensor m = mean(h, {2, 3}, true);
  h = mul(h, hardsigmoid(conv2d(relu(conv2d(m, w(8, 24, 1), b(8))), w(24, 8, 1), b(24))));
  Tensor p = conv2d(h, w(40, 24, 1));
  Tensor e = relu(conv2d(p, w(40, 40, 1), b(40)));
  p = add(conv2d(e, w(40, 40, 3), Tensor(), {1, 1}, {1, 1}), p);
  // inception's branch pool as ONNX gives it: a zero pad, then the pool.
  p = relu(add(p, avg_pool2d(pad(p, {1, 1, 1, 1}), {3, 3}, {1, 1})));
  Tensor mid = conv2d(p, w(40, 40, 1));  // fetched: leaves blocks at batch 2 (a strided slice)
  Tensor out = mean(relu(conv2d(mid, w(72, 40, 1), b(72))), {2, 3});
  Program prog = program_of({out, mid});
  manual_seed(25);
  std::map<std::string, Tensor> feeds{{"x", randn({2, 3, 18, 18})}};
  const_fold(prog);
  auto before = evaluate(prog, feeds);
  fuse_conv_epilogue(prog);
  const int blocked = block_layout(prog);
  verify_program(prog, "block_layout");
  const int64_t blk = cpu::dnnl_channel_block();
  if (blk == 0) {
    EXPECT_EQ(blocked, 0);
    return;
  }
  EXPECT_EQ(count_op(prog, "conv2d"), 0);
  int convs = 0;
  for (const auto& n : prog.graph->nodes)
    if (n->kind == NodeKind::Op && n->op->name.rfind("conv2d_fused", 0) == 0) {
      ++convs;
      EXPECT_EQ(n->attrs.i(7), blk) << "out_block";
    }
  EXPECT_EQ(convs, 9);
  EXPECT_EQ(count_op(prog, "mean_hw_blocked"), 2);
  EXPECT_EQ(count_op(prog, "scale_channels_blocked"), 1);
  EXPECT_EQ(count_op(prog, "avg_pool2d_values"), 1);
  EXPECT_EQ(count_op(prog, "as_strided_scatter"), 0);
  EXPECT_EQ(count_op(prog, "slice"), 2);  // the fetched conv and the final pool
  expect_close(before, evaluate(prog, feeds), 1e-5);
  // In a Session (memory plan included: the residual add writes over a padded value).
  std::vector<Tensor> off, on;
  {
    DisablePasses d("fuse_conv_epilogue,block_layout");
    Session s(g);
    off = s.run({out, mid}, {{x, feeds.at("x")}});
  }
  Session s(g);
  on = s.run({out, mid}, {{x, feeds.at("x")}});
  expect_close(on, off, 1e-5);
  expect_same(on, s.run({out, mid}, {{x, feeds.at("x")}}));
}

// shufflenet's units: a channel split (two slices), a branch on one half, a concatenation
// and the channel shuffle (reshape, transpose, reshape), on 24-channel halves that end inside
// a block: all of it stays in blocks as channel gathers, chains of them composed into one.
TEST(PassConvLayout, ChannelShuffleUnitsStayInBlocks) {
  manual_seed(26);
  Graph g;
  auto w = [&](int64_t o, int64_t i, int64_t k) {
    return g.constant(mul(randn({o, i, k, k}), 1.0 / std::sqrt(double(i * k * k))));
  };
  Tensor x = g.placeholder("x", Float32, {2, 3, 8, 8});
  Tensor h = relu(conv2d(x, w(48, 3, 3), Tensor(), {1, 1}, {1, 1}));
  for (int unit = 0; unit < 2; ++unit) {
    Tensor x1 = slice(h, 1, 0, 24), x2 = slice(h, 1, 24, 48);
    Tensor br = relu(conv2d(x2, w(24, 24, 1)));
    br = conv2d(br, w(24, 1, 3), Tensor(), {1, 1}, {1, 1}, {1, 1}, 24);
    br = relu(conv2d(br, w(24, 24, 1)));
    Tensor c = cat({x1, br}, 1);
    h = reshape(transpose(reshape(c, Shape{2, 2, 24, 8, 8}), 1, 2), Shape{2, 48, 8, 8});
  }
  Tensor out = mean(conv2d(h, w(40, 48, 1)), {2, 3});
  Program prog = program_of({out});
  manual_seed(27);
  std::map<std::string, Tensor> feeds{{"x", randn({2, 3, 8, 8})}};
  const_fold(prog);
  auto before = evaluate(prog, feeds);
  fuse_conv_epilogue(prog);
  block_layout(prog);
  verify_program(prog, "block_layout");
  if (cpu::dnnl_channel_block() == 0) return;
  EXPECT_EQ(count_op(prog, "cat"), 0);
  EXPECT_EQ(count_op(prog, "transpose"), 0);
  EXPECT_EQ(count_op(prog, "conv2d"), 0);
  // Per unit: the second half for the branch, and the shuffled concatenation (its first half
  // and the previous unit's shuffle composed in).
  EXPECT_EQ(count_op(prog, "gather_channels_blocked"), 4);
  EXPECT_EQ(count_op(prog, "clone"), 1);  // the pooled 40 channels, sliced out of 48 lanes
  expect_close(before, evaluate(prog, feeds), 1e-5);
  std::vector<Tensor> off, on;
  {
    DisablePasses d("fuse_conv_epilogue,block_layout");
    Session s(g);
    off = s.run({out}, {{x, feeds.at("x")}});
  }
  Session s(g);
  on = s.run({out}, {{x, feeds.at("x")}});
  expect_close(on, off, 1e-5);
}

// The default pipeline in a Session (memory plan included: a fused residual add may take the
// residual's buffer) gives the numbers of the pipeline without the two passes.
TEST(PassConvLayout, SessionMatchesThePassesSwitchedOff) {
  ConvNet net;
  manual_seed(23);
  Tensor xv = randn({2, 3, 18, 18});
  std::vector<Tensor> off, on;
  {
    DisablePasses d("fuse_conv_epilogue,block_layout");
    Session s(net.g);
    off = s.run({net.out, net.conv_fetched}, {{net.x, xv}});
  }
  Session s(net.g);
  on = s.run({net.out, net.conv_fetched}, {{net.x, xv}});
  auto again = s.run({net.out, net.conv_fetched}, {{net.x, xv}});
  expect_close(on, off, 1e-4);
  expect_same(on, again);
}

// A residual with a dynamic dim may broadcast at run time (size 1): its add stays an add.
TEST(PassConvLayout, ResidualWithADynamicDimIsNotFused) {
  Graph g;
  manual_seed(25);
  Tensor x = g.placeholder("x", Float32, {2, 16, 6, 6});
  Tensor r = g.placeholder("r", Float32, {Dim::any(), 16, 6, 6});
  Tensor w = g.constant(mul(randn({16, 16, 3, 3}), 0.1));
  Tensor y = add(conv2d(x, w, Tensor(), {1, 1}, {1, 1}), r);
  Program p = program_of({y});
  EXPECT_EQ(fuse_conv_epilogue(p), 0);
  EXPECT_EQ(count_op(p, "add"), 1);
  Session s(g);
  Tensor xv = randn({2, 16, 6, 6}), rv = randn({1, 16, 6, 6});
  Tensor got = s.run({y}, {{x, xv}, {r, rv}})[0];
  DisablePasses d("fuse_conv_epilogue,block_layout");
  Session s2(g);
  expect_close({got}, s2.run({y}, {{x, xv}, {r, rv}}), 1e-5);
}

// In a training graph the chain conv -> add -> relu still fuses (the gradients read the conv's
// input and weight and the relu's output, which the fused node gives), block_layout leaves the
// program alone, and loss and gradient match the passes switched off.
TEST(PassConvLayout, TrainingGraphFusesWhatItsGradientDoesNotRead) {
  Graph g;
  manual_seed(24);
  Tensor x = g.placeholder("x", Float32, {2, 16, 6, 6});
  Tensor w = g.variable("w", mul(randn({16, 16, 3, 3}), 0.1));
  Tensor loss = sum(relu(add(conv2d(x, w, Tensor(), {1, 1}, {1, 1}), x)));
  Tensor gw = gradients({loss}, {w})[0];
  std::vector<ValueRef> refs{g.value_of(loss), g.value_of(gw)};
  Program p = prune(*g.impl(), refs);
  EXPECT_EQ(fuse_conv_epilogue(p), 1);
  EXPECT_EQ(block_layout(p), 0);
  Tensor xv = randn({2, 16, 6, 6});
  std::vector<Tensor> off, on;
  {
    DisablePasses d("fuse_conv_epilogue,block_layout");
    Session s(g);
    off = s.run({loss, gw}, {{x, xv}});
  }
  Session s(g);
  on = s.run({loss, gw}, {{x, xv}});
  expect_close(on, off, 1e-4);
}

}  // namespace
