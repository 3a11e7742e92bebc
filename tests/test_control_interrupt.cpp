// request_interrupt(): a long Session run, while_loop or jitted replay stops between steps with
// kiln::Interrupted, writes no variable, and what ran it runs again correctly afterwards.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "kiln/kiln.h"

using namespace kiln;

namespace {

// Counts to n one iteration at a time: about a microsecond or more per iteration, so 1e9
// would take minutes.
struct Counter {
  Graph g;
  Tensor n = g.placeholder("n", Int64, {});
  Tensor count = while_loop([this](const std::vector<Tensor>& v) { return lt(v[0], n); },
                            [](const std::vector<Tensor>& v) {
                              return std::vector<Tensor>{add(v[0], scalar_tensor(1, Int64))};
                            },
                            {scalar_tensor(0, Int64)})[0];
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST(ControlInterrupt, LongWhileLoopStopsAndSessionRunsAgain) {
  clear_interrupt();
  Counter c;
  Session sess(c.g);
  EXPECT_EQ(sess.run(c.count, {{c.n, scalar_tensor(5, Int64)}}).item<int64_t>(), 5);
  std::thread timer([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    request_interrupt();
  });
  const auto t0 = std::chrono::steady_clock::now();
  std::string msg;
  try {
    sess.run(c.count, {{c.n, scalar_tensor(int64_t{1} << 40, Int64)}});
  } catch (const Interrupted& e) {
    msg = e.what();
  }
  const double took = seconds_since(t0);
  timer.join();
  EXPECT_NE(msg.find("interrupted"), std::string::npos) << msg;
  EXPECT_EQ(msg.rfind("[", 0), 0u) << msg;
  EXPECT_LT(took, 20.0);                // a hang, not a timing: the loop would run for hours
  EXPECT_FALSE(interrupt_requested());  // taken by the run it stopped
  // The same Session and plan again, also at the size that was cut.
  EXPECT_EQ(sess.run(c.count, {{c.n, scalar_tensor(7, Int64)}}).item<int64_t>(), 7);
  EXPECT_EQ(sess.run(c.count, {{c.n, scalar_tensor(3000, Int64)}}).item<int64_t>(), 3000);
  EXPECT_EQ(sess.plans_built(), 1u);
}

TEST(ControlInterrupt, PendingRequestStopsTheNextRunBeforeItWritesVariables) {
  clear_interrupt();
  Graph g;
  Tensor x = g.placeholder("x", Float32, {2});
  Tensor v = g.variable("v", zeros({2}));
  Tensor step = assign(v, add(v, x));
  Session sess(g);
  sess.run(step, {{x, tensor({1.f, 2.f})}});
  request_interrupt();
  EXPECT_THROW(sess.run(step, {{x, tensor({1.f, 2.f})}}), Interrupted);
  EXPECT_EQ(sess.variable("v").to_vector<float>(), (std::vector<float>{1.f, 2.f}));
  sess.run(step, {{x, tensor({1.f, 2.f})}});  // a bound replay now
  sess.run(step, {{x, tensor({1.f, 2.f})}});
  EXPECT_EQ(sess.variable("v").to_vector<float>(), (std::vector<float>{3.f, 6.f}));
  // Interrupted is not a kiln::Error: fallbacks that catch errors let it through.
  request_interrupt();
  bool caught_as_error = false;
  try {
    sess.run(step, {{x, tensor({1.f, 2.f})}});
  } catch (const Error&) {
    caught_as_error = true;
  } catch (const Interrupted&) {
  }
  EXPECT_FALSE(caught_as_error);
  EXPECT_EQ(sess.variable("v").to_vector<float>(), (std::vector<float>{3.f, 6.f}));
}

TEST(ControlInterrupt, NoInterruptGuardLeavesTheRequestPending) {
  clear_interrupt();
  Counter c;
  Session sess(c.g);
  request_interrupt();
  {
    NoInterruptGuard guard;
    EXPECT_EQ(sess.run(c.count, {{c.n, scalar_tensor(50, Int64)}}).item<int64_t>(), 50);
  }
  EXPECT_TRUE(interrupt_requested());
  EXPECT_THROW(sess.run(c.count, {{c.n, scalar_tensor(50, Int64)}}), Interrupted);
  EXPECT_EQ(sess.run(c.count, {{c.n, scalar_tensor(50, Int64)}}).item<int64_t>(), 50);
}

TEST(ControlInterrupt, EagerWhileLoopStops) {
  clear_interrupt();
  request_interrupt();
  try {
    while_loop([](const std::vector<Tensor>&) { return scalar_tensor(1, Bool); },
               [](const std::vector<Tensor>& v) { return std::vector<Tensor>{add(v[0], 1.0)}; },
               {zeros({})});
    ADD_FAILURE() << "no interrupt";
  } catch (const Interrupted& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[while_loop] interrupted", 0), 0u) << e.what();
  }
}

TEST(ControlInterrupt, JitReplayStopsAndKeepsItsVersions) {
  clear_interrupt();
  // A graph break with kReplay: the trace tree replays in the JIT's own loop.
  auto f = jit(
      [](const Tensor& x) {
        Tensor s = mul(x, 2.0);
        if ((s.sum() > 0).item<bool>()) return add(s, 1.0);
        return sub(mul(s, s), 1.0);
      },
      JitOptions{.host_code = JitOptions::HostCode::kReplay});
  // Without a break: one Session.
  auto g = jit([](const Tensor& x) { return add(mul(x, 2.0), 1.0); });
  Tensor pos = tensor({1.f, 2.f});
  EXPECT_EQ(f(pos).to_vector<float>(), (std::vector<float>{3.f, 5.f}));
  EXPECT_EQ(g(pos).to_vector<float>(), (std::vector<float>{3.f, 5.f}));
  const auto fs = f.stats(), gs = g.stats();
  for (int i = 0; i < 2; ++i) {
    request_interrupt();
    try {
      if (i == 0)
        f(pos);
      else
        g(pos);
      ADD_FAILURE() << "no interrupt";
    } catch (const Interrupted& e) {
      EXPECT_NE(std::string(e.what()).find("] interrupted"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(f(pos).to_vector<float>(), (std::vector<float>{3.f, 5.f}));
  EXPECT_EQ(g(pos).to_vector<float>(), (std::vector<float>{3.f, 5.f}));
  // No recompile and no eager fallback: the interrupt was not taken for a failed version.
  EXPECT_EQ(f.stats().compiles, fs.compiles);
  EXPECT_EQ(g.stats().compiles, gs.compiles);
  EXPECT_FALSE(f.stats().eager_fallback);
  EXPECT_FALSE(g.stats().eager_fallback);
}

TEST(ControlInterrupt, CheckScopeRunsOnlyOnItsThreadAndMayStopTheRun) {
  clear_interrupt();
  Counter c;
  Session sess(c.g);
  struct Seen {
    int calls = 0;
    bool stop = false;
    std::string where;
  } seen;
  auto check = [](void* ctx, const char* where) {
    auto* s = static_cast<Seen*>(ctx);
    ++s->calls;
    s->where = where;
    if (s->stop) throw Interrupted("[test] stopped by the check");
  };
  // A thread without a scope ignores check requests.
  request_interrupt_check();
  EXPECT_EQ(sess.run(c.count, {{c.n, scalar_tensor(20, Int64)}}).item<int64_t>(), 20);
  {
    InterruptCheckScope scope(check, &seen);
    EXPECT_EQ(sess.run(c.count, {{c.n, scalar_tensor(20, Int64)}}).item<int64_t>(), 20);
    EXPECT_EQ(seen.calls, 1);  // one request, one check; the run went on
    EXPECT_FALSE(seen.where.empty());
    seen.stop = true;
    request_interrupt_check();
    EXPECT_THROW(sess.run(c.count, {{c.n, scalar_tensor(20, Int64)}}), Interrupted);
    EXPECT_EQ(seen.calls, 2);
  }
  request_interrupt_check();
  EXPECT_EQ(sess.run(c.count, {{c.n, scalar_tensor(20, Int64)}}).item<int64_t>(), 20);
  EXPECT_EQ(seen.calls, 2);
  clear_interrupt();
}
