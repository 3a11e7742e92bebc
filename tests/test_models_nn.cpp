// kiln::nn layers: every forward against a loop reference, gradchecks through the layers with
// parameters, state dicts, train/eval, ParameterSwap, and a small CNN whose training steps give
// the same losses eagerly, under jit and (forward) in a static graph. Initializers:
// test_models_nn_init.cpp; bad input probed: test_models_nn_probe.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"
#include "test_util.h"

using namespace kiln;
using kiln_test::expect_error;
namespace init = kiln::nn::init;

namespace {

std::vector<double> v64(const Tensor& t) { return t.to_vector<double>(); }

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << "element " << i;
}

// Index of a contiguous NCHW element.
size_t at4(int64_t n, int64_t c, int64_t h, int64_t w, int64_t C, int64_t H, int64_t W) {
  return static_cast<size_t>(((n * C + c) * H + h) * W + w);
}

// Direct convolution in double: x [N, C, H, W], w [O, C/G, kH, kW].
std::vector<double> conv_ref(const std::vector<double>& x, const std::vector<double>& w,
                             const std::vector<double>& b, int64_t N, int64_t C, int64_t H,
                             int64_t W, int64_t O, int64_t kH, int64_t kW, int64_t s, int64_t p,
                             int64_t d, int64_t G, int64_t& OH, int64_t& OW) {
  OH = (H + 2 * p - d * (kH - 1) - 1) / s + 1;
  OW = (W + 2 * p - d * (kW - 1) - 1) / s + 1;
  int64_t Cg = C / G, Og = O / G;
  std::vector<double> y(static_cast<size_t>(N * O * OH * OW));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          double acc = b.empty() ? 0.0 : b[static_cast<size_t>(o)];
          int64_t g = o / Og;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t u = 0; u < kH; ++u)
              for (int64_t v = 0; v < kW; ++v) {
                int64_t hh = i * s - p + u * d, ww = j * s - p + v * d;
                if (hh < 0 || hh >= H || ww < 0 || ww >= W) continue;
                acc += x[at4(n, g * Cg + c, hh, ww, C, H, W)] * w[at4(o, c, u, v, Cg, kH, kW)];
              }
          y[at4(n, o, i, j, O, OH, OW)] = acc;
        }
  return y;
}

}  // namespace

// ---- layers: forward against references -------------------------------------------------------

TEST(NnLayers, LinearForwardAndDefaultInit) {
  manual_seed(2);
  nn::Linear fc(7, 4);
  EXPECT_EQ(fc.weight().shape(), Shape({4, 7}));
  EXPECT_TRUE(fc.weight().requires_grad());
  double bound = 1.0 / std::sqrt(7.0);
  for (double x : v64(fc.weight())) EXPECT_LE(std::fabs(x), bound);
  for (double x : v64(fc.bias())) EXPECT_LE(std::fabs(x), bound);

  Tensor x = randn({3, 7});
  auto xv = v64(x), w = v64(fc.weight()), b = v64(fc.bias());
  std::vector<double> want(12);
  for (int i = 0; i < 3; ++i)
    for (int o = 0; o < 4; ++o) {
      double acc = b[static_cast<size_t>(o)];
      for (int k = 0; k < 7; ++k)
        acc += xv[static_cast<size_t>(i * 7 + k)] * w[static_cast<size_t>(o * 7 + k)];
      want[static_cast<size_t>(i * 4 + o)] = acc;
    }
  expect_near_all(v64(fc(x)), want, 1e-5);

  nn::Linear nob(7, 4, false);
  EXPECT_EQ(nob.parameters().size(), 1u);
  expect_error([&] { fc(randn({3, 6})); }, {"[Linear]", "[3, 6]", "7"});
  expect_error([] { nn::Linear(0, 3); }, {"[Linear]", "in_features"});
}

TEST(NnLayers, Conv2dForwardStridePadDilationGroups) {
  manual_seed(3);
  const int64_t N = 2, C = 4, H = 9, W = 8, O = 6, k = 3;
  nn::Conv2d conv(C, O, {k}, {.stride = {2}, .padding = {2}, .dilation = {2}, .groups = 2});
  EXPECT_EQ(conv.weight().shape(), Shape({O, C / 2, k, k}));
  Tensor x = randn({N, C, H, W});
  int64_t OH = 0, OW = 0;
  auto want = conv_ref(v64(x), v64(conv.weight()), v64(conv.bias()), N, C, H, W, O, k, k, 2, 2, 2,
                       2, OH, OW);
  Tensor y = conv(x);
  EXPECT_EQ(y.shape(), Shape({N, O, OH, OW}));
  expect_near_all(v64(y), want, 1e-5);

  // Unbatched [C, H, W] input.
  Tensor y1 = conv(x.select(0, 1));
  EXPECT_EQ(y1.shape(), Shape({O, OH, OW}));
  expect_near_all(v64(y1), v64(y.select(0, 1)), 1e-6);

  nn::Conv2d plain(1, 2, {2, 3}, {.bias = false});
  EXPECT_EQ(plain.parameters().size(), 1u);
  expect_error(
      [&] {
        conv(randn({N, 3, H, W}));
      },
      {"[Conv2d]", "4 input channels", "[2, 3, 9, 8]"});
  expect_error([&] { conv(randn({H, W})); }, {"[Conv2d]", "[9, 8]"});
  expect_error([] { nn::Conv2d(3, 4, {3}, {.groups = 2}); }, {"[Conv2d]", "groups"});
}

