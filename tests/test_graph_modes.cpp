// Eager vs static graph on the same model (docs/design.md section 11: "the same model gives the
// same result eagerly and as a graph"), and the Session's error contract on a softmax-regression
// graph: every bad feed / fetch / build names what is wrong, and leaves the Session working
// with its variables unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "kiln/kiln.h"
#include "kiln/optim/optim.h"
#include "test_util.h"

using namespace kiln;
using kiln_test::expect_error;

namespace {

// |got - want| <= rel * (|want| + 1e-2 * max|want|) element by element; "" when fine.
std::string rel_compare(const Tensor& got, const Tensor& want, double rel = 1e-5) {
  if (got.shape() != want.shape())
    return "shape " + got.shape().str() + " vs " + want.shape().str();
  auto g = got.to_vector<double>(), w = want.to_vector<double>();
  double scale = 0;
  for (double x : w) scale = std::max(scale, std::fabs(x));
  for (size_t i = 0; i < g.size(); ++i) {
    double err = std::fabs(g[i] - w[i]);
    if (!(err <= rel * (std::fabs(w[i]) + 1e-2 * scale + 1e-30))) {
      std::ostringstream o;
      o.precision(9);
      o << "element " << i << ": graph " << g[i] << ", eager " << w[i];
      return o.str();
    }
  }
  return "";
}

// ---- MLP 20-32-32-5, ReLU, cross-entropy ------------------------------------------------------

const char* const kNames[] = {"w1", "b1", "w2", "b2", "w3", "b3"};

struct MlpData {
  std::vector<Tensor> init;  // w1 b1 w2 b2 w3 b3 (float32)
  Tensor x, y;               // [16, 20] float32, [16] int64
};

MlpData mlp_data() {
  manual_seed(2024);
  MlpData d;
  auto layer = [&](int64_t in, int64_t out) {
    double s = 1.0 / std::sqrt(static_cast<double>(in));
    d.init.push_back(mul(randn({in, out}), s));
    d.init.push_back(mul(randn({out}), 0.1));
  };
  layer(20, 32);
  layer(32, 32);
  layer(32, 5);
  d.x = randn({16, 20});
  d.y = randint(0, 5, {16});
  return d;
}

// The same code builds the eager computation and the graph.
Tensor mlp_loss(const Tensor& x, const Tensor& y, const std::vector<Tensor>& p) {
  Tensor h = relu(add(matmul(x, p[0]), p[1]));
  h = relu(add(matmul(h, p[2]), p[3]));
  Tensor logits = add(matmul(h, p[4]), p[5]);
  return cross_entropy(logits, y);
}

TEST(GraphModes, MlpLossAndGradientsMatchEager) {
  MlpData d = mlp_data();
  // Eager autograd.
  std::vector<Tensor> ep;
  for (auto& t : d.init) ep.push_back(t.clone().requires_grad_());
  Tensor eloss = mlp_loss(d.x, d.y, ep);
  eloss.backward();
  ASSERT_EQ(eloss.dtype(), Float32);

  // Graph: placeholders for the data, variables for the parameters, gradients() + Session.
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), 20});
  Tensor y = g.placeholder("y", Int64, {Dim::any()});
  std::vector<Tensor> gp;
  for (size_t i = 0; i < d.init.size(); ++i) gp.push_back(g.variable(kNames[i], d.init[i]));
  Tensor gloss = mlp_loss(x, y, gp);
  EXPECT_TRUE(gloss.is_symbolic());
  std::vector<Tensor> grads = gradients({gloss}, gp);
  ASSERT_EQ(grads.size(), gp.size());
  std::vector<Tensor> fetches{gloss};
  for (auto& t : grads) {
    ASSERT_TRUE(t.defined());
    fetches.push_back(t);
  }
  Session sess(g);
  auto out = sess.run(fetches, {{x, d.x}, {y, d.y}});
  ASSERT_EQ(out.size(), fetches.size());
  EXPECT_EQ(out[0].dtype(), Float32);
  EXPECT_EQ(rel_compare(out[0], eloss.detach()), "") << "loss";
  EXPECT_GT(eloss.item<double>(), 0.5);  // a real, untrained loss
  for (size_t i = 0; i < gp.size(); ++i) {
    ASSERT_TRUE(ep[i].grad().defined()) << kNames[i];
    EXPECT_EQ(out[i + 1].dtype(), Float32) << kNames[i];
    EXPECT_EQ(rel_compare(out[i + 1], ep[i].grad()), "") << "gradient of " << kNames[i];
  }
  // Running again gives the same numbers (no hidden state in the plan).
  auto again = sess.run(fetches, {{x, d.x}, {y, d.y}});
  for (size_t i = 0; i < out.size(); ++i)
    EXPECT_EQ(again[i].to_vector<float>(), out[i].to_vector<float>()) << i;
}

