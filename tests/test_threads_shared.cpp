// Concurrency: one Session and one jitted function shared by 8 threads give exactly what the
// same calls give one after another. The calls start together (a latch), on fresh objects each
// round, so that plan building, binding, tracing, compiling and the guard cache are raced as
// well as replays. Also: grad mode and tracing are per thread. Run under ThreadSanitizer by
// `make test-tsan`.
#include <gtest/gtest.h>

#include <functional>
#include <latch>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.h"

using namespace kiln;

namespace {

constexpr int kThreads = 8;
constexpr int kRounds = 3;   // fresh Session / jitted function each round
constexpr int kRepeats = 3;  // calls per thread per round

using Values = std::vector<std::vector<float>>;

Values values(const std::vector<Tensor>& ts) {
  Values v;
  for (const auto& t : ts) v.push_back(t.contiguous().to_vector<float>());
  return v;
}

// Runs body(i) on kThreads threads that start together; a kiln::Error (or any exception) in a
// thread is reported as a failure of that thread instead of terminating the process.
void run_together(const std::function<void(int)>& body) {
  std::latch start(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      try {
        body(i);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(i)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i)
    EXPECT_EQ(errors[static_cast<size_t>(i)], "") << "thread " << i << " raised";
}

// A graph with a variable, matmul, relu, softmax, reductions and a cond. Two fetch sets: {p, s}
// has no control flow (its plan is bound: one arena replayed every run), {out} has a cond (its
// plan runs generically).
struct Model {
  Graph g;
  Tensor x, p, s, out;
  Model() {
    manual_seed(11);
    x = g.placeholder("x", Float32, {Dim::any(), 16});
    Tensor w = g.variable("w", randn({16, 32}));
    Tensor b = g.variable("b", randn({32}));
    Tensor h = relu(add(matmul(x, w), b));
    p = softmax(h, -1);
    s = sum(mul(p, h), {1});
    out = cond(
        gt(sum(s), 0.0), [&] { return mul(s, 2.0); }, [&] { return sub(exp(s), 1.0); });
  }
  // Thread i's call: batch 1 + i % 4 (two threads per shape; shapes change between calls, so
  // plans are bound and rebound), fetch set by parity.
  std::vector<Tensor> fetches(int i) const {
    return i % 2 ? std::vector<Tensor>{out} : std::vector<Tensor>{p, s};
  }
};

TEST(ThreadsShared, OneSessionFromEightThreads) {
  Model m;
  std::vector<Tensor> feeds;
  for (int i = 0; i < kThreads; ++i) feeds.push_back(randn({1 + i % 4, 16}));
  // Sequential reference, twice: the first run of a plan is generic, later ones are bound.
  std::vector<Values> want(kThreads);
  {
    Session sess(m.g);
    for (int rep = 0; rep < 2; ++rep)
      for (int i = 0; i < kThreads; ++i) {
        Values v = values(sess.run(m.fetches(i), {{m.x, feeds[static_cast<size_t>(i)]}}));
        if (rep == 0)
          want[static_cast<size_t>(i)] = v;
        else
          ASSERT_EQ(v, want[static_cast<size_t>(i)]) << "sequential run " << i << " changed";
      }
  }
  for (int round = 0; round < kRounds; ++round) {
    Session sess(m.g);
    std::vector<std::vector<Values>> got(kThreads);
    run_together([&](int i) {
      for (int r = 0; r < kRepeats; ++r)
        got[static_cast<size_t>(i)].push_back(
            values(sess.run(m.fetches(i), {{m.x, feeds[static_cast<size_t>(i)]}})));
    });
    for (int i = 0; i < kThreads; ++i)
      for (const Values& v : got[static_cast<size_t>(i)])
        EXPECT_EQ(v, want[static_cast<size_t>(i)]) << "round " << round << ", thread " << i;
    EXPECT_EQ(sess.plans_built(), 2u);
    // Reading variables while nobody runs is unaffected by the concurrent runs.
    Session fresh(m.g);
    EXPECT_EQ(sess.variable("w").to_vector<float>(), fresh.variable("w").to_vector<float>());
  }
}

// f has a matmul, relu, softmax and a reduction; batch sizes differ between threads (a static
// version, then a recompile with the batch dim dynamic) and a constant scalar argument gives
// one version per value, so the guard cache is written while other threads read it.
Tensor model_fn(const Tensor& x, const Tensor& w, int k) {
  Tensor h = relu(matmul(x, w));
  return mul(sum(mul(softmax(h, -1), h), {1}), static_cast<double>(k));
}

// A graph break (a host read of a traced value): the host code reruns on every call, with a
// compiled piece before the read and one per branch after it.
Tensor branchy_fn(const Tensor& x) {
  Tensor s = mul(x, 2.0);
  if ((sum(s) > 0).item<bool>()) return add(s, 1.0);
  return sub(mul(s, s), 1.0);
}

TEST(ThreadsShared, OneJitFunctionFromEightThreads) {
  manual_seed(12);
  Tensor w = randn({16, 8});
  std::vector<Tensor> xs, bs;
  for (int i = 0; i < kThreads; ++i) {
    xs.push_back(randn({1 + i, 16}));
    bs.push_back(mul(randn({3}), i % 2 ? 1.0 : -1.0));  // both branches of branchy_fn
  }
  auto k_of = [](int i) { return 1 + i % 3; };
  std::vector<Values> want(kThreads), want_b(kThreads);
  {
    auto f = jit(model_fn);
    auto fb = jit(branchy_fn);
    for (int i = 0; i < kThreads; ++i) {
      want[static_cast<size_t>(i)] = values({f(xs[static_cast<size_t>(i)], w, k_of(i))});
      want_b[static_cast<size_t>(i)] = values({fb(bs[static_cast<size_t>(i)])});
    }
    ASSERT_FALSE(f.stats().eager_fallback) << f.explain();
  }
  for (int round = 0; round < kRounds; ++round) {
    auto f = jit(model_fn);
    auto fb = jit(branchy_fn);
    std::vector<std::vector<Values>> got(kThreads), got_b(kThreads), eager(kThreads);
    run_together([&](int i) {
      const Tensor& x = xs[static_cast<size_t>(i)];
      for (int r = 0; r < kRepeats; ++r) {
        got[static_cast<size_t>(i)].push_back(values({f(x, w, k_of(i))}));
        got_b[static_cast<size_t>(i)].push_back(values({fb(bs[static_cast<size_t>(i)])}));
        // Eager ops on this thread while others trace: tracing is per thread, so these stay
        // concrete (to_vector would raise on a symbolic tensor).
        eager[static_cast<size_t>(i)].push_back(values({model_fn(x, w, k_of(i))}));
      }
    });
    for (int i = 0; i < kThreads; ++i) {
      for (const Values& v : got[static_cast<size_t>(i)])
        EXPECT_EQ(v, want[static_cast<size_t>(i)]) << "round " << round << ", thread " << i;
      for (const Values& v : got_b[static_cast<size_t>(i)])
        EXPECT_EQ(v, want_b[static_cast<size_t>(i)]) << "round " << round << ", thread " << i;
      ASSERT_EQ(eager[static_cast<size_t>(i)].size(), size_t(kRepeats));
      for (const Values& v : eager[static_cast<size_t>(i)]) {
        ASSERT_EQ(v.size(), 1u);
        ASSERT_EQ(v[0].size(), want[static_cast<size_t>(i)][0].size());
        for (size_t j = 0; j < v[0].size(); ++j)
          EXPECT_NEAR(v[0][j], want[static_cast<size_t>(i)][0][j], 1e-4 * (1 + std::abs(v[0][j])));
      }
    }
    // Concurrent calls compile no more than sequential ones could: one version per k, plus a
    // dynamic-batch recompile each (at most).
    EXPECT_FALSE(f.stats().eager_fallback) << f.explain();
    EXPECT_LE(f.stats().compiles, 6) << f.explain();
    EXPECT_EQ(f.stats().hits + f.stats().misses, kThreads * kRepeats);
    // branchy_fn reruns its host code: one version, and a compiled piece for the head and
    // for each branch.
    EXPECT_EQ(fb.stats().compiles, 1) << fb.explain();
    EXPECT_EQ(fb.stats().piece_compiles, 3) << fb.explain();
  }
}

// Backward through a jitted call on each thread, with the thread's own parameter: the compiled
// backward graph (one Session per version) is run from 8 threads at once.
TEST(ThreadsShared, JitBackwardPerThreadParameters) {
  manual_seed(13);
  std::vector<Tensor> xs, ws;
  for (int i = 0; i < kThreads; ++i) {
    xs.push_back(randn({4, 16}));
    ws.push_back(randn({16, 8}));
  }
  auto loss_fn = [](const Tensor& x, const Tensor& w) { return mean(tanh(matmul(x, w))); };
  std::vector<Values> want(kThreads);
  {
    auto f = jit(loss_fn);
    for (int i = 0; i < kThreads; ++i) {
      Tensor wi = ws[static_cast<size_t>(i)].clone().requires_grad_();
      Tensor y = f(xs[static_cast<size_t>(i)], wi);
      y.backward();
      want[static_cast<size_t>(i)] = values({y.detach(), wi.grad()});
    }
  }
  for (int round = 0; round < kRounds; ++round) {
    auto f = jit(loss_fn);
    std::vector<std::vector<Values>> got(kThreads);
    run_together([&](int i) {
      for (int r = 0; r < kRepeats; ++r) {
        Tensor wi = ws[static_cast<size_t>(i)].clone().requires_grad_();
        Tensor y = f(xs[static_cast<size_t>(i)], wi);
        y.backward();
        got[static_cast<size_t>(i)].push_back(values({y.detach(), wi.grad()}));
      }
    });
    for (int i = 0; i < kThreads; ++i)
      for (const Values& v : got[static_cast<size_t>(i)])
        EXPECT_EQ(v, want[static_cast<size_t>(i)]) << "round " << round << ", thread " << i;
    EXPECT_EQ(f.stats().compiles, 1) << f.explain();
  }
}

// Grad mode is per thread: a NoGradGuard held on some threads leaves recording on elsewhere.
TEST(ThreadsShared, GradModeIsPerThread) {
  Tensor a = tensor({1.f, 2.f, 3.f});
  std::vector<int> recorded(kThreads, -1);
  std::latch guards_on(kThreads);
  run_together([&](int i) {
    std::optional<NoGradGuard> ng;
    if (i % 2) ng.emplace();
    guards_on.arrive_and_wait();  // every odd thread holds its guard now
    Tensor w = a.clone().requires_grad_();
    Tensor y = sum(mul(w, w));
    recorded[static_cast<size_t>(i)] = y.requires_grad();
    if (y.requires_grad()) {
      y.backward();
      EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{2.f, 4.f, 6.f}));
    }
  });
  for (int i = 0; i < kThreads; ++i)
    EXPECT_EQ(recorded[static_cast<size_t>(i)], i % 2 ? 0 : 1) << "thread " << i;
  EXPECT_TRUE(grad_mode_enabled());
}

}  // namespace
