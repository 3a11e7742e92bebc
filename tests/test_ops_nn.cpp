// Behaviour of the nn and indexing ops beyond the registry samples (and of conv1d, pad and
// adaptive_avg_pool2d, composed of registry ops): batch_norm running
// statistics, cross_entropy reductions with ignore_index, numerical stability, large inputs on
// the multithreaded paths, dropout reproducibility, and bad inputs raising kiln::Error.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kiln/dispatch/dispatch.h"
#include "kiln/kernels/cpu/parallel.h"
#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/ops/grad_ops.h"
#include "test_util.h"

using namespace kiln::detail;

using namespace kiln;
using kiln_test::expect_error;

namespace {

std::vector<double> v64(const Tensor& t) { return t.to_vector<double>(); }

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << "element " << i;
}

// Naive softmax / log_softmax of a contiguous [outer, n, inner] float64 buffer.
std::vector<double> naive_softmax(const std::vector<double>& x, int64_t outer, int64_t n,
                                  int64_t inner, bool log) {
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      auto at = [&](int64_t k) { return static_cast<size_t>((o * n + k) * inner + j); };
      double m = -INFINITY, s = 0;
      for (int64_t k = 0; k < n; ++k) m = std::max(m, x[at(k)]);
      for (int64_t k = 0; k < n; ++k) s += std::exp(x[at(k)] - m);
      for (int64_t k = 0; k < n; ++k)
        y[at(k)] = log ? x[at(k)] - m - std::log(s) : std::exp(x[at(k)] - m) / s;
    }
  return y;
}

// ---- batch_norm ---------------------------------------------------------------------------

TEST(BatchNorm, RunningStatsUpdatedInPlace) {
  // x [4, 2]: channel 0 = {1, 2, 3, 6}, channel 1 = {0, 0, 4, 4}.
  Tensor x = tensor({1.f, 0.f, 2.f, 0.f, 3.f, 4.f, 6.f, 4.f}, {4, 2});
  Tensor rm = full({2}, 0.5f), rv = full({2}, 2.0f);
  Tensor y = batch_norm(x, rm, rv, Tensor(), Tensor(), true, 0.1, 1e-5);
  // Batch stats: mean {3, 2}; biased var {14/4, 16/4}; unbiased {14/3, 16/3}.
  auto m = rm.to_vector<float>();
  auto v = rv.to_vector<float>();
  EXPECT_NEAR(m[0], 0.9 * 0.5 + 0.1 * 3.0, 1e-6);
  EXPECT_NEAR(m[1], 0.9 * 0.5 + 0.1 * 2.0, 1e-6);
  EXPECT_NEAR(v[0], 0.9 * 2.0 + 0.1 * 14.0 / 3.0, 1e-6);
  EXPECT_NEAR(v[1], 0.9 * 2.0 + 0.1 * 16.0 / 3.0, 1e-6);
  // Normalization uses the biased batch variance.
  auto yv = y.to_vector<float>();
  EXPECT_NEAR(yv[0], (1 - 3) / std::sqrt(3.5 + 1e-5), 1e-5);
  EXPECT_NEAR(yv[5], (4 - 2) / std::sqrt(4.0 + 1e-5), 1e-5);
}

TEST(BatchNorm, RunningStats4dAndMomentum) {
  manual_seed(3);
  Tensor x = randn({3, 2, 2, 2}, Float64);
  Tensor rm = zeros({2}, Float64), rv = ones({2}, Float64);
  batch_norm(x, rm, rv, Tensor(), Tensor(), true, 0.25, 1e-5);
  auto xv = v64(x);
  for (int64_t c = 0; c < 2; ++c) {
    std::vector<double> vals;
    for (int64_t n = 0; n < 3; ++n)
      for (int64_t s = 0; s < 4; ++s) vals.push_back(xv[static_cast<size_t>((n * 2 + c) * 4 + s)]);
    double mu = 0, var = 0;
    for (double e : vals) mu += e;
    mu /= 12;
    for (double e : vals) var += (e - mu) * (e - mu);
    var /= 11;
    EXPECT_NEAR(v64(rm)[static_cast<size_t>(c)], 0.25 * mu, 1e-12);
    EXPECT_NEAR(v64(rv)[static_cast<size_t>(c)], 0.75 + 0.25 * var, 1e-12);
  }
}

TEST(BatchNorm, EvalUsesRunningStatsAndLeavesThem) {
  Tensor x = tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {3, 2});
  Tensor rm = tensor({0.5f, -1.f}), rv = tensor({4.f, 0.25f});
  Tensor w = tensor({2.f, 3.f}), b = tensor({0.1f, 0.2f});
  Tensor y = batch_norm(x, rm, rv, w, b, false, 0.1, 1e-5);
  auto yv = y.to_vector<float>();
  float xs[6] = {1, 2, 3, 4, 5, 6};
  for (int i = 0; i < 6; ++i) {
    int c = i % 2;
    double want = (xs[i] - (c ? -1.0 : 0.5)) / std::sqrt((c ? 0.25 : 4.0) + 1e-5) * (c ? 3 : 2) +
                  (c ? 0.2 : 0.1);
    EXPECT_NEAR(yv[static_cast<size_t>(i)], want, 1e-5);
  }
  EXPECT_EQ(rm.to_vector<float>(), (std::vector<float>{0.5f, -1.f}));
  EXPECT_EQ(rv.to_vector<float>(), (std::vector<float>{4.f, 0.25f}));
}

TEST(BatchNorm, TrainingBackwardWithRunningStats) {
  Tensor x = randn({4, 3}, Float32).requires_grad_();
  Tensor rm = zeros({3}), rv = ones({3});
  Tensor y = batch_norm(x, rm, rv, Tensor(), Tensor(), true, 0.1, 1e-5);
  y.sum().backward();
  // Normalized outputs sum to zero per channel regardless of x, so d sum / dx = 0.
  for (double g : v64(x.grad())) EXPECT_NEAR(g, 0, 1e-5);
  EXPECT_FALSE(rm.requires_grad());
}

TEST(BatchNorm, MixedFloatRunningStats) {
  // Running statistics of the other float dtype are updated and keep their dtype.
  Tensor x = tensor({1.f, 0.f, 2.f, 0.f, 3.f, 4.f, 6.f, 4.f}, {4, 2});
  Tensor rm = full({2}, 0.5, Float64), rv = full({2}, 2.0, Float64);
  batch_norm(x, rm, rv, Tensor(), Tensor(), true, 0.1, 1e-5);
  EXPECT_EQ(rm.dtype(), Float64);
  EXPECT_NEAR(v64(rm)[0], 0.9 * 0.5 + 0.1 * 3.0, 1e-6);
  EXPECT_NEAR(v64(rv)[1], 0.9 * 2.0 + 0.1 * 16.0 / 3.0, 1e-6);
  Tensor rm32 = full({2}, 0.5f), rv32 = full({2}, 2.0f);
  batch_norm(cast(x, Float64), rm32, rv32, Tensor(), Tensor(), true, 0.1, 1e-5);
  EXPECT_EQ(rm32.dtype(), Float32);
  EXPECT_NEAR(v64(rm32)[1], 0.9 * 0.5 + 0.1 * 2.0, 1e-6);
  EXPECT_NEAR(v64(rv32)[0], 0.9 * 2.0 + 0.1 * 14.0 / 3.0, 1e-6);
}

