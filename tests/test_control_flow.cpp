// Control flow as dataflow: switch/merge deadness in the executor (executed-node counts prove the
// untaken branch did not run), cond and while_loop eagerly and in graphs, nested, with gradients
// (eager gradcheck and graph gradients() against eager), passes (CSE, constant predicates).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "kiln/kiln.h"
#include "test_util.h"

using namespace kiln;
using kiln_test::expect_error;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double m = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

Tensor bool_scalar(bool v) { return scalar_tensor(v ? 1.0 : 0.0, Bool); }

// The lecture's example: f(x, y, z) = x < y ? x + z : y * y. For tensors the predicate compares
// sums (cond needs a bool scalar).
Tensor lecture_f(const Tensor& x, const Tensor& y, const Tensor& z) {
  Tensor pred = x.dim() == 0 ? lt(x, y) : lt(sum(x), sum(y));
  return cond(
      pred, [&] { return add(x, z); }, [&] { return mul(y, y); });
}

// Switches passes off for one test (KILN_DISABLE_PASSES is read when a plan is built).
struct ScopedDisablePasses {
  explicit ScopedDisablePasses(const char* names) { ::setenv("KILN_DISABLE_PASSES", names, 1); }
  ~ScopedDisablePasses() { ::unsetenv("KILN_DISABLE_PASSES"); }
};

TEST(ControlSwitchMerge, EagerDeadIsUndefined) {
  Tensor x = tensor({1.f, 2.f});
  auto s = switch_(x, bool_scalar(true));
  EXPECT_FALSE(s[0].defined());
  EXPECT_TRUE(s[1].is_same(x));
  auto m = merge({s[0], s[1]});
  EXPECT_TRUE(m[0].is_same(x));
  EXPECT_EQ(m[1].item<int64_t>(), 1);
  auto d = merge({Tensor(), Tensor()});
  EXPECT_FALSE(d[0].defined());
  EXPECT_NE(expect_error([&] { switch_(x, tensor({1.f})); }).find("[switch]"), std::string::npos);
  EXPECT_NE(expect_error([&] {
              merge({x, tensor(std::vector<int64_t>{1, 2})});
            }).find("[merge]"),
            std::string::npos);
}

TEST(ControlSwitchMerge, ExecutorSkipsDeadOps) {
  // Counts kernels per op: fusion and simplification (tested on their own) would merge them.
  ScopedDisablePasses off("fusion,simplify");
  Graph g;
  Tensor x = g.placeholder("x", Float32, {3});
  Tensor p = g.placeholder("p", Bool, {});
  auto s = switch_(x, p);
  Tensor f = exp(exp(exp(s[0])));  // three ops on the false side
  Tensor t = neg(s[1]);            // one on the true side
  auto m = merge({f, t});
  Session sess(g);
  Tensor xv = tensor({0.f, 1.f, 2.f});
  auto r = sess.run({m[0], m[1]}, {{x, xv}, {p, bool_scalar(true)}});
  EXPECT_EQ(r[0].to_vector<float>(), (std::vector<float>{-0.f, -1.f, -2.f}));
  EXPECT_EQ(r[1].item<int64_t>(), 1);
  EXPECT_EQ(sess.last_run().plan_steps, 6);
  EXPECT_EQ(sess.last_run().nodes_executed, 3);  // switch, neg, merge
  r = sess.run({m[0], m[1]}, {{x, xv}, {p, bool_scalar(false)}});
  EXPECT_NEAR(r[0].to_vector<float>()[0], std::exp(std::exp(1.0)), 1e-4);
  EXPECT_EQ(r[1].item<int64_t>(), 0);
  EXPECT_EQ(sess.last_run().nodes_executed, 5);  // switch, 3 x exp, merge
  // Fetching a value of the untaken side is a clear error.
  std::string e = expect_error([&] { sess.run(t, {{x, xv}, {p, bool_scalar(false)}}); });
  EXPECT_NE(e.find("dead"), std::string::npos) << e;
}

TEST(ControlCond, EagerRunsOneBranch) {
  int t_runs = 0, f_runs = 0;
  Tensor r = cond(
      bool_scalar(false),
      [&] {
        ++t_runs;
        return ones({2});
      },
      [&] {
        ++f_runs;
        return zeros({2});
      });
  EXPECT_EQ(t_runs, 0);
  EXPECT_EQ(f_runs, 1);
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{0.f, 0.f}));
  EXPECT_NE(expect_error([&] {
              cond(
                  tensor({1.f}), [] { return ones({1}); }, [] { return ones({1}); });
            }).find("[cond]"),
            std::string::npos);
}

