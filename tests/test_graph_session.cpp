// Static graphs: building with placeholders/variables, Session::run with feeds and pruning,
// symbolic gradients equal to eager backward, optimizers in the graph, printers and errors.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.h"
#include "kiln/optim/optim.h"
#include "test_util.h"

using namespace kiln;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

TEST(GraphSession, PlaceholderVariableRun) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), 3});
  Tensor w = g.variable("w", tensor({1.f, 2.f, 3.f}, {3}));
  Tensor y = sum(mul(x, w), {1});
  EXPECT_TRUE(y.is_symbolic());
  EXPECT_EQ(y.shape(), (Shape{-1}));
  Session sess(g);
  Tensor out = sess.run(y, {{x, tensor({1.f, 1.f, 1.f, 2.f, 0.f, 1.f}, {2, 3})}});
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{6.f, 5.f}));
  // A different batch size uses the same plan.
  out = sess.run(y, {{x, ones({4, 3})}});
  EXPECT_EQ(out.shape(), (Shape{4}));
  EXPECT_EQ(sess.plans_built(), 1u);
}

TEST(GraphSession, PruningRunsOnlyWhatFetchesNeed) {
  Graph g;
  Tensor a = g.placeholder("a", Float32, {2});
  Tensor b = g.placeholder("b", Float32, {2});
  Tensor c = exp(a);
  Tensor d = add(log(b), 1.0);
  Session sess(g);
  // b is not fed and not needed for c.
  Tensor out = sess.run(c, {{a, zeros({2})}});
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{1.f, 1.f}));
  EXPECT_EQ(sess.last_run().nodes_executed, 1);
  (void)d;
}

TEST(GraphSession, CseAndConstantFolding) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {3});
  Tensor k = mul(full({3}, 2.0), full({3}, 3.0));  // eager: concrete, becomes a constant
  Tensor c = g.constant(tensor({1.f, 1.f, 1.f}));
  Tensor folded = add(c, c);                        // constant-folded in the session
  Tensor y1 = mul(x, folded), y2 = mul(x, folded);  // CSE merges these
  Tensor z = add(add(y1, y2), k);
  Session sess(g);
  Tensor out = sess.run(z, {{x, tensor({1.f, 2.f, 3.f})}});
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{10.f, 14.f, 18.f}));
  // add(c,c) folded; one of the two muls merged: mul, add, add remain, and fusion makes them
  // one kernel.
  EXPECT_NE(sess.last_run().passes.find("cse: 1"), std::string::npos) << sess.last_run().passes;
  EXPECT_NE(sess.last_run().passes.find("const_fold: 1"), std::string::npos);
  EXPECT_EQ(sess.last_run().nodes_executed, 1) << sess.last_run().passes;
}

TEST(GraphSession, VariablesPersistAndAssign) {
  Graph g;
  Tensor v = g.variable("v", zeros({2}));
  Tensor inc = assign(v, add(v, 1.0));
  Session sess(g);
  for (int i = 0; i < 3; ++i) sess.run(inc);
  EXPECT_EQ(sess.variable("v").to_vector<float>(), (std::vector<float>{3.f, 3.f}));
  // A second session starts from the initial value.
  Session s2(g);
  EXPECT_EQ(s2.run(v).to_vector<float>(), (std::vector<float>{0.f, 0.f}));
}

// Plans run bound (arena, no re-planning) from their second run: fetching a variable or a
// constant alone must keep working there, between training steps (the third run of such a plan
// used to report the variable dead).
TEST(GraphSession, FetchingAVariableAloneKeepsWorkingAcrossBoundRuns) {
  Graph g;
  Tensor w = g.variable("w", tensor(std::vector<double>{1.0, 2.0}));
  Tensor c = g.constant(tensor(std::vector<double>{5.0}));
  Tensor step = optim::SGD(0.1).minimize(sum(mul(w, w)));
  Session s(g);
  double want = 1.0;
  for (int k = 0; k < 6; ++k) {
    s.run(step);
    want *= 0.8;  // w -= 0.1 * 2w
    Tensor got = s.run(w);
    EXPECT_NEAR(got.to_vector<double>()[0], want, 1e-12) << "run " << k;
    EXPECT_EQ(s.run(c).to_vector<double>(), std::vector<double>{5.0}) << "run " << k;
    // What run() hands out is a copy: the next step does not change it.
    s.run(step);
    EXPECT_NEAR(got.to_vector<double>()[0], want, 1e-12);
    want *= 0.8;
  }
}