TEST(NnLayers, PoolingForward) {
  manual_seed(4);
  const int64_t N = 2, C = 3, H = 7, W = 6;
  Tensor x = randn({N, C, H, W});
  auto xv = v64(x);
  nn::MaxPool2d mp({3, 2}, {2, 2}, {1, 1});
  nn::AvgPool2d ap({2});
  Tensor ym = mp(x), ya = ap(x);
  int64_t MH = (H + 2 - 3) / 2 + 1, MW = (W + 2 - 2) / 2 + 1;
  ASSERT_EQ(ym.shape(), Shape({N, C, MH, MW}));
  ASSERT_EQ(ya.shape(), Shape({N, C, H / 2, W / 2}));
  std::vector<double> wm, wa;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t i = 0; i < MH; ++i)
        for (int64_t j = 0; j < MW; ++j) {
          double m = -INFINITY;
          for (int64_t u = 0; u < 3; ++u)
            for (int64_t v = 0; v < 2; ++v) {
              int64_t h = i * 2 - 1 + u, w = j * 2 - 1 + v;
              if (h >= 0 && h < H && w >= 0 && w < W) m = std::max(m, xv[at4(n, c, h, w, C, H, W)]);
            }
          wm.push_back(m);
        }
      for (int64_t i = 0; i < H / 2; ++i)
        for (int64_t j = 0; j < W / 2; ++j) {
          double s = 0;
          for (int64_t u = 0; u < 2; ++u)
            for (int64_t v = 0; v < 2; ++v) s += xv[at4(n, c, 2 * i + u, 2 * j + v, C, H, W)];
          wa.push_back(s / 4);
        }
    }
  expect_near_all(v64(ym), wm, 1e-6);
  expect_near_all(v64(ya), wa, 1e-6);
  EXPECT_EQ(mp(x.select(0, 0)).shape(), Shape({C, MH, MW}));
  expect_error([&] { mp(randn({2, 3})); }, {"[MaxPool2d]", "[2, 3]"});
  expect_error([] { nn::AvgPool2d({2, 2, 2}); }, {"[AvgPool2d]", "kernel_size"});
}

TEST(NnLayers, BatchNorm2dTrainAndEval) {
  manual_seed(5);
  const int64_t N = 3, C = 2, H = 4, W = 5;
  nn::BatchNorm2d bn(C, {.momentum = 0.2});
  // Non-trivial affine parameters.
  {
    NoGradGuard ng;
    bn.weight().copy_(tensor({1.5f, -0.5f}));
    bn.bias().copy_(tensor({0.25f, 2.f}));
  }
  Tensor x = add(mul(randn({N, C, H, W}), 3.0), 1.0);
  auto xv = v64(x);
  Tensor y = bn(x);
  auto yv = v64(y);
  const double gamma[2] = {1.5, -0.5}, beta[2] = {0.25, 2.0};
  std::vector<double> rm(2), rv(2);
  const double cnt = static_cast<double>(N * H * W);
  for (int64_t c = 0; c < C; ++c) {
    double s = 0, s2 = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) s += xv[at4(n, c, h, w, C, H, W)];
    double mu = s / cnt;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) s2 += std::pow(xv[at4(n, c, h, w, C, H, W)] - mu, 2);
    double var_b = s2 / cnt, var_u = s2 / (cnt - 1);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) {
          size_t i = at4(n, c, h, w, C, H, W);
          EXPECT_NEAR(yv[i], (xv[i] - mu) / std::sqrt(var_b + 1e-5) * gamma[c] + beta[c], 1e-4);
        }
    rm[static_cast<size_t>(c)] = 0.2 * mu;
    rv[static_cast<size_t>(c)] = 0.8 * 1.0 + 0.2 * var_u;
  }
  expect_near_all(v64(bn.running_mean()), rm, 1e-5);
  expect_near_all(v64(bn.running_var()), rv, 1e-5);
  EXPECT_EQ(bn.num_batches_tracked().item<int64_t>(), 1);
  EXPECT_FALSE(bn.running_mean().requires_grad());

  // Eval normalizes with the running statistics and changes nothing.
  bn.eval();
  Tensor ye = bn(x);
  auto yev = v64(ye);
  for (int64_t c = 0; c < C; ++c) {
    size_t i = at4(1, c, 2, 3, C, H, W);
    EXPECT_NEAR(yev[i],
                (xv[i] - rm[static_cast<size_t>(c)]) /
                        std::sqrt(rv[static_cast<size_t>(c)] + 1e-5) * gamma[c] +
                    beta[c],
                1e-4);
  }
  expect_near_all(v64(bn.running_mean()), rm, 1e-6);
  EXPECT_EQ(bn.num_batches_tracked().item<int64_t>(), 1);

  expect_error([&] { bn(randn({N, 3, H, W})); }, {"[BatchNorm2d]", "2 channels", "[3, 3, 4, 5]"});
  expect_error([&] { bn(randn({N, C})); }, {"[BatchNorm2d]", "[3, 2]"});
  bn.train();
  expect_error([&] { bn(randn({1, C, 1, 1})); }, {"[BatchNorm2d]", "more than 1 value"});
}

