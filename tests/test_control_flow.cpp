// Control flow as dataflow: switch/merge deadness eagerly (dead tensors) and in the executor
// (executed-node counts prove the untaken branch did not run), the lecture's example with
// Switch/Merge directly in all three modes (eager, Session, jit), cond and while_loop eagerly
// and in graphs, nested, with gradients (eager gradcheck and graph gradients() against eager),
// passes (CSE, constant predicates).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "kiln/dispatch/dispatch.h"
#include "kiln/graph/node.h"
#include "kiln/kiln.h"
#include "kiln/passes/passes.h"
#include "test_util.h"

using namespace kiln::detail;

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

// Eagerly the untaken side of a switch is a dead tensor: defined, with data's dtype and shape,
// no storage. Ops on it run no kernel and give dead tensors; merge forwards the live input.
TEST(ControlSwitchMerge, EagerDeadTensors) {
  Tensor x = tensor({1.f, 2.f});
  auto s = switch_(x, bool_scalar(true));
  ASSERT_TRUE(s[0].defined());
  EXPECT_TRUE(s[0].is_dead());
  EXPECT_FALSE(s[0].is_concrete());
  EXPECT_FALSE(s[0].is_symbolic());
  EXPECT_EQ(s[0].shape(), x.shape());
  EXPECT_EQ(s[0].dtype(), Float32);
  EXPECT_TRUE(s[1].is_same(x));
  EXPECT_FALSE(s[1].is_dead());
  EXPECT_FALSE(x.is_dead());
  EXPECT_FALSE(Tensor().is_dead());
  auto m = merge({s[0], s[1]});
  EXPECT_TRUE(m[0].is_same(x));
  EXPECT_EQ(m[1].item<int64_t>(), 1);
  auto s2 = switch_(x, bool_scalar(false));
  EXPECT_TRUE(s2[0].is_same(x));
  EXPECT_TRUE(s2[1].is_dead());
  EXPECT_EQ(merge({s2[0], s2[1]})[1].item<int64_t>(), 0);

  // An op on a dead tensor: no kernel runs, the outputs are dead and shaped by inference.
  const uint64_t ops_before = eager_op_count();
  Tensor d = exp(exp(s[0]));
  Tensor e = add(x, s[0]);
  Tensor r = sum(matmul(reshape(s[0], {2, 1}), ones({1, 3})), {0});
  EXPECT_EQ(eager_op_count(), ops_before);
  EXPECT_TRUE(d.is_dead());
  EXPECT_TRUE(e.is_dead());
  EXPECT_TRUE(r.is_dead());
  EXPECT_EQ(r.shape(), Shape({3}));
  // Inference still checks a dead op's inputs, naming the op.
  EXPECT_NE(expect_error([&] { add(s[0], ones({3})); }).find("[add]"), std::string::npos);
  // Several outputs, a switch inside an untaken branch, merge of dead inputs only.
  auto sp = split(s[0], 1, 0);
  ASSERT_EQ(sp.size(), 2u);
  EXPECT_TRUE(sp[0].is_dead() && sp[1].is_dead());
  auto inner = switch_(d, bool_scalar(true));
  EXPECT_TRUE(inner[0].is_dead() && inner[1].is_dead());
  auto dm = merge({d, neg(s[0])});
  EXPECT_TRUE(dm[0].is_dead());
  EXPECT_TRUE(dm[1].is_dead());
  EXPECT_EQ(dm[0].shape(), x.shape());
  EXPECT_TRUE(merge({d, e, x})[0].is_same(x));
  EXPECT_EQ(merge({d, e, x})[1].item<int64_t>(), 2);

  // Host reads of a dead value say it is dead; printing says so.
  for (std::string msg : {expect_error([&] { (void)s[0].to_vector<float>(); }),
                          expect_error([&] { (void)sum(d).item<float>(); }),
                          expect_error([&] { (void)s[0].data_ptr<float>(); })}) {
    EXPECT_NE(msg.find("dead"), std::string::npos) << msg;
    EXPECT_NE(msg.find("not taken"), std::string::npos) << msg;
  }
  std::ostringstream os;
  os << d;
  EXPECT_NE(os.str().find("dead"), std::string::npos) << os.str();
  // Bad uses raise kiln::Error naming the op: in-place writes, backward, cond, a graph, a feed.
  Tensor y = tensor({3.f, 4.f});
  EXPECT_NE(expect_error([&] { y.add_(s[0]); }).find("[add_]"), std::string::npos);
  EXPECT_NE(expect_error([&] { d.mul_(2.0); }).find("[mul_]"), std::string::npos);
  EXPECT_NE(expect_error([&] { y.copy_(s[0]); }).find("dead"), std::string::npos);
  EXPECT_NE(expect_error([&] { sum(d).backward(); }).find("[backward]"), std::string::npos);
  EXPECT_NE(expect_error([&] {
              cond(
                  lt(sum(d), 0.0), [&] { return x; }, [&] { return x; });
            }).find("[cond]"),
            std::string::npos);
  EXPECT_NE(expect_error([&] {
              while_loop([](const std::vector<Tensor>& v) { return lt(sum(v[0]), 9.0); },
                         [](const std::vector<Tensor>& v) { return v; }, {d});
            }).find("[while_loop]"),
            std::string::npos);
  Graph g;
  Tensor ph = g.placeholder("p", Float32, {2});
  EXPECT_NE(expect_error([&] { add(ph, s[0]); }).find("[add]"), std::string::npos);
  Session sess(g);
  std::string fe = expect_error([&] { sess.run(neg(ph), {{ph, s[0]}}); });
  EXPECT_NE(fe.find("dead"), std::string::npos) << fe;
}