// Lecture example: identical values and gradients eagerly and as a static graph, both branches,
// scalar and tensor inputs; the executed-node count shows the untaken branch did not run.
TEST(ControlCond, LectureExampleAcrossModes) {
  struct Case {
    Tensor x, y, z;
  };
  std::vector<Case> cases = {
      {scalar_tensor(1.0), scalar_tensor(2.0), scalar_tensor(3.0)},  // x < y: x + z
      {scalar_tensor(4.0), scalar_tensor(2.0), scalar_tensor(3.0)},  // else: y * y
      {tensor({1.f, 2.f, 3.f}), tensor({2.f, 2.f, 5.f}), tensor({.5f, .5f, .5f})},
      {tensor({4.f, 2.f, 3.f}), tensor({2.f, 2.f, 1.f}), tensor({.5f, .5f, .5f})}};
  for (const auto& c : cases) {
    // Eager value and gradients of sum(f).
    Tensor x = c.x.clone().requires_grad_(), y = c.y.clone().requires_grad_(),
           z = c.z.clone().requires_grad_();
    Tensor fe = lecture_f(x, y, z);
    sum(fe).backward();
    Tensor gx = x.grad().defined() ? x.grad() : zeros_like(c.x);
    Tensor gy = y.grad().defined() ? y.grad() : zeros_like(c.y);
    Tensor gz = z.grad().defined() ? z.grad() : zeros_like(c.z);

    Graph g;
    Tensor px = g.placeholder("x", Float32, c.x.shape()),
           py = g.placeholder("y", Float32, c.y.shape()),
           pz = g.placeholder("z", Float32, c.z.shape());
    Tensor f = lecture_f(px, py, pz);
    auto grads = gradients({sum(f)}, {px, py, pz});
    Session sess(g);
    FeedDict feeds{{px, c.x}, {py, c.y}, {pz, c.z}};
    Tensor fv = sess.run(f, feeds);
    EXPECT_LT(max_abs_diff(fv, fe.detach()), 1e-6);
    // The untaken branch is one op (add or mul) and did not run.
    EXPECT_EQ(sess.last_run().nodes_executed, sess.last_run().plan_steps - 1) << g.to_text();
    auto gv = sess.run({grads[0], grads[1], grads[2]}, feeds);
    EXPECT_LT(max_abs_diff(gv[0], gx), 1e-6);
    EXPECT_LT(max_abs_diff(gv[1], gy), 1e-6);
    EXPECT_LT(max_abs_diff(gv[2], gz), 1e-6);

    std::string mm = g.to_mermaid(), dot = g.to_dot();
    EXPECT_NE(mm.find("[switch]"), std::string::npos);
    EXPECT_NE(mm.find("[merge]"), std::string::npos);
    EXPECT_NE(dot.find("switch"), std::string::npos);
    EXPECT_NE(dot.find("merge"), std::string::npos);
    EXPECT_NE(mm.find("-->|T|"), std::string::npos);  // switch edges say which side
    EXPECT_NE(dot.find("label=\"F\""), std::string::npos);
  }
}

TEST(ControlCond, UntakenHeavyBranchDoesNotRun) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {4, 4});
  Tensor p = g.placeholder("p", Bool, {});
  Tensor r = cond(
      p, [&] { return matmul(matmul(matmul(x, x), x), x); }, [&] { return neg(x); });
  Session sess(g);
  Tensor xv = eye(4);
  sess.run(r, {{x, xv}, {p, bool_scalar(false)}});
  int64_t cheap = sess.last_run().nodes_executed;
  sess.run(r, {{x, xv}, {p, bool_scalar(true)}});
  int64_t heavy = sess.last_run().nodes_executed;
  EXPECT_EQ(heavy - cheap, 2);  // three matmuls instead of one neg
  EXPECT_EQ(sess.last_run().plan_steps - heavy, 1);
}

