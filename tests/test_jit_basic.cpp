// kiln::jit: guards and constant specialization (lecture case 1), graph breaks and the trace
// tree (case 2), dynamic dims, the recompile budget, verify mode, explain(), autodiff through
// the compiled backward, and a jitted training step equal to eager.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.h"
#include "kiln/optim/optim.h"
#include "test_util.h"

using namespace kiln;

namespace {

using kiln_test::max_diff;

TEST(Jit, ConstantSpecialization) {
  auto f = jit([](const Tensor& x, int c) { return mul(relu(x), static_cast<double>(c)); });
  Tensor x = tensor({-1.f, 2.f, 3.f});
  for (int c : {1, 2, 3})
    EXPECT_EQ(f(x, c).to_vector<float>(), (std::vector<float>{0.f, 2.f * c, 3.f * c}));
  EXPECT_EQ(f.stats().compiles, 3);
  // A constant seen before compiles nothing.
  EXPECT_EQ(f(x, 2).to_vector<float>(), (std::vector<float>{0.f, 4.f, 6.f}));
  EXPECT_EQ(f.stats().compiles, 3);
  EXPECT_EQ(f.stats().hits, 1);
  EXPECT_NE(f.explain().find("arg 1 value: expected"), std::string::npos) << f.explain();
}

TEST(Jit, RuntimeScalarIsOneVersion) {
  auto f = jit([](const Tensor& x, const Tensor& c) { return mul(x, c); },
               JitOptions{.runtime_scalars = {1}});
  Tensor x = tensor({1.f, 2.f});
  for (double c : {1.0, 2.5, -3.0})
    EXPECT_EQ(f(x, c).to_vector<float>(), (std::vector<float>{float(c), float(2 * c)}));
  EXPECT_EQ(f.stats().compiles, 1);
}

TEST(Jit, GraphBreakBuildsTraceTree) {
  // static -> dynamic (host read) -> static: the lecture's case 2, replayed as a trace tree
  // (test_jit_rerun.cpp has the default, where the host code reruns).
  auto f = jit(
      [](const Tensor& x) {
        Tensor s = mul(x, 2.0);
        if ((s.sum() > 0).item<bool>()) return add(s, 1.0);
        return sub(mul(s, s), 1.0);
      },
      JitOptions{.host_code = JitOptions::HostCode::kReplay, .heal_breaks = false});
  Tensor pos = tensor({1.f, 2.f}), neg = tensor({-1.f, -2.f});
  EXPECT_EQ(f(pos).to_vector<float>(), (std::vector<float>{3.f, 5.f}));
  EXPECT_EQ(f(neg).to_vector<float>(), (std::vector<float>{3.f, 15.f}));
  auto warm = f.stats();
  EXPECT_EQ(warm.compiles, 2);  // one per branch of the tree
  EXPECT_EQ(warm.pieces, 3);    // shared first piece + two second pieces
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(f(pos).to_vector<float>(), (std::vector<float>{3.f, 5.f}));
    EXPECT_EQ(f(neg).to_vector<float>(), (std::vector<float>{3.f, 15.f}));
    EXPECT_EQ(f(tensor({5.f, -1.f})).to_vector<float>(), (std::vector<float>{11.f, -1.f}));
  }
  EXPECT_EQ(f.stats().compiles, 2);  // no retrace after warm-up
  std::string e = f.explain();
  EXPECT_NE(e.find("test_jit_basic.cpp"), std::string::npos) << e;
  EXPECT_NE(e.find("item() of a traced value -> graph break"), std::string::npos) << e;
  EXPECT_NE(e.find("[if 1]"), std::string::npos) << e;
  EXPECT_NE(e.find("[if 0]"), std::string::npos) << e;
}

