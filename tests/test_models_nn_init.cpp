// kiln::nn::init: fans and gains, bounds and moments of every initializer, seeding, and bad
// input (integer tensors, fans of 1-D tensors) raising kiln::Error naming the initializer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "test_util.h"

using namespace kiln;
using kiln_test::expect_error;
namespace init = kiln::nn::init;

namespace {
std::vector<double> v64(const Tensor& t) { return t.to_vector<double>(); }
}  // namespace

TEST(NnInit, FansAndGains) {
  Tensor w = empty({6, 4, 3, 5});
  auto [fi, fo] = init::fan_in_and_fan_out(w);
  EXPECT_EQ(fi, 4 * 15);
  EXPECT_EQ(fo, 6 * 15);
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::ReLU), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::Tanh), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::LeakyReLU, std::sqrt(5.0)),
                   std::sqrt(2.0 / 6.0));
  expect_error([] { init::fan_in_and_fan_out(empty({3})); }, {"[fan_in_and_fan_out]", "[3]"});
}

TEST(NnInit, BoundsMomentsAndSeed) {
  manual_seed(1);
  Tensor w = empty({256, 128});
  init::kaiming_uniform_(w, 0.0, init::FanMode::FanIn, init::Nonlinearity::ReLU);
  double bound = std::sqrt(2.0) * std::sqrt(3.0 / 128.0);
  auto v = v64(w);
  double mx = 0, s2 = 0;
  for (double x : v) mx = std::max(mx, std::fabs(x)), s2 += x * x;
  EXPECT_LE(mx, bound);
  EXPECT_GT(mx, 0.95 * bound);
  // Variance of U(-b, b) is b^2 / 3 = 2 / fan_in.
  EXPECT_NEAR(s2 / static_cast<double>(v.size()), 2.0 / 128.0, 0.05 * 2.0 / 128.0);

  init::kaiming_normal_(w, 0.0, init::FanMode::FanOut, init::Nonlinearity::ReLU);
  s2 = 0;
  for (double x : v64(w)) s2 += x * x;
  EXPECT_NEAR(s2 / static_cast<double>(w.numel()), 2.0 / 256.0, 0.05 * 2.0 / 256.0);

  init::xavier_uniform_(w);
  double xb = std::sqrt(6.0 / (128.0 + 256.0));
  mx = 0;
  for (double x : v64(w)) mx = std::max(mx, std::fabs(x));
  EXPECT_LE(mx, xb);
  EXPECT_GT(mx, 0.95 * xb);

  init::xavier_normal_(w, 2.0);
  s2 = 0;
  for (double x : v64(w)) s2 += x * x;
  double want = 4.0 * 2.0 / (128.0 + 256.0);
  EXPECT_NEAR(s2 / static_cast<double>(w.numel()), want, 0.05 * want);

  Tensor u = empty({1000});
  init::uniform_(u, 2.0, 3.0);
  for (double x : v64(u)) EXPECT_TRUE(x >= 2.0 && x < 3.0) << x;
  init::zeros_(u);
  for (double x : v64(u)) EXPECT_EQ(x, 0.0);

  // The same seed gives the same parameters.
  manual_seed(7);
  nn::Linear a(5, 3);
  manual_seed(7);
  nn::Linear b(5, 3);
  EXPECT_EQ(v64(a.weight()), v64(b.weight()));
  EXPECT_EQ(v64(a.bias()), v64(b.bias()));
}

TEST(NnInit, BadInputRaises) {
  Tensor i = zeros({3, 3}, Int64);
  expect_error([&] { init::normal_(i); }, {"[normal_]", "int64"});
  Tensor w = empty({3, 3});
  expect_error([&] { init::uniform_(w, 1.0, 0.0); }, {"[uniform_]"});
  Graph g;
  Tensor s = g.placeholder("s", Float32, {3, 3});
  expect_error([&] { init::xavier_uniform_(s); }, {"[xavier_uniform_]", "symbolic"});
}