TEST(NnLayers, BatchNorm1dAndNoRunningStats) {
  manual_seed(6);
  nn::BatchNorm1d bn(3, {.affine = false});
  EXPECT_TRUE(bn.parameters().empty());
  Tensor x = randn({5, 3});
  auto xv = v64(x);
  auto yv = v64(bn(x));
  for (int64_t c = 0; c < 3; ++c) {
    double s = 0, s2 = 0;
    for (int64_t n = 0; n < 5; ++n) s += xv[static_cast<size_t>(n * 3 + c)];
    for (int64_t n = 0; n < 5; ++n) s2 += std::pow(xv[static_cast<size_t>(n * 3 + c)] - s / 5, 2);
    for (int64_t n = 0; n < 5; ++n)
      EXPECT_NEAR(yv[static_cast<size_t>(n * 3 + c)],
                  (xv[static_cast<size_t>(n * 3 + c)] - s / 5) / std::sqrt(s2 / 5 + 1e-5), 1e-4);
  }
  // [N, C, L] normalizes over N and L.
  Tensor x3 = randn({4, 3, 6});
  Tensor y3 = bn(x3);
  auto m = v64(mean(y3, {0, 2}));
  for (double v : m) EXPECT_NEAR(v, 0.0, 1e-5);

  // Without running statistics eval still uses batch statistics.
  nn::BatchNorm1d free(3, {.track_running_stats = false});
  EXPECT_TRUE(free.buffers().empty());
  free.eval();
  expect_near_all(v64(free(x)), yv, 1e-5);
}

TEST(NnLayers, LayerNormEmbeddingActivationsFlatten) {
  manual_seed(7);
  nn::LayerNorm ln(Shape{4});
  {
    NoGradGuard ng;
    ln.weight().copy_(tensor({1.f, 2.f, 3.f, 4.f}));
    ln.bias().copy_(tensor({0.f, -1.f, 0.5f, 0.f}));
  }
  Tensor x = randn({3, 4});
  auto xv = v64(x), yv = v64(ln(x));
  for (int r = 0; r < 3; ++r) {
    double s = 0, s2 = 0;
    for (int k = 0; k < 4; ++k) s += xv[static_cast<size_t>(r * 4 + k)];
    for (int k = 0; k < 4; ++k) s2 += std::pow(xv[static_cast<size_t>(r * 4 + k)] - s / 4, 2);
    const double w[4] = {1, 2, 3, 4}, b[4] = {0, -1, 0.5, 0};
    for (int k = 0; k < 4; ++k)
      EXPECT_NEAR(
          yv[static_cast<size_t>(r * 4 + k)],
          (xv[static_cast<size_t>(r * 4 + k)] - s / 4) / std::sqrt(s2 / 4 + 1e-5) * w[k] + b[k],
          1e-4);
  }
  expect_error([&] { ln(randn({3, 5})); }, {"[LayerNorm]", "[3, 5]"});

  nn::Embedding emb(10, 3);
  Tensor idx = tensor(std::vector<int64_t>{4, 0, 9, 4}, {2, 2});
  Tensor e = emb(idx);
  EXPECT_EQ(e.shape(), Shape({2, 2, 3}));
  auto tw = v64(emb.weight()), ev = v64(e);
  const int64_t rows[4] = {4, 0, 9, 4};
  for (int i = 0; i < 4; ++i)
    for (int d = 0; d < 3; ++d)
      EXPECT_EQ(ev[static_cast<size_t>(i * 3 + d)], tw[static_cast<size_t>(rows[i] * 3 + d)]);
  expect_error([&] { emb(randn({2})); }, {"[Embedding]", "float32"});

  Tensor a = tensor({-2.f, -0.5f, 0.f, 1.f, 3.f});
  auto av = v64(a);
  auto r = v64(nn::ReLU()(a)), t = v64(nn::Tanh()(a)), s = v64(nn::Sigmoid()(a)),
       g = v64(nn::GELU()(a));
  for (size_t i = 0; i < av.size(); ++i) {
    EXPECT_NEAR(r[i], std::max(av[i], 0.0), 1e-7);
    EXPECT_NEAR(t[i], std::tanh(av[i]), 1e-6);
    EXPECT_NEAR(s[i], 1 / (1 + std::exp(-av[i])), 1e-6);
    EXPECT_NEAR(g[i], 0.5 * av[i] * (1 + std::erf(av[i] / std::sqrt(2.0))), 1e-6);
  }

  Tensor f = randn({2, 3, 4, 5});
  EXPECT_EQ(nn::Flatten()(f).shape(), Shape({2, 60}));
  EXPECT_EQ(nn::Flatten(2)(f).shape(), Shape({2, 3, 20}));
  EXPECT_EQ(v64(nn::Flatten()(f)), v64(f));
  expect_error([&] { nn::Flatten(4)(f); }, {"[Flatten]", "[2, 3, 4, 5]"});
}

