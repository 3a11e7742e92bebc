// matmul / linear / conv2d / pooling beyond the registry samples: transposed operands reach the
// GEMM without copies, float32 (oneDNN, batch-parallel, and the conv lane kernels called
// directly) agrees with float64 (OpenBLAS, serial), gradients of gradients, max-pool routing,
// and every bad input raises a kiln::Error that names the op and the shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <string>

#include "kiln/dispatch/dispatch.h"
#include "kiln/graph/node.h"
#include "kiln/kernels/cpu/conv_lanes.h"
#include "kiln/kiln.h"
#include "test_util.h"

using namespace kiln::detail;

using namespace kiln;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double m = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

double max_abs(const Tensor& a) {
  double m = 0;
  for (double v : a.to_vector<double>()) m = std::max(m, std::fabs(v));
  return m;
}

// Size-class rounding of the caching allocator below 1 MiB.
size_t pow2ceil(size_t n) {
  size_t p = 64;
  while (p < n) p *= 2;
  return p;
}

// Bytes the caching allocator handed out at the peak of f, beyond what was in use before.
template <typename F>
size_t peak_extra_bytes(F&& f) {
  size_t before = allocator_stats().in_use_bytes;
  reset_peak_memory();
  f();
  return allocator_stats().peak_in_use_bytes - before;
}

TEST(Matmul, TransposedOperandsMatchContiguousAndAreNotCopied) {
  manual_seed(1);
  Tensor a = randn({512, 256});  // used as a^T [256, 512]
  Tensor b = randn({256, 512});  // used as b^T [512, 256]
  Tensor at = a.t(), bt = b.t();
  ASSERT_FALSE(at.is_contiguous());
  ASSERT_FALSE(bt.is_contiguous());
  Tensor want = matmul(at.contiguous(), bt.contiguous());
  Tensor got;
  size_t extra = peak_extra_bytes([&] { got = matmul(at, bt); });
  const size_t out_bytes = 256 * 256 * sizeof(float), operand_bytes = 512 * 256 * sizeof(float);
  // Only the output is allocated; a copy of either operand would add 512 KiB.
  EXPECT_GE(extra, out_bytes);
  EXPECT_LT(extra, out_bytes + operand_bytes / 2) << "a transposed operand was copied";
  EXPECT_EQ(got.shape(), (Shape{256, 256}));
  EXPECT_LT(max_abs_diff(got, want), 1e-3 * (1 + max_abs(want)));
}

TEST(Matmul, BatchedTransposedAndSharedWeightNotCopied) {
  manual_seed(2);
  Tensor a = randn({4, 64, 48}), b = randn({4, 64, 32});
  Tensor at = a.transpose(-1, -2);  // [4, 48, 64], per-matrix strides (1, 48)
  Tensor want = matmul(at.contiguous(), b);
  Tensor got;
  size_t extra = peak_extra_bytes([&] { got = matmul(at, b); });
  EXPECT_LT(extra, pow2ceil(4 * 48 * 32 * sizeof(float)) + 4 * 64 * 48 * sizeof(float) / 2);
  EXPECT_LT(max_abs_diff(got, want), 1e-4 * (1 + max_abs(want)));

  // x [batch, T, in] @ w^T: one tall GEMM on the transposed weight view.
  Tensor x = randn({3, 50, 64}), w = randn({96, 64});
  Tensor want2 = matmul(x, w.t().contiguous());
  Tensor got2;
  extra = peak_extra_bytes([&] { got2 = linear(x, w); });
  EXPECT_LT(extra, pow2ceil(3 * 50 * 96 * sizeof(float)) + 96 * 64 * sizeof(float) / 2);
  EXPECT_LT(max_abs_diff(got2, want2), 1e-4 * (1 + max_abs(want2)));
}

TEST(Matmul, ShapesFollowTorch) {
  EXPECT_EQ(matmul(ones({4}), ones({4})).shape(), Shape{});
  EXPECT_DOUBLE_EQ(matmul(ones({4}), full({4}, 2.0)).item<double>(), 8.0);
  EXPECT_EQ(matmul(ones({4}), ones({4, 5})).shape(), (Shape{5}));
  EXPECT_EQ(matmul(ones({3, 4}), ones({4})).shape(), (Shape{3}));
  EXPECT_EQ(matmul(ones({2, 1, 3, 4}), ones({5, 4, 6})).shape(), (Shape{2, 5, 3, 6}));
  EXPECT_EQ(matmul(ones({4}), ones({2, 4, 6})).shape(), (Shape{2, 6}));
  EXPECT_EQ(matmul(ones({2, 3, 4}), ones({4})).shape(), (Shape{2, 3}));
  EXPECT_EQ(matmul(ones({0, 4}), ones({4, 3})).shape(), (Shape{0, 3}));
  // k = 0: an empty sum is zero.
  Tensor z = matmul(ones({2, 0}), ones({0, 3}));
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(max_abs(z), 0.0);
  EXPECT_EQ(matmul(ones({2, 3}, Float64), ones({3, 2}, Float64)).dtype(), Float64);
}

