// Autograd semantics as in PyTorch: requires_grad, backward (implicit / explicit gradient),
// accumulation, zero_grad, no_grad, detach, retain_graph, retain_grad, functional grad / vjp,
// gradients of gradients, in-place modification checks, and gradcheck catching a wrong gradient.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/autograd/grad_node.h"
#include "kiln/kiln.h"

using namespace kiln;

namespace {

std::vector<double> dv(const Tensor& t) { return t.to_vector<double>(); }

Tensor leaf(const std::vector<double>& v, const Shape& s = {}) {
  return tensor(v, s).requires_grad_();
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want,
                 double tol = 1e-12) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

}  // namespace

TEST(Autograd, RequiresGradPropagates) {
  Tensor a = tensor(std::vector<double>{1, 2});
  EXPECT_FALSE(a.requires_grad());
  EXPECT_TRUE(a.is_leaf());
  Tensor b = a * 2.0;
  EXPECT_FALSE(b.requires_grad());
  EXPECT_EQ(b.grad_fn(), nullptr);
  a.requires_grad_();
  EXPECT_TRUE(a.requires_grad());
  EXPECT_TRUE(a.is_leaf());
  Tensor c = a * 2.0;
  EXPECT_TRUE(c.requires_grad());
  EXPECT_FALSE(c.is_leaf());
  ASSERT_NE(c.grad_fn(), nullptr);
  EXPECT_EQ(c.grad_fn()->name(), "mul");
  // Non-floating results do not require grad.
  EXPECT_FALSE(gt(a, 1.0).requires_grad());
  EXPECT_FALSE(argmax(a).requires_grad());
  a.requires_grad_(false);
  EXPECT_FALSE(a.requires_grad());
}

TEST(Autograd, BackwardOnScalar) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = (x * x * 3.0 + x).sum();  // dy/dx = 6x + 1
  y.backward();
  expect_near(dv(x.grad()), {7, 13, 19});
  EXPECT_FALSE(x.grad().requires_grad());
}

TEST(Autograd, BackwardWithExplicitGradient) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * x;  // non-scalar
  y.backward(tensor(std::vector<double>{1, 0.5, -1}));
  expect_near(dv(x.grad()), {2, 2, -6});
}

TEST(Autograd, ImplicitGradientOnlyForScalars) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * 2.0;
  try {
    y.backward();
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(m.rfind("[backward]", 0), 0u) << m;
    EXPECT_NE(m.find("[3]"), std::string::npos) << m;
  }
  // A one-element non-0-d output is fine (PyTorch: numel() == 1).
  Tensor z = (x.sum() * 1.0).reshape({1, 1});
  z.backward();
  expect_near(dv(x.grad()), {1, 1, 1});
  // A gradient of the wrong shape is rejected.
  Tensor w = x * 3.0;
  EXPECT_THROW(w.backward(ones({2}, Float64)), Error);
}

TEST(Autograd, GradientsAccumulateAndZeroGrad) {
  Tensor x = leaf({1, 2});
  (x * x).sum().backward();
  expect_near(dv(x.grad()), {2, 4});
  (x * 3.0).sum().backward();
  expect_near(dv(x.grad()), {5, 7});
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
  (x * x).sum().backward();
  expect_near(dv(x.grad()), {2, 4});
}

TEST(Autograd, InputUsedTwiceAndBroadcast) {
  Tensor x = leaf({1, 2, 3}, {3, 1});
  Tensor b = leaf({10, 20}, {1, 2});
  Tensor y = (x * b + x).sum();  // dy/dx = sum_j b_j + 2 (per row) = 32; dy/db = sum_i x_i = 6
  y.backward();
  EXPECT_EQ(x.grad().shape(), Shape({3, 1}));
  EXPECT_EQ(b.grad().shape(), Shape({1, 2}));
  expect_near(dv(x.grad()), {32, 32, 32});
  expect_near(dv(b.grad()), {6, 6});
}