TEST(NnLayers, DropoutTrainEval) {
  manual_seed(8);
  nn::Dropout d(0.25);
  Tensor x = ones({20000});
  auto y = v64(d(x));
  int64_t zeros_n = 0;
  for (double v : y) {
    if (v == 0)
      ++zeros_n;
    else
      EXPECT_NEAR(v, 1 / 0.75, 1e-6);
  }
  EXPECT_NEAR(static_cast<double>(zeros_n) / 20000.0, 0.25, 0.02);
  d.eval();
  EXPECT_EQ(v64(d(x)), v64(x));
  expect_error([] { nn::Dropout(1.5); }, {"[Dropout]", "1.5"});
}

// nn::Dropout(1) is allowed, as torch.nn.Dropout(p=1): zeros while training, identity in eval.
TEST(NnLayers, DropoutOfOne) {
  nn::Dropout all(1.0);
  EXPECT_EQ(max(abs(all(ones({4})))).item<double>(), 0.0);
  all.eval();
  EXPECT_EQ(sum(all(ones({4}))).item<double>(), 4.0);
}

// One SGD step (lr 0.1) on seq's parameters moves `w` by exactly -lr times its gradient (a
// tensor listed twice would move twice as far).
void expect_one_sgd_step(nn::Sequential& seq, const Tensor& w, int64_t in_features) {
  const std::vector<double> w0 = w.to_vector<double>();
  optim::SGD opt(seq.parameters(), optim::SGDOptions{.lr = 0.1});
  sum(seq(ones({2, in_features}))).backward();
  const std::vector<double> g = w.grad().to_vector<double>();
  opt.step();
  const std::vector<double> w1 = w.to_vector<double>();
  for (size_t i = 0; i < w0.size(); ++i) EXPECT_NEAR(w1[i], w0[i] - 0.1 * g[i], 1e-6) << i;
}

// A layer used twice (weight sharing): parameters() lists its tensors once, so an optimizer
// steps them once; state_dict() has them under both names and loads back (as torch).
TEST(NnLayers, SharedLayerParametersOnce) {
  auto lin = std::make_shared<nn::Linear>(3, 3);
  nn::Sequential seq{lin, std::make_shared<nn::ReLU>(), lin};
  EXPECT_EQ(seq.parameters().size(), 2u);
  EXPECT_EQ(seq.named_parameters()[0].first, "0.weight");
  EXPECT_EQ(seq.parameter_slots().size(), 2u);
  EXPECT_EQ(seq.num_parameters(), 12);
  nn::StateDict sd = seq.state_dict();
  ASSERT_EQ(sd.size(), 4u);
  EXPECT_EQ(sd[2].first, "2.weight");
  seq.load_state_dict(sd);
  expect_one_sgd_step(seq, lin->weight(), 3);
}

// A weight tied across two slots (an output layer sharing the embedding's matrix, as GPT-2):
// listed once, stepped once, cast once (the tie survives to()), and a ParameterSwap gives both
// slots the replacement and restores both.
TEST(NnLayers, TiedWeightsListedOnceAndSwappedTogether) {
  auto a = std::make_shared<nn::Linear>(4, 4, false), b = std::make_shared<nn::Linear>(4, 4, false);
  b->weight() = a->weight();
  nn::Sequential seq{a, b};
  ASSERT_EQ(seq.parameters().size(), 1u);
  EXPECT_EQ(seq.named_parameters()[0].first, "0.weight");
  ASSERT_EQ(seq.parameter_slots().size(), 1u);
  EXPECT_EQ(seq.parameter_slots()[0].size(), 2u);
  EXPECT_EQ(seq.state_dict().size(), 2u);
  {
    Tensor w = zeros({4, 4});
    nn::ParameterSwap swap(seq, {w});
    EXPECT_TRUE(a->weight().is_same(w));
    EXPECT_TRUE(b->weight().is_same(w));
  }
  EXPECT_TRUE(a->weight().is_same(b->weight()));
  expect_one_sgd_step(seq, b->weight(), 4);
  seq.to(Float64);
  EXPECT_TRUE(a->weight().is_same(b->weight()));
  EXPECT_EQ(b->weight().dtype(), Float64);
}