// ---- cross_entropy / nll_loss -------------------------------------------------------------

TEST(CrossEntropy, ReductionsWithIgnoreIndex) {
  Tensor logits = tensor({1.f, 2.f, 0.5f, -1.f, 0.f, 3.f, 2.f, 2.f, -2.f, 1.f, 0.f, 4.f}, {3, 4});
  Tensor target = tensor(std::vector<int64_t>{1, -100, 3}, {3});
  auto lv = v64(logits);
  auto lp = naive_softmax(lv, 3, 4, 1, true);
  double l0 = -lp[1], l2 = -lp[8 + 3];
  auto none = v64(cross_entropy(logits, target, Reduction::None));
  expect_near_all(none, {l0, 0.0, l2}, 1e-6);
  EXPECT_NEAR(cross_entropy(logits, target, Reduction::Sum).item<double>(), l0 + l2, 1e-5);
  EXPECT_NEAR(cross_entropy(logits, target, Reduction::Mean).item<double>(), (l0 + l2) / 2, 1e-5);
  EXPECT_EQ(cross_entropy(logits, target, Reduction::Mean).dim(), 0);

  // The ignored row gets no gradient; the mean divides by the 2 counted rows.
  Tensor lg = logits.detach().requires_grad_();
  cross_entropy(lg, target, Reduction::Mean).backward();
  auto g = v64(lg.grad());
  for (int j = 0; j < 4; ++j) EXPECT_EQ(g[static_cast<size_t>(4 + j)], 0.0);
  auto sm = naive_softmax(lv, 3, 4, 1, false);
  EXPECT_NEAR(g[1], (sm[1] - 1) / 2, 1e-6);
  EXPECT_NEAR(g[0], sm[0] / 2, 1e-6);
}

TEST(CrossEntropy, AllIgnoredMeanIsNaN) {
  Tensor logits = tensor({1.f, 2.f, 3.f, 4.f}, {2, 2});
  Tensor target = tensor(std::vector<int64_t>{-100, -100}, {2});
  EXPECT_TRUE(std::isnan(cross_entropy(logits, target).item<float>()));
  EXPECT_EQ(cross_entropy(logits, target, Reduction::Sum).item<float>(), 0.f);
}

TEST(CrossEntropy, UnbatchedAndInt32Target) {
  Tensor logits = tensor({0.f, 1.f, 2.f});
  Tensor t = tensor(std::vector<int64_t>{2}, {1}).reshape(Shape{});
  auto lp = naive_softmax({0, 1, 2}, 1, 3, 1, true);
  EXPECT_NEAR(cross_entropy(logits, t).item<float>(), -lp[2], 1e-6);
  Tensor l2 = tensor({0.f, 1.f, 2.f, 3.f, 1.f, 0.f}, {2, 3});
  Tensor t32 = tensor(std::vector<int32_t>{2, 0}, {2});
  Tensor t64 = tensor(std::vector<int64_t>{2, 0}, {2});
  EXPECT_FLOAT_EQ(cross_entropy(l2, t32).item<float>(), cross_entropy(l2, t64).item<float>());
}

// ---- stability and large inputs -----------------------------------------------------------

TEST(Softmax, StableForLargeLogits) {
  Tensor x = tensor({1000.f, 1001.f, 1002.f, -1000.f});
  auto ls = log_softmax(x, 0).to_vector<float>();
  auto want = naive_softmax({1000, 1001, 1002, -1000}, 1, 4, 1, true);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(std::isfinite(ls[i]));
    EXPECT_NEAR(ls[i], want[i], 1e-4 * (1 + std::fabs(want[i])));
  }
  auto s = softmax(tensor({1000.f, 0.f, -1000.f}), 0).to_vector<float>();
  EXPECT_NEAR(s[0], 1.0, 1e-6);
  EXPECT_EQ(s[1], 0.f);
  EXPECT_EQ(s[2], 0.f);
  // Gradient stays finite too.
  Tensor xl = tensor({1000.f, 1001.f, 1002.f}).requires_grad_();
  log_softmax(xl, 0).sum().backward();
  for (double g : v64(xl.grad())) EXPECT_TRUE(std::isfinite(g));
}

TEST(Softmax, LargeRowsAndColumnsMatchNaive) {
  manual_seed(5);
  Tensor a = mul(randn({64, 1000}), 3.0);  // rows path, several threads
  auto av = v64(a);
  expect_near_all(v64(softmax(a, 1)), naive_softmax(av, 64, 1000, 1, false), 1e-5);
  expect_near_all(v64(log_softmax(a, -1)), naive_softmax(av, 64, 1000, 1, true), 1e-5);
  Tensor b = mul(randn({50, 600}), 3.0);  // column-block path, 3 blocks
  auto bv = v64(b);
  expect_near_all(v64(softmax(b, 0)), naive_softmax(bv, 1, 50, 600, false), 1e-5);
  expect_near_all(v64(log_softmax(b, 0)), naive_softmax(bv, 1, 50, 600, true), 1e-5);
  // Non-contiguous input.
  Tensor t = b.t();
  expect_near_all(v64(softmax(t, 1)), v64(softmax(b, 0).t().contiguous()), 1e-6);
}

TEST(LayerNorm, LargeRowsMatchNaive) {
  manual_seed(6);
  // 256 x 384 stays in cache; 2800 x 401 (4.5 MB) takes the streaming-store path, with a row
  // length that is a multiple of neither the accumulator block nor the streamed piece.
  for (auto [R, N] : {std::pair<size_t, size_t>{256, 384}, {2800, 401}}) {
    const auto r64 = static_cast<int64_t>(R), n64 = static_cast<int64_t>(N);
    Tensor x = add(randn({r64, n64}), 2.0);
    Tensor w = randn({n64}), b = randn({n64});
    auto got = v64(layer_norm(x, {n64}, w, b, 1e-5));
    auto xv = v64(x), wv = v64(w), bv = v64(b);
    std::vector<double> want(xv.size());
    for (size_t r = 0; r < R; ++r) {
      double m = 0, v = 0;
      for (size_t j = 0; j < N; ++j) m += xv[r * N + j];
      m /= static_cast<double>(N);
      for (size_t j = 0; j < N; ++j) v += (xv[r * N + j] - m) * (xv[r * N + j] - m);
      v /= static_cast<double>(N);
      for (size_t j = 0; j < N; ++j)
        want[r * N + j] = (xv[r * N + j] - m) / std::sqrt(v + 1e-5) * wv[j] + bv[j];
    }
    expect_near_all(got, want, 1e-4);
  }
}