TEST(Jit, DynamicDimsCompileAtMostTwice) {
  auto f = jit([](const Tensor& x) { return sum(tanh(x), {1}); });
  for (int64_t len = 5; len <= 50; ++len) {
    Tensor x = randn({4, len});
    EXPECT_LT(max_diff(f(x), sum(tanh(x), {1})), 1e-6);
  }
  EXPECT_LE(f.stats().compiles, 2);
  EXPECT_NE(f.explain().find("arg 0 dim 1: expected 5, got 6"), std::string::npos) << f.explain();
}

TEST(Jit, BudgetFallsBackToEagerOnce) {
  auto f = jit([](const Tensor& x, int c) { return add(x, static_cast<double>(c)); },
               JitOptions{.max_recompiles = 3, .name = "adder"});
  Tensor x = zeros({2});
  ::testing::internal::CaptureStderr();
  for (int c = 0; c < 10; ++c)
    EXPECT_EQ(f(x, c).to_vector<float>(), (std::vector<float>{float(c), float(c)}));
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(f.stats().eager_fallback);
  EXPECT_EQ(f.stats().compiles, 4);
  size_t first = err.find("recompile budget (3) exhausted");
  EXPECT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find("recompile budget", first + 1), std::string::npos) << "said more than once";
  EXPECT_NE(f.explain().find("running eagerly"), std::string::npos);
}

TEST(Jit, VerifyModeCatchesImpureFunction) {
  setenv("KILN_JIT_VERIFY", "1", 1);
  int calls = 0;
  // Host state that changes between calls: the compiled plan bakes in the traced value.
  auto f = jit([&calls](const Tensor& x) { return add(x, static_cast<double>(++calls)); });
  unsetenv("KILN_JIT_VERIFY");
  Tensor x = zeros({2});
  ::testing::internal::CaptureStderr();
  f(x);
  f(x);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_GE(f.stats().verify_mismatches, 1);
  EXPECT_NE(err.find("KILN_JIT_VERIFY mismatch"), std::string::npos) << err;
}

TEST(Jit, PrintRunsOnEveryReplay) {
  auto f = jit([](const Tensor& x) { return mul(print(x, "seen"), 2.0); });
  ::testing::internal::CaptureStdout();
  f(tensor({1.f}));
  f(tensor({2.f}));
  f(tensor({3.f}));
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("seen tensor([2.])"), std::string::npos) << out;
  EXPECT_NE(out.find("seen tensor([3.])"), std::string::npos) << out;
}

TEST(Jit, BackwardThroughCompiledGraph) {
  auto f = jit([](const Tensor& x, const Tensor& w) { return mean(tanh(matmul(x, w))); });
  manual_seed(7);
  Tensor x = randn({4, 3}), w0 = randn({3, 2});
  Tensor w = w0.clone().requires_grad_();
  Tensor y = f(x, w);
  y.backward();
  Tensor we = w0.clone().requires_grad_();
  mean(tanh(matmul(x, we))).backward();
  EXPECT_LT(max_diff(y, mean(tanh(matmul(x, w0)))), 1e-6);
  EXPECT_LT(max_diff(w.grad(), we.grad()), 1e-6);
  EXPECT_NE(f.explain().find("compiled backward graph"), std::string::npos);
  // gradcheck through the jitted function (float64).
  auto r = gradcheck([&](const std::vector<Tensor>& a) { return f(a[0], a[1]); },
                     {randn({2, 3}, Float64), randn({3, 2}, Float64)});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Jit, TrainingStepEqualsEager) {
  // One SGD step written once: grad() gives autograd eagerly and gradients() under jit.
  auto step = [](const Tensor& w_in, const Tensor& b_in, const Tensor& x, const Tensor& y) {
    Tensor w = w_in.detach().requires_grad_(), b = b_in.detach().requires_grad_();
    Tensor logits = add(matmul(x, w), b);
    Tensor loss = cross_entropy(logits, y);
    auto g = grad({loss}, {w, b});
    return std::make_tuple(sub(w_in, mul(g[0], 0.5)), sub(b_in, mul(g[1], 0.5)), loss.detach());
  };
  auto jstep = jit(step);
  manual_seed(8);
  Tensor x = randn({16, 5}), y = randint(0, 3, {16});
  Tensor we = zeros({5, 3}), be = zeros({3}), wj = we, bj = be;
  for (int i = 0; i < 20; ++i) {
    auto [w1, b1, l1] = step(we, be, x, y);
    auto [w2, b2, l2] = jstep(wj, bj, x, y);
    EXPECT_LT(std::fabs(l1.item<double>() - l2.item<double>()),
              1e-5 * (1 + std::fabs(l1.item<double>())));
    we = w1.detach(), be = b1.detach(), wj = w2, bj = b2;
  }
  EXPECT_LT(max_diff(we, wj), 1e-5);
  EXPECT_LT(max_diff(be, bj), 1e-5);
  EXPECT_EQ(jstep.stats().compiles, 1);
}