TEST(NnLayers, SequentialNamesIndexingAndErrors) {
  auto seq = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Layer>>{
      std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>()});
  seq->emplace_back<nn::Dropout>(0.5);
  seq->push_back(std::make_shared<nn::Linear>(8, 2));
  EXPECT_EQ(seq->size(), 4u);
  std::vector<std::string> names;
  for (auto& [n, t] : seq->named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "3.weight", "3.bias"}));
  EXPECT_EQ((*seq)[2].type_name(), "Dropout");
  EXPECT_EQ(seq->num_parameters(), 4 * 8 + 8 + 8 * 2 + 2);
  expect_error([&] { (*seq)[4]; }, {"[Sequential]", "4"});
  expect_error([&] { seq->push_back(nullptr); }, {"[Sequential]"});
  seq->eval();
  EXPECT_FALSE((*seq)[2].is_training());
  EXPECT_EQ((*seq)(randn({5, 4})).shape(), Shape({5, 2}));
  expect_error([&] { (*seq)(randn({5, 3})); }, {"[Linear]", "[5, 3]", "Sequential layer 0"});
}

// ---- gradients --------------------------------------------------------------------------------

TEST(NnGradcheck, LinearConvBatchNormLayerNorm) {
  manual_seed(9);
  nn::Linear fc(4, 3);
  nn::Conv2d conv(2, 3, {3}, {.stride = {2}, .padding = {1}});
  nn::BatchNorm2d bn(3);
  nn::LayerNorm ln(Shape{5});
  for (nn::Module* m : std::vector<nn::Module*>{&fc, &conv, &bn, &ln}) m->to(Float64);
  EXPECT_EQ(fc.weight().dtype(), Float64);
  EXPECT_EQ(bn.running_var().dtype(), Float64);
  EXPECT_EQ(bn.num_batches_tracked().dtype(), Int64);

  // fn(x, params...) runs the layer with the given parameters swapped in.
  auto through = [](nn::Layer& l) {
    return [&l](const std::vector<Tensor>& in) {
      nn::ParameterSwap swap(l, std::vector<Tensor>(in.begin() + 1, in.end()));
      return l(in[0]);
    };
  };
  auto check = [&](nn::Layer& l, const Tensor& x) {
    std::vector<Tensor> in{x};
    for (auto& p : l.parameters()) in.push_back(p.detach());
    GradcheckResult r = gradcheck(through(l), in);
    EXPECT_TRUE(r.ok) << l.type_name() << ": " << r.message;
  };
  check(fc, randn({2, 4}, Float64));
  check(conv, randn({2, 2, 5, 5}, Float64));
  bn.train();
  Tensor rm_before = bn.running_mean();
  check(bn, randn({3, 3, 2, 2}, Float64));
  check(ln, randn({2, 3, 5}, Float64));
  // Training forwards moved the running statistics (by reassignment, not in place).
  EXPECT_FALSE(bn.running_mean().is_same(rm_before));
  EXPECT_EQ(v64(rm_before), std::vector<double>(3, 0.0));
}

TEST(NnLayers, GroupNormMatchesItsDefinition) {
  manual_seed(11);
  nn::GroupNorm gn(2, 6);
  {
    NoGradGuard ng;
    gn.weight().copy_(tensor({1.f, 2.f, 0.5f, -1.f, 3.f, 1.f}));
    gn.bias().copy_(tensor({0.f, 1.f, -1.f, 0.25f, 0.f, 2.f}));
  }
  const Tensor x = randn({2, 6, 3, 2});
  const auto xv = v64(x), yv = v64(gn(x));
  const double w[6] = {1, 2, 0.5, -1, 3, 1}, b[6] = {0, 1, -1, 0.25, 0, 2};
  // Group g of sample n: channels 3g..3g+2, all 6 positions: 18 contiguous values.
  for (int n = 0; n < 2; ++n)
    for (int g = 0; g < 2; ++g) {
      const size_t base = static_cast<size_t>(n * 36 + g * 18);
      double m = 0, v = 0;
      for (size_t i = 0; i < 18; ++i) m += xv[base + i] / 18;
      for (size_t i = 0; i < 18; ++i) v += std::pow(xv[base + i] - m, 2) / 18;
      for (size_t i = 0; i < 18; ++i) {
        const int c = g * 3 + static_cast<int>(i / 6);
        EXPECT_NEAR(yv[base + i], (xv[base + i] - m) / std::sqrt(v + 1e-5) * w[c] + b[c], 1e-4);
      }
    }
  // num_groups = C: instance norm; no affine: no parameters.
  nn::GroupNorm inorm(6, 6, 1e-5, false);
  EXPECT_TRUE(inorm.parameters().empty());
  const auto iv = v64(inorm(x));
  double m = 0;
  for (size_t i = 0; i < 6; ++i) m += iv[i];
  EXPECT_NEAR(m, 0, 1e-5);
  // [N, C] input (no positions) and gradients through every input and parameter.
  gn.to(Float64);
  EXPECT_EQ(gn(randn({4, 6}, Float64)).shape(), Shape({4, 6}));
  std::vector<Tensor> in{randn({2, 6, 2, 2}, Float64), gn.weight().detach(), gn.bias().detach()};
  GradcheckResult r = gradcheck(
      [&](const std::vector<Tensor>& xs) {
        nn::ParameterSwap swap(gn, std::vector<Tensor>(xs.begin() + 1, xs.end()));
        return gn(xs[0]);
      },
      in);
  EXPECT_TRUE(r.ok) << r.message;
  expect_error([] { nn::GroupNorm(4, 6); }, {"[GroupNorm]", "divisible"});
  expect_error([] { nn::GroupNorm(0, 6); }, {"[GroupNorm]", "num_groups"});
  expect_error([&] { gn(randn({2, 5, 3}, Float64)); }, {"[GroupNorm]", "[2, 5, 3]"});
  expect_error([&] { gn(randn({2, 6, 3})); }, {"[GroupNorm]", "float32"});
  // Graphs with a dynamic batch dim give eager's numbers.
  Graph gr;
  Tensor ph = gr.placeholder("x", Float64, {-1, 6, 2, 2});
  Tensor y = gn(ph);
  Session sess(gr);
  const Tensor xb = randn({3, 6, 2, 2}, Float64);
  expect_near_all(v64(sess.run(y, {{ph, xb}})), v64(gn(xb)), 1e-12);
}

