// pad (every mode) and N-d pooling in static graphs whose placeholders have a dynamic (None)
// dim, batch or padded/pooled, run by a Session at several sizes: values and gradients equal to
// eager, and the errors eager raises for a size raised when the graph runs; and under jit at
// every length of a sequence, one dynamic version with gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string>

#include "kiln/kiln.h"

using namespace kiln;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return INFINITY;
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

Tensor seq(const Shape& s) {
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37 * static_cast<double>(i) + 0.1);
  return tensor(v, s);
}

// f on a placeholder of shape `ph` (-1 = dynamic) fed each of `sizes`: output and the gradient
// of sum(out * out) equal eager's.
void check_graph(const std::function<Tensor(const Tensor&)>& f, const Shape& ph,
                 const std::vector<Shape>& sizes, const std::string& what) {
  Graph g;
  Tensor x = g.placeholder("x", Float64, ph);
  Tensor y = f(x);
  ASSERT_TRUE(y.is_symbolic()) << what;
  Tensor gx = gradients({sum(mul(y, y))}, {x})[0];
  Session sess(g);
  for (const Shape& s : sizes) {
    Tensor xv = seq(s);
    auto got = sess.run({y, gx}, {{x, xv}});
    Tensor xe = xv.clone().requires_grad_();
    Tensor ye = f(xe);
    sum(mul(ye, ye)).backward();
    EXPECT_LT(max_abs_diff(got[0], ye.detach()), 1e-12) << what << " at " << s.str();
    EXPECT_LT(max_abs_diff(got[1], xe.grad()), 1e-12) << what << " gradient at " << s.str();
  }
}

TEST(GraphDynamicPad, EveryModeWithADynamicBatchDim) {
  const std::vector<Shape> sizes{{2, 3, 6}, {5, 3, 6}, {1, 3, 6}};
  check_graph([](const Tensor& x) { return pad(x, {2, 1}, 0.5); }, {-1, 3, 6}, sizes, "constant");
  check_graph(
      [](const Tensor& x) {
        return pad(x, {2, 1, -1, 1}, "constant", -1.0);
      },
      {-1, 3, 6}, sizes, "constant, two dims, a crop");
  for (const char* mode : {"reflect", "replicate", "circular"})
    check_graph(
        [mode](const Tensor& x) {
          return pad(x, {2, 3}, mode, 0.0);
        },
        {-1, 3, 6}, sizes, mode);
  check_graph(
      [](const Tensor& x) {
        return pad(x, {1, 2, 2, 1}, "reflect", 0.0);
      },
      {-1, 3, 4, 6}, {{2, 3, 4, 6}, {4, 3, 4, 6}}, "reflect 2-d");
}

TEST(GraphDynamicPad, EveryModeWithADynamicPaddedDim) {
  const std::vector<Shape> sizes{{2, 3, 6}, {2, 3, 4}, {2, 3, 9}};
  check_graph([](const Tensor& x) { return pad(x, {2, 1}, 0.5); }, {2, 3, -1}, sizes, "constant");
  check_graph(
      [](const Tensor& x) {
        return pad(x, {-1, 2, 1, 0}, 0.0);
      },
      {2, -1, -1}, {{2, 3, 6}, {2, 5, 4}}, "constant, two dynamic dims, a crop");
  for (const char* mode : {"reflect", "replicate", "circular"}) {
    check_graph(
        [mode](const Tensor& x) {
          return pad(x, {2, 3}, mode, 0.0);
        },
        {2, 3, -1}, sizes, mode);
    check_graph(
        [mode](const Tensor& x) {
          return pad(x, {1, 0, 2, 2}, mode, 0.0);
        },
        {-1, 3, -1, 5}, {{2, 3, 4, 5}, {1, 3, 6, 5}}, std::string(mode) + " 2-d");
  }
}

TEST(GraphDynamicPad, TooSmallADimFailsWhenTheGraphRuns) {
  for (const char* mode : {"reflect", "circular"}) {
    Graph g;
    Tensor x = g.placeholder("x", Float64, {2, -1});
    Tensor y = pad(x, {3, 1}, mode, 0.0);
    Session sess(g);
    EXPECT_EQ(sess.run(y, {{x, seq({2, 5})}}).shape(), (Shape{2, 9}));
    // reflect needs 3 < L, circular 3 <= L: eager raises for L = 3 (reflect) and 2 (both).
    EXPECT_THROW(sess.run(y, {{x, seq({2, 2})}}), Error) << mode;
    EXPECT_THROW(pad(seq({2, 2}), {3, 1}, mode, 0.0), Error) << mode;
  }
}

TEST(GraphDynamicPool, BatchAndChannelDimsDynamic) {
  check_graph(
      [](const Tensor& x) {
        return max_pool2d(x, {3, 2}, {2, 1}, {1, 1}, {1, 1}, true);
      },
      {-1, -1, 7, 6}, {{2, 3, 7, 6}, {1, 2, 7, 6}}, "max_pool2d ceil");
  check_graph(
      [](const Tensor& x) {
        return max_pool3d(x, {2, 2, 2}, {2, 1, 2}, {1, 0, 1});
      },
      {-1, 2, 5, 4, 5}, {{1, 2, 5, 4, 5}, {3, 2, 5, 4, 5}}, "max_pool3d");
  check_graph([](const Tensor& x) { return avg_pool1d(x, {3}, {2}, {1}, true, false); },
              {-1, -1, 9}, {{2, 2, 9}, {3, 1, 9}}, "avg_pool1d ceil");
  check_graph([](const Tensor& x) { return adaptive_max_pool1d(x, {4}); }, {-1, 10},
              {{3, 10}, {5, 10}}, "adaptive_max_pool1d unbatched");
}