// An undefined (default-constructed) tensor is not a dead one: ops still refuse it by name.
TEST(ControlSwitchMerge, UndefinedStillRaises) {
  Tensor x = tensor({1.f, 2.f});
  EXPECT_NE(expect_error([&] { add(Tensor(), x); }).find("[add]"), std::string::npos);
  EXPECT_NE(expect_error([&] { neg(Tensor()); }).find("[neg]"), std::string::npos);
  EXPECT_NE(expect_error([&] { switch_(Tensor(), bool_scalar(true)); }).find("[switch]"),
            std::string::npos);
  EXPECT_NE(expect_error([&] { switch_(x, Tensor()); }).find("[switch]"), std::string::npos);
  EXPECT_NE(expect_error([&] { merge({Tensor(), x}); }).find("[merge]"), std::string::npos);
  EXPECT_NE(expect_error([&] { merge({}); }).find("[merge]"), std::string::npos);
  // A dead tensor next to an undefined one: still the undefined error.
  Tensor dead = switch_(x, bool_scalar(true))[0];
  EXPECT_NE(expect_error([&] { add(dead, Tensor()); }).find("undefined"), std::string::npos);
  EXPECT_NE(expect_error([&] { switch_(x, tensor({1.f})); }).find("[switch]"), std::string::npos);
  EXPECT_NE(expect_error([&] {
              merge({x, tensor(std::vector<int64_t>{1, 2})});
            }).find("[merge]"),
            std::string::npos);
  // Inputs disagreeing in dtype are refused also when the odd one is dead, as in a graph.
  EXPECT_NE(expect_error([&] {
              merge({switch_(tensor(std::vector<int64_t>{1, 2}), bool_scalar(true))[0], x});
            }).find("[merge]"),
            std::string::npos);
}