TEST(NnLayers, ActivationModulesAreTheirFunctions) {
  const Tensor a = tensor({-30.f, -2.f, -0.5f, 0.25f, 1.f, 3.f, 40.f});
  EXPECT_EQ(v64(nn::SiLU()(a)), v64(silu(a)));
  EXPECT_EQ(v64(nn::LeakyReLU(0.2)(a)), v64(leaky_relu(a, 0.2)));
  EXPECT_EQ(v64(nn::ELU(0.5)(a)), v64(elu(a, 0.5)));
  EXPECT_EQ(v64(nn::Softplus(2.0, 10.0)(a)), v64(softplus(a, 2.0, 10.0)));
  const auto sp = v64(nn::Softplus()(a)), av = v64(a);
  for (size_t i = 0; i < av.size(); ++i) EXPECT_NEAR(sp[i], std::log1p(std::exp(av[i])), 1e-5);
  expect_error([] { nn::Softplus(0.0)(tensor({1.f})); }, {"[softplus]", "beta"});
  expect_error([] { nn::ELU()(Tensor()); }, {"[ELU]"});
}

TEST(NnGradcheck, ModuleBackwardFillsParameterGrads) {
  manual_seed(10);
  nn::Sequential net{std::make_shared<nn::Linear>(3, 5), std::make_shared<nn::Tanh>(),
                     std::make_shared<nn::Linear>(5, 1)};
  Tensor x = randn({4, 3});
  sum(net(x)).backward();
  for (auto& [n, p] : net.named_parameters()) EXPECT_TRUE(p.grad().defined()) << n;
  // d sum / d bias of the last layer is the batch size.
  EXPECT_NEAR(net.named_parameters()[3].second.grad().item<double>(), 4.0, 1e-6);
  net.zero_grad();
  for (auto& p : net.parameters()) EXPECT_FALSE(p.grad().defined());
}

// ---- state -------------------------------------------------------------------------------------

namespace {
std::shared_ptr<nn::Sequential> small_cnn() {
  auto net = std::make_shared<nn::Sequential>();
  net->emplace_back<nn::Conv2d>(1, 4, std::vector<int64_t>{3}, nn::Conv2dOptions{.padding = {1}});
  net->emplace_back<nn::BatchNorm2d>(4);
  net->emplace_back<nn::ReLU>();
  net->emplace_back<nn::MaxPool2d>(std::vector<int64_t>{2});
  net->emplace_back<nn::Flatten>();
  net->emplace_back<nn::Linear>(4 * 4 * 4, 10);
  return net;
}
}  // namespace