TEST(Autograd, NoGradRecordsNothing) {
  Tensor x = leaf({1, 2});
  {
    NoGradGuard ng;
    EXPECT_FALSE(grad_mode_enabled());
    Tensor y = x * x;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    {
      EnableGradGuard eg;
      EXPECT_TRUE((x * x).requires_grad());
    }
    EXPECT_FALSE((x * x).requires_grad());
  }
  EXPECT_TRUE(grad_mode_enabled());
  EXPECT_TRUE((x * x).requires_grad());
}

TEST(Autograd, DetachCutsTheGraph) {
  Tensor x = leaf({1, 2, 3});
  Tensor d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.shares_storage(x));
  Tensor y = (x * d).sum();  // gradient only through the first factor: d
  y.backward();
  expect_near(dv(x.grad()), {1, 2, 3});
  // A fully detached result cannot be backpropagated.
  Tensor z = (x.detach() * 2.0).sum();
  EXPECT_FALSE(z.requires_grad());
  EXPECT_THROW(z.backward(), Error);
}

TEST(Autograd, RetainGraph) {
  Tensor x = leaf({1, 2});
  Tensor y = (exp(x) * x).sum();
  y.backward();
  // The graph was freed: a second backward raises.
  try {
    y.backward();
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[backward]", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("retain_graph"), std::string::npos) << e.what();
  }
  x.zero_grad();
  Tensor z = (exp(x) * x).sum();  // dz/dx = e^x (1 + x)
  z.backward(Tensor(), /*retain_graph=*/true);
  z.backward();
  double e1 = std::exp(1.0), e2 = std::exp(2.0);
  expect_near(dv(x.grad()), {2 * e1 * 2, 2 * e2 * 3}, 1e-9);
}

TEST(Autograd, RetainGradOnNonLeaf) {
  Tensor x = leaf({1, 2});
  Tensor h = x * 3.0;
  h.retain_grad();
  Tensor k = x * 2.0;  // non-leaf without retain_grad
  Tensor y = (h * h + k).sum();
  y.backward();
  expect_near(dv(h.grad()), {6, 12});  // dy/dh = 2h
  EXPECT_FALSE(k.grad().defined());
  expect_near(dv(x.grad()), {18 + 2, 36 + 2});
}

TEST(Autograd, FunctionalGradDoesNotAccumulate) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = (x * x).sum();
  auto g = grad({y}, {x});
  ASSERT_EQ(g.size(), 1u);
  expect_near(dv(g[0]), {2, 4, 6});
  EXPECT_FALSE(x.grad().defined());

  // grad(fn, inputs): inputs need not require grad; results are fresh.
  Tensor a = tensor(std::vector<double>{0.5, -1});
  Tensor b = tensor(std::vector<double>{2, 3});
  auto gs = grad([](const std::vector<Tensor>& in) { return (in[0] * in[1] + exp(in[0])).sum(); },
                 {a, b});
  ASSERT_EQ(gs.size(), 2u);
  expect_near(dv(gs[0]), {2 + std::exp(0.5), 3 + std::exp(-1.0)}, 1e-12);
  expect_near(dv(gs[1]), {0.5, -1});
  EXPECT_FALSE(a.grad().defined());
  EXPECT_FALSE(a.requires_grad());

  // Unused input: error unless allowed.
  Tensor u = leaf({1});
  Tensor y2 = (x * 2.0).sum();
  EXPECT_THROW(grad({y2}, {u}), Error);
  Tensor y3 = (x * 2.0).sum();
  auto gu = grad({y3}, {x, u}, {}, false, false, /*allow_unused=*/true);
  EXPECT_TRUE(gu[0].defined());
  EXPECT_FALSE(gu[1].defined());
  // Gradient with respect to a non-leaf.
  Tensor h = x * x;
  Tensor y4 = (h * 2.0).sum();
  auto gh = grad({y4}, {h});
  expect_near(dv(gh[0]), {2, 2, 2});
}

