// kiln::jit healing graph breaks (JitOptions::heal_breaks): a trace tree whose bool guards have
// been traced both ways is joined into one graph with Switch/Merge. The healed function equals
// the unhealed tree and eager in values and gradients, replays with no host read at the break,
// and stays a tree where a guard is not a bool seen both ways or the branches cannot merge.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "test_util.h"

using namespace kiln;

namespace {

using kiln_test::max_diff;

bool has(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

JitOptions replay_opts(bool heal) {
  return JitOptions{.name = heal ? "healed" : "tree",
                    .host_code = JitOptions::HostCode::kReplay,
                    .heal_breaks = heal};
}

// The lecture's case 2 with a data-dependent branch: static, a bool read, static again.
Tensor branchy(const Tensor& x, const Tensor& w) {
  Tensor h = matmul(x, w);
  if ((h.sum() > 0).item<bool>()) return relu(h) * 2.0 + 1.0;
  return tanh(h) - h * h;
}

TEST(JitHeal, BothWaysTracedBecomesOneGraphEqualToTreeAndEager) {
  int host = 0;
  auto body = [&](const Tensor& x, const Tensor& w) {
    ++host;
    return branchy(x, w);
  };
  auto healed = jit(body, replay_opts(true));
  auto tree = jit(body, replay_opts(false));
  Tensor w = abs(randn({4, 3}));  // pos @ w > 0, -pos @ w < 0
  Tensor pos = abs(randn({5, 4}));
  std::vector<Tensor> xs;
  for (int i = 0; i < 12; ++i) xs.push_back(randn({5, 4}));
  xs.push_back(pos);
  xs.push_back(mul(pos, -1.0));
  int seen_true = 0, seen_false = 0;
  for (const Tensor& x : xs) {
    const bool taken = (matmul(x, w).sum() > 0).item<bool>();
    (taken ? seen_true : seen_false) += 1;
    Tensor ref = branchy(x, w);
    EXPECT_LT(max_diff(healed(x, w), ref), 1e-5);
    EXPECT_LT(max_diff(tree(x, w), ref), 1e-5);
  }
  ASSERT_GT(seen_true, 0);
  ASSERT_GT(seen_false, 0);
  const auto hs = healed.stats(), ts = tree.stats();
  EXPECT_EQ(hs.healed, 1) << healed.explain();
  EXPECT_EQ(ts.healed, 0) << tree.explain();
  EXPECT_EQ(hs.compiles, 2) << healed.explain();  // one trace per branch, then no more
  // After healing the version is one piece: no guard left to read on the host.
  const std::string e = healed.explain();
  EXPECT_TRUE(has(e, "healed: item() at")) << e;
  EXPECT_TRUE(has(e, "test_jit_heal.cpp")) << e;
  EXPECT_FALSE(has(e, "then guard on")) << e;
  EXPECT_TRUE(has(tree.explain(), "then guard on")) << tree.explain();
  const std::string m = healed.to_mermaid();
  EXPECT_TRUE(has(m, "Switch on item() at")) << m;
  EXPECT_TRUE(has(m, "Merge")) << m;
  // Many more calls on either side: no trace, no recompile, equal to eager.
  const int before = host;
  for (int i = 0; i < 20; ++i) {
    Tensor x = i % 2 ? pos : mul(pos, -1.0);
    EXPECT_LT(max_diff(healed(x, w), branchy(x, w)), 1e-5);
  }
  EXPECT_EQ(host, before) << "a healed replay runs no host code";
  EXPECT_EQ(healed.stats().compiles, 2);
}

TEST(JitHeal, GradientsThroughTheHealedBranchEqualEager) {
  // Calls that record gradients trace (kReplay) under every host_code mode: the default here.
  auto loss_fn = [](const Tensor& x, const Tensor& w) {
    Tensor h = matmul(x, w);
    if ((h.sum() > 0).item<bool>()) return (relu(h) * h).sum();
    return (exp(h * 0.1) * w.sum()).sum();
  };
  auto healed = jit(loss_fn);
  auto unhealed = jit(loss_fn, JitOptions{.name = "unhealed", .heal_breaks = false});
  Tensor w0 = randn({3, 2});
  Tensor x_pos = abs(randn({4, 3})), x_neg = mul(x_pos, -1.0);
  w0 = abs(w0);  // x_pos @ w0 > 0, x_neg @ w0 < 0
  auto grads_of = [&](auto& f, const Tensor& x) {
    Tensor w = w0.clone().requires_grad_(true);
    Tensor xx = x.clone().requires_grad_(true);
    Tensor l = f(xx, w);
    l.backward();
    return std::vector<Tensor>{l.detach(), xx.grad(), w.grad()};
  };
  auto eager = [&](const Tensor& x, const Tensor& w) { return loss_fn(x, w); };
  for (int round = 0; round < 3; ++round)
    for (const Tensor& x : {x_pos, x_neg}) {
      auto r = grads_of(eager, x);
      auto h = grads_of(healed, x);
      auto u = grads_of(unhealed, x);
      for (size_t k = 0; k < 3; ++k) {
        EXPECT_LT(max_diff(h[k], r[k]), 1e-4) << "round " << round << " output " << k;
        EXPECT_LT(max_diff(u[k], r[k]), 1e-6) << "round " << round << " output " << k;
      }
    }
  const auto st = healed.stats();
  EXPECT_EQ(st.healed, 1) << healed.explain();
  EXPECT_EQ(st.compiles, 2) << healed.explain();
  const std::string e = healed.explain();
  EXPECT_TRUE(has(e, "compiled backward graph fed the saved activations")) << e;
  EXPECT_FALSE(has(e, "until its breaks heal")) << e;
  EXPECT_EQ(unhealed.stats().healed, 0);
  EXPECT_TRUE(has(unhealed.explain(), "runs eagerly (graph break under autograd)"))
      << unhealed.explain();
}

TEST(JitHeal, WeightReadByOneBranchGetsAZeroGradientOnTheOther) {
  // w_pos is read only on the true side, w_neg only on the false side: in the healed graph the
  // untaken side's saved values and gradient are dead, and the gradient is zero (eager leaves
  // it undefined: the weight was not used).
  auto loss_fn = [](const Tensor& x, const Tensor& w_pos, const Tensor& w_neg) {
    if ((x.sum() > 0).item<bool>()) return sigmoid(matmul(x, w_pos)).sum();
    return (tanh(matmul(x, w_neg)) * 3.0).sum();
  };
  auto f = jit(loss_fn);
  Tensor wp0 = randn({3, 2}), wn0 = randn({3, 2});
  auto run = [&](auto& fn, const Tensor& x) {
    Tensor wp = wp0.clone().requires_grad_(true), wn = wn0.clone().requires_grad_(true);
    Tensor l = fn(x, wp, wn);
    l.backward();
    auto g = [](const Tensor& w) { return w.grad().defined() ? w.grad() : zeros_like(w); };
    return std::vector<Tensor>{l.detach(), g(wp), g(wn)};
  };
  Tensor pos = full({4, 3}, 0.5), neg = full({4, 3}, -0.5);
  for (int round = 0; round < 3; ++round)
    for (const Tensor& x : {pos, neg}) {
      auto r = run(loss_fn, x);
      auto j = run(f, x);
      for (size_t k = 0; k < 3; ++k) EXPECT_LT(max_diff(j[k], r[k]), 1e-5) << round << " " << k;
    }
  EXPECT_EQ(f.stats().healed, 1) << f.explain();
  EXPECT_TRUE(has(f.explain(), "fed the saved activations")) << f.explain();
}

TEST(JitHeal, NestedBoolBreaksHealOnceEveryBranchIsSeen) {
  auto f = [](const Tensor& x) {
    if ((x.sum() > 0).item<bool>()) {
      Tensor y = x * 3.0;
      if ((max(y) > 6.0).item<bool>()) return y - 6.0;
      return y + 1.0;
    }
    return x * x;
  };
  auto g = jit(f, replay_opts(true));
  Tensor a = tensor({1.f, 3.f}), b = tensor({1.f, 1.f}), c = tensor({-1.f, -2.f});
  EXPECT_LT(max_diff(g(a), f(a)), 1e-6);
  EXPECT_LT(max_diff(g(b), f(b)), 1e-6);
  EXPECT_EQ(g.stats().healed, 0) << g.explain();  // the outer guard is seen one way only
  EXPECT_LT(max_diff(g(c), f(c)), 1e-6);
  EXPECT_EQ(g.stats().healed, 2) << g.explain();
  const int compiles = static_cast<int>(g.stats().compiles);
  for (int i = 0; i < 4; ++i)
    for (const Tensor& x : {a, b, c, tensor({2.f, 2.5f})}) EXPECT_LT(max_diff(g(x), f(x)), 1e-6);
  EXPECT_EQ(g.stats().compiles, compiles);
}

TEST(JitHeal, NumberGuardsAndOneWayBranchesStayBreaks) {
  // A guard on a number (one branch per value) is not a bool choice: not healed.
  auto by_value = jit(
      [](const Tensor& x) {
        const float s = x.sum().item<float>();
        return x * static_cast<double>(s);
      },
      replay_opts(true));
  by_value(tensor({1.f}));
  by_value(tensor({2.f}));
  EXPECT_EQ(by_value.stats().healed, 0) << by_value.explain();
  EXPECT_TRUE(has(by_value.explain(), "then guard on")) << by_value.explain();
  // A bool seen one way only stays a guard.
  auto one_way = jit([](const Tensor& x) { return (x.sum() > 0).item<bool>() ? x + 1.0 : x - 1.0; },
                     replay_opts(true));
  for (int i = 1; i < 4; ++i) one_way(full({2}, static_cast<double>(i)));
  EXPECT_EQ(one_way.stats().healed, 0);
  EXPECT_TRUE(has(one_way.explain(), "then guard on")) << one_way.explain();
}

TEST(JitHeal, BranchesThatCannotMergeKeepTheTree) {
  // The branches return different dtypes: cond refuses, the tree stays and stays right.
  auto f = [](const Tensor& x) {
    if ((x.sum() > 0).item<bool>()) return argmax(x, 0);
    return x * 2.0;
  };
  auto g = jit(f, replay_opts(true));
  Tensor p = tensor({1.f, 5.f, 2.f}), n = tensor({-1.f, -5.f, -2.f});
  for (int i = 0; i < 2; ++i) {
    EXPECT_LT(max_diff(g(p), f(p)), 1e-9);
    EXPECT_LT(max_diff(g(n), f(n)), 1e-9);
  }
  EXPECT_EQ(g.stats().healed, 0);
  const std::string e = g.explain();
  EXPECT_TRUE(has(e, "not healed")) << e;
  EXPECT_TRUE(has(e, "then guard on")) << e;
}

}  // namespace
