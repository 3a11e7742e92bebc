// The Session's bound form: after a first run, a plan replays on prebuilt tensors in one
// planned arena. Same numbers as the generic run, the arena smaller than the sum of buffers, and
// a steady-state run allocates (global operator new and Kiln's allocator) only for what it hands
// back, however many ops the graph has.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <new>

#include "kiln/exec/session.h"
#include "kiln/kiln.h"
#include "kiln/optim/optim.h"
#include "test_util.h"

// The replacement pair below is malloc/free underneath on purpose; GCC cannot see that the
// new and delete it pairs are both ours.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {
std::atomic<int64_t> g_news{0};
}

// Under AddressSanitizer the runtime owns operator new/delete (and their aligned forms, which
// this pair does not replace): count only Kiln's allocator there.
#ifndef __SANITIZE_ADDRESS__
#define KILN_COUNT_NEW 1
void* operator new(size_t n) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#endif

namespace {
using namespace kiln;

struct Mlp {
  Graph g;
  Tensor x, y, loss, step;
  explicit Mlp(bool train) {
    manual_seed(3);
    x = g.placeholder("x", Float32, {32, 20});
    y = g.placeholder("y", Int64, {32});
    Tensor w1 = g.variable("w1", mul(randn({64, 20}), 0.2)), b1 = g.variable("b1", zeros({64}));
    Tensor w2 = g.variable("w2", mul(randn({64, 64}), 0.2)), b2 = g.variable("b2", zeros({64}));
    Tensor w3 = g.variable("w3", mul(randn({5, 64}), 0.2)), b3 = g.variable("b3", zeros({5}));
    Tensor h = gelu(add(linear(x, w1, b1), 0.1));
    h = tanh(mul(linear(h, w2, b2), 0.5));
    loss = cross_entropy(linear(h, w3, b3), y);
    if (train) step = optim::SGD(0.1).minimize(loss);
  }
};

uint64_t kiln_allocs() {
  auto s = allocator_stats();
  return s.hits + s.misses;
}

TEST(GraphMemory, BoundRunsMatchGenericRuns) {
  Tensor xb = randn({32, 20}), yb = randint(0, 5, {32});
  std::vector<float> losses[2];
  for (int bound = 0; bound < 2; ++bound) {
    if (!bound) ::setenv("KILN_DISABLE_PASSES", "plan_memory", 1);
    Mlp m(true);
    Session s(m.g);
    for (int i = 0; i < 20; ++i)
      losses[bound].push_back(s.run({m.loss, m.step}, {{m.x, xb}, {m.y, yb}})[0].item<float>());
    ::unsetenv("KILN_DISABLE_PASSES");
    if (bound) {
      EXPECT_GT(s.last_run().arena_bytes, 0);
      EXPECT_LT(s.last_run().arena_bytes, s.last_run().unplanned_bytes);
    } else {
      EXPECT_EQ(s.last_run().arena_bytes, 0);
    }
  }
  for (int i = 0; i < 20; ++i)
    EXPECT_NEAR(losses[0][i], losses[1][i], 1e-6 * std::abs(losses[0][i])) << "step " << i;
  EXPECT_LT(losses[1].back(), losses[1].front());
}

TEST(GraphMemory, FetchedResultsSurviveLaterRuns) {
  Mlp m(false);
  Session s(m.g);
  Tensor x1 = randn({32, 20}), x2 = randn({32, 20}), yb = randint(0, 5, {32});
  Tensor l1 = s.run(m.loss, {{m.x, x1}, {m.y, yb}});
  Tensor l1b = s.run(m.loss, {{m.x, x1}, {m.y, yb}});  // bound from here on
  float v1 = l1b.item<float>();
  Tensor l2 = s.run(m.loss, {{m.x, x2}, {m.y, yb}});
  EXPECT_EQ(l1b.item<float>(), v1);  // not overwritten by the next run
  EXPECT_EQ(l1.item<float>(), v1);
  EXPECT_NE(l2.item<float>(), v1);
  // A feed of another layout falls back to the generic run and still computes the right thing.
  Tensor xt = randn({20, 32}).t();
  EXPECT_NEAR(s.run(m.loss, {{m.x, xt}, {m.y, yb}}).item<float>(),
              s.run(m.loss, {{m.x, xt.contiguous()}, {m.y, yb}}).item<float>(), 1e-6);
}

TEST(GraphMemory, SteadyStateAllocatesOnlyWhatItReturns) {
  Mlp m(false);
  Session s(m.g);
  Tensor xb = randn({32, 20}), yb = randint(0, 5, {32});
  FeedDict feeds = {{m.x, xb}, {m.y, yb}};
  std::vector<Tensor> fetches = {m.loss};
  for (int i = 0; i < 3; ++i) s.run(fetches, feeds);
  const int runs = 50;
  int64_t n0 = g_news.load();
  uint64_t a0 = kiln_allocs();
  for (int i = 0; i < runs; ++i) s.run(fetches, feeds);
  double news = double(g_news.load() - n0) / runs;
  double allocs = double(kiln_allocs() - a0) / runs;
  // The graph has dozens of ops; a run hands back one tensor (its storage, its TensorImpl, the
  // result vector).
  int64_t ops = s.last_run().plan_steps;
  EXPECT_GT(ops, 8);
  EXPECT_LE(allocs, 1.0) << "Kiln allocator calls per run";
#ifdef KILN_COUNT_NEW
  EXPECT_LE(news, 4.0) << "operator new calls per run (plan has " << ops << " steps)";
#else
  (void)news;
#endif
}

// A jitted function without graph breaks replays through the same bound plan: after warm-up a
// call takes from Kiln's allocator only the tensor it returns, whatever the op count.
TEST(GraphMemory, JitReplayAllocatesOnlyWhatItReturns) {
  manual_seed(4);
  Tensor w1 = mul(randn({64, 20}), 0.2), b1 = zeros({64}), w2 = mul(randn({5, 64}), 0.2);
  Tensor xb = randn({32, 20}), yb = randint(0, 5, {32});
  auto f =
      jit([](const Tensor& x, const Tensor& y, const Tensor& a, const Tensor& b, const Tensor& c) {
        Tensor h = tanh(mul(gelu(add(linear(x, a, b), 0.1)), 0.5));
        return cross_entropy(matmul(h, c.t()), y);
      });
  Tensor eager = [&] {
    Tensor h = tanh(mul(gelu(add(linear(xb, w1, b1), 0.1)), 0.5));
    return cross_entropy(matmul(h, w2.t()), yb);
  }();
  for (int i = 0; i < 3; ++i) f(xb, yb, w1, b1, w2);
  const int runs = 50;
  uint64_t a0 = kiln_allocs();
  Tensor r;
  for (int i = 0; i < runs; ++i) r = f(xb, yb, w1, b1, w2);
  double allocs = double(kiln_allocs() - a0) / runs;
  EXPECT_LE(allocs, 1.0) << "Kiln allocator calls per jitted call";
  EXPECT_NEAR(r.item<double>(), eager.item<double>(), 1e-5);
}

// A jitted function whose length varies: after the second length makes it dynamic, every call
// at any length replays the one version on its plan laid out by symbol, taking from Kiln's
// allocator its result and the sizes evaluated on the host, however many ops it has (a plan
// per size went generic after four lengths, allocating every intermediate).
TEST(GraphMemory, JitDynamicVersionAllocatesLittleAtEveryLength) {
  manual_seed(9);
  Tensor w = mul(randn({16, 16}), 0.25), pos = randn({64, 16}), v = randn({16});
  auto f = jit([](const Tensor& x, const Tensor& w, const Tensor& pos, const Tensor& v) {
    Tensor h = gelu(add(matmul(x, w), slice(pos, 0, 0, sym_size(x, 0))));
    Tensor g = mul(sigmoid(h), tanh(add(h, 0.5)));
    return matmul(layer_norm(g, {16}), v);
  });
  auto eager = [&](const Tensor& x) {
    Tensor h = gelu(add(matmul(x, w), pos.slice(0, 0, x.shape()[0])));
    Tensor g = mul(sigmoid(h), tanh(add(h, 0.5)));
    return matmul(layer_norm(g, {16}), v);
  };
  f(randn({7, 16}), w, pos, v);
  f(randn({9, 16}), w, pos, v);
  for (int64_t t : {12, 40, 5, 64, 33, 12, 1, 50}) {
    Tensor x = randn({t, 16});
    uint64_t a0 = kiln_allocs();
    f(x, w, pos, v);  // a new length: laid out by symbol
    const uint64_t first = kiln_allocs() - a0;
    a0 = kiln_allocs();
    Tensor r = f(x, w, pos, v);
    const uint64_t again = kiln_allocs() - a0;
    // A new length: the result, the host's sym_size value and, when it is the longest so far,
    // the grown arena. A repeat: the result.
    EXPECT_LE(first, 3u) << "length " << t;
    EXPECT_LE(again, 1u) << "length " << t;
    EXPECT_LE(kiln_test::max_diff(r, eager(x)), 1e-5) << "length " << t;
  }
  EXPECT_EQ(f.stats().compiles, 2);
}

// Kernels that write their output through a view (cat, slice_grad) must start from the output's
// own offset: in a bound plan the output sits inside the arena. Both wrote at the arena's start
// until 2026-12-03, clobbering whatever lived there (a jitted MoE training step diverged from
// eager at its second call).
TEST(GraphMemory, BoundPlanCatAndSliceGradMatchEager) {
  manual_seed(8);
  auto f = [](const Tensor& x, const Tensor& w, const Tensor& u) {
    EnableGradGuard eg;
    Tensor wl = w.detach().requires_grad_();
    Tensor y = tanh(matmul(x, wl));
    auto c = chunk(y, 3, 1);  // split: its gradient is a cat
    // slice: its gradient is a slice_grad (chunk no longer makes those).
    Tensor z = cat({mul(c[2], 2.0), c[0], exp(c[1]), y.slice(1, 3, 7)}, 1);
    Tensor h = cat({z, mul(z, z)}, 0);
    Tensor loss = sum(mul(h, u));
    return std::vector<Tensor>{grad({loss}, {wl})[0], loss.detach()};
  };
  auto jf = jit(f);
  Tensor w = mul(randn({16, 24}), 0.3), u = randn({16, 28});
  for (int call = 0; call < 4; ++call) {
    Tensor x = randn({8, 16});
    std::vector<Tensor> want = f(x, w, u), got = jf(x, w, u);
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) {
      auto a = got[k].to_vector<double>(), b = want[k].to_vector<double>();
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i)
        ASSERT_NEAR(a[i], b[i], 1e-5 * (1 + std::fabs(b[i])))
            << "call " << call << " output " << k << " element " << i;
    }
  }
}