TEST(Matmul, ManySmallBatchesMatchFloat64) {
  // Small matrices spread over threads; float64 runs serially through OpenBLAS.
  manual_seed(3);
  Tensor a = randn({64, 8, 16}), b = randn({64, 16, 8});
  Tensor got = matmul(a, b);
  Tensor want = matmul(a.to(Float64), b.to(Float64));
  EXPECT_LT(max_abs_diff(got, want), 1e-4 * (1 + max_abs(want)));
}

TEST(Linear, Float32BiasEpilogueMatchesFloat64AndRepeatsBitForBit) {
  // Products of >= 2e6 multiply-adds run as oneDNN's matmul primitive with the bias in its
  // epilogue (kernels/cpu/gemm.h), one primitive per shape. Every call must agree with float64,
  // and a shape must give identical bits on every call, for 2-D and batch-flattened 3-D inputs,
  // a transposed and a row-major weight, and a sliced input whose rows are padded.
  manual_seed(8);
  Tensor w = randn({96, 128}), b = randn({96});
  Tensor wt = randn({128, 96});  // linear(x, wt.t()): a row-major B
  Tensor x2 = randn({300, 128}), x3 = randn({3, 100, 128}), wide = randn({300, 160});
  Tensor xs = slice(wide, 1, 0, 128);  // rows 160 apart
  ASSERT_FALSE(xs.is_contiguous());
  for (const Tensor& x : {x2, x3, xs}) {
    Tensor want = linear(x.to(Float64), w.to(Float64), b.to(Float64));
    Tensor want2 = add(matmul(x.to(Float64), wt.to(Float64)), b.to(Float64));
    Tensor first = linear(x, w, b), first2 = linear(x, wt.t(), b);
    EXPECT_LT(max_abs_diff(first, want), 1e-4 * (1 + max_abs(want)));
    EXPECT_LT(max_abs_diff(first2, want2), 1e-4 * (1 + max_abs(want2)));
    for (int rep = 0; rep < 2; ++rep) {
      EXPECT_EQ(linear(x, w, b).to_vector<float>(), first.to_vector<float>()) << rep;
      EXPECT_EQ(linear(x, wt.t(), b).to_vector<float>(), first2.to_vector<float>()) << rep;
    }
  }
}

TEST(Linear, MatchesCompositeAndGradients) {
  manual_seed(4);
  Tensor x = randn({2, 3, 5}, Float64), w = randn({4, 5}, Float64), b = randn({4}, Float64);
  Tensor y = linear(x, w, b);
  Tensor want = add(matmul(x, transpose(w, 0, 1)), b);
  EXPECT_LT(max_abs_diff(y, want), 1e-12);
  auto r = gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); },
                     {x, w, b});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Conv2d, Float32MatchesFloat64) {
  // float32 runs on oneDNN's convolution primitives, Kiln's direct and lane kernels, or im2col +
  // GEMM where none applies (and in the CBLAS build); float64 on Kiln's im2col + OpenBLAS. Forward
  // and both gradients must agree over geometries with groups, stride, dilation, one input channel
  // (LeNet's first conv), and strides that leave the right/bottom padding smaller than the left.
  struct G {
    int64_t N, C, H, W, O, Cg, k, sh, sw, ph, pw, dh, dw, groups;
  };
  for (const G& g :
       {G{6, 8, 12, 12, 16, 4, 3, 2, 1, 1, 1, 1, 2, 2},
        G{4, 1, 28, 28, 6, 1, 5, 1, 1, 2, 2, 1, 1, 1},
        G{3, 6, 14, 14, 16, 6, 5, 1, 1, 0, 0, 1, 1, 1},
        G{2, 3, 11, 10, 5, 3, 3, 2, 3, 1, 2, 1, 1, 1}, G{2, 4, 9, 9, 4, 1, 3, 2, 2, 1, 1, 2, 2, 4},
        // Tiny reductions (C k k <= 32, stride 1): three channels 3x3 with uneven
        // padding, and one channel 5x5 without.
        G{3, 3, 10, 17, 5, 3, 3, 1, 1, 2, 1, 1, 1, 1}, G{2, 1, 9, 12, 4, 1, 5, 1, 1, 0, 0, 1, 1, 1},
        // Samples in vector lanes (kernels/cpu/conv_lanes: N fills the lanes, few channels):
        // LeNet's 6 -> 16 layer at batch 64, uneven padding with 16 samples, more input than
        // output channels, and 52 samples (lanes padded to 64).
        G{64, 6, 14, 14, 16, 6, 5, 1, 1, 0, 0, 1, 1, 1},
        G{16, 7, 9, 11, 9, 7, 3, 1, 1, 1, 2, 1, 1, 1},
        G{16, 20, 6, 7, 4, 20, 3, 1, 1, 1, 1, 1, 1, 1},
        G{52, 13, 6, 7, 2, 13, 2, 1, 1, 0, 1, 1, 1, 1},
        // A 20x20 plane: the input gradient on lanes, the weight gradient on oneDNN.
        G{16, 4, 20, 20, 8, 4, 3, 1, 1, 1, 1, 1, 1, 1}}) {
    manual_seed(5);
    Tensor x = randn({g.N, g.C, g.H, g.W}), w = mul(randn({g.O, g.Cg, g.k, g.k}), 0.3);
    Tensor bias = randn({g.O});
    auto run = [&](DType dt) {
      Tensor xx = x.to(dt).detach(), ww = w.to(dt).detach(), bb = bias.to(dt).detach();
      xx.requires_grad_();
      ww.requires_grad_();
      bb.requires_grad_();
      Tensor y = conv2d(xx, ww, bb, {g.sh, g.sw}, {g.ph, g.pw}, {g.dh, g.dw}, g.groups);
      manual_seed(6);
      sum(mul(y, randn(y.shape(), dt))).backward();
      return std::vector<Tensor>{y, xx.grad(), ww.grad(), bb.grad()};
    };
    auto f32 = run(Float32), f64 = run(Float64);
    for (size_t k = 0; k < f32.size(); ++k) {
      ASSERT_EQ(f32[k].shape(), f64[k].shape());
      EXPECT_LT(max_abs_diff(f32[k], f64[k]), 1e-4 * (1 + max_abs(f64[k])))
          << "result " << k << " of conv C=" << g.C << " k=" << g.k << " stride " << g.sh << ","
          << g.sw << " groups " << g.groups;
    }
  }
}

