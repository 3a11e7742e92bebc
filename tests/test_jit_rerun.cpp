// kiln::jit, the lecture's case 2 in full (JitOptions::host_code): host code between pieces runs
// on every call, values the host hands to the next piece are fed instead of baked (a piece
// compiles at most twice), and results equal eager throughout. Also the backward that reads
// saved activations instead of recomputing the forward, and the picture of a piecewise program.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kiln/kiln.h"
#include "test_util.h"

using namespace kiln;

namespace {

using kiln_test::max_diff;

TEST(JitRerun, HostSideEffectsRunOncePerCall) {
  std::vector<float> seen;
  int before = 0, after = 0;
  auto body = [&](const Tensor& x) {
    ++before;
    Tensor s = mul(x, 2.0);
    const float total = s.sum().item<float>();  // graph break
    seen.push_back(total);
    ++after;
    return add(s, 1.0);
  };
  auto f = jit(body);
  for (int i = 0; i < 20; ++i) {
    Tensor x = full({3}, static_cast<double>(i));
    EXPECT_LT(max_diff(f(x), add(mul(x, 2.0), 1.0)), 1e-6);
  }
  EXPECT_EQ(before, 20);
  EXPECT_EQ(after, 20);
  ASSERT_EQ(seen.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_FLOAT_EQ(seen[static_cast<size_t>(i)], 6.f * i);
  EXPECT_EQ(f.stats().reruns, 20);
}

TEST(JitRerun, FedHostValueCompilesPieceAtMostTwice) {
  // float s = x.sum().item(); return x * s: s is new on every call. Before, each value was a
  // guard and a recompile; now the second piece takes s as an input once it has changed.
  auto f = jit([](const Tensor& x) {
    const float s = x.sum().item<float>();
    return mul(tanh(x), static_cast<double>(s) * 0.5 + 1.0);
  });
  for (int i = 0; i < 1000; ++i) {
    Tensor x = full({2, 3}, 0.001 * i - 0.3);
    const double s = x.sum().item<float>();
    ASSERT_LT(max_diff(f(x), mul(tanh(x), s * 0.5 + 1.0)), 1e-5) << "call " << i;
  }
  const auto st = f.stats();
  EXPECT_LE(st.max_piece_compiles, 2) << f.explain();
  EXPECT_LE(st.piece_compiles, 3) << f.explain();  // the sum once, the product twice
  EXPECT_EQ(st.compiles, 1) << f.explain();        // one version
  EXPECT_FALSE(st.eager_fallback);
  EXPECT_NE(f.explain().find("1 host value fed as inputs"), std::string::npos) << f.explain();
  EXPECT_NE(f.explain().find("test_jit_rerun.cpp"), std::string::npos) << f.explain();
}

TEST(JitRerun, ComputedHostTensorIsFedToo) {
  // A tensor the host builds from a read value (not a scalar) is a constant of the next piece
  // that changes on every call: fed as well.
  auto f = jit([](const Tensor& x) {
    const float m = max(x).item<float>();
    Tensor bias = full({4}, static_cast<double>(m));
    return add(x, bias);
  });
  for (int i = 0; i < 50; ++i) {
    Tensor x = randn({4});
    ASSERT_LT(max_diff(f(x), add(x, max(x))), 1e-6);
  }
  EXPECT_LE(f.stats().max_piece_compiles, 2) << f.explain();
}

TEST(JitRerun, BoolReadsChooseTheBranchEveryCall) {
  int branch_a = 0, branch_b = 0;
  auto f = jit([&](const Tensor& x) {
    Tensor s = mul(x, 2.0);
    if ((s.sum() > 0).item<bool>()) {
      ++branch_a;
      return add(s, 1.0);
    }
    ++branch_b;
    return sub(mul(s, s), 1.0);
  });
  Tensor pos = tensor({1.f, 2.f}), neg = tensor({-1.f, -2.f});
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(f(pos).to_vector<float>(), (std::vector<float>{3.f, 5.f}));
    EXPECT_EQ(f(neg).to_vector<float>(), (std::vector<float>{3.f, 15.f}));
  }
  EXPECT_EQ(branch_a, 5);
  EXPECT_EQ(branch_b, 5);
  // Three structures (the head and one per branch), each compiled once.
  EXPECT_EQ(f.stats().piece_compiles, 3) << f.explain();
  EXPECT_EQ(f.stats().max_piece_compiles, 1) << f.explain();
}

TEST(JitRerun, ValueOfAnEarlierPieceIsKeptNotRedrawn) {
  // r is drawn (dropout) in the first piece and returned after the read: the result must be the
  // draw the read saw (a random draw is never recomputed), and e, which only the last piece
  // uses, is kept by the first one from its second run on.
  float seen = 0;
  auto f = jit([&](const Tensor& x) {
    Tensor r = dropout(add(x, 3.0), 0.5);
    Tensor e = exp(x);
    seen = r.sum().item<float>();
    return std::make_pair(div(e, e.sum()), r);
  });
  for (int i = 0; i < 10; ++i) {
    Tensor x = rand({64});
    auto [p, r] = f(x);
    EXPECT_LT(max_diff(p, div(exp(x), exp(x).sum())), 1e-6);
    EXPECT_NEAR(r.sum().item<float>(), seen, 1e-3);
  }
  EXPECT_FALSE(f.stats().eager_fallback) << f.explain();
  EXPECT_NE(f.explain().find("1 ops recomputed"), std::string::npos) << f.explain();
}

TEST(JitRerun, OneVersionForEveryLength) {
  auto f = jit([](const Tensor& x) {
    const double n = max(abs(x)).item<float>();
    return div(x, n + 1.0);
  });
  for (int64_t len = 3; len < 40; ++len) {
    Tensor x = randn({2, len});
    ASSERT_LT(max_diff(f(x), div(x, max(abs(x)).item<float>() + 1.0)), 1e-6);
  }
  EXPECT_EQ(f.stats().compiles, 1) << f.explain();
  EXPECT_FALSE(f.stats().eager_fallback);
}

TEST(JitRerun, ScalarArgumentsKeepOneVersionPerConstant) {
  auto f = jit([](const Tensor& x, int k) {
    const float m = max(x).item<float>();
    return mul(x, static_cast<double>(k) + m);
  });
  Tensor x = tensor({1.f, 2.f});
  for (int rep = 0; rep < 3; ++rep)
    for (int k : {1, 2, 3}) EXPECT_LT(max_diff(f(x, k), mul(x, k + 2.0)), 1e-6);
  EXPECT_EQ(f.stats().compiles, 3);  // case 1: a version per constant
}

TEST(JitRerun, RerunModeRunsHostCodeWithoutReads) {
  int calls = 0;
  auto f = jit(
      [&](const Tensor& x) {
        ++calls;
        return relu(x);
      },
      JitOptions{.host_code = JitOptions::HostCode::kRerun});
  auto g = jit([&](const Tensor& x) {
    ++calls;
    return relu(x);
  });
  Tensor x = tensor({-1.f, 1.f});
  for (int i = 0; i < 4; ++i) EXPECT_EQ(f(x).to_vector<float>(), (std::vector<float>{0.f, 1.f}));
  EXPECT_EQ(calls, 4);
  // kAuto without host reads replays: fn ran only to trace.
  for (int i = 0; i < 4; ++i) EXPECT_EQ(g(x).to_vector<float>(), (std::vector<float>{0.f, 1.f}));
  EXPECT_EQ(calls, 5);
}

TEST(JitRerun, ReplayModeKeepsTheTraceTree) {
  int host = 0;
  auto f = jit(
      [&](const Tensor& x) {
        ++host;
        return (x.sum() > 0).item<bool>() ? add(x, 1.0) : sub(x, 1.0);
      },
      JitOptions{.host_code = JitOptions::HostCode::kReplay, .heal_breaks = false});
  Tensor pos = tensor({1.f}), neg = tensor({-1.f});
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(f(pos).to_vector<float>(), (std::vector<float>{2.f}));
    EXPECT_EQ(f(neg).to_vector<float>(), (std::vector<float>{-2.f}));
  }
  EXPECT_EQ(host, 2);  // traced once per branch, replayed since
  EXPECT_NE(f.explain().find("[if 1]"), std::string::npos) << f.explain();
}