TEST(GraphDynamicPool, DynamicSpatialDimsWithGradients) {
  // A varying sequence length: the pooled length and both gradients follow it at run time.
  const std::vector<Shape> seqs{{2, 3, 9}, {2, 3, 12}, {2, 3, 5}};
  check_graph([](const Tensor& x) { return max_pool1d(x, {3}, {2}, {1}, {2}, true); }, {2, 3, -1},
              seqs, "max_pool1d, dynamic length");
  check_graph([](const Tensor& x) { return avg_pool1d(x, {3}, {2}, {1}, true, false); }, {2, 3, -1},
              seqs, "avg_pool1d, dynamic length");
  check_graph([](const Tensor& x) { return adaptive_avg_pool1d(x, {4}); }, {-1, 3, -1},
              {{2, 3, 9}, {1, 3, 6}}, "adaptive_avg_pool1d, dynamic batch and length");
  check_graph([](const Tensor& x) { return adaptive_max_pool1d(x, {4}); }, {-1, 3, -1},
              {{2, 3, 9}, {1, 3, 6}}, "adaptive_max_pool1d, dynamic batch and length");
  // One dynamic spatial dim of a 2-d pooling.
  check_graph(
      [](const Tensor& x) {
        return max_pool2d(x, {2, 3}, {2, 1}, {1, 1}, {1, 1}, true);
      },
      {2, 2, -1, 6}, {{2, 2, 7, 6}, {2, 2, 4, 6}}, "max_pool2d, dynamic height");
  check_graph(
      [](const Tensor& x) {
        return avg_pool2d(x, {2, 3}, {2, 1}, {1, 1}, true, false);
      },
      {2, 2, -1, 6}, {{2, 2, 7, 6}, {2, 2, 4, 6}}, "avg_pool2d, dynamic height");
}

TEST(GraphDynamicPool, DynamicSpatialDimsForward) {
  // The pooled size follows the input's at run time; the forward needs no static size.
  for (auto [ph, sizes] :
       {std::pair<Shape, std::vector<Shape>>{{2, 3, -1}, {{2, 3, 9}, {2, 3, 12}, {2, 3, 5}}}}) {
    Graph g;
    Tensor x = g.placeholder("x", Float64, ph);
    Tensor a = avg_pool1d(x, {3}, {2}, {1}, true, false);
    Tensor m = max_pool1d(x, {3}, {2}, {1}, {2}, true);
    Tensor ad = adaptive_avg_pool1d(x, {4});
    EXPECT_EQ(a.shape(), (Shape{2, 3, -1}));
    EXPECT_EQ(ad.shape(), (Shape{2, 3, 4}));
    Session sess(g);
    for (const Shape& s : sizes) {
      Tensor xv = seq(s);
      auto got = sess.run({a, m, ad}, {{x, xv}});
      EXPECT_LT(max_abs_diff(got[0], avg_pool1d(xv, {3}, {2}, {1}, true, false)), 1e-12);
      EXPECT_LT(max_abs_diff(got[1], max_pool1d(xv, {3}, {2}, {1}, {2}, true)), 1e-12);
      EXPECT_LT(max_abs_diff(got[2], adaptive_avg_pool1d(xv, {4})), 1e-12);
    }
  }
}

// The jit at every sequence length from 7 to 14, with backward: one dynamic version serves
// them all (no static recompile), values and gradients equal eager.
TEST(JitDynamicPool, VaryingLengthCompilesTwiceWithGradients) {
  std::function<Tensor(const Tensor&)> fn = [](const Tensor& x) {
    return pad(avg_pool1d(max_pool1d(x, {3}, {2}, {1}), {2}, {1}, {0}, true, false), {1, 2},
               "reflect", 0.0);
  };
  auto f = jit(fn, JitOptions{.name = "pool_seq"});
  for (int64_t L = 7; L <= 14; ++L) {
    Tensor x = seq({2, 3, L});
    Tensor xa = x.clone().requires_grad_(), xb = x.clone().requires_grad_();
    Tensor ya = f(xa), yb = fn(xb);
    sum(mul(ya, ya)).backward();
    sum(mul(yb, yb)).backward();
    EXPECT_LT(max_abs_diff(ya.detach(), yb.detach()), 1e-12) << "length " << L;
    EXPECT_LT(max_abs_diff(xa.grad(), xb.grad()), 1e-12) << "length " << L;
  }
  EXPECT_GE(f.stats().compiles, 1) << f.explain();
  EXPECT_LE(f.stats().compiles, 2) << f.explain();
  if (std::getenv("KILN_TEST_EXPLAIN")) std::cout << f.explain() << "\n";
  EXPECT_EQ(f.explain().find("recompiling for the concrete shape"), std::string::npos)
      << f.explain();
  EXPECT_FALSE(f.stats().eager_fallback) << f.explain();
}

}  // namespace