TEST(LayerNorm, EmptyNormalizedShapeGivesAnEmptyResult) {
  // Rows of no elements (torch.layer_norm(torch.zeros(4, 0), [0]) is [4, 0]): nothing is read.
  Tensor y = layer_norm(ones({4, 0}), {0}, Tensor(), Tensor(), 1e-5);
  EXPECT_EQ(y.shape(), (Shape{4, 0}));
  Tensor z = layer_norm(ones({0, 3}), {3}, ones({3}), zeros({3}), 1e-5);
  EXPECT_EQ(z.shape(), (Shape{0, 3}));
}

TEST(LayerNorm, SecondOrderGradientMatchesFiniteDifference) {
  // d/dx of <grad_x(sum(layer_norm(x) * u)), v>, by create_graph vs central differences.
  manual_seed(8);
  Tensor x0 = randn({2, 5}, Float64), u = randn({2, 5}, Float64), v = randn({2, 5}, Float64);
  Tensor w = randn({5}, Float64);
  auto inner = [&](const Tensor& x) {
    Tensor xr = x.detach().requires_grad_();
    Tensor y = sum(mul(layer_norm(xr, {5}, w, Tensor(), 1e-5), u));
    auto g = grad({y}, {xr}, {}, true, true);
    return std::make_pair(xr, sum(mul(g[0], v)));
  };
  auto [xr, s] = inner(x0);
  auto g2 = grad({s}, {xr});
  auto analytic = v64(g2[0]);
  auto xv = v64(x0);
  for (size_t i = 0; i < xv.size(); ++i) {
    auto xp = xv, xm = xv;
    xp[i] += 1e-6;
    xm[i] -= 1e-6;
    double fp = inner(tensor(xp, {2, 5})).second.item<double>();
    double fm = inner(tensor(xm, {2, 5})).second.item<double>();
    EXPECT_NEAR(analytic[i], (fp - fm) / 2e-6, 1e-4 * (1 + std::fabs(analytic[i]))) << i;
  }
}

TEST(Indexing, LargeScatterAddAndGatherMatchNaive) {
  manual_seed(9);
  Tensor a = randn({40, 700}, Float64);
  Tensor src = randn({64, 700}, Float64);
  Tensor ix = randint(0, 40, {64, 700});
  auto out = v64(scatter_add(a, 0, ix, src));
  auto want = v64(a);
  auto iv = ix.to_vector<int64_t>();
  auto sv = v64(src);
  for (size_t k = 0; k < 64; ++k)
    for (size_t j = 0; j < 700; ++j)
      want[static_cast<size_t>(iv[k * 700 + j]) * 700 + j] += sv[k * 700 + j];
  expect_near_all(out, want, 1e-12);
  auto gv = v64(gather(a, 0, ix));
  auto avv = v64(a);
  for (size_t k = 0; k < 64; ++k)
    for (size_t j = 0; j < 700; j += 37)
      EXPECT_EQ(gv[k * 700 + j], avv[static_cast<size_t>(iv[k * 700 + j]) * 700 + j]);
}

TEST(Embedding, BackwardAccumulatesRepeatedRows) {
  Tensor w = zeros({3, 2}).requires_grad_();
  Tensor ix = tensor(std::vector<int64_t>{0, 0, 2}, {3});
  embedding(w, ix).sum().backward();
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{2, 2, 0, 0, 1, 1}));
  // Large index count, multithreaded grad.
  manual_seed(10);
  Tensor w2 = randn({50, 64}).requires_grad_();
  Tensor ix2 = randint(0, 50, {4000});
  embedding(w2, ix2).sum().backward();
  std::vector<double> cnt(50, 0);
  for (auto i : ix2.to_vector<int64_t>()) cnt[static_cast<size_t>(i)] += 1;
  auto g = v64(w2.grad());
  for (size_t r = 0; r < 50; ++r) EXPECT_EQ(g[r * 64 + 5], cnt[r]);
}

// ---- dropout ------------------------------------------------------------------------------

TEST(Dropout, ReproducibleAndThreadIndependent) {
  Tensor x = ones({300, 500});
  manual_seed(42);
  auto a = dropout(x, 0.4).to_vector<float>();
  int prev = get_num_threads();
  set_num_threads(1);
  manual_seed(42);
  auto b = dropout(x, 0.4).to_vector<float>();
  set_num_threads(prev);
  EXPECT_EQ(a, b);
  manual_seed(43);
  EXPECT_NE(dropout(x, 0.4).to_vector<float>(), a);
  double zeros = 0;
  for (float e : a) {
    if (e == 0)
      ++zeros;
    else
      EXPECT_FLOAT_EQ(e, 1.f / 0.6f);
  }
  EXPECT_NEAR(zeros / static_cast<double>(a.size()), 0.4, 0.01);
}

TEST(Dropout, GradientUsesTheSameMask) {
  Tensor x = rand({20, 30}).requires_grad_();
  Tensor y = dropout(x, 0.25);
  y.sum().backward();
  auto yv = y.to_vector<float>(), gv = x.grad().to_vector<float>();
  for (size_t i = 0; i < yv.size(); ++i)
    EXPECT_FLOAT_EQ(gv[i], yv[i] == 0 ? 0.f : 1.f / 0.75f) << i;
}

TEST(Dropout, EvalAndZeroPAreIdentity) {
  Tensor x = randn({4, 4});
  EXPECT_TRUE(dropout(x, 0.5, false).is_same(x));
  EXPECT_TRUE(dropout(x, 0.0, true).is_same(x));
}

// ---- bad inputs ---------------------------------------------------------------------------

TEST(NnBadInput, EmbeddingIndexOutOfRange) {
  Tensor w = randn({5, 3});
  expect_error(
      [&] {
        embedding(w, tensor(std::vector<int64_t>{0, 7, 1}, {3}));
      },
      "embedding", {"index 7", "V = 5", "[3]"});
  expect_error([&] { embedding(w, tensor(std::vector<int64_t>{-1}, {1})); }, "embedding",
               {"index -1", "5"});
}

TEST(NnBadInput, EmbeddingBadIndexDtypeAndLargeInput) {
  Tensor w = randn({5, 3});
  expect_error([&] { embedding(w, tensor({1.f, 2.f})); }, "embedding", {"float32", "[2]"});
  // An error in a large (multithreaded) lookup surfaces as kiln::Error, not a crash.
  std::vector<int64_t> big(100000, 1);
  big.back() = 5;
  Tensor ix = tensor(big, {100000});
  expect_error([&] { embedding(w, ix); }, "embedding", {"index 5"});
}