TEST(NnState, StateDictRoundTripAndBadLoadsChangeNothing) {
  manual_seed(11);
  auto a = small_cnn();
  a->train();
  a->forward(randn({4, 1, 8, 8}));  // move the running statistics away from their start
  manual_seed(12);
  auto b = small_cnn();
  nn::StateDict sd = a->state_dict();
  std::vector<std::string> names;
  for (auto& [n, t] : sd) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "5.weight",
                                             "5.bias", "1.running_mean", "1.running_var",
                                             "1.num_batches_tracked"}));

  nn::StateDict before = b->state_dict();
  auto unchanged = [&] {
    nn::StateDict now = b->state_dict();
    for (size_t i = 0; i < now.size(); ++i)
      EXPECT_EQ(v64(now[i].second), v64(before[i].second)) << now[i].first;
  };
  nn::StateDict wrong = sd;
  wrong[4].second = zeros({10, 63});
  expect_error([&] { b->load_state_dict(wrong); }, {"[load_state_dict]", "5.weight", "[10, 63]"});
  unchanged();
  nn::StateDict missing(sd.begin(), sd.end() - 1);
  expect_error([&] { b->load_state_dict(missing); }, {"[load_state_dict]", "num_batches_tracked"});
  unchanged();

  b->load_state_dict(sd);
  a->eval();
  b->eval();
  Tensor x = randn({2, 1, 8, 8});
  EXPECT_EQ(v64(a->forward(x)), v64(b->forward(x)));
  EXPECT_EQ(b->state_dict()[8].second.item<int64_t>(), 1);
}

TEST(NnState, TrainEvalAndParameterSwapRestores) {
  manual_seed(13);
  auto net = small_cnn();
  Tensor x = randn({4, 1, 8, 8});
  net->eval();
  Tensor y_eval = net->forward(x);
  net->train();
  Tensor y_train = net->forward(x);
  EXPECT_NE(v64(y_eval), v64(y_train));  // batch statistics vs running statistics
  EXPECT_TRUE(net->at(1)->is_training());

  // Swap in other parameters and buffers; the originals come back at scope end, and buffers the
  // module reassigned while swapped are visible before that.
  auto params = net->parameters();
  auto bufs = net->buffers();
  std::vector<Tensor> zp, zb;
  for (auto& p : params) zp.push_back(zeros_like(p));
  for (auto& bb : bufs) zb.push_back(bb.dtype() == Int64 ? bb.clone() : zeros_like(bb));
  {
    nn::ParameterSwap swap(*net, zp, zb);
    net->eval();
    for (double v : v64(net->forward(x))) EXPECT_EQ(v, 0.0);
    net->train();
    net->forward(x);
    EXPECT_FALSE(net->buffers()[0].is_same(zb[0]));
  }
  auto params2 = net->parameters();
  auto bufs2 = net->buffers();
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(params2[i].is_same(params[i]));
  for (size_t i = 0; i < bufs.size(); ++i) EXPECT_TRUE(bufs2[i].is_same(bufs[i]));
  expect_error([&] { nn::ParameterSwap bad(*net, {zeros({1})}); },
               {"[ParameterSwap]", "6 parameters"});
}

// ---- one model, three modes -------------------------------------------------------------------

namespace {

// One SGD-with-momentum training step over flat state [params..., buffers..., velocities...];
// returns the new state and the loss. Written once; runs eagerly and under jit.
struct CnnStep {
  std::shared_ptr<nn::Sequential> net;
  size_t np, nb;
  std::vector<Tensor> operator()(const std::vector<Tensor>& state, const Tensor& x,
                                 const Tensor& y) const {
    std::vector<Tensor> ps,
        bs(state.begin() + static_cast<long>(np), state.begin() + static_cast<long>(np + nb));
    for (size_t i = 0; i < np; ++i) ps.push_back(state[i].detach().requires_grad_());
    nn::ParameterSwap swap(*net, ps, bs);
    net->train();
    Tensor loss = cross_entropy(net->forward(x), y);
    std::vector<Tensor> g = grad({loss}, ps);
    std::vector<Tensor> out(np), vel(np);
    for (size_t i = 0; i < np; ++i) {
      vel[i] = add(mul(state[np + nb + i], 0.9), g[i]);
      out[i] = sub(state[i], mul(vel[i], 0.05));
    }
    for (auto& b : net->buffers()) out.push_back(b);
    out.insert(out.end(), vel.begin(), vel.end());
    out.push_back(loss.detach());
    return out;
  }
};

}  // namespace