TEST(Jit, VectorAndTupleResults) {
  auto f = jit([](const std::vector<Tensor>& xs) {
    std::vector<Tensor> r;
    for (const auto& x : xs) r.push_back(exp(x));
    return r;
  });
  auto r = f(std::vector<Tensor>{zeros({2}), ones({1})});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_FLOAT_EQ(r[1].item<float>(), std::exp(1.f));
}

TEST(Jit, GuardCheckReportsFailedGuard) {
  auto f = jit([](const Tensor& x) { return relu(x); }, JitOptions{.dynamic_dims = false});
  f(zeros({2, 32}));
  f(zeros({2, 48}));
  EXPECT_NE(f.explain().find("arg 0 dim 1: expected 32, got 48"), std::string::npos) << f.explain();
  f(zeros({2, 32}, Float64));
  EXPECT_NE(f.explain().find("dtype: expected float32, got float64"), std::string::npos)
      << f.explain();
}

}  // namespace

namespace {
TEST(Jit, CondIsOneGraphWithoutBreaks) {
  auto f = jit([](const Tensor& a, const Tensor& b, const Tensor& c) {
    return cond(
        lt(a, b), [&] { return add(a, c); }, [&] { return mul(b, b); });
  });
  Tensor z = scalar_tensor(3.f);
  EXPECT_FLOAT_EQ(f(scalar_tensor(1.f), scalar_tensor(2.f), z).item<float>(), 4.f);
  EXPECT_FLOAT_EQ(f(scalar_tensor(4.f), scalar_tensor(2.f), z).item<float>(), 4.f);
  EXPECT_FLOAT_EQ(f(scalar_tensor(5.f), scalar_tensor(3.f), z).item<float>(), 9.f);
  EXPECT_EQ(f.stats().compiles, 1);
  EXPECT_EQ(f.stats().graph_breaks, 0);
}
}  // namespace

namespace {
// The lecture's x < y ? x + z : y * y under jit (as one graph with Switch/Merge): values and
// gradients equal eager on both branches.
TEST(Jit, LectureCondGradientsMatchEager) {
  auto f = [](const Tensor& a, const Tensor& b, const Tensor& c) {
    return cond(
        lt(a, b), [&] { return add(a, c); }, [&] { return mul(b, b); });
  };
  auto jf = jit(f);
  for (auto [xv, yv] : {std::pair{1.0, 2.0}, std::pair{4.0, 2.0}}) {
    std::vector<Tensor> e = {scalar_tensor(xv).requires_grad_(), scalar_tensor(yv).requires_grad_(),
                             scalar_tensor(3.0).requires_grad_()};
    std::vector<Tensor> j = {scalar_tensor(xv).requires_grad_(), scalar_tensor(yv).requires_grad_(),
                             scalar_tensor(3.0).requires_grad_()};
    Tensor ye = f(e[0], e[1], e[2]);
    Tensor yj = jf(j[0], j[1], j[2]);
    EXPECT_FLOAT_EQ(ye.item<float>(), yj.item<float>());
    ye.backward();
    yj.backward();
    for (int k = 0; k < 3; ++k) {
      float ge = e[k].grad().defined() ? e[k].grad().item<float>() : 0.f;
      float gj = j[k].grad().defined() ? j[k].grad().item<float>() : 0.f;
      EXPECT_FLOAT_EQ(ge, gj) << "input " << k << " at x=" << xv;
    }
  }
}
}  // namespace