TEST(NnBadInput, GatherErrors) {
  Tensor a = randn({3, 4});
  expect_error(
      [&] {
        gather(a, 1, tensor(std::vector<int64_t>{0, 4}, {1, 2}));
      },
      "gather", {"index 4", "size 4", "[1, 2]"});
  expect_error([&] { gather(a, 1, tensor({0.f, 1.f}, {1, 2})); }, "gather", {"float32", "[1, 2]"});
  expect_error(
      [&] {
        gather(a, 1, tensor(std::vector<int64_t>{0, 1}, {2}));
      },
      "gather", {"[3, 4]", "[2]"});
  expect_error([&] { gather(a, 2, tensor(std::vector<int64_t>{0}, {1, 1})); }, "gather", {"dim 2"});
}

TEST(NnBadInput, ScatterAddAndIndexSelectErrors) {
  Tensor a = randn({3, 4});
  Tensor ix = tensor(std::vector<int64_t>{0, 5}, {1, 2});
  expect_error([&] { scatter_add(a, 1, ix, randn({1, 2})); }, "scatter_add", {"index 5"});
  expect_error(
      [&] {
        scatter_add(a, 1, tensor(std::vector<int64_t>{0, 1}, {1, 2}), randn({1, 1}));
      },
      "scatter_add", {"[1, 2]", "[1, 1]"});
  expect_error([&] { index_select(a, 0, tensor(std::vector<int64_t>{3}, {1})); }, "index_select",
               {"index 3", "size 3"});
  expect_error(
      [&] {
        index_select(a, 0, tensor(std::vector<int64_t>{0, 1}, {1, 2}));
      },
      "index_select", {"[1, 2]"});
}

// The ops added for eager backward passes, MoE combining and split check their inputs like
// the rest: an error naming the op and the shapes, and the input tensors untouched.
TEST(NnBadInput, IndexAddSplitAndGradientOpErrors) {
  Tensor a = randn({3, 4});
  std::vector<double> before = a.to_vector<double>();
  expect_error(
      [&] {
        index_add(a, 0, tensor(std::vector<int64_t>{0, 3}, {2}), randn({2, 4}));
      },
      "index_add", {"index 3"});
  expect_error(
      [&] {
        index_add(a, 0, tensor(std::vector<int64_t>{0, 1}, {2}), randn({3, 4}));
      },
      "index_add", {"[3, 4]"});
  expect_error(
      [&] {
        index_add(a, 0, tensor(std::vector<int64_t>{0}, {1, 1}), randn({1, 4}));
      },
      "index_add", {"[1, 1]"});
  EXPECT_EQ(a.to_vector<double>(), before);
  expect_error([&] { split(a, std::vector<int64_t>{1, 1}, 0); }, "split", {"[3, 4]"});
  expect_error(
      [&] {
        softmax_grad(randn({2, 3}), randn({3, 2}), -1);
      },
      "softmax_grad", {"[2, 3]", "[3, 2]"});
  expect_error([&] { gelu_grad(randn({2, 3}), randn({4, 3})); }, "gelu_grad", {"[2, 3]", "[4, 3]"});
  const OpDef& lnb = OpRegistry::get().at("layer_norm_backward");
  expect_error(
      [&] {
        call(lnb, {randn({2, 4}), randn({2, 4}), randn({2, 1}), randn({3, 1})},
             {int64_t(1), false});
      },
      "layer_norm_backward", {"[3, 1]", "[2, 1]"});
  // matmul's bias row (what linear folds in) must match the output columns.
  const OpDef& mm = OpRegistry::get().at("matmul");
  expect_error(
      [&] {
        call(mm, {randn({2, 4}), randn({4, 3}), randn({4})});
      },
      "matmul", {"[3]", "[4]", "[2, 4]", "[4, 3]"});
  expect_error(
      [&] {
        call(mm, {randn({2, 4}), randn({4, 3}), randn({1, 3})});
      },
      "matmul", {"[1, 3]"});
}

TEST(NnBadInput, LossErrors) {
  Tensor logits = randn({3, 4});
  expect_error(
      [&] {
        nll_loss(logits, tensor(std::vector<int64_t>{0, 9, 1}, {3}));
      },
      "nll_loss", {"target 9", "4 classes"});
  expect_error(
      [&] {
        cross_entropy(logits, tensor(std::vector<int64_t>{0, 1}, {2}));
      },
      "cross_entropy", {"[2]", "[3, 4]"});
  expect_error(
      [&] {
        cross_entropy(logits, tensor({0.f, 1.f, 2.f}));
      },
      "cross_entropy", {"float32", "[3]"});
  expect_error(
      [&] {
        nll_loss(logits, tensor(std::vector<int64_t>{0, 1, 1}, {3, 1}));
      },
      "nll_loss", {"[3, 1]", "[3, 4]"});
  expect_error([&] { mse_loss(randn({2, 3}), randn({4})); }, "mse_loss", {"[2, 3]", "[4]"});
}

TEST(NnBadInput, NormErrors) {
  Tensor x = randn({2, 3, 4});
  expect_error([&] { layer_norm(x, {3, 5}); }, "layer_norm", {"[3, 5]", "[2, 3, 4]"});
  expect_error([&] { layer_norm(x, {4}, randn({3})); }, "layer_norm", {"weight", "[3]", "[4]"});
  expect_error([&] { batch_norm(x, zeros({4}), ones({4})); }, "batch_norm",
               {"running_mean", "[3]", "[4]"});
  expect_error([&] { batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false); }, "batch_norm",
               {"running_mean", "[2, 3, 4]"});
  expect_error(
      [&] {
        batch_norm(randn({1, 3}), Tensor(), Tensor());
      },
      "batch_norm", {"more than 1 value", "[1, 3]"});
}