TEST(ControlCond, SeveralResultsShapesAndDtypes) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {2, 3});
  Tensor p = g.placeholder("p", Bool, {});
  auto rs = cond(
      p,
      [&] {
        return std::vector<Tensor>{sum(x, {1}), x};
      },
      [&] {
        return std::vector<Tensor>{sum(x, {0}), mul(x, 2.0)};
      });
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[0].shape(), (Shape{Dim::any()}));  // [2] vs [3]
  EXPECT_EQ(rs[1].shape(), (Shape{2, 3}));
  Session sess(g);
  Tensor xv = ones({2, 3});
  auto a = sess.run({rs[0], rs[1]}, {{x, xv}, {p, bool_scalar(true)}});
  EXPECT_EQ(a[0].shape(), (Shape{2}));
  auto b = sess.run({rs[0], rs[1]}, {{x, xv}, {p, bool_scalar(false)}});
  EXPECT_EQ(b[0].shape(), (Shape{3}));
  EXPECT_EQ(b[1].to_vector<float>()[0], 2.f);
  std::string e = expect_error([&] {
    cond(
        p, [&] { return x; }, [&] { return cast(x, Int64); });
  });
  EXPECT_NE(e.find("[cond]"), std::string::npos) << e;
  EXPECT_NE(e.find("float32"), std::string::npos) << e;
  EXPECT_NE(e.find("int64"), std::string::npos) << e;
  // A bare constant or an outside value as a branch result is still gated.
  Tensor c = cond(
      p,
      [&] {
        return ones({2, 3});
      },
      [&] { return x; });
  EXPECT_EQ(sess.run(c, {{x, xv}, {p, bool_scalar(true)}}).to_vector<float>()[0], 1.f);
  EXPECT_EQ(sess.run(c, {{x, xv * 5.0}, {p, bool_scalar(false)}}).to_vector<float>()[0], 5.f);
}

Tensor nested_f(const Tensor& x, const Tensor& y) {
  return cond(
      lt(sum(x), 0.0),
      [&] {
        return cond(
            lt(sum(y), 0.0), [&] { return mul(x, y); }, [&] { return exp(x); });
      },
      [&] { return add(tanh(x), y); });
}

TEST(ControlCond, NestedEagerGraphAndGradients) {
  std::vector<std::pair<Tensor, Tensor>> inputs = {{tensor({-1.f, -2.f}), tensor({-1.f, 0.5f})},
                                                   {tensor({-1.f, -2.f}), tensor({1.f, 0.5f})},
                                                   {tensor({1.f, 2.f}), tensor({1.f, 0.5f})}};
  Graph g;
  Tensor px = g.placeholder("x", Float32, {2}), py = g.placeholder("y", Float32, {2});
  Tensor f = nested_f(px, py);
  auto grads = gradients({sum(f)}, {px, py});
  Session sess(g);
  for (auto& [xv, yv] : inputs) {
    auto r = gradcheck([](const std::vector<Tensor>& a) { return nested_f(a[0], a[1]); }, {xv, yv});
    EXPECT_TRUE(r.ok) << r.message;
    Tensor x = xv.clone().requires_grad_(), y = yv.clone().requires_grad_();
    Tensor fe = nested_f(x, y);
    sum(fe).backward();
    auto out = sess.run({f, grads[0], grads[1]}, {{px, xv}, {py, yv}});
    EXPECT_LT(max_abs_diff(out[0], fe.detach()), 1e-6);
    EXPECT_LT(max_abs_diff(out[1], x.grad().defined() ? x.grad() : zeros({2})), 1e-6);
    EXPECT_LT(max_abs_diff(out[2], y.grad().defined() ? y.grad() : zeros({2})), 1e-6);
  }
}

TEST(ControlCond, GradcheckThroughCond) {
  auto f = [](const std::vector<Tensor>& a) { return lecture_f(a[0], a[1], a[2]); };
  for (double xv : {1.0, 3.0}) {
    auto r = gradcheck(
        f, {tensor(std::vector<double>{xv, xv + 0.5}), tensor(std::vector<double>{2.0, 2.5}),
            tensor(std::vector<double>{0.3, 0.7})});
    EXPECT_TRUE(r.ok) << r.message;
  }
}

TEST(ControlPasses, NoCseAcrossBranches) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {3});
  Tensor p = g.placeholder("p", Bool, {});
  Tensor r = cond(
      p, [&] { return add(x, x); }, [&] { return add(x, x); });
  Program prog = prune(*g.impl(), {g.value_of(r)});
  optimize(prog);
  int adds = 0;
  for (const auto& n : prog.graph->nodes)
    if (n->kind == NodeKind::Op && n->op->name == "add") ++adds;
  EXPECT_EQ(adds, 2);
  Session sess(g);
  EXPECT_EQ(sess.run(r, {{x, ones({3})}, {p, bool_scalar(false)}}).to_vector<float>()[0], 2.f);
}