TEST(Autograd, Vjp) {
  Tensor x = tensor(std::vector<double>{1, 2, 3});
  Tensor v = tensor(std::vector<double>{1, -1, 0.5});
  auto [y, g] = vjp([](const std::vector<Tensor>& in) { return in[0] * in[0] * in[0]; }, {x}, v);
  expect_near(dv(y), {1, 8, 27});
  EXPECT_FALSE(y.requires_grad());
  ASSERT_EQ(g.size(), 1u);
  expect_near(dv(g[0]), {3 * 1, -3 * 4, 0.5 * 3 * 9});
}

TEST(Autograd, SecondDerivativeOfCube) {
  Tensor x = leaf({-1, 0.5, 2});
  Tensor y = (x * x * x).sum();
  auto g1 = grad({y}, {x}, {}, false, /*create_graph=*/true);
  expect_near(dv(g1[0]), {3, 0.75, 12});
  EXPECT_TRUE(g1[0].requires_grad());
  auto g2 = grad({g1[0].sum()}, {x});
  expect_near(dv(g2[0]), {-6, 3, 12});  // 6x
}

TEST(Autograd, SecondDerivativeOfTanh) {
  std::vector<double> xs = {-1.5, 0.3, 1.2};
  Tensor x = leaf(xs);
  auto g1 = grad({tanh(x).sum()}, {x}, {}, false, true);
  auto g2 = grad({g1[0].sum()}, {x});
  std::vector<double> want1, want2;
  for (double v : xs) {
    double t = std::tanh(v);
    want1.push_back(1 - t * t);
    want2.push_back(-2 * t * (1 - t * t));
  }
  expect_near(dv(g1[0]), want1, 1e-12);
  expect_near(dv(g2[0]), want2, 1e-12);
  // backward(create_graph=true) leaves a differentiable .grad.
  Tensor z = leaf({0.7});
  (z * z * z).sum().backward(Tensor(), false, /*create_graph=*/true);
  EXPECT_TRUE(z.grad().requires_grad());
  auto gg = grad({z.grad().sum()}, {z});
  expect_near(dv(gg[0]), {6 * 0.7}, 1e-12);
  // As in PyTorch, a differentiable .grad references the graph that references z: a cycle
  // the user breaks by dropping the gradient.
  z.zero_grad();
}

TEST(Autograd, InPlaceOnSavedInputRaises) {
  Tensor x = leaf({1, 2, 3});
  Tensor h = x * 2.0;
  Tensor y = (h * h).sum();  // mul saves h
  {
    NoGradGuard ng;
    h.copy_(zeros({3}, Float64));
  }
  try {
    y.backward();
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(m.rfind("[backward]", 0), 0u) << m;
    EXPECT_NE(m.find("modified in place"), std::string::npos) << m;
  }
  // Writing into a leaf that requires grad with grad mode on is refused outright.
  EXPECT_THROW(x.copy_(zeros({3}, Float64)), Error);
}

TEST(Autograd, InPlaceOnSavedOutputRaises) {
  // exp saves its output; overwriting it must not silently give a wrong gradient.
  Tensor x = leaf({0.1, 0.2});
  Tensor e = exp(x);
  Tensor y = e.sum();
  {
    NoGradGuard ng;
    e.fill_(5);
  }
  EXPECT_THROW(y.backward(), Error);
}

TEST(Autograd, InPlaceOnOutputRaisesOnlyWhenTheRuleReadsIt) {
  // exp's gradient reads its output: backward from the modified output itself raises.
  Tensor x = leaf({0.1, 0.2});
  Tensor e = exp(x);
  {
    NoGradGuard ng;
    e.fill_(5);
  }
  try {
    e.backward(ones({2}, Float64));
    FAIL() << "expected kiln::Error";
  } catch (const Error& err) {
    std::string m = err.what();
    EXPECT_EQ(m.rfind("[backward]", 0), 0u) << m;
    EXPECT_NE(m.find("'exp'"), std::string::npos) << m;
  }
  // mul's gradient does not read its output: modifying it is harmless (as in PyTorch).
  Tensor h = x * 2.0;
  {
    NoGradGuard ng;
    h.fill_(7);
  }
  h.backward(ones({2}, Float64));
  expect_near(dv(x.grad()), {2, 2});
}