TEST(NnBadInput, BatchNormBadRunningStatsLeaveThemUnchanged) {
  // Every check runs before either buffer is written, so the good buffer of a pair keeps its
  // values too.
  Tensor x = randn({4, 3});
  Tensor rm = tensor({0.5f, -1.f, 2.f}), rv = tensor({4.f, 0.25f, 1.f});
  const auto rm0 = rm.to_vector<float>(), rv0 = rv.to_vector<float>();
  Tensor irm = tensor(std::vector<int64_t>{1, 2, 3}, {3}), brv = ones({3}, Bool);
  auto unchanged = [&] {
    EXPECT_EQ(rm.to_vector<float>(), rm0);
    EXPECT_EQ(rv.to_vector<float>(), rv0);
    EXPECT_EQ(irm.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
    EXPECT_EQ(brv.to_vector<float>(), (std::vector<float>{1.f, 1.f, 1.f}));
  };
  expect_error([&] { batch_norm(x, irm, rv); }, "batch_norm",
               {"running_mean must be float32 or float64", "int64 [3]", "float32 [4, 3]"});
  expect_error([&] { batch_norm(x, rm, brv); }, "batch_norm",
               {"running_var must be float32 or float64", "bool [3]", "[4, 3]"});
  expect_error([&] { batch_norm(x, irm, rv, Tensor(), Tensor(), false); }, "batch_norm",
               {"running_mean", "int64"});
  unchanged();
  expect_error([&] { batch_norm(x, rm, ones({4})); }, "batch_norm", {"running_var", "[3]", "[4]"});
  expect_error([&] { batch_norm(x, zeros({2}), rv); }, "batch_norm",
               {"running_mean", "[3]", "[2]"});
  expect_error([&] { batch_norm(x, rm, Tensor()); }, "batch_norm", {"both be given"});
  expect_error([&] { batch_norm(x, rm, rv, ones({2})); }, "batch_norm", {"weight", "[3]", "[2]"});
  expect_error(
      [&] {
        batch_norm(x, rm, rv, Tensor(), ones({3, 1}));
      },
      "batch_norm", {"bias", "[3, 1]"});
  expect_error(
      [&] {
        batch_norm(randn({1, 3}), rm, rv);
      },
      "batch_norm", {"more than 1 value", "[1, 3]"});
  expect_error(
      [&] {
        batch_norm(tensor(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3}), rm, rv);
      },
      "batch_norm", {"int64", "[2, 3]"});
  unchanged();
}

TEST(NnBadInput, BatchNormGraphRunningVarLeavesRunningMean) {
  // copy_ refuses to write a graph value; before the check running_mean was updated first.
  Graph g;
  Tensor rv = g.placeholder("rv", Float32, {3});
  Tensor rm = tensor({0.5f, -1.f, 2.f});
  expect_error(
      [&] {
        batch_norm(randn({4, 3}), rm, rv);
      },
      "batch_norm", {"concrete", "graph value for running_var", "[4, 3]"});
  EXPECT_EQ(rm.to_vector<float>(), (std::vector<float>{0.5f, -1.f, 2.f}));
}

TEST(NnBadInput, SoftmaxAndDropoutErrors) {
  expect_error([&] { softmax(randn({2, 3}), 2); }, "softmax", {"dim 2", "rank 2"});
  expect_error(
      [&] {
        log_softmax(tensor(std::vector<int64_t>{1, 2}, {2}), 0);
      },
      "log_softmax", {"int64", "[2]"});
  expect_error([&] { dropout(randn({2, 3}), 1.5); }, "dropout", {"1.5", "[2, 3]"});
  expect_error([&] { dropout(randn({2, 3}), -0.1); }, "dropout", {"-0.1"});
  expect_error([&] { dropout(randn({2, 3}), 1.0 + 1e-9); }, "dropout", {"p must be in [0, 1]"});
  // p = 1 drops everything (zeros, zero gradient), as PyTorch; eval mode is the identity.
  Tensor x = randn({2, 3}).requires_grad_();
  Tensor y = dropout(x, 1.0);
  EXPECT_EQ(max(abs(y)).item<double>(), 0.0);
  sum(y).backward();
  EXPECT_EQ(max(abs(x.grad())).item<double>(), 0.0);
  EXPECT_TRUE(dropout(x, 1.0, false).is_same(x));
}

TEST(NnBadInput, SoftmaxCorrectAfterFailedNnOps) {
  // Failures inside parallel regions (the large lookup) and in argument checks must leave the
  // thread pool and dispatcher able to give the right numbers.
  std::vector<int64_t> big(100000, 1);
  big.back() = 5;
  EXPECT_THROW(embedding(randn({5, 3}), tensor(big, {100000})), Error);
  EXPECT_THROW(softmax(randn({2, 3}), 2), Error);
  EXPECT_THROW(dropout(randn({2, 3}), 1.5), Error);
  Tensor s = softmax(tensor({1.f, 2.f, 3.f}), 0);
  EXPECT_NEAR(s.sum().item<float>(), 1.f, 1e-6);
  expect_near_all(v64(s), naive_softmax({1, 2, 3}, 1, 3, 1, false), 1e-6);
}

}  // namespace

// ---- conv1d, pad, adaptive_avg_pool2d (compositions of registry ops) --------------------------

TEST(Conv1d, MatchesTheDefinitionAndDifferentiates) {
  manual_seed(21);
  // N 2, C 4 in 2 groups, L 9, O 6, K 3, stride 2, padding 1, dilation 2.
  const int64_t N = 2, C = 4, L = 9, O = 6, K = 3, G = 2, s = 2, p = 1, d = 2;
  Tensor x = randn({N, C, L}, Float64), w = randn({O, C / G, K}, Float64), b = randn({O}, Float64);
  Tensor y = conv1d(x, w, b, s, p, d, G);
  const int64_t Lo = (L + 2 * p - d * (K - 1) - 1) / s + 1;
  ASSERT_EQ(y.shape(), Shape({N, O, Lo}));
  auto xv = v64(x), wv = v64(w), bv = v64(b), yv = v64(y);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t t = 0; t < Lo; ++t) {
        double acc = bv[static_cast<size_t>(o)];
        const int64_t g = o / (O / G);
        for (int64_t c = 0; c < C / G; ++c)
          for (int64_t k = 0; k < K; ++k) {
            const int64_t at = t * s - p + k * d;
            if (at < 0 || at >= L) continue;
            acc += xv[static_cast<size_t>((n * C + g * (C / G) + c) * L + at)] *
                   wv[static_cast<size_t>((o * (C / G) + c) * K + k)];
          }
        EXPECT_NEAR(yv[static_cast<size_t>((n * O + o) * Lo + t)], acc, 1e-12);
      }
  GradcheckResult r = gradcheck(
      [&](const std::vector<Tensor>& in) { return conv1d(in[0], in[1], in[2], s, p, d, G); },
      {x, w, b});
  EXPECT_TRUE(r.ok) << r.message;
  // Unbatched input, and the module.
  EXPECT_EQ(conv1d(x.select(0, 1), w, b, s, p, d, G).to_vector<double>(),
            y.select(0, 1).contiguous().to_vector<double>());
  nn::Conv1d m(4, 6, 3, {.padding = 1});
  EXPECT_EQ(m(randn({2, 4, 9})).shape(), Shape({2, 6, 9}));
  expect_error([&] { m(randn({2, 5, 9})); }, {"[Conv1d]", "[2, 5, 9]"});
  expect_error([&] { conv1d(x, randn({6, 2, 3, 1}, Float64)); }, {"[conv1d]", "[6, 2, 3, 1]"});
  expect_error([&] { conv1d(randn({2, 4, 9, 1}, Float64), w); }, {"[conv1d]", "[2, 4, 9, 1]"});
  expect_error([] { nn::Conv1d(4, 6, 3, {.groups = 4}); }, {"[Conv1d]", "groups"});
}