TEST(GraphModes, TwentySgdStepsMatchEager) {
  MlpData d = mlp_data();
  const double lr = 0.1;
  const int steps = 20;

  std::vector<Tensor> ep;
  for (auto& t : d.init) ep.push_back(t.clone().requires_grad_());
  optim::SGD eopt(ep, {.lr = lr});
  std::vector<double> eager_losses;
  for (int s = 0; s < steps; ++s) {
    Tensor l = mlp_loss(d.x, d.y, ep);
    eager_losses.push_back(l.item<double>());
    eopt.zero_grad();
    l.backward();
    eopt.step();
  }

  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), 20});
  Tensor y = g.placeholder("y", Int64, {Dim::any()});
  std::vector<Tensor> gp;
  for (size_t i = 0; i < d.init.size(); ++i) gp.push_back(g.variable(kNames[i], d.init[i]));
  Tensor loss = mlp_loss(x, y, gp);
  Tensor step = optim::SGD(lr).minimize(loss);
  Session sess(g);
  for (int s = 0; s < steps; ++s) {
    double l = sess.run(loss, {{x, d.x}, {y, d.y}}).item<double>();
    EXPECT_NEAR(l, eager_losses[static_cast<size_t>(s)],
                1e-5 * std::fabs(eager_losses[static_cast<size_t>(s)]))
        << "loss before step " << s;
    sess.run(step, {{x, d.x}, {y, d.y}});
  }
  EXPECT_LT(eager_losses.back(), eager_losses.front());  // training did something
  for (size_t i = 0; i < gp.size(); ++i) {
    Tensor gv = sess.variable(kNames[i]);
    EXPECT_EQ(gv.dtype(), Float32);
    EXPECT_EQ(rel_compare(gv, ep[i].detach()), "") << kNames[i] << " after " << steps << " steps";
    // And the parameters moved.
    EXPECT_NE(gv.to_vector<float>(), d.init[i].to_vector<float>()) << kNames[i];
  }
}

// ---- Errors on a softmax-regression graph -----------------------------------------------------

struct SoftmaxRegression {
  Graph g;
  Tensor x, y_, w, b, logits, probs, loss, step;
  Tensor xb, yb;
  SoftmaxRegression() {
    manual_seed(77);
    x = g.placeholder("x", Float32, {Dim::any(), 784});
    y_ = g.placeholder("y_", Int64, {Dim::any()});
    w = g.variable("w", mul(randn({784, 10}), 0.01));
    b = g.variable("b", zeros({10}));
    logits = add(matmul(x, w), b);
    probs = softmax(logits, -1);
    loss = cross_entropy(logits, y_);
    step = optim::SGD(0.5).minimize(loss);
    xb = rand({8, 784});
    yb = randint(0, 10, {8});
  }
};

class SessionErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    sess = std::make_unique<Session>(m.g);
    w0 = sess->variable("w").to_vector<float>();
    b0 = sess->variable("b").to_vector<float>();
    loss0 = sess->run(m.loss, {{m.x, m.xb}, {m.y_, m.yb}}).item<double>();
    nodes0 = m.g.nodes().size();
  }
  // After an error: same variables, same loss, and a training step still works and matches a
  // fresh session's step.
  void ExpectUnchangedAndWorking() {
    EXPECT_EQ(sess->variable("w").to_vector<float>(), w0) << "w changed by a failed call";
    EXPECT_EQ(sess->variable("b").to_vector<float>(), b0) << "b changed by a failed call";
    EXPECT_EQ(sess->run(m.loss, {{m.x, m.xb}, {m.y_, m.yb}}).item<double>(), loss0);
    sess->run(m.step, {{m.x, m.xb}, {m.y_, m.yb}});
    Session fresh(m.g);
    fresh.run(m.step, {{m.x, m.xb}, {m.y_, m.yb}});
    EXPECT_EQ(sess->variable("w").to_vector<float>(), fresh.variable("w").to_vector<float>());
    EXPECT_EQ(sess->variable("b").to_vector<float>(), fresh.variable("b").to_vector<float>());
    EXPECT_NE(sess->variable("b").to_vector<float>(), b0) << "the step did not train";
    double after = sess->run(m.loss, {{m.x, m.xb}, {m.y_, m.yb}}).item<double>();
    EXPECT_LT(after, loss0);
  }
  SoftmaxRegression m;
  std::unique_ptr<Session> sess;
  std::vector<float> w0, b0;
  double loss0 = 0;
  size_t nodes0 = 0;
};