// The lane kernels called directly: conv2d reaches conv_lanes_fwd only where oneDNN declines a
// forward (the CBLAS build), so the default build's conv2d tests above run only its two gradient
// kernels. Forward, input gradient and weight gradient against conv2d in float64.
TEST(Conv2d, LaneKernelsMatchFloat64) {
  struct G {
    int64_t N, C, H, W, O, k, ph, pw;
  };
  for (const G& g : {G{64, 6, 14, 14, 16, 5, 0, 0}, G{16, 7, 9, 11, 9, 3, 1, 2},
                     G{52, 13, 6, 7, 2, 2, 0, 1}, G{16, 4, 20, 20, 8, 3, 1, 1}}) {
    const int64_t OH = g.H + 2 * g.ph - g.k + 1, OW = g.W + 2 * g.pw - g.k + 1;
    const cpu::LaneConv s{g.N, g.C, g.H, g.W, g.O, g.k, g.k, OH, OW, g.ph, g.pw};
    ASSERT_TRUE(cpu::conv_lanes_suits(s)) << "geometry N=" << g.N << " C=" << g.C;
    manual_seed(7);
    Tensor x = randn({g.N, g.C, g.H, g.W}), w = mul(randn({g.O, g.C, g.k, g.k}), 0.3);
    Tensor gy = randn({g.N, g.O, OH, OW});
    Tensor x64 = x.to(Float64).requires_grad_(), w64 = w.to(Float64).requires_grad_();
    Tensor y64 = conv2d(x64, w64, Tensor(), {1, 1}, {g.ph, g.pw});
    sum(mul(y64, gy.to(Float64))).backward();
    Tensor y = empty({g.N, g.O, OH, OW}), dx = empty(x.shape()), dw = empty(w.shape());
    cpu::conv_lanes_fwd(s, x.data_ptr<float>(), w.data_ptr<float>(), y.data_ptr<float>());
    cpu::conv_lanes_bwd_data(s, gy.data_ptr<float>(), w.data_ptr<float>(), dx.data_ptr<float>());
    cpu::conv_lanes_bwd_weight(s, x.data_ptr<float>(), gy.data_ptr<float>(), dw.data_ptr<float>());
    const Tensor want[] = {y64, x64.grad(), w64.grad()};
    const Tensor got[] = {y, dx, dw};
    for (int i = 0; i < 3; ++i)
      EXPECT_LT(max_abs_diff(got[i], want[i]), 1e-4 * (1 + max_abs(want[i])))
          << "result " << i << " N=" << g.N << " C=" << g.C << " O=" << g.O << " k=" << g.k;
  }
}

TEST(Conv2d, PointwiseEqualsMatmulOverChannels) {
  manual_seed(6);
  Tensor x = randn({2, 3, 4, 5}, Float64), w = randn({6, 3, 1, 1}, Float64);
  Tensor y = conv2d(x, w);
  // y[n, o, h, w] = sum_c w[o, c] x[n, c, h, w]
  Tensor want = matmul(reshape(w, {6, 3}), reshape(x, {2, 3, 20}));
  EXPECT_LT(max_abs_diff(y, reshape(want, {2, 6, 4, 5})), 1e-12);
}

// Second-order gradients: gradcheck of a function that itself returns first-order gradients
// (computed with create_graph) runs each gradient op's own rule.
Tensor leaf_for_grad(const Tensor& t) {
  if (t.requires_grad()) return t;  // analytic pass: keep the link to gradcheck's inputs
  Tensor l = t.detach();
  l.requires_grad_();
  return l;
}