TEST(GraphSession, GradientsMatchEager) {
  manual_seed(3);
  Tensor xv = randn({4, 3}), wv = randn({3}), bv = randn({1});
  // Eager
  Tensor we = wv.clone().requires_grad_(), be = bv.clone().requires_grad_();
  Tensor le = mean(mul(tanh(add(sum(mul(xv, we), {1}), be)), 2.0));
  le.backward();
  // Graph
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), 3});
  Tensor w = g.variable("w", wv), b = g.variable("b", bv);
  Tensor lg = mean(mul(tanh(add(sum(mul(x, w), {1}), b)), 2.0));
  auto gr = gradients({lg}, {w, b});
  Session sess(g);
  auto out = sess.run({lg, gr[0], gr[1]}, {{x, xv}});
  EXPECT_LT(max_abs_diff(out[0], le), 1e-6);
  EXPECT_LT(max_abs_diff(out[1], we.grad()), 1e-6);
  EXPECT_LT(max_abs_diff(out[2], be.grad()), 1e-6);
}

TEST(GraphSession, SgdMinimizeFitsLinearRegression) {
  manual_seed(5);
  Tensor xs = randn({64, 2});
  Tensor ys = add(sum(mul(xs, tensor({2.f, -3.f})), {1}), 0.5);
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), 2});
  Tensor y = g.placeholder("y", Float32, {Dim::any()});
  Tensor w = g.variable("w", zeros({2})), b = g.variable("b", zeros({1}));
  Tensor pred = add(sum(mul(x, w), {1}), b);
  Tensor loss = mean(mul(sub(pred, y), sub(pred, y)));
  Tensor step = optim::SGD(0.1, 0.9).minimize(loss);
  Session sess(g);
  double first = sess.run(loss, {{x, xs}, {y, ys}}).item<double>();
  for (int i = 0; i < 200; ++i) sess.run(step, {{x, xs}, {y, ys}});
  double last = sess.run(loss, {{x, xs}, {y, ys}}).item<double>();
  EXPECT_LT(last, 1e-4 * first);
  auto wv = sess.variable("w").to_vector<float>();
  EXPECT_NEAR(wv[0], 2.0, 1e-2);
  EXPECT_NEAR(wv[1], -3.0, 1e-2);
}

TEST(GraphSession, AdamMinimizeMatchesEagerAdam) {
  manual_seed(6);
  Tensor xs = randn({16, 3}), ys = randn({16});
  Tensor w0 = randn({3});
  // Eager Adam
  Tensor we = w0.clone().requires_grad_();
  optim::Adam eopt({we}, {.lr = 0.05});
  for (int i = 0; i < 5; ++i) {
    Tensor r = sub(sum(mul(xs, we), {1}), ys);
    Tensor l = mean(mul(r, r));
    eopt.zero_grad();
    l.backward();
    eopt.step();
  }
  Graph g;
  Tensor x = g.placeholder("x", Float32, {16, 3}), y = g.placeholder("y", Float32, {16});
  Tensor w = g.variable("w", w0);
  Tensor r = sub(sum(mul(x, w), {1}), y);
  Tensor step = optim::Adam(0.05).minimize(mean(mul(r, r)));
  Session sess(g);
  for (int i = 0; i < 5; ++i) sess.run(step, {{x, xs}, {y, ys}});
  EXPECT_LT(max_abs_diff(sess.variable("w"), we.detach()), 1e-5);
}

TEST(GraphSession, PrintRunsEachExecution) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {2});
  Tensor y = mul(print(x, "x is"), 2.0);
  Session sess(g);
  ::testing::internal::CaptureStdout();
  sess.run(y, {{x, tensor({1.f, 2.f})}});
  sess.run(y, {{x, tensor({3.f, 4.f})}});
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("x is tensor([1., 2.])"), std::string::npos) << out;
  EXPECT_NE(out.find("x is tensor([3., 4.])"), std::string::npos) << out;
}

TEST(GraphSession, PrintersShowTheGraph) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), 4});
  Tensor w = g.variable("w", zeros({4}));
  Tensor y = exp(mul(x, w));
  std::string m = g.to_mermaid();
  EXPECT_NE(m.find("graph LR"), std::string::npos);
  EXPECT_NE(m.find("n0[x]"), std::string::npos) << m;
  EXPECT_NE(m.find("n1[w]"), std::string::npos) << m;
  EXPECT_NE(m.find("n0 --> n2"), std::string::npos) << m;
  EXPECT_NE(m.find("n2 --> n3"), std::string::npos) << m;
  std::string t = g.to_text();
  EXPECT_NE(t.find("%2 = mul(%0, %1) : float32[?, 4]"), std::string::npos) << t;
  EXPECT_NE(g.to_dot().find("n2 -> n3"), std::string::npos);
  (void)y;
}