TEST(ControlSwitchMerge, ExecutorSkipsDeadOps) {
  // Counts kernels per op: fusion and simplification (tested on their own) would merge them.
  ScopedDisablePasses off("fuse_elementwise,simplify");
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

// The lecture's f(x, y, z) = x < y ? x + z : y * y written with Switch and Merge directly (no
// cond): each input the branches read goes through its own switch on the predicate. Returns
// {f, value_index, the add branch's result, the mul branch's result}.
std::vector<Tensor> lecture_switch_merge(const Tensor& x, const Tensor& y, const Tensor& z) {
  Tensor pred = x.dim() == 0 ? lt(x, y) : lt(sum(x), sum(y));
  auto sx = switch_(x, pred), sy = switch_(y, pred), sz = switch_(z, pred);
  Tensor t = add(sx[1], sz[1]);  // true side: x + z
  Tensor f = mul(sy[0], sy[0]);  // false side: y * y
  auto m = merge({f, t});
  return {m[0], m[1], t, f};
}

// The same function eagerly (dead tensors), as a static graph run by a Session, and under
// kiln::jit: values, value_index and gradients agree across the three, for both branches.
TEST(ControlSwitchMerge, LectureExampleEagerGraphJit) {
  struct Case {
    Tensor x, y, z;
    bool add_branch;
  };
  std::vector<Case> cases = {
      {scalar_tensor(1.0), scalar_tensor(2.0), scalar_tensor(3.0), true},
      {scalar_tensor(4.0), scalar_tensor(2.0), scalar_tensor(3.0), false},
      {tensor({1.f, 2.f, 3.f}), tensor({2.f, 2.f, 5.f}), tensor({.5f, .5f, .5f}), true},
      {tensor({4.f, 2.f, 3.f}), tensor({2.f, 2.f, 1.f}), tensor({.5f, .5f, .5f}), false}};
  auto jf = jit([](const Tensor& x, const Tensor& y, const Tensor& z) {
    return lecture_switch_merge(x, y, z)[0];
  });
  auto or_zeros = [](const Tensor& g, const Tensor& like) {
    return g.defined() ? g : zeros_like(like);
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.add_branch ? "x + z branch" : "y * y branch");
    Tensor expected = c.add_branch ? add(c.x, c.z) : mul(c.y, c.y);
    // Eager: the untaken branch's result is dead, the merge forwards the taken one.
    Tensor x = c.x.clone().requires_grad_(), y = c.y.clone().requires_grad_(),
           z = c.z.clone().requires_grad_();
    auto e = lecture_switch_merge(x, y, z);
    EXPECT_EQ(e[2].is_dead(), !c.add_branch);
    EXPECT_EQ(e[3].is_dead(), c.add_branch);
    EXPECT_FALSE(e[0].is_dead());
    EXPECT_EQ(e[1].item<int64_t>(), c.add_branch ? 1 : 0);
    EXPECT_LT(max_abs_diff(e[0].detach(), expected), 1e-6);
    sum(e[0]).backward();
    Tensor gx = or_zeros(x.grad(), c.x), gy = or_zeros(y.grad(), c.y), gz = or_zeros(z.grad(), c.z);
    // Gradients reach only the taken side.
    EXPECT_EQ(x.grad().defined(), c.add_branch);
    EXPECT_EQ(z.grad().defined(), c.add_branch);
    EXPECT_EQ(y.grad().defined(), !c.add_branch);
    EXPECT_LT(max_abs_diff(c.add_branch ? gx : gy, c.add_branch ? ones_like(c.x) : mul(c.y, 2.0)),
              1e-6);

    // Static graph.
    Graph g;
    Tensor px = g.placeholder("x", Float32, c.x.shape()),
           py = g.placeholder("y", Float32, c.y.shape()),
           pz = g.placeholder("z", Float32, c.z.shape());
    auto gr = lecture_switch_merge(px, py, pz);
    auto grads = gradients({sum(gr[0])}, {px, py, pz});
    Session sess(g);
    FeedDict feeds{{px, c.x}, {py, c.y}, {pz, c.z}};
    auto gv = sess.run({gr[0], gr[1]}, feeds);
    EXPECT_LT(max_abs_diff(gv[0], e[0].detach()), 1e-6);
    EXPECT_EQ(gv[1].item<int64_t>(), e[1].item<int64_t>());
    EXPECT_LT(sess.last_run().nodes_executed, sess.last_run().plan_steps);  // one branch ran
    auto gg = sess.run({grads[0], grads[1], grads[2]}, feeds);
    EXPECT_LT(max_abs_diff(gg[0], gx), 1e-6);
    EXPECT_LT(max_abs_diff(gg[1], gy), 1e-6);
    EXPECT_LT(max_abs_diff(gg[2], gz), 1e-6);

    // jit: no grad, then through the compiled backward.
    Tensor jv = jf(c.x, c.y, c.z);
    EXPECT_FALSE(jv.is_dead());
    EXPECT_LT(max_abs_diff(jv, e[0].detach()), 1e-6);
    Tensor jx = c.x.clone().requires_grad_(), jy = c.y.clone().requires_grad_(),
           jz = c.z.clone().requires_grad_();
    Tensor jo = jf(jx, jy, jz);
    EXPECT_LT(max_abs_diff(jo.detach(), e[0].detach()), 1e-6);
    sum(jo).backward();
    EXPECT_LT(max_abs_diff(or_zeros(jx.grad(), c.x), gx), 1e-6);
    EXPECT_LT(max_abs_diff(or_zeros(jy.grad(), c.y), gy), 1e-6);
    EXPECT_LT(max_abs_diff(or_zeros(jz.grad(), c.z), gz), 1e-6);
  }
  EXPECT_EQ(jf.stats().graph_breaks, 0);
}

// Gradients of a recorded op whose rule meets a dead tensor, and a dead gradient handed to
// backward: the engine takes dead as no gradient.
TEST(ControlSwitchMerge, EagerDeadGradientIsNoGradient) {
  Tensor x = tensor({1.f, 2.f}).requires_grad_();
  Tensor y = mul(x, 3.0);
  Tensor dead = switch_(ones({2}), bool_scalar(true))[0];
  y.backward(dead);
  EXPECT_FALSE(x.grad().defined());
  // A gradient through merge's live input only; the dead input had no history to reach.
  Tensor w = tensor({5.f, 6.f}).requires_grad_();
  auto s = switch_(w, bool_scalar(false));
  Tensor out = merge({mul(s[0], s[0]), exp(s[1])})[0];
  sum(out).backward();
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{10.f, 12.f}));
  // grad(): an input on the untaken side only gets no gradient.
  Tensor a = tensor({1.f}).requires_grad_(), b = tensor({2.f}).requires_grad_();
  auto sa = switch_(a, bool_scalar(true)), sb = switch_(b, bool_scalar(true));
  Tensor o = merge({neg(sa[0]), mul(sb[1], 4.0)})[0];
  auto gs = grad({sum(o)}, {a, b}, {}, false, false, /*allow_unused=*/true);
  EXPECT_FALSE(gs[0].defined());
  EXPECT_EQ(gs[1].to_vector<float>(), (std::vector<float>{4.f}));
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
  ScopedDisablePasses off("fuse_elementwise,simplify");
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