TEST(SecondOrder, MatmulConvAndPoolGradientsOfGradients) {
  auto mm = [](const std::vector<Tensor>& in) {
    EnableGradGuard eg;
    Tensor a = leaf_for_grad(in[0]), b = leaf_for_grad(in[1]);
    Tensor y = matmul(a, b);
    auto g = grad({sum(mul(y, y))}, {a, b}, {}, true, true);
    return add(sum(mul(g[0], g[0])), sum(mul(g[1], g[1])));
  };
  manual_seed(7);
  auto r = gradcheck(mm, {randn({2, 3, 4}, Float64), randn({4, 2}, Float64)});
  EXPECT_TRUE(r.ok) << r.message;

  auto conv = [](const std::vector<Tensor>& in) {
    EnableGradGuard eg;
    Tensor x = leaf_for_grad(in[0]), w = leaf_for_grad(in[1]);
    Tensor y = conv2d(x, w, Tensor(), {2, 2}, {1, 1}, {1, 1}, 2);
    auto g = grad({sum(mul(y, y))}, {x, w}, {}, true, true);
    return add(sum(mul(g[0], g[0])), sum(mul(g[1], g[1])));
  };
  r = gradcheck(conv, {randn({1, 4, 5, 5}, Float64), randn({2, 2, 3, 3}, Float64)});
  EXPECT_TRUE(r.ok) << r.message;

  auto pools = [](const std::vector<Tensor>& in) {
    EnableGradGuard eg;
    Tensor x = leaf_for_grad(in[0]);
    Tensor y = add(max_pool2d(x, {3, 3}, {2, 2}, {1, 1}), avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}));
    auto g = grad({sum(mul(y, y))}, {x}, {}, true, true);
    return sum(mul(g[0], g[0]));
  };
  r = gradcheck(pools, {randn({1, 2, 5, 5}, Float64)});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Pool, MaxPoolRoutesGradientToArgmax) {
  // One 4x4 plane, 2x2 windows: each window's max gets the whole gradient.
  Tensor x = tensor({1.f, 5.f, 2.f, 0.f,  //
                     3.f, 4.f, 9.f, 1.f,  //
                     0.f, 0.f, 1.f, 1.f,  //
                     7.f, 0.f, 1.f, 3.f},
                    {1, 1, 4, 4});
  x.requires_grad_();
  Tensor y = max_pool2d(x, {2});
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{5, 9, 7, 3}));
  sum(mul(y, tensor({1.f, 2.f, 3.f, 4.f}, {1, 1, 2, 2}))).backward();
  EXPECT_EQ(x.grad().to_vector<double>(),
            (std::vector<double>{0, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0, 4}));
  // 3-D input and padding with -inf: a border window never picks the padding.
  Tensor z = max_pool2d(neg(ones({1, 3, 3})), {3}, {1}, {1});
  EXPECT_EQ(z.shape(), (Shape{1, 3, 3}));
  for (double v : z.to_vector<double>()) EXPECT_EQ(v, -1.0);
  // avg pooling counts padding in the divisor (count_include_pad = true).
  Tensor a = avg_pool2d(ones({1, 1, 2, 2}), {2}, {1}, {1});
  EXPECT_EQ(a.to_vector<double>(),
            (std::vector<double>{0.25, 0.5, 0.25, 0.5, 1, 0.5, 0.25, 0.5, 0.25}));
}

TEST(Pool, MaxPoolMatchesNaiveWithTiesAndNaN) {
  // Values and argmax indices against a plain loop, over the geometries with a vectorized row
  // path (2x2 / 3x3 windows, stride 1 and 2) and a generic one (stride 3, odd sizes), with
  // padding that clips edge windows. Small integers make ties common (the first maximum wins);
  // planted NaNs must win their windows, the last NaN of a window when it has two (PyTorch's
  // rule: take v when v > best or v is NaN).
  manual_seed(11);
  struct G {
    int64_t k, s, p, h, w;
  };
  for (const G& g : {G{2, 2, 0, 28, 28}, G{2, 2, 1, 9, 11}, G{3, 2, 1, 14, 13}, G{3, 1, 1, 7, 20},
                     G{3, 3, 0, 10, 17}, G{2, 1, 0, 5, 6},
                     // 2x2 / stride 2 rows of 8+ windows (the vector row): an odd width whose
                     // last column is unused, and exactly eight windows.
                     G{2, 2, 0, 6, 37}, G{2, 2, 0, 4, 16}}) {
    Tensor x = cast(randint(0, 4, {2, 3, g.h, g.w}), Float32);
    std::vector<float> xv = x.to_vector<float>();
    xv[4] = NAN;
    xv[5] = NAN;
    xv[xv.size() - 3] = NAN;
    x = tensor(xv, {2, 3, g.h, g.w});
    auto r = kiln::detail::call(*OpRegistry::get().find("max_pool2d"), {x},
                                {std::vector<int64_t>{g.k, g.k}, std::vector<int64_t>{g.s, g.s},
                                 std::vector<int64_t>{g.p, g.p}});
    const int64_t OH = (g.h + 2 * g.p - g.k) / g.s + 1, OW = (g.w + 2 * g.p - g.k) / g.s + 1;
    ASSERT_EQ(r[0].shape(), (Shape{2, 3, OH, OW}));
    std::vector<float> yv = r[0].to_vector<float>();
    std::vector<int64_t> iv = r[1].to_vector<int64_t>();
    for (int64_t pl = 0; pl < 6; ++pl)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          float best = -INFINITY;
          int64_t bi = -1;
          for (int64_t ih = oh * g.s - g.p; ih < oh * g.s - g.p + g.k; ++ih)
            for (int64_t iw = ow * g.s - g.p; iw < ow * g.s - g.p + g.k; ++iw) {
              if (ih < 0 || iw < 0 || ih >= g.h || iw >= g.w) continue;
              float v = xv[static_cast<size_t>((pl * g.h + ih) * g.w + iw)];
              if (bi < 0 || v > best || std::isnan(v)) {
                best = v;
                bi = ih * g.w + iw;
              }
            }
          const size_t o = static_cast<size_t>((pl * OH + oh) * OW + ow);
          if (std::isnan(best))
            EXPECT_TRUE(std::isnan(yv[o])) << "k" << g.k << " s" << g.s << " at " << o;
          else
            EXPECT_EQ(yv[o], best) << "k" << g.k << " s" << g.s << " p" << g.p << " at " << o;
          EXPECT_EQ(iv[o], bi) << "k" << g.k << " s" << g.s << " p" << g.p << " at " << o;
        }
  }
}