TEST(GraphSession, Errors) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), 3});
  Tensor y = exp(x);
  Session sess(g);
  auto expect_msg = [](auto f, const std::string& part) {
    try {
      f();
      ADD_FAILURE() << "no error, expected: " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_msg([&] { sess.run(y); }, "placeholder 'x'");
  expect_msg([&] { sess.run(y, {{x, ones({2, 4})}}); }, "has shape [2, 4], expected [?, 3]");
  expect_msg([&] { sess.run(y, {{x, ones({2, 3}, Float64)}}); }, "dtype float64, expected float32");
  expect_msg([&] { sess.run(y, {{x, ones({3})}}); }, "'x'");
  expect_msg([&] { (void)y.item<float>(); }, "fetch it with Session::run");
  expect_msg([&] { (void)add(x, ones({2, 4})); }, "[add]");
  Graph g2;
  Tensor z = g2.placeholder("z", Float32, {3});
  expect_msg([&] { sess.run(z); }, "another graph");
  expect_msg([&] { (void)add(x, z); }, "different graphs");
  // The session still works after the errors.
  EXPECT_EQ(sess.run(y, {{x, zeros({1, 3})}}).to_vector<float>(), (std::vector<float>{1, 1, 1}));
}

TEST(GraphSession, ManyRunsDoNotGrowMemory) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), 8});
  Tensor w = g.variable("w", ones({8, 8}));
  Tensor loss = mean(tanh(sum(mul(unsqueeze(x, 2), w), {1})));
  Tensor step = optim::SGD(0.01).minimize(loss);
  Session sess(g);
  Tensor xb = ones({4, 8});
  for (int i = 0; i < 100; ++i) sess.run(step, {{x, xb}});
  size_t before = allocator_stats().in_use_bytes;
  for (int i = 0; i < 10000; ++i) sess.run(step, {{x, xb}});
  size_t after = allocator_stats().in_use_bytes;
  EXPECT_EQ(before, after);
}

}  // namespace

namespace {
// The lecture's y = softmax(matmul(x, w)) prints as the lecture's Mermaid graph.
TEST(GraphSession, LectureSoftmaxMatmulMermaid) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), 784});
  Tensor w = g.variable("w", zeros({784, 10}));
  Tensor y = softmax(matmul(x, w), -1);
  EXPECT_EQ(g.to_mermaid(),
            "graph LR\n"
            "    n0[x]\n"
            "    n1[w]\n"
            "    n2[matmul]\n"
            "    n3[softmax]\n"
            "    n0 --> n2\n"
            "    n1 --> n2\n"
            "    n2 --> n3\n");
  EXPECT_EQ(y.shape(), (Shape{-1, 10}));
}
}  // namespace