TEST(Autograd, InPlaceThroughAViewRaises) {
  // A write through a view bumps the version shared with its base (as PyTorch).
  Tensor x = leaf({1, 2, 3});
  Tensor h = x * 2.0;
  Tensor y = (h * h).sum();
  {
    NoGradGuard ng;
    h.slice(0, 0, 1).fill_(0);
  }
  EXPECT_THROW(y.backward(), Error);
}

TEST(Autograd, GradientsThroughViews) {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor y = (x.t().slice(0, 0, 3, 2) * tensor(std::vector<double>{1, 10}, {1, 2})).sum() +
             x.reshape({3, 2}).select(1, 1).sum() + x.expand({4, 2, 3}).sum();
  y.backward();
  // t().slice(0,0,3,2) picks columns 0 and 2 of x weighted by row weights 1, 10;
  // reshape({3,2}).select(1,1) picks flat elements 1, 3, 5; expand adds 4 everywhere.
  expect_near(dv(x.grad()), {1 + 4, 1 + 4, 1 + 4, 10 + 1 + 4, 0 + 4, 10 + 1 + 4});
}

TEST(Gradcheck, PassesForCorrectFunctions) {
  manual_seed(1);
  Tensor a = randn({3, 4}, Float64), b = randn({4}, Float64);
  auto r = gradcheck(
      [](const std::vector<Tensor>& in) {
        return sum(tanh(in[0]) * in[1] + sigmoid(in[0] * in[1]), {1});
      },
      {a, b});
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_LT(r.max_abs_err, 1e-6);
  // Float32 inputs are checked in float64.
  auto r32 = gradcheck([](const std::vector<Tensor>& in) { return exp(in[0]).mean(); },
                       {randn({5}, Float32)});
  EXPECT_TRUE(r32.ok) << r32.message;
  // Integer inputs are passed through, not perturbed.
  auto ri = gradcheck([](const std::vector<Tensor>& in) { return in[0] * in[1].to(Float64); },
                      {randn({3}, Float64), tensor(std::vector<int64_t>{1, 2, 3})});
  EXPECT_TRUE(ri.ok) << ri.message;
}

TEST(Gradcheck, DetectsAWrongGradient) {
  manual_seed(2);
  Tensor a = randn({4}, Float64);
  // x * detach(x): the analytic gradient misses the detached factor (x instead of 2x), so the
  // numeric and analytic gradients disagree.
  auto bad = gradcheck([](const std::vector<Tensor>& in) { return in[0] * in[0].detach(); }, {a});
  EXPECT_FALSE(bad.ok);
  EXPECT_NE(bad.message.find("input 0"), std::string::npos) << bad.message;
  EXPECT_GT(bad.max_abs_err, 1e-3);
  auto good = gradcheck([](const std::vector<Tensor>& in) { return in[0] * in[0]; }, {a});
  EXPECT_TRUE(good.ok) << good.message;
  // A function whose output does not depend on an input through the graph at all.
  auto cut = gradcheck(
      [](const std::vector<Tensor>& in) { return (exp(in[0].detach()) + in[0] * 0.0).sum(); }, {a});
  EXPECT_FALSE(cut.ok);
}

TEST(Gradcheck, MultipleOutputs) {
  manual_seed(3);
  Tensor a = randn({2, 3}, Float64);
  TensorsFn fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{sum(in[0], {0}), max(in[0], {1}), var(in[0])};
  };
  auto r = gradcheck(fn, {a});
  EXPECT_TRUE(r.ok) << r.message;
}