// Concatenation pieces written in place: a bound plan has each producer write its piece where it
// lands in the cat's result when that is one contiguous range (dims before the cat's all 1), and
// the cat copies nothing. Left out, and copied as before: a piece read after the cat, one input
// given twice, a batch of 2 (the pieces are strided there), a cat holding pieces inside another
// cat. Every case gives eager's numbers over fresh feeds, with the pass on and off.
TEST(GraphMemory, ConcatPiecesAreWrittenWhereTheyLand) {
  struct Case {
    const char* name;
    int64_t batch;
    std::function<Tensor(const Tensor&)> f;
    int64_t pieces;
  };
  const std::vector<Case> cases = {
      {"three pieces", 1,
       [](const Tensor& x) {
         return mul(cat({mul(x, 2.0), tanh(x), add(x, 1.0)}, 1), 0.5);
       },
       3},
      {"piece read after the cat", 1,
       [](const Tensor& x) {
         Tensor p = exp(x), q = sub(x, 1.0);
         Tensor y = cat({p, q}, 1);
         return mul(p, sum(y));  // p is read after y is made
       },
       1},
      {"one input twice", 1,
       [](const Tensor& x) {
         return sigmoid(cat({exp(x), exp(x)}, 1));
       },
       0},
      {"batch of two", 2,
       [](const Tensor& x) {
         return relu(cat({mul(x, 2.0), tanh(x)}, 1));
       },
       0},
      {"cat of cats", 1,
       [](const Tensor& x) {
         Tensor inner = cat({mul(x, 2.0), tanh(x)}, 1);
         return mul(cat({inner, add(x, 3.0)}, 1), 1.5);
       },
       3},
  };
  for (const Case& c : cases) {
    for (bool on : {true, false}) {
      if (!on) ::setenv("KILN_DISABLE_PASSES", "concat_in_place", 1);
      Graph g;
      // 4 x 4 floats a channel: each piece starts on a 64-byte boundary of the result.
      Tensor x = g.placeholder("x", Float32, {c.batch, 4, 4, 4});
      Tensor y = c.f(x);
      Session s(g);
      for (int run = 0; run < 4; ++run) {
        Tensor feed = randn({c.batch, 4, 4, 4});
        const Tensor want = c.f(feed);
        EXPECT_LT(kiln_test::max_diff(s.run(y, {{x, feed}}), want), 1e-6)
            << c.name << ", run " << run;
      }
      ::unsetenv("KILN_DISABLE_PASSES");
      EXPECT_EQ(s.last_run().pieces_in_place, on ? c.pieces : 0) << c.name;
      EXPECT_GT(s.last_run().arena_bytes, 0) << c.name;
    }
  }
}