TEST(ControlPasses, ConstantPredicateFoldsUntakenBranch) {
  ScopedDisablePasses off("fusion,simplify");
  for (bool pv : {true, false}) {
    Graph g;
    Tensor x = g.placeholder("x", Float32, {3});
    Tensor p = lt(g.constant(scalar_tensor(1.0)), g.constant(scalar_tensor(pv ? 2.0 : 0.0)));
    Tensor r = cond(
        p, [&] { return exp(x); }, [&] { return neg(neg(x)); });
    Program prog = prune(*g.impl(), {g.value_of(r)});
    optimize(prog);
    for (const auto& n : prog.graph->nodes)
      if (n->kind == NodeKind::Op) {
        EXPECT_NE(n->op->name, "switch");
        EXPECT_NE(n->op->name, "merge");
        EXPECT_NE(n->op->name, pv ? "neg" : "exp");
      }
    Session sess(g);
    Tensor out = sess.run(r, {{x, zeros({3})}});
    EXPECT_EQ(out.to_vector<float>()[0], pv ? 1.f : 0.f);
    EXPECT_EQ(sess.last_run().nodes_executed, pv ? 1 : 2);
  }
}

// ---- while_loop ------------------------------------------------------------------------------

// Doubles x until its sum exceeds the limit: a data-dependent trip count.
std::vector<Tensor> doubling(const Tensor& x, const Tensor& w, double limit) {
  return while_loop([&](const std::vector<Tensor>& v) { return lt(sum(v[0]), limit); },
                    [&](const std::vector<Tensor>& v) {
                      return std::vector<Tensor>{mul(v[0], w), add(v[1], 1.0)};
                    },
                    {x, zeros({}, x.dtype())});
}

TEST(ControlWhile, EagerAndGraphAgree) {
  Tensor xv = tensor({0.5f, 1.f}), wv = tensor({2.f, 2.f});
  auto e = doubling(xv, wv, 10.0);
  EXPECT_EQ(e[1].item<double>(), 3.0);  // 1.5 -> 3 -> 6 -> 12
  Graph g;
  Tensor x = g.placeholder("x", Float32, {2}), w = g.placeholder("w", Float32, {2});
  auto r = doubling(x, w, 10.0);
  Session sess(g);
  auto out = sess.run({r[0], r[1]}, {{x, xv}, {w, wv}});
  EXPECT_LT(max_abs_diff(out[0], e[0]), 1e-6);
  EXPECT_EQ(out[1].item<double>(), 3.0);
  // Another trip count without rebuilding anything.
  out = sess.run({r[0], r[1]}, {{x, tensor({4.f, 4.f})}, {w, wv}});
  EXPECT_EQ(out[1].item<double>(), 1.0);
  EXPECT_EQ(sess.plans_built(), 1u);
  EXPECT_NE(g.to_text().find("while"), std::string::npos);
}

TEST(ControlWhile, MaxIterationsAndCounter) {
  Graph g;
  Tensor n = g.placeholder("n", Int64, {});
  auto r =
      while_loop([&](const std::vector<Tensor>& v) { return lt(v[0], n); },
                 [&](const std::vector<Tensor>& v) {
                   return std::vector<Tensor>{add(v[0], scalar_tensor(1, Int64)), add(v[1], v[1])};
                 },
                 {scalar_tensor(0, Int64), ones({2})}, WhileOptions{.max_iterations = 5});
  Session sess(g);
  auto o = sess.run({r[0], r[1]}, {{n, scalar_tensor(3, Int64)}});
  EXPECT_EQ(o[0].item<int64_t>(), 3);
  EXPECT_EQ(o[1].to_vector<float>()[0], 8.f);
  o = sess.run({r[0], r[1]}, {{n, scalar_tensor(100, Int64)}});
  EXPECT_EQ(o[0].item<int64_t>(), 5);
  o = sess.run({r[0], r[1]}, {{n, scalar_tensor(0, Int64)}});
  EXPECT_EQ(o[0].item<int64_t>(), 0);
  // Eagerly too.
  auto e =
      while_loop([](const std::vector<Tensor>& v) { return lt(v[0], 100.0); },
                 [](const std::vector<Tensor>& v) { return std::vector<Tensor>{add(v[0], 1.0)}; },
                 {scalar_tensor(0.0)}, WhileOptions{.max_iterations = 7});
  EXPECT_EQ(e[0].item<double>(), 7.0);
}