TEST_F(SessionErrors, FeedOfWrongShapeNamesPlaceholderExpectedAndGot) {
  expect_error(
      [&] {
        sess->run(m.step, {{m.x, rand({8, 783})}, {m.y_, m.yb}});
      },
      {"'x'", "[8, 783]", "[?, 784]"});
  expect_error(
      [&] {
        sess->run(m.step, {{m.x, rand({784})}, {m.y_, m.yb}});
      },
      {"'x'", "[784]", "[?, 784]"});
  expect_error(
      [&] {
        sess->run(m.probs, {{m.x, rand({2, 3, 784})}});
      },
      {"'x'", "[2, 3, 784]", "[?, 784]"});
  expect_error(
      [&] {
        sess->run(m.step, {{m.x, m.xb}, {m.y_, randint(0, 10, {8, 1})}});
      },
      {"'y_'", "[8, 1]", "[?]"});
  ExpectUnchangedAndWorking();
}

TEST_F(SessionErrors, FeedOfWrongDtypeNamesPlaceholderExpectedAndGot) {
  expect_error(
      [&] {
        sess->run(m.step, {{m.x, m.xb.to(Float64)}, {m.y_, m.yb}});
      },
      {"'x'", "float64", "float32"});
  expect_error(
      [&] {
        sess->run(m.step, {{m.x, m.xb}, {m.y_, m.yb.to(Float32)}});
      },
      {"'y_'", "float32", "int64"});
  ExpectUnchangedAndWorking();
}

TEST_F(SessionErrors, MissingFeedNamesThePlaceholder) {
  expect_error([&] { sess->run(m.step, {{m.x, m.xb}}); }, {"'y_'"});
  expect_error([&] { sess->run(m.probs); }, {"'x'"});
  expect_error([&] { sess->run({m.loss, m.probs}, {{m.y_, m.yb}}); }, {"'x'"});
  ExpectUnchangedAndWorking();
}

TEST_F(SessionErrors, FetchFromAnotherGraph) {
  Graph other;
  Tensor z = other.placeholder("z", Float32, {3});
  Tensor ez = exp(z);
  expect_error([&] { sess->run(ez, {{z, ones({3})}}); }, {"another graph"});
  expect_error([&] { sess->run({m.loss, ez}, {{m.x, m.xb}, {m.y_, m.yb}}); }, {"another graph"});
  // A feed key from another graph is an error too (not silently ignored).
  expect_error([&] { sess->run(m.probs, {{m.x, m.xb}, {z, ones({3})}}); }, {"z"});
  ExpectUnchangedAndWorking();
}

TEST_F(SessionErrors, HostReadOfSymbolicTensorSaysUseSessionRun) {
  expect_error([&] { (void)m.loss.item<float>(); }, {"Session::run"});
  expect_error([&] { (void)m.probs.to_vector<float>(); }, {"Session::run"});
  expect_error([&] { (void)m.w.item<float>(); }, {"Session::run"});
  ExpectUnchangedAndWorking();
}

TEST_F(SessionErrors, OpShapeErrorAtBuildTimeNamesOpAndBothShapes) {
  Tensor bad_w = m.g.placeholder("bad_w", Float32, {783, 10});
  size_t with_placeholder = m.g.nodes().size();
  expect_error([&] { (void)matmul(m.x, bad_w); }, {"matmul", "[?, 784]", "[783, 10]"});
  expect_error([&] { (void)add(m.logits, ones({3})); }, {"add", "[?, 10]", "[3]"});
  expect_error([&] { (void)cross_entropy(m.logits, m.x); },
               {"cross_entropy", "[?, 10]", "[?, 784]"});
  // The failed builds added no nodes, and a Session on the graph still verifies and runs.
  EXPECT_EQ(m.g.nodes().size(), with_placeholder);
  EXPECT_EQ(with_placeholder, nodes0 + 1);
  ExpectUnchangedAndWorking();
}

TEST_F(SessionErrors, RunTimeShapeMismatchBetweenFeedsLeavesStateUnchanged) {
  // Both feeds fit their placeholders ([?, 784], [?]) but disagree on the batch size: the error
  // comes from an op while running, after other kernels may have run; no assign may have run.
  expect_error([&] { sess->run(m.step, {{m.x, m.xb}, {m.y_, randint(0, 10, {7})}}); }, {"[7]"});
  // A label out of range is caught by the loss before any update.
  expect_error([&] { sess->run(m.step, {{m.x, m.xb}, {m.y_, full({8}, 10.0, Int64)}}); }, {"10"});
  ExpectUnchangedAndWorking();
}

}  // namespace