namespace {

// An SGD step with its parameters donated: the weights' updates (addmm onto the old weight)
// and the biases' come back in the donated buffers once the plan is bound, with the numbers
// of the same step undonated.
TEST(Jit, DonatedParametersAreUpdatedInTheirBuffers) {
  auto step = [](const std::vector<Tensor>& prm, const Tensor& x, const Tensor& y) {
    std::vector<Tensor> q;
    for (const auto& t : prm) q.push_back(t.detach().requires_grad_());
    Tensor l = cross_entropy(linear(relu(linear(x, q[0], q[1])), q[2], q[3]), y);
    std::vector<Tensor> gs = grad({l}, q);
    std::vector<Tensor> out;
    for (size_t i = 0; i < prm.size(); ++i) out.push_back(sub(prm[i], mul(gs[i], 0.1)));
    out.push_back(l.detach());
    return out;
  };
  manual_seed(31);
  std::vector<Tensor> init = {mul(randn({16, 8}), 0.3), zeros({16}), mul(randn({3, 16}), 0.3),
                              zeros({3})};
  Tensor x = randn({10, 8}), y = randint(0, 3, {10});
  auto plain = jit(step);
  auto donating = jit(step, JitOptions{.donate = {0}});
  std::vector<Tensor> p1, p2;
  for (const auto& t : init) {
    p1.push_back(t.clone());
    p2.push_back(t.clone());
  }
  int in_place = 0;
  for (int it = 0; it < 6; ++it) {
    auto r1 = plain(p1, x, y);
    auto r2 = donating(p2, x, y);
    EXPECT_NEAR(r1.back().item<float>(), r2.back().item<float>(), 1e-6) << "step " << it;
    for (size_t i = 0; i < p2.size(); ++i) {
      EXPECT_LT(max_diff(r1[i], r2[i]), 1e-6) << "step " << it << " param " << i;
      in_place += r2[i].shares_storage(p2[i]);
      p1[i] = r1[i];
      p2[i] = r2[i];
    }
  }
  // Both weights' addmm write into their donated buffers on every replay after the first call
  // (which traces and plans); the biases' fused updates (generated kernels) get fresh buffers.
  EXPECT_EQ(in_place, 2 * 5);
  EXPECT_EQ(donating.stats().compiles, 1);
}

// Donation never applies to calls that record gradients (the backward reads the inputs) or
// under KILN_JIT_VERIFY (the eager reference reads them after the run), and its positions must
// name tensor arguments.
TEST(Jit, DonationSkipsGradientRecordingCallsAndChecksPositions) {
  auto f =
      jit([](const Tensor& a, const Tensor& b) { return mul(a, b); }, JitOptions{.donate = {0}});
  Tensor a = tensor({1.f, 2.f, 3.f}).requires_grad_(), b = tensor({4.f, 5.f, 6.f});
  for (int it = 0; it < 4; ++it) {
    Tensor y = f(a, b);
    EXPECT_FALSE(y.shares_storage(a));
    EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1.f, 2.f, 3.f}));
    sum(y).backward();
  }
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{16.f, 20.f, 24.f}));
  auto g = jit([](const Tensor& a, double s) { return mul(a, s); }, JitOptions{.donate = {1}});
  kiln_test::expect_error([&] { (void)g(tensor({1.f}), 2.0); }, {"jit", "donate position 1"});
  auto h = jit([](const Tensor& a) { return neg(a); }, JitOptions{.donate = {3}});
  kiln_test::expect_error([&] { (void)h(tensor({1.f})); }, {"jit", "donate position 3"});
}

}  // namespace