TEST(NnModes, SmallCnnTrainingEagerEqualsJit) {
  manual_seed(14);
  auto net = small_cnn();
  Tensor x = randn({8, 1, 8, 8});
  Tensor y = randint(0, 10, {8});
  CnnStep step{net, net->parameters().size(), net->buffers().size()};
  auto jstep = jit([step](const std::vector<Tensor>& s, const Tensor& xb, const Tensor& yb) {
    return step(s, xb, yb);
  });
  std::vector<Tensor> init_state;
  for (auto& p : net->parameters()) init_state.push_back(p.detach());
  for (auto& b : net->buffers()) init_state.push_back(b);
  for (auto& p : net->parameters()) init_state.push_back(zeros_like(p));
  std::vector<Tensor> se = init_state, sj = init_state;
  for (int it = 0; it < 4; ++it) {
    std::vector<Tensor> re = step(se, x, y), rj = jstep(sj, x, y);
    ASSERT_EQ(re.size(), rj.size());
    double le = re.back().item<double>(), lj = rj.back().item<double>();
    EXPECT_NEAR(lj, le, 1e-5 * (1 + std::fabs(le))) << "step " << it;
    se.assign(re.begin(), re.end() - 1);
    sj.assign(rj.begin(), rj.end() - 1);
  }
  for (size_t i = 0; i < se.size(); ++i) expect_near_all(v64(sj[i]), v64(se[i]), 1e-5);
  EXPECT_EQ(jstep.stats().compiles, 1);
  // The BatchNorm buffers came back out of the jitted step: 4 updates.
  EXPECT_EQ(sj[step.np + 2].item<int64_t>(), 4);
  // The module's own tensors are untouched by either.
  EXPECT_EQ(v64(net->buffers()[0]), std::vector<double>(4, 0.0));

  // Eval forward: eager, jitted (params as arguments) and a static graph agree.
  std::vector<Tensor> ps(se.begin(), se.begin() + static_cast<long>(step.np));
  std::vector<Tensor> bs(se.begin() + static_cast<long>(step.np),
                         se.begin() + static_cast<long>(step.np + step.nb));
  auto jeval =
      jit([net](const std::vector<Tensor>& p, const std::vector<Tensor>& b, const Tensor& xb) {
        nn::ParameterSwap swap(*net, p, b);
        net->eval();
        return net->forward(xb);
      });
  Tensor ye;
  {
    nn::ParameterSwap swap(*net, ps, bs);
    net->eval();
    ye = net->forward(x);
    Graph g;
    Tensor xp = g.placeholder("x", Float32, {Dim::any(), 1, 8, 8});
    Tensor yg = net->forward(xp);
    Session sess(g);
    expect_near_all(v64(sess.run(yg, {{xp, x}})), v64(ye), 1e-5);
    EXPECT_NE(g.to_mermaid().find("conv2d"), std::string::npos);
  }
  expect_near_all(v64(jeval(ps, bs, x)), v64(ye), 1e-5);
  EXPECT_NEAR(nn::accuracy(ye, y).item<double>(),
              static_cast<double>(nn::num_correct(ye, y).item<int64_t>()) / 8.0, 1e-7);
}

TEST(NnModes, EagerOptimizerMatchesFunctionalStep) {
  // optim::SGD on module.parameters() takes the same steps as the functional update above.
  manual_seed(15);
  auto net = small_cnn();
  Tensor x = randn({8, 1, 8, 8});
  Tensor y = randint(0, 10, {8});
  CnnStep step{net, net->parameters().size(), net->buffers().size()};
  std::vector<Tensor> s;
  for (auto& p : net->parameters()) s.push_back(p.detach().clone());
  for (auto& b : net->buffers()) s.push_back(b);
  for (auto& p : net->parameters()) s.push_back(zeros_like(p));
  optim::SGD opt(net->parameters(), {.lr = 0.05, .momentum = 0.9});
  net->train();
  for (int it = 0; it < 3; ++it) {
    auto r = step(s, x, y);
    s.assign(r.begin(), r.end() - 1);
    Tensor loss = cross_entropy(net->forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    EXPECT_NEAR(loss.item<double>(), r.back().item<double>(), 1e-5);
  }
  auto params = net->parameters();
  for (size_t i = 0; i < params.size(); ++i) expect_near_all(v64(params[i]), v64(s[i]), 1e-5);
  expect_near_all(v64(net->buffers()[1]), v64(s[step.np + 1]), 1e-5);
}

TEST(NnLayers, ModuleListRegistersItsChildren) {
  manual_seed(12);
  nn::ModuleList blocks;
  blocks.emplace_back<nn::Linear>(4, 4);
  blocks.emplace_back<nn::LayerNorm>(Shape{4});
  blocks.push_back(std::make_shared<nn::Dropout>(0.5));
  EXPECT_EQ(blocks.size(), 3u);
  const auto names = blocks.named_parameters();
  ASSERT_EQ(names.size(), 4u);
  EXPECT_EQ(names[0].first, "0.weight");
  EXPECT_EQ(names[3].first, "1.bias");
  EXPECT_EQ(blocks.state_dict().size(), 4u);
  blocks.eval();
  EXPECT_FALSE(blocks[2].is_training());
  // Calling them is the owner's: typed access.
  Tensor x = randn({2, 4});
  Tensor y = blocks.get<nn::LayerNorm>(1)(blocks.get<nn::Linear>(0)(x));
  EXPECT_EQ(y.shape(), Shape({2, 4}));
  int n = 0;
  for (const auto& m : blocks) n += m->parameters().empty() ? 0 : 1;
  EXPECT_EQ(n, 2);
  expect_error([&] { blocks.get<nn::Linear>(1); }, {"[ModuleList]", "LayerNorm"});
  expect_error([&] { blocks[3]; }, {"[ModuleList]", "out of range"});
  expect_error([&] { blocks.push_back(nullptr); }, {"[ModuleList]", "null"});
}