TEST(Pad, ConstantPaddingAndCroppingAsTorch) {
  Tensor x = tensor(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  // Last dim: 1 left, 2 right; first dim: 1 top, 0 bottom; filled with -1.
  Tensor y = pad(x, {1, 2, 1, 0}, -1.0);
  ASSERT_EQ(y.shape(), Shape({3, 6}));
  EXPECT_EQ(v64(y), (std::vector<double>{-1, -1, -1, -1, -1, -1,  //
                                         -1, 1, 2, 3, -1, -1,     //
                                         -1, 4, 5, 6, -1, -1}));
  // Negative amounts crop; mixed with padding.
  EXPECT_EQ(v64(pad(x, {-1, 1})), (std::vector<double>{2, 3, 0, 5, 6, 0}));
  EXPECT_EQ(v64(pad(x, {0, -2, -1, 0})), (std::vector<double>{4}));
  // Gradient: the inner region of the output's gradient.
  Tensor xg = randn({2, 3, 4}, Float64);
  GradcheckResult r = gradcheck(
      [](const std::vector<Tensor>& in) {
        return pad(in[0], {2, 1, 0, 3}, 0.5);
      },
      {xg});
  EXPECT_TRUE(r.ok) << r.message;
  GradcheckResult r2 = gradcheck(
      [](const std::vector<Tensor>& in) {
        return pad(in[0].t(), {1, -1});
      },
      {x});
  EXPECT_TRUE(r2.ok) << r2.message;
  expect_error([&] { pad(x, {1}); }, {"[pad]", "pairs"});
  expect_error([&] { pad(x, {1, 1, 1, 1, 1, 1}); }, {"[pad]", "[2, 3]"});
  expect_error([&] { pad(x, {-2, -2}); }, {"[pad]", "below 0"});
}

TEST(AdaptiveAvgPool2d, TorchBinsDivisibleOrNot) {
  manual_seed(22);
  Tensor x = randn({2, 3, 5, 7}, Float64);
  for (std::vector<int64_t> o : {std::vector<int64_t>{3, 4}, {1, 1}, {5, 7}, {2, 3}}) {
    SCOPED_TRACE(str_cat(o[0], "x", o[1]));
    Tensor y = adaptive_avg_pool2d(x, o);
    ASSERT_EQ(y.shape(), Shape({2, 3, o[0], o[1]}));
    auto xv = v64(x), yv = v64(y);
    for (int64_t nc = 0; nc < 6; ++nc)
      for (int64_t i = 0; i < o[0]; ++i)
        for (int64_t j = 0; j < o[1]; ++j) {
          const int64_t h0 = i * 5 / o[0], h1 = ((i + 1) * 5 + o[0] - 1) / o[0];
          const int64_t w0 = j * 7 / o[1], w1 = ((j + 1) * 7 + o[1] - 1) / o[1];
          double s = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) s += xv[static_cast<size_t>((nc * 5 + h) * 7 + w)];
          EXPECT_NEAR(yv[static_cast<size_t>((nc * o[0] + i) * o[1] + j)],
                      s / static_cast<double>((h1 - h0) * (w1 - w0)), 1e-12);
        }
    GradcheckResult r = gradcheck(
        [o](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], o); }, {x});
    EXPECT_TRUE(r.ok) << r.message;
  }
  // Divisible sizes take one avg_pool2d; [C, H, W] input; the module.
  EXPECT_EQ(adaptive_avg_pool2d(randn({1, 2, 6, 4}), {3, 2}).shape(), Shape({1, 2, 3, 2}));
  EXPECT_EQ(adaptive_avg_pool2d(randn({2, 6, 4}), {1}).shape(), Shape({2, 1, 1}));
  EXPECT_EQ(nn::AdaptiveAvgPool2d({1})(randn({4, 8, 3, 3})).shape(), Shape({4, 8, 1, 1}));
  expect_error([&] { adaptive_avg_pool2d(x, {0, 2}); }, {"[adaptive_avg_pool2d]", "positive"});
  expect_error([&] { adaptive_avg_pool2d(randn({5, 7}), {2}); }, {"[adaptive_avg_pool2d]"});
}

// ---- flip, roll, repeat, one_hot, std_dev (compositions) --------------------------------------

TEST(ShapeCompositions, FlipRollRepeatAsTorch) {
  const Tensor x = tensor(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(v64(flip(x, {1})), (std::vector<double>{3, 2, 1, 6, 5, 4}));
  EXPECT_EQ(v64(flip(x, {0, -1})), (std::vector<double>{6, 5, 4, 3, 2, 1}));
  EXPECT_EQ(v64(roll(x, 1, 1)), (std::vector<double>{3, 1, 2, 6, 4, 5}));
  EXPECT_EQ(v64(roll(x, -4, 1)), (std::vector<double>{2, 3, 1, 5, 6, 4}));
  EXPECT_EQ(v64(roll(x, 3, 0)), (std::vector<double>{4, 5, 6, 1, 2, 3}));
  const Tensor r = repeat(x, {2, 1, 2});
  ASSERT_EQ(r.shape(), Shape({2, 2, 6}));
  EXPECT_EQ(v64(r), (std::vector<double>{1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6,  //
                                         1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6}));
  EXPECT_EQ(repeat(x, {0, 3}).shape(), Shape({0, 9}));
  // Gradients: flip and roll permute it back; repeat sums the copies.
  const Tensor xg = randn({3, 4}, Float64);
  for (auto f : std::vector<std::function<Tensor(const Tensor&)>>{
           [](const Tensor& t) {
             return flip(t, {0, 1});
           },
           [](const Tensor& t) { return roll(t, 2, -1); },
           [](const Tensor& t) {
             return repeat(t.t(), {2, 1, 3});
           }}) {
    GradcheckResult g = gradcheck([&](const std::vector<Tensor>& in) { return f(in[0]); }, {xg});
    EXPECT_TRUE(g.ok) << g.message;
  }
  expect_error([&] { flip(x, {1, 1}); }, {"[flip]", "twice"});
  expect_error([&] { flip(x, {2}); }, {"[flip]"});
  expect_error([&] { roll(x, 1, 3); }, {"[roll]"});
  expect_error([&] { repeat(x, {2}); }, {"[repeat]", "[2, 3]"});
  expect_error([&] { repeat(x, {1, -1}); }, {"[repeat]", ">= 0"});
}

TEST(ShapeCompositions, OneHotAndStdDev) {
  const Tensor idx = tensor(std::vector<int64_t>{2, 0, 1, 2}, {2, 2});
  const Tensor oh = one_hot(idx, 3);
  ASSERT_EQ(oh.shape(), Shape({2, 2, 3}));
  EXPECT_EQ(oh.dtype(), Int64);
  EXPECT_EQ(oh.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1}));
  expect_error([&] { one_hot(idx, 2); }, {"[one_hot]", "[0, 2)", "[0, 2]"});
  expect_error([&] { one_hot(tensor(std::vector<int64_t>{-1}, {1}), 4); }, {"[one_hot]"});
  expect_error([&] { one_hot(randn({3}), 4); }, {"[one_hot]", "float32"});
  // std_dev: Bessel-corrected by default, as torch.std.
  const Tensor x = tensor(std::vector<double>{1, 2, 3, 4, 6, 8}, {2, 3});
  // mean 4, squared deviations 9 + 4 + 1 + 0 + 4 + 16 = 34 over 6 - 1.
  EXPECT_NEAR(std_dev(x).item<double>(), std::sqrt(34.0 / 5), 1e-12);
  ASSERT_EQ(v64(std_dev(x, {1}, false, 0)).size(), 2u);
  EXPECT_NEAR(v64(std_dev(x, {1}, false, 0))[1], std::sqrt(8.0 / 3.0), 1e-12);
}