// Nested loops and a cond inside a loop body, with captured outer values at every level.
Tensor nested_loops(const Tensor& x, const Tensor& a) {
  auto outer = while_loop([&](const std::vector<Tensor>& v) { return lt(v[0], 3.0); },
                          [&](const std::vector<Tensor>& v) {
                            auto inner = while_loop(
                                [&](const std::vector<Tensor>& u) { return lt(u[0], v[0]); },
                                [&](const std::vector<Tensor>& u) {
                                  Tensor h = cond(
                                      lt(sum(u[1]), 0.0), [&] { return mul(u[1], a); },
                                      [&] { return sub(tanh(u[1]), a); });
                                  return std::vector<Tensor>{add(u[0], 1.0), h};
                                },
                                {zeros({}, x.dtype()), v[1]});
                            return std::vector<Tensor>{add(v[0], 1.0), mul(inner[1], 0.9)};
                          },
                          {zeros({}, x.dtype()), x});
  return outer[1];
}

TEST(ControlWhile, NestedLoopsWithCondGradients) {
  Tensor xv = tensor({0.3f, -0.2f}), av = tensor({0.7f, 1.1f});
  auto r =
      gradcheck([](const std::vector<Tensor>& in) { return nested_loops(in[0], in[1]); }, {xv, av});
  EXPECT_TRUE(r.ok) << r.message;
  Tensor x = xv.clone().requires_grad_(), a = av.clone().requires_grad_();
  Tensor e = nested_loops(x, a);
  sum(e).backward();
  Graph g;
  Tensor px = g.placeholder("x", Float32, {2}), pa = g.placeholder("a", Float32, {2});
  Tensor f = nested_loops(px, pa);
  auto grads = gradients({sum(f)}, {px, pa});
  Session sess(g);
  auto out = sess.run({f, grads[0], grads[1]}, {{px, xv}, {pa, av}});
  EXPECT_LT(max_abs_diff(out[0], e.detach()), 1e-5);
  EXPECT_LT(max_abs_diff(out[1], x.grad()), 1e-5);
  EXPECT_LT(max_abs_diff(out[2], a.grad()), 1e-5);
}

TEST(ControlWhile, GradientsDataDependentTripCount) {
  for (float start : {0.5f, 3.f}) {
    Tensor xv = tensor({start, 1.f}), wv = tensor({1.5f, 2.f});
    auto r = gradcheck(
        [](const std::vector<Tensor>& in) { return doubling(in[0], in[1], 10.0)[0]; }, {xv, wv});
    EXPECT_TRUE(r.ok) << r.message;
    Tensor x = xv.clone().requires_grad_(), w = wv.clone().requires_grad_();
    sum(doubling(x, w, 10.0)[0]).backward();
    Graph g;
    Tensor px = g.placeholder("x", Float32, {2}), pw = g.placeholder("w", Float32, {2});
    Tensor f = doubling(px, pw, 10.0)[0];
    auto grads = gradients({sum(f)}, {px, pw});
    Session sess(g);
    auto out = sess.run({grads[0], grads[1]}, {{px, xv}, {pw, wv}});
    EXPECT_LT(max_abs_diff(out[0], x.grad()), 1e-4);
    EXPECT_LT(max_abs_diff(out[1], w.grad()), 1e-4);
  }
}

TEST(ControlWhile, LoopInsideCondSkipsWhenUntaken) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {2});
  Tensor p = g.placeholder("p", Bool, {});
  Tensor r = cond(
      p, [&] { return doubling(x, full({2}, 2.0), 100.0)[0]; }, [&] { return neg(x); });
  Session sess(g);
  EXPECT_EQ(sess.run(r, {{x, ones({2})}, {p, bool_scalar(false)}}).to_vector<float>()[0], -1.f);
  // One op per branch (the while node, or neg): exactly one step is skipped either way.
  EXPECT_EQ(sess.last_run().nodes_executed, sess.last_run().plan_steps - 1);
  EXPECT_EQ(sess.run(r, {{x, ones({2})}, {p, bool_scalar(true)}}).to_vector<float>()[0], 64.f);
  EXPECT_EQ(sess.last_run().nodes_executed, sess.last_run().plan_steps - 1);
}

TEST(ControlWhile, BadInput) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {2});
  std::string e = expect_error([&] {
    while_loop([](const std::vector<Tensor>& v) { return sum(v[0]); },
               [](const std::vector<Tensor>& v) { return v; }, {x});
  });
  EXPECT_NE(e.find("[while_loop]"), std::string::npos) << e;
  e = expect_error([&] {
    while_loop([](const std::vector<Tensor>& v) { return lt(sum(v[0]), 1.0); },
               [](const std::vector<Tensor>& v) {
                 return std::vector<Tensor>{cat({v[0], v[0]})};
               },
               {x});
  });
  EXPECT_NE(e.find("[while_loop]"), std::string::npos) << e;
  EXPECT_NE(e.find("[4]"), std::string::npos) << e;
}

}  // namespace