TEST(Pool, BlockedMaxPoolMatchesNchwWithTiesAndNaN) {
  // max_pool2d_blocked (what block_layout makes of an inference max pool) against max_pool2d,
  // blocks of 8 (the AVX2 loop) and 16 (AVX-512 where the CPU has it), NaNs planted in the
  // first window, across an edge, and in the last block's lanes: NaN wherever NCHW has NaN.
  manual_seed(12);
  for (int64_t b : {8, 16})
    for (int64_t k : {2, 3})
      for (int64_t st : {1, 2}) {
        Tensor x = cast(randint(0, 4, {2, 2 * b, 9, 11}), Float32);
        std::vector<float> xv = x.to_vector<float>();
        for (size_t i : {size_t{0}, size_t{12}, size_t{98}, xv.size() - 1, xv.size() - 13})
          xv[i] = NAN;
        x = tensor(xv, {2, 2 * b, 9, 11});
        const std::vector<float> want = max_pool2d(x, {k, k}, {st, st}, {1, 1}).to_vector<float>();
        const std::vector<float> got =
            from_channel_blocks(
                max_pool2d_blocked(to_channel_blocks(x, b), {k, k}, {st, st}, {1, 1}))
                .to_vector<float>();
        ASSERT_EQ(got.size(), want.size());
        int nans = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          nans += std::isnan(want[i]);
          if (std::isnan(want[i]))
            EXPECT_TRUE(std::isnan(got[i])) << "b" << b << " k" << k << " s" << st << " at " << i;
          else
            EXPECT_EQ(got[i], want[i]) << "b" << b << " k" << k << " s" << st << " at " << i;
        }
        EXPECT_GE(nans, 4);
      }
}

// ---- bad inputs ------------------------------------------------------------------------------

// Runs f, which must raise kiln::Error; returns the message.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The message starts with "[op]" and contains every part (shapes).
void expect_msg(const std::string& m, const std::string& op, std::vector<std::string> parts) {
  EXPECT_EQ(m.rfind("[" + op + "]", 0), 0u) << m;
  for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' in: " << m;
}

#define EXPECT_KILN_ERROR(expr, op, ...)                          \
  do {                                                            \
    EXPECT_THROW((void)(expr), kiln::Error);                      \
    expect_msg(error_of([&] { (void)(expr); }), op, __VA_ARGS__); \
  } while (0)