// ---- conv_transpose2d
// ----------------------------------------------------------------------------

TEST(ConvTranspose2d, MatchesTheScatterDefinitionAndDifferentiates) {
  manual_seed(23);
  // N 2, C_in 4, C_out 6 in 2 groups, 3x4 input, 3x2 kernel, stride (2, 1), padding (1, 0),
  // output_padding (1, 0), dilation (1, 2).
  const int64_t N = 2, Ci = 4, Co = 6, G = 2, H = 3, W = 4, kH = 3, kW = 2;
  const std::vector<int64_t> s{2, 1}, p{1, 0}, op{1, 0}, d{1, 2};
  Tensor x = randn({N, Ci, H, W}, Float64), w = randn({Ci, Co / G, kH, kW}, Float64),
         b = randn({Co}, Float64);
  Tensor y = conv_transpose2d(x, w, b, s, p, op, d, G);
  const int64_t Ho = (H - 1) * s[0] - 2 * p[0] + d[0] * (kH - 1) + op[0] + 1;
  const int64_t Wo = (W - 1) * s[1] - 2 * p[1] + d[1] * (kW - 1) + op[1] + 1;
  ASSERT_EQ(y.shape(), Shape({N, Co, Ho, Wo}));
  // Each input pixel scatters its kernel-weighted value into the output.
  std::vector<double> want(static_cast<size_t>(N * Co * Ho * Wo), 0.0);
  auto xv = v64(x), wv = v64(w), bv = v64(b);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ci = 0; ci < Ci; ++ci)
      for (int64_t i = 0; i < H; ++i)
        for (int64_t j = 0; j < W; ++j)
          for (int64_t c = 0; c < Co / G; ++c)
            for (int64_t a = 0; a < kH; ++a)
              for (int64_t e = 0; e < kW; ++e) {
                const int64_t oi = i * s[0] - p[0] + a * d[0], oj = j * s[1] - p[1] + e * d[1];
                if (oi < 0 || oi >= Ho || oj < 0 || oj >= Wo) continue;
                const int64_t co = ci / (Ci / G) * (Co / G) + c;
                want[static_cast<size_t>(((n * Co + co) * Ho + oi) * Wo + oj)] +=
                    xv[static_cast<size_t>(((n * Ci + ci) * H + i) * W + j)] *
                    wv[static_cast<size_t>(((ci * (Co / G) + c) * kH + a) * kW + e)];
              }
  for (size_t k = 0; k < want.size(); ++k)
    want[k] += bv[k / static_cast<size_t>(Ho * Wo) % static_cast<size_t>(Co)];
  expect_near_all(v64(y), want, 1e-12);
  GradcheckResult r = gradcheck(
      [&](const std::vector<Tensor>& in) {
        return conv_transpose2d(in[0], in[1], in[2], s, p, op, d, G);
      },
      {x, w, b});
  EXPECT_TRUE(r.ok) << r.message;
  // The module upsamples by its stride.
  nn::ConvTranspose2d up(8, 4, {2}, {.stride = {2}});
  EXPECT_EQ(up(randn({1, 8, 5, 5})).shape(), Shape({1, 4, 10, 10}));
  EXPECT_EQ(up(randn({8, 5, 5})).shape(), Shape({4, 10, 10}));
  expect_error([&] { up(randn({1, 7, 5, 5})); }, {"[ConvTranspose2d]", "[1, 7, 5, 5]"});
  expect_error(
      [&] {
        conv_transpose2d(x, w, b, s, p, {2, 0}, d, G);
      },
      {"[conv_transpose2d]", "output_padding"});
  expect_error(
      [&] {
        conv_transpose2d(x, randn({5, 3, 3, 2}, Float64));
      },
      {"[conv_transpose2d]", "channels"});
}

// ---- nonzero, masked_select (data-dependent sizes)
// -----------------------------------------------

TEST(DataDependent, NonzeroAndMaskedSelectEagerJitAndGraphs) {
  const Tensor x = tensor(std::vector<double>{0, 1.5, 0, -2, 3, 0}, {2, 3});
  const Tensor nz = nonzero(x);
  ASSERT_EQ(nz.shape(), Shape({3, 2}));
  EXPECT_EQ(nz.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 1, 0, 1, 1}));
  EXPECT_EQ(nonzero(zeros({4})).shape(), Shape({0, 1}));
  EXPECT_EQ(nonzero(gt(x, 1.0)).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 1, 1}));
  // masked_select with a broadcast mask, and its gradient (ones where selected).
  Tensor a = randn({2, 3}, Float64).requires_grad_();
  const Tensor mask = tensor(std::vector<bool>{true, false, true}, {3});
  const Tensor sel = masked_select(a, mask);
  ASSERT_EQ(sel.shape(), Shape({4}));
  const auto av = a.to_vector<double>();
  EXPECT_EQ(sel.to_vector<double>(), (std::vector<double>{av[0], av[2], av[3], av[5]}));
  sum(mul(sel, 2.0)).backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{2, 0, 2, 2, 0, 2}));
  // Under jit: the mask read is a graph break; each call gives the right selection.
  auto f = jit([](const Tensor& t) { return sum(masked_select(t, gt(t, 0.0))); });
  for (int rep = 0; rep < 3; ++rep) {
    const Tensor t = randn({5});
    double want = 0;
    for (double v : t.to_vector<double>()) want += v > 0 ? v : 0;
    EXPECT_NEAR(f(t).item<double>(), want, 1e-5);
  }
  // In a static graph the size cannot be known: refused.
  Graph g;
  Tensor ph = g.placeholder("x", Float32, {4});
  kiln_test::expect_error([&] { nonzero(ph); }, {"nonzero"});
  kiln_test::expect_error([&] { masked_select(x, x); }, {"[masked_select]", "bool"});
  kiln_test::expect_error(
      [&] {
        masked_select(x, tensor(std::vector<bool>{true, false}, {2}));
      },
      {"[masked_select]"});
}