TEST(JitRerun, ErrorInHostCodeLeavesNoState) {
  int calls = 0;
  auto f = jit([&](const Tensor& x) {
    ++calls;
    const float s = x.sum().item<float>();
    if (s > 100) fail("test", "too large: ", s);
    return mul(x, static_cast<double>(s));
  });
  Tensor small = tensor({1.f, 2.f}), big = tensor({100.f, 200.f});
  EXPECT_LT(max_diff(f(small), mul(small, 3.0)), 1e-6);
  EXPECT_THROW(f(big), Error);
  EXPECT_LT(max_diff(f(small), mul(small, 3.0)), 1e-6);
}

// The gradient of a jitted forward whose backward reads saved activations equals the one that
// recomputes the forward, and eager, with random draws (dropout) included.
TEST(JitSaved, BackwardFedSavedActivationsEqualsRecomputeAndEager) {
  manual_seed(3);
  Tensor w1 = mul(randn({6, 8}), 0.3), b1 = zeros({8}), w2 = mul(randn({8, 3}), 0.3);
  auto fwd = [](const Tensor& x, const Tensor& a, const Tensor& b, const Tensor& c) {
    Tensor h = dropout(tanh(add(matmul(x, a), b)), 0.25);
    return sum(mul(gelu(matmul(h, c)), matmul(h, c)));
  };
  auto saving = jit(fwd);
  auto recomputing = jit(fwd, JitOptions{.save_activations = false});
  auto grads = [&](auto&& f, const Tensor& x, uint64_t seed) {
    std::vector<Tensor> ps;
    for (const Tensor& t : {w1, b1, w2}) ps.push_back(t.detach().requires_grad_());
    manual_seed(seed);
    Tensor l = f(x, ps[0], ps[1], ps[2]);
    std::vector<Tensor> g = grad({l}, ps);
    g.push_back(l.detach());
    return g;
  };
  for (int step = 0; step < 4; ++step) {
    Tensor x = randn({5, 6});
    auto gs = grads(saving, x, 100 + step);
    auto gr = grads(recomputing, x, 100 + step);
    auto ge = grads(fwd, x, 100 + step);
    for (size_t k = 0; k < gs.size(); ++k) {
      EXPECT_LT(max_diff(gs[k], gr[k]), 1e-5) << "step " << step << " grad " << k;
      EXPECT_LT(max_diff(gs[k], ge[k]), 1e-4) << "step " << step << " grad " << k;
    }
  }
  EXPECT_NE(saving.explain().find("fed the saved activations"), std::string::npos)
      << saving.explain();
  EXPECT_NE(recomputing.explain().find("forward recomputed"), std::string::npos)
      << recomputing.explain();
  EXPECT_FALSE(saving.stats().eager_fallback);
}