TEST(BadInputs, RaiseErrorsNamingOpAndShapes) {
  Tensor w = ones({2, 2, 3, 3});
  EXPECT_KILN_ERROR(matmul(ones({2, 3}), ones({4, 5})), "matmul",
                    {"[2, 3]", "[4, 5]", "inner dims 3 and 4 differ"});
  EXPECT_KILN_ERROR(matmul(ones({3}), ones({4})), "matmul", {"[3]", "[4]"});
  EXPECT_KILN_ERROR(matmul(scalar_tensor(1.0), ones({3})), "matmul", {"[]", "[3]"});
  EXPECT_KILN_ERROR(matmul(ones({2, 2}, Bool), ones({2, 2}, Bool)), "matmul", {"[2, 2]", "bool"});
  EXPECT_KILN_ERROR(matmul(ones({2, 2}, Int64), ones({2, 2}, Int32)), "matmul",
                    {"[2, 2]", "int64", "int32"});
  EXPECT_KILN_ERROR(matmul(ones({2, 2}, Float32), ones({2, 2}, Float64)), "matmul", {"[2, 2]"});
  EXPECT_KILN_ERROR(matmul(ones({2, 3, 4}), ones({3, 4, 5})), "matmul", {"[2, 3, 4]", "[3, 4, 5]"});
  EXPECT_KILN_ERROR(linear(ones({2, 3}), ones({4, 5})), "linear", {"[2, 3]", "[4, 5]"});
  EXPECT_KILN_ERROR(linear(ones({2, 5}), ones({4, 5}), ones({3})), "linear", {"[3]"});
  // conv2d: channel mismatch, kernel larger than the padded input, groups not dividing,
  // non-4-D input, bad stride, bad bias.
  EXPECT_KILN_ERROR(conv2d(ones({1, 3, 5, 5}), w), "conv2d", {"[1, 3, 5, 5]", "[2, 2, 3, 3]"});
  EXPECT_KILN_ERROR(conv2d(ones({1, 1, 2, 2}), ones({1, 1, 5, 5}), Tensor(), {1, 1}, {1, 1}),
                    "conv2d", {"[1, 1, 2, 2]", "[1, 1, 5, 5]", "larger than the padded input"});
  EXPECT_KILN_ERROR(
      conv2d(ones({1, 4, 5, 5}), ones({3, 2, 3, 3}), Tensor(), {1, 1}, {0, 0}, {1, 1}, 2), "conv2d",
      {"groups", "[1, 4, 5, 5]", "[3, 2, 3, 3]"});
  EXPECT_KILN_ERROR(conv2d(ones({2, 5, 5}), w), "conv2d", {"[2, 5, 5]", "4-D"});
  EXPECT_KILN_ERROR(conv2d(ones({1, 1, 5, 5}), ones({2, 1, 0, 3})), "conv2d",
                    {"kernel dims must be positive", "[2, 1, 0, 3]"});
  // A bad bias is refused before the conv is built: the graph gains no node.
  {
    Graph g;
    Tensor x = g.placeholder("x", Float32, {1, 2, 5, 5});
    const size_t before = g.impl()->nodes.size();
    EXPECT_KILN_ERROR(conv2d(x, w, ones({3})), "conv2d", {"bias", "[3]", "[2, 2, 3, 3]"});
    EXPECT_EQ(g.impl()->nodes.size(), before);
  }
  // max_pool2d_grad range-checks its indices inside the scatter and names the bad one.
  {
    const OpDef& mpg = OpRegistry::get().at("max_pool2d_grad");
    Tensor idx = tensor(std::vector<int64_t>{0, 3, 99, 1}, {1, 1, 2, 2});
    EXPECT_KILN_ERROR(call(mpg, {ones({1, 1, 2, 2}), idx}, {std::vector<int64_t>{4, 4}}),
                      "max_pool2d_grad", {"index 99", "4x4"});
    Tensor neg = tensor(std::vector<int64_t>{0, -1, 2, 1}, {1, 1, 2, 2});
    EXPECT_KILN_ERROR(call(mpg, {ones({1, 1, 2, 2}), idx}, {std::vector<int64_t>{0, 4}}),
                      "max_pool2d_grad", {"input_size", "2 positive sizes", "[0, 4]"});
    EXPECT_KILN_ERROR(call(mpg, {ones({1, 1, 2, 2}), idx}, {std::vector<int64_t>{-3, 4}}),
                      "max_pool2d_grad", {"input_size", "[-3, 4]"});
    const OpDef& apg = OpRegistry::get().at("avg_pool2d_grad");
    EXPECT_KILN_ERROR(call(apg, {ones({1, 1, 2, 2})},
                           {std::vector<int64_t>{2, 2}, std::vector<int64_t>{2, 2},
                            std::vector<int64_t>{0, 0}, std::vector<int64_t>{-3, 4}}),
                      "avg_pool2d_grad", {"input_size", "[-3, 4]"});
    EXPECT_KILN_ERROR(call(mpg, {ones({1, 1, 2, 2}), neg}, {std::vector<int64_t>{4, 4}}),
                      "max_pool2d_grad", {"index -1"});
  }
  EXPECT_KILN_ERROR(conv2d(ones({1, 2, 5, 5}), ones({2, 5, 5})), "conv2d", {"[2, 5, 5]"});
  EXPECT_KILN_ERROR(conv2d(ones({1, 2, 5, 5}), w, Tensor(), {0, 1}), "conv2d",
                    {"stride", "[0, 1]"});
  EXPECT_KILN_ERROR(conv2d(ones({1, 2, 5, 5}), w, Tensor(), {1, 1}, {0, 0}, {0, 1}), "conv2d",
                    {"dilation", "[0, 1]"});
  EXPECT_KILN_ERROR(conv2d(ones({1, 2, 5, 5}), w, ones({3})), "conv2d", {"[3]", "[2, 2, 3, 3]"});
  EXPECT_KILN_ERROR(conv2d(ones({1, 2, 5, 5}, Int64), ones({2, 2, 3, 3}, Int64)), "conv2d",
                    {"[1, 2, 5, 5]"});
  // pooling: kernel too big, too much padding, wrong rank, zero stride.
  EXPECT_KILN_ERROR(max_pool2d(ones({1, 1, 3, 3}), {5, 5}), "max_pool2d",
                    {"[1, 1, 3, 3]", "larger than the padded input"});
  EXPECT_KILN_ERROR(avg_pool2d(ones({1, 1, 3, 3}), {4, 4}), "avg_pool2d", {"[1, 1, 3, 3]"});
  EXPECT_KILN_ERROR(max_pool2d(ones({1, 1, 6, 6}), {3, 3}, {1, 1}, {2, 2}), "max_pool2d",
                    {"padding", "[2, 2]"});
  EXPECT_KILN_ERROR(max_pool2d(ones({6, 6}), {2, 2}), "max_pool2d", {"[6, 6]"});
  EXPECT_KILN_ERROR(avg_pool2d(ones({1, 1, 6, 6}), {2, 2}, {0, 1}), "avg_pool2d",
                    {"stride", "[0, 1]"});
  EXPECT_KILN_ERROR(max_pool2d(ones({1, 1, 6, 6}), {2, 2, 2}), "max_pool2d",
                    {"kernel", "[2, 2, 2]"});
  // Geometry past 2^30 (in + 2 pad overflowed int64: a "padded input" of -2^63).
  EXPECT_KILN_ERROR(conv2d(ones({1, 2, 5, 5}), w, Tensor(), {1, 1}, {int64_t(1) << 62, 0}),
                    "conv2d", {"padding", "too large"});
  EXPECT_KILN_ERROR(max_pool2d(ones({1, 1, 6, 6}), {2}, {int64_t(1) << 40}), "max_pool2d",
                    {"stride", "too large"});
  // An empty plane (with padding its windows saw padding alone); an empty batch is fine.
  EXPECT_KILN_ERROR(max_pool2d(ones({1, 1, 0, 4}), {2}, {2}, {1}), "max_pool2d",
                    {"non-empty", "[1, 1, 0, 4]"});
  EXPECT_KILN_ERROR(avg_pool2d(ones({1, 0, 4, 4}), {2}), "avg_pool2d", {"[1, 0, 4, 4]"});
  EXPECT_EQ(max_pool2d(ones({0, 2, 4, 4}), {2}).shape(), (Shape{0, 2, 2, 2}));

  // Everything still works afterwards.
  EXPECT_DOUBLE_EQ(matmul(ones({2, 3}), ones({3, 4})).sum().item<double>(), 24.0);
  EXPECT_DOUBLE_EQ(conv2d(ones({1, 2, 5, 5}), w).sum().item<double>(), 2 * 9 * 18.0);
  EXPECT_DOUBLE_EQ(max_pool2d(ones({1, 1, 4, 4}), {2}).sum().item<double>(), 4.0);
}

}  // namespace