// A plan whose feeds keep changing shape stops rebinding after a few binds and runs generically.
// The bound form it kept was built for other shapes: until 2026-12-04 a later run whose feeds
// matched the last generic run's layout replayed that stale form, writing a [64, 32] matmul into
// arena buffers planned for [1, 32] (heap corruption, wrong results; first seen as crashes of
// one Session shared by several threads, whose calls come in any order).
TEST(GraphMemory, StaleBoundFormIsNotReplayedForOtherShapes) {
  manual_seed(5);
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), 16});
  Tensor w = g.variable("w", randn({16, 32}));
  Tensor h = relu(matmul(x, w));
  Tensor y = sum(mul(softmax(h, -1), h), {1});
  Tensor small = randn({1, 16}), big = randn({64, 16});
  auto want = [&](const Tensor& feed) {
    Session fresh(g);
    return fresh.run(y, {{x, feed}}).to_vector<float>();
  };
  const std::vector<float> want_small = want(small), want_big = want(big);
  Session s(g);
  // Four binds (the last one for `small`), then generic runs and repeats of each shape.
  const std::vector<int> calls = {1, 0, 1, 0, 1, 1, 1, 0, 0, 1, 0, 0, 1, 1};
  for (size_t i = 0; i < calls.size(); ++i) {
    const bool is_big = calls[i];
    EXPECT_EQ(s.run(y, {{x, is_big ? big : small}}).to_vector<float>(),
              is_big ? want_big : want_small)
        << "call " << i << (is_big ? " (big)" : " (small)");
  }
}