TEST(JitPicture, MermaidShowsPiecesBreaksAndGuards) {
  auto rerun = jit([](const Tensor& x) {
    Tensor s = mul(x, 2.0);
    if ((s.sum() > 0).item<bool>()) return add(s, 1.0);
    return sub(mul(s, s), 1.0);
  });
  auto tree = jit(
      [](const Tensor& x) {
        Tensor s = mul(x, 2.0);
        if ((s.sum() > 0).item<bool>()) return add(s, 1.0);
        return sub(mul(s, s), 1.0);
      },
      JitOptions{.name = "tree", .host_code = JitOptions::HostCode::kReplay, .heal_breaks = false});
  for (const Tensor& x : {tensor({1.f}), tensor({-1.f})}) {
    rerun(x);
    tree(x);
  }
  const std::string a = rerun.to_mermaid(), b = tree.to_mermaid();
  EXPECT_EQ(a.rfind("flowchart TD", 0), 0u) << a;
  EXPECT_NE(a.find("host code reruns on every call"), std::string::npos) << a;
  EXPECT_NE(a.find("host code after"), std::string::npos) << a;
  EXPECT_NE(a.find("test_jit_rerun.cpp"), std::string::npos) << a;
  EXPECT_NE(a.find("v0_p2"), std::string::npos) << a;  // head + one piece per branch
  EXPECT_NE(b.find("item() at"), std::string::npos) << b;
  EXPECT_NE(b.find("-->|\"1\"|"), std::string::npos) << b;
  EXPECT_NE(b.find("-->|\"0\"|"), std::string::npos) << b;
  EXPECT_NE(b.find("--> result"), std::string::npos) << b;
}

}  // namespace