namespace {

// A donated feed's buffer takes the result computed from it (addmm accumulating onto it, an
// elementwise op over it) once the plan is bound; the numbers are those of an undonated run.
TEST(GraphSession, DonatedFeedsTakeTheirResults) {
  manual_seed(21);
  Graph g;
  Tensor w = g.placeholder("w", Float32, {6, 5});
  Tensor b = g.placeholder("b", Float32, {5});
  Tensor a = g.placeholder("a", Float32, {4, 6});
  Tensor gr = g.placeholder("g", Float32, {4, 5});
  Tensor nw = sub(w, mul(matmul(transpose(a, 0, 1), gr), 0.1));  // addmm onto w
  Tensor nb = mul(b, 0.5);                                       // elementwise over b
  Tensor loss = sum(mul(matmul(a, w), gr));                      // reads w before the update
  Session plain(g), donating(g);
  donating.set_donated({w, b});
  Tensor a0 = randn({4, 6}), g0 = randn({4, 5});
  Tensor w_ref = randn({6, 5}), b_ref = randn({5});
  Tensor w_don = w_ref.clone(), b_don = b_ref.clone();
  for (int step = 0; step < 4; ++step) {
    auto r = plain.run({nw, nb, loss}, {{w, w_ref}, {b, b_ref}, {a, a0}, {gr, g0}});
    auto d = donating.run({nw, nb, loss}, {{w, w_don}, {b, b_don}, {a, a0}, {gr, g0}});
    EXPECT_LT(max_abs_diff(r[0], d[0]), 1e-6) << "step " << step;
    EXPECT_EQ(r[1].to_vector<float>(), d[1].to_vector<float>());
    EXPECT_NEAR(r[2].item<float>(), d[2].item<float>(), 1e-4);
    // The first run plans (generic); bound replays write both results into the fed buffers.
    EXPECT_EQ(donating.last_run().donated_writes, step == 0 ? 0 : 2) << "step " << step;
    EXPECT_EQ(d[0].shares_storage(w_don), step > 0);
    EXPECT_EQ(d[1].shares_storage(b_don), step > 0);
    EXPECT_EQ(plain.last_run().donated_writes, 0);
    w_ref = r[0];
    b_ref = r[1];
    w_don = d[0];
    b_don = d[1];
  }
}

// What may and may not be written over: a feed only by its last reader (x by one of exp and
// add, not both), never a fetched feed, a feed sharing storage with another feed, or a
// non-contiguous feed.
TEST(GraphSession, DonationLeavesSharedLaterReadAndFetchedFeedsAlone) {
  manual_seed(22);
  Graph g;
  Tensor x = g.placeholder("x", Float32, {3, 4});
  Tensor y = g.placeholder("y", Float32, {3, 4});
  Tensor z = g.placeholder("z", Float32, {3, 4});
  Tensor ex = exp(x);
  Tensor later = add(x, 1.0);
  Tensor ey = mul(y, 2.0);
  Tensor ez = neg(z);  // z is also fetched itself
  Session s(g);
  s.set_donated({x, y, z});
  Tensor zv = randn({3, 4});
  const std::vector<float> z_before = zv.to_vector<float>();
  for (int run = 0; run < 3; ++run) {
    Tensor xv = randn({3, 4}), yv = randn({3, 4});
    const std::vector<float> x_before = xv.to_vector<float>(), y_before = yv.to_vector<float>();
    auto r = s.run({ex, later, ey, ez, z}, {{x, xv}, {y, yv}, {z, zv}});
    EXPECT_EQ(s.last_run().donated_writes, run > 0 ? 2 : 0);  // into x and into y
    // exp and add both read x and feed nothing: whichever runs last takes x's buffer.
    EXPECT_EQ(r[0].shares_storage(xv) + r[1].shares_storage(xv), run > 0 ? 1 : 0);
    EXPECT_EQ(r[2].shares_storage(yv), run > 0);
    EXPECT_FALSE(r[3].shares_storage(zv));
    EXPECT_EQ(r[4].to_vector<float>(), z_before);
    const auto e = r[0].to_vector<float>(), l = r[1].to_vector<float>(),
               m = r[2].to_vector<float>();
    for (size_t i = 0; i < x_before.size(); ++i) {
      EXPECT_FLOAT_EQ(e[i], std::exp(x_before[i]));
      EXPECT_FLOAT_EQ(l[i], x_before[i] + 1);
      EXPECT_FLOAT_EQ(m[i], 2 * y_before[i]);
    }
  }
  Tensor xv = randn({3, 4});
  // y fed with a view of x's storage: the two share storage, so y is not written over.
  Tensor both = randn({2, 3, 4});
  Tensor xs = both.select(0, 0), ys = both.select(0, 1);
  const std::vector<float> xs_before = xs.to_vector<float>();
  auto r = s.run({ex, later, ey, ez, z}, {{x, xs}, {y, ys}, {z, zv}});
  EXPECT_EQ(s.last_run().donated_writes, 0);
  EXPECT_EQ(xs.to_vector<float>(), xs_before);
  EXPECT_FALSE(r[2].shares_storage(both));
  // A non-contiguous feed (a transposed view) keeps its values too.
  Tensor yt = randn({4, 3}).t();
  const std::vector<float> yt_before = yt.to_vector<float>();
  s.run({ex, later, ey, ez, z}, {{x, xv}, {y, yt}, {z, zv}});
  EXPECT_EQ(yt.to_vector<float>(), yt_before);
  // Only placeholders can be donated.
  Tensor c = g.constant(ones({2}));
  kiln_test::expect_error([&] { s.set_donated({c}); }, {"Session::set_donated", "placeholder"});
}

}  // namespace

TEST(GraphSession, ARunThatRaisesHalfWayLeavesNoStaleBoundPlan) {
  // A bound plan for x of 4 elements; then a run with 8 raises in a kernel after the run had
  // recorded the new feed layout. The next run with 8 elements must not replay the bound plan
  // built for 4 (its arena and prebuilt tensors have the old shapes).
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any()});
  Tensor idx = g.placeholder("idx", Int64, {1});
  Tensor h = relu(mul(x, 2.0));
  Tensor picked = index_select(h, 0, idx);
  Tensor out = add(mul(h, 3.0), picked);
  Session sess(g);
  for (int i = 0; i < 3; ++i)  // generic, then bound
    EXPECT_EQ(
        sess.run(out, {{x, tensor({1.f, 2.f, 3.f, 4.f})}, {idx, tensor(std::vector<int64_t>{0})}})
            .to_vector<float>(),
        (std::vector<float>{8.f, 14.f, 20.f, 26.f}));
  Tensor x8 = tensor({1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f});
  EXPECT_THROW(sess.run(out, {{x, x8}, {idx, tensor(std::vector<int64_t>{99})}}), Error);
  Tensor r = sess.run(out, {{x, x8}, {idx, tensor(std::vector<int64_t>{1})}});
  EXPECT_EQ(r.to_vector<float>(), std::vector<float>(8, 8.f));
}