// Feeds with a dynamic dim: one plan, bound once, then laid out again by symbol at every new
// length (offsets evaluated along the placement made at the first one), with no generic run and
// no allocation but the result, and the numbers of a fresh Session at each length. Symbolic
// sizes (a position table sliced to the length, a reshape by it) and dynamic elementwise groups
// included.
TEST(GraphMemory, DynamicFeedsAreLaidOutBySymbolNotPerSize) {
  manual_seed(6);
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), 16});
  Tensor pos = g.variable("pos", randn({64, 16}));
  Tensor w = g.variable("w", mul(randn({16, 16}), 0.25));
  const SymInt T = sym_size(x, 0);
  Tensor h = gelu(add(mul(add(x, slice(pos, 0, 0, T)), 0.5), 1.0));
  Tensor m = matmul(h, w);
  Tensor r = reshape_symint(m, {T * 4, SymInt(4)});
  Tensor y = sum(mul(tanh(r), sigmoid(r)), {1});
  auto want = [&](const Tensor& feed) {
    Session fresh(g);
    return fresh.run(y, {{x, feed}});
  };
  Session s(g);
  const std::vector<int64_t> lengths = {5, 9, 5, 17, 33, 9, 64, 1, 40, 40, 12, 2, 64, 7};
  std::vector<Tensor> feeds;
  for (int64_t t : lengths) feeds.push_back(randn({t, 16}));
  int64_t relaid = 0;
  std::map<int64_t, int64_t> arena;
  for (size_t i = 0; i < lengths.size(); ++i) {
    Tensor got = s.run(y, {{x, feeds[i]}});
    Tensor ref = want(feeds[i]);
    ASSERT_EQ(got.shape(), Shape({lengths[i] * 4})) << "length " << lengths[i];
    EXPECT_LE(kiln_test::max_diff(got, ref), 1e-6) << "length " << lengths[i];
    const RunStats st = s.last_run();
    if (i >= 1 && lengths[i] != lengths[i - 1]) {
      EXPECT_TRUE(st.relaid_out) << "call " << i << " (length " << lengths[i] << ")";
      ++relaid;
    }
    if (i >= 1) arena[lengths[i]] = st.arena_bytes;
    // Both elementwise chains fuse over the dynamic length (one kernel each, n at run time).
    const size_t at = st.passes.find("fuse_elementwise: ");
    ASSERT_NE(at, std::string::npos) << st.passes;
    EXPECT_EQ(std::stoi(st.passes.substr(at + 18)), 2) << st.passes;
  }
  EXPECT_EQ(s.last_run().relayouts, relaid);
  EXPECT_EQ(s.plans_built(), 1u);
  // The layout's arena follows the length (planned at 5, evaluated at the others).
  EXPECT_GT(arena.at(1), 0);
  EXPECT_LT(arena.at(9), arena.at(33));
  EXPECT_LT(arena.at(33), arena.at(64));
  // A run at a new length takes from the allocator its result and the size arithmetic's 0-d
  // values (sym_size, T * 4) evaluated on the host, whatever the op count; a repeat, only the
  // result.
  for (int64_t t : {int64_t{33}, int64_t{50}}) {
    Tensor feed = randn({t, 16});
    s.run(y, {{x, randn({3, 16})}});
    uint64_t a0 = kiln_allocs();
    s.run(y, {{x, feed}});
    EXPECT_LE(kiln_allocs() - a0, 3u) << "length " << t;
    EXPECT_TRUE(s.last_run().relaid_out);
    a0 = kiln_allocs();
    s.run(y, {{x, feed}});
    EXPECT_LE(kiln_allocs() - a0, 1u) << "length " << t << ", again";
    EXPECT_FALSE(s.last_run().relaid_out);
  }
}

}  // namespace