// linear(x, w) multiplies by w^T, a transposed view. The weight's gradient must come back in
// w's own (contiguous) layout, eagerly and in a graph: a transposed gradient made every
// optimizer step copy it first (W4: 325 -> 60 us per eager SGD step).
TEST(Linear, WeightGradientKeepsTheWeightsLayout) {
  Tensor x = randn({8, 5}), w0 = randn({3, 5}), b0 = randn({3});
  Tensor w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
  sum(mul(linear(x, w, b), linear(x, w, b))).backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_TRUE(w.grad().is_contiguous());
  // Against the plain formula dW = 2 (x W^T + b)^T x.
  Tensor y = add(matmul(x, w0.t()), b0);
  std::vector<float> want = mul(matmul(y.t(), x), 2.0).to_vector<float>();
  std::vector<float> got = w.grad().to_vector<float>();
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i])));

  Graph g;
  Tensor gx = g.placeholder("x", Float32, {8, 5});
  Tensor gw = g.variable("w", w0), gb = g.variable("b", b0);
  Tensor gy = linear(gx, gw, gb);
  Tensor dw = gradients({sum(mul(gy, gy))}, {gw})[0];
  Session s(g);
  Tensor r = s.run(dw, {{gx, x}});
  EXPECT_TRUE(r.is_contiguous());
  got = r.to_vector<float>();
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i])));
}

// ---- einsum ------------------------------------------------------------------------------------

namespace {

// Naive einsum over explicit subscripts (letters only, output given): loops over every
// assignment of the labels, in float64. Independent of Kiln's ops.
std::vector<double> naive_einsum(const std::vector<std::string>& subs, const std::string& out,
                                 const std::vector<Tensor>& xs, std::vector<int64_t>* out_shape) {
  std::map<char, int64_t> size;
  std::vector<std::vector<double>> vals;
  for (size_t k = 0; k < xs.size(); ++k) {
    vals.push_back(xs[k].to_vector<double>());
    for (size_t d = 0; d < subs[k].size(); ++d)
      size[subs[k][d]] = std::max<int64_t>(size[subs[k][d]], xs[k].size(static_cast<int64_t>(d)));
  }
  std::vector<char> labels;
  for (auto& [c, n] : size) labels.push_back(c);
  out_shape->clear();
  for (char c : out) out_shape->push_back(size[c]);
  int64_t total_out = 1;
  for (int64_t n : *out_shape) total_out *= n;
  std::vector<double> res(static_cast<size_t>(total_out), 0.0);
  std::map<char, int64_t> at;
  std::function<void(size_t)> rec = [&](size_t li) {
    if (li == labels.size()) {
      double prod = 1;
      for (size_t k = 0; k < xs.size(); ++k) {
        int64_t flat = 0;
        for (size_t d = 0; d < subs[k].size(); ++d) {
          const int64_t n = xs[k].size(static_cast<int64_t>(d));
          flat = flat * n + (n == 1 ? 0 : at[subs[k][d]]);  // size-1 dims broadcast
        }
        prod *= vals[k][static_cast<size_t>(flat)];
      }
      int64_t o = 0;
      for (char c : out) o = o * size[c] + at[c];
      res[static_cast<size_t>(o)] += prod;
      return;
    }
    for (int64_t i = 0; i < size[labels[li]]; ++i) {
      at[labels[li]] = i;
      rec(li + 1);
    }
  };
  rec(0);
  return res;
}

}  // namespace