// ---- vector_norm at zero, normalize, cosine_similarity
// ---------------------------------------------

TEST(Norms, ZeroVectorGradientNormalizeAndCosine) {
  // The gradient of ||x|| at x = 0 is 0 (torch's subgradient), not NaN.
  Tensor z = zeros({2, 3}, Float64).requires_grad_();
  for (double ord : {2.0, 3.0, 1.0}) {
    Tensor g = grad({sum(vector_norm(z, ord, {1}))}, {z})[0];
    for (double v : g.to_vector<double>()) EXPECT_EQ(v, 0.0) << "ord " << ord;
  }
  const Tensor x = tensor(std::vector<double>{3, 4, 0, 0, 1, 0}, {2, 3});
  EXPECT_EQ(v64(vector_norm(x, 2, {1})), (std::vector<double>{5, 1}));
  // normalize: rows over their norm; a zero row stays zero (eps).
  const Tensor y = tensor(std::vector<double>{3, 4, 0, 0}, {2, 2});
  EXPECT_EQ(v64(normalize(y)), (std::vector<double>{0.6, 0.8, 0, 0}));
  // cosine_similarity over dim 1, broadcasting b's single row.
  const Tensor a = tensor(std::vector<double>{1, 0, 1, 1}, {2, 2});
  const Tensor b = tensor(std::vector<double>{1, 0}, {1, 2});
  expect_near_all(v64(cosine_similarity(a, b)), {1.0, 1 / std::sqrt(2.0)}, 1e-15);
  GradcheckResult r =
      gradcheck([](const std::vector<Tensor>& in) { return cosine_similarity(in[0], in[1], -1); },
                {randn({3, 4}, Float64), randn({3, 4}, Float64)});
  EXPECT_TRUE(r.ok) << r.message;
  GradcheckResult r2 =
      gradcheck([](const std::vector<Tensor>& in) { return normalize(in[0], 2, 0); },
                {randn({3, 4}, Float64)});
  EXPECT_TRUE(r2.ok) << r2.message;
  expect_error([&] { vector_norm(x, NAN); }, {"[vector_norm]", "NaN"});
  expect_error([&] { vector_norm(Tensor()); }, {"[vector_norm]", "undefined"});
  expect_error([&] { cosine_similarity(x, Tensor()); }, {"[cosine_similarity]", "undefined"});
  expect_error([&] { logsumexp(Tensor()); }, {"[logsumexp]", "undefined"});
  expect_error([&] { normalize(x, 2, 1, -1); }, {"[normalize]", "eps"});
}

// ---- interpolate
// ---------------------------------------------------------------------------------

// Values printed by PyTorch 1.13's F.interpolate on x = sin(arange(120)).reshape(2, 3, 4, 5):
// elements 5..8 and the sum, per mode.
TEST(Interpolate, NearestAndBilinearMatchPyTorch) {
  const Tensor x = sin(arange(0, 120, 1, Float64).reshape({2, 3, 4, 5}));
  struct Case {
    const char* mode;
    bool align;
    std::vector<int64_t> size;
    std::vector<double> elems;
    double sum;
  };
  const std::vector<Case> cases = {
      {"nearest",
       false,
       {7, 3},
       {0.14112000806, -0.958924274663, -0.279415498199, 0.989358246623},
       -0.982810062684},
      {"bilinear",
       false,
       {7, 3},
       {-0.0781997323207, -0.660070515072, 0.675008800726, 0.528672686663},
       -0.142742305183},
      {"bilinear",
       true,
       {7, 3},
       {-0.172342005033, -0.958924274663, 0.656986598719, 0.412118485242},
       -0.0384662893794},
      {"bilinear",
       false,
       {8, 10},
       {0.717253072134, 0.333164362751, -0.0833606177821, -0.532321869466},
       -0.480943464601},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(str_cat(c.mode, " align ", c.align, " ", c.size[0], "x", c.size[1]));
    const Tensor y = interpolate(x, c.size, c.mode, c.align);
    ASSERT_EQ(y.shape(), Shape({2, 3, c.size[0], c.size[1]}));
    const auto v = v64(y);
    for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(v[5 + i], c.elems[i], 1e-11);
    EXPECT_NEAR(sum(y).item<double>(), c.sum, 1e-10);
    GradcheckResult r = gradcheck(
        [&](const std::vector<Tensor>& in) { return interpolate(in[0], c.size, c.mode, c.align); },
        {randn({1, 2, 4, 5}, Float64)});
    EXPECT_TRUE(r.ok) << r.message;
  }
  // Nearest 2x upsampling repeats each pixel in a 2x2 block (a 3-D input is [N, C, L], as torch).
  const Tensor p = tensor(std::vector<double>{1, 2, 3, 4}, {1, 1, 2, 2});
  EXPECT_EQ(v64(interpolate(p, {4})),
            (std::vector<double>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}));
  expect_error([&] { interpolate(x, {0, 2}); }, {"[interpolate]", "positive"});
  expect_error([&] { interpolate(x, {2, 2}, "cubic"); }, {"[interpolate]", "\"cubic\""});
  expect_error([&] { interpolate(x, {2, 2}, "nearest", true); }, {"[interpolate]", "align"});
}

// Limits found in review: extreme diagonals, integer overflow in cumsum, oversized resizing and
// transposed-convolution parameters raise or behave instead of overflowing.
TEST(ReviewLimits, ExtremeArgumentsRaiseOrBehave) {
  const Tensor x = tensor(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(v64(tril(x, INT64_MAX)), v64(x));
  EXPECT_EQ(v64(tril(x, INT64_MIN)), std::vector<double>(6, 0.0));
  EXPECT_EQ(v64(triu(x, INT64_MIN)), v64(x));
  // Integer cumsum wraps (as torch's), without undefined behaviour.
  const Tensor big = tensor(std::vector<int64_t>{INT64_MAX, 1}, {2});
  EXPECT_EQ(cumsum(big, 0).to_vector<int64_t>()[1], INT64_MIN);
  expect_error(
      [&] {
        interpolate(randn({1, 1, 1 << 20, 2}), {1 << 20, 2});
      },
      {"[interpolate]", "2^28"});
  expect_error(
      [&] {
        adaptive_avg_pool2d(randn({1, 1, 5, 5}), {100000, 2});
      },
      {"[adaptive_avg_pool2d]", "65536"});
  expect_error(
      [&] {
        conv_transpose2d(randn({1, 2, 3, 3}), randn({2, 2, 2, 2}), Tensor(), {INT64_MAX, 1});
      },
      {"[conv_transpose2d]", "2^30"});
}