TEST(Einsum, MatchesNaiveLoopsAndDifferentiates) {
  manual_seed(31);
  struct Case {
    std::string eq;                 // what einsum is given
    std::vector<std::string> subs;  // explicit form for the reference
    std::string out;
    std::vector<std::vector<int64_t>> shapes;
  };
  const std::vector<Case> cases = {
      {"bij,bjk->bik", {"bij", "bjk"}, "bik", {{2, 3, 4}, {2, 4, 5}}},
      {"ij,jk", {"ij", "jk"}, "ik", {{3, 4}, {4, 2}}},  // implicit output
      {"bhqd,bhkd->bhqk", {"bhqd", "bhkd"}, "bhqk", {{2, 2, 3, 4}, {2, 2, 5, 4}}},
      {"i,i->", {"i", "i"}, "", {{5}, {5}}},
      {"ij->ji", {"ij"}, "ji", {{3, 4}}},
      {"ij->", {"ij"}, "", {{3, 4}}},
      {"ec,ecd->ed", {"ec", "ecd"}, "ed", {{3, 4}, {3, 4, 2}}},
      {"ij,jk,kl->il", {"ij", "jk", "kl"}, "il", {{2, 3}, {3, 4}, {4, 2}}},
      {"bn,anm,bm->ba", {"bn", "anm", "bm"}, "ba", {{2, 3}, {4, 3, 5}, {2, 5}}},
      {"i,j->ij", {"i", "j"}, "ij", {{3}, {4}}},
      {"ijk->kj", {"ijk"}, "kj", {{2, 3, 4}}},
      // "..." broadcast: [2, 1, 3, 4] and [5, 4, 2] -> [2, 5, 3, 2].
      {"...ij,...jk->...ik", {"abij", "bjk"}, "abik", {{2, 1, 3, 4}, {5, 4, 2}}},
      {"b...,b...->b", {"bxy", "bxy"}, "b", {{3, 2, 4}, {3, 2, 4}}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.eq);
    std::vector<Tensor> xs;
    for (const auto& s : c.shapes) xs.push_back(randn(Shape(s), Float64));
    const Tensor y = einsum(c.eq, xs);
    std::vector<int64_t> want_shape;
    const std::vector<double> want = naive_einsum(c.subs, c.out, xs, &want_shape);
    ASSERT_EQ(y.shape(), Shape(want_shape));
    const auto got = y.to_vector<double>();
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
    GradcheckResult r =
        gradcheck([&](const std::vector<Tensor>& in) { return einsum(c.eq, in); }, xs);
    EXPECT_TRUE(r.ok) << r.message;
  }
  // Under jit (traced into a graph, replayed).
  {
    auto f = jit([](const Tensor& q, const Tensor& k) { return einsum("bqd,bkd->bqk", {q, k}); });
    const Tensor q = randn({2, 3, 4}), k = randn({2, 5, 4});
    const Tensor want = matmul(q, k.transpose(1, 2));
    for (int rep = 0; rep < 2; ++rep) {
      const auto got = f(q, k).to_vector<float>(), w = want.to_vector<float>();
      ASSERT_EQ(got.size(), w.size());
      for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(got[i], w[i], 1e-5);
    }
  }
  // float32 through the same GEMMs.
  const Tensor a = randn({4, 6}), b = randn({6, 3});
  const auto e = einsum("ik,kj->ij", {a, b}).to_vector<float>(),
             m = matmul(a, b).to_vector<float>();
  for (size_t i = 0; i < e.size(); ++i) EXPECT_NEAR(e[i], m[i], 1e-5);
  const Tensor x = randn({3, 4});
  // A repeated label takes the diagonal ('ii' the trace); its sizes must agree.
  const Tensor sq = randn({3, 3});
  EXPECT_EQ(einsum("ii->i", {sq}).to_vector<float>(), diagonal(sq, 0, 0, 1).to_vector<float>());
  EXPECT_NEAR(einsum("ii", {sq}).item<float>(), trace(sq).item<float>(), 1e-6);
  kiln_test::expect_error([&] { einsum("ii->i", {randn({3, 4})}); }, {"[einsum]", "repeats"});
  kiln_test::expect_error([&] { einsum("ij,jk->ik", {x}); }, {"[einsum]", "2 operands"});
  kiln_test::expect_error([&] { einsum("ijk->i", {x}); }, {"[einsum]", "[3, 4]"});
  kiln_test::expect_error(
      [&] {
        einsum("ij,jk->ik", {x, randn({5, 2})});
      },
      {"[einsum]", "'j'", "4", "5"});
  kiln_test::expect_error([&] { einsum("ij->iz", {x}); }, {"[einsum]", "'z'"});
  kiln_test::expect_error([&] { einsum("i$->i", {x}); }, {"[einsum]", "bad subscript"});
}
