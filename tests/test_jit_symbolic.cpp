// Symbolic sizes under kiln::jit (docs/jit.md, "Symbolic sizes"): the examples' GPT (its
// position table sliced to sym_size(ids, 1)) and character LSTM, called on every length from 5
// to 64, compile at most two versions (the first call's, then one with the length dynamic),
// never fall back to eager, and give eager's outputs and gradients; a size compared in host
// code is a shape guard, not a graph break; SymInt arithmetic and the symbolic ops agree with
// their eager forms.
#include <gtest/gtest.h>

#include <cmath>

#include "examples/text_lm_common.h"
#include "kiln/kiln.h"
#include "test_util.h"

using namespace kiln;

namespace {

using kiln_test::max_diff;

// Calls the model's jitted logits on every length 5..64, beside eager, then a jitted loss with
// gradients at every fifth length; returns explain().
std::string every_length(lm::CharModel& model, int64_t vocab, const char* name) {
  auto logits =
      jit([&model](const Tensor& ids) { return model.logits(ids); }, JitOptions{.name = name});
  manual_seed(5);
  for (int64_t T = 5; T <= 64; ++T) {
    Tensor ids = randint(0, vocab, {2, T});
    Tensor want = model.logits(ids);
    EXPECT_LT(max_diff(logits(ids), want), 1e-4) << name << " T=" << T;
  }
  EXPECT_LE(logits.stats().compiles, 2) << logits.explain();
  EXPECT_FALSE(logits.stats().eager_fallback) << logits.explain();
  EXPECT_EQ(logits.stats().graph_breaks, 0) << logits.explain();

  auto loss = jit(
      [&model](const Tensor& ids, const Tensor& y) {
        Tensor lg = model.logits(ids);
        return cross_entropy(reshape(lg, {-1, lg.size(-1)}), reshape(y, {-1}));
      },
      JitOptions{.name = std::string(name) + "_loss"});
  std::vector<Tensor> params = model.parameters();
  for (int64_t T = 5; T <= 64; T += 5) {
    Tensor ids = randint(0, vocab, {2, T}), y = randint(0, vocab, {2, T});
    std::vector<Tensor> gj = grad({loss(ids, y)}, params);
    Tensor lg = model.logits(ids);
    std::vector<Tensor> ge =
        grad({cross_entropy(reshape(lg, {-1, lg.size(-1)}), reshape(y, {-1}))}, params);
    for (size_t k = 0; k < params.size(); ++k)
      EXPECT_LT(max_diff(gj[k], ge[k]), 1e-4) << name << " grad " << k << " T=" << T;
  }
  EXPECT_LE(loss.stats().compiles, 2) << loss.explain();
  EXPECT_FALSE(loss.stats().eager_fallback) << loss.explain();
  return logits.explain() + loss.explain();
}

}  // namespace

TEST(JitSymbolic, ExamplesGptCompilesOnceForEveryLength) {
  manual_seed(1);
  lm::GPT gpt(30, 64, 32, 4, 2);
  std::string ex = every_length(gpt, 30, "gpt");
  if (std::getenv("KILN_SHOW_EXPLAIN")) std::cout << ex;
}

TEST(JitSymbolic, ExamplesLstmCompilesOnceForEveryLength) {
  manual_seed(2);
  lm::CharLSTM lstm(30, 16, 32);
  std::string ex = every_length(lstm, 30, "lstm");
  if (std::getenv("KILN_SHOW_EXPLAIN")) std::cout << ex;
}

TEST(JitSymbolic, ComparisonsAreShapeGuardsNotBreaks) {
  auto f = jit(
      [](const Tensor& x) {
        const SymInt T = sym_size(x, 0);
        if (SymInt::compare(T, ">", 8)) return sum(slice(x, 0, 0, floordiv(T, 2)));
        return mul(sum(x), 2.0);
      },
      JitOptions{.name = "branchy"});
  for (int64_t T : {4, 5, 6, 9, 10, 11, 7, 12}) {
    Tensor x = arange(0, static_cast<double>(T), 1, Float32);
    const double want = T > 8 ? (T / 2) * (T / 2 - 1) / 2.0 : T * (T - 1.0);
    EXPECT_DOUBLE_EQ(f(x).item<double>(), want) << T;
  }
  EXPECT_EQ(f.stats().graph_breaks, 0) << f.explain();
  EXPECT_LE(f.stats().compiles, 3) << f.explain();
  EXPECT_NE(f.explain().find("shape guard: arg0.size(0) > 8"), std::string::npos) << f.explain();
  EXPECT_NE(f.explain().find("test_jit_symbolic.cpp"), std::string::npos) << f.explain();
}

TEST(JitSymbolic, ValueReadsGuardOnTheValue) {
  auto f =
      jit([](const Tensor& x) { return mul(x, static_cast<double>(sym_size(x, 0).guard_int())); },
          JitOptions{.name = "value"});
  for (int64_t T : {3, 4, 5, 4, 3}) {
    Tensor x = ones({T});
    EXPECT_DOUBLE_EQ(sum(f(x)).item<double>(), static_cast<double>(T * T));
  }
  // One version per value (3, 4, 5), each guarded on it.
  EXPECT_LE(f.stats().compiles, 4) << f.explain();
}

TEST(JitSymbolic, ArithmeticFollowsPython) {
  EXPECT_EQ(floordiv(SymInt(-7), 2).hint(), -4);
  EXPECT_EQ(mod(SymInt(-7), 2).hint(), 1);
  EXPECT_EQ(mod(SymInt(7), -2).hint(), -1);
  EXPECT_EQ(sym_min(3, 5).hint(), 3);
  EXPECT_EQ((SymInt(3) * 4 - 1).hint(), 11);
  EXPECT_THROW(floordiv(SymInt(1), 0), Error);
  // In a graph the symbolic forms compute the same at run time.
  Graph g;
  Tensor x = g.placeholder("x", Float32, Shape{Dim::any(), 3});
  const SymInt n = sym_size(x, 0);
  EXPECT_TRUE(n.is_symbolic());
  EXPECT_EQ(n.hint(), SymInt::kNoHint);  // a graph built by hand has no traced sizes
  Tensor y = add(slice(x, 0, 0, floordiv(n + 1, 2)),
                 reshape_symint(arange_symint(0, floordiv(n + 1, 2), 1, Float32),
                                {floordiv(n + 1, 2), SymInt(1)}));
  Tensor z = full_symint({mod(n, 4), SymInt(2)}, 1.5);
  Session s(g);
  for (int64_t rows : {5, 8}) {
    Tensor xv = randn({rows, 3});
    auto r = s.run({y, z}, {{x, xv}});
    const int64_t h = (rows + 1) / 2;
    Tensor want =
        add(slice(xv, 0, 0, h), reshape(arange(0, static_cast<double>(h), 1, Float32), {h, 1}));
    EXPECT_LT(max_diff(r[0], want), 1e-6);
    EXPECT_EQ(r[1].shape(), (Shape{rows % 4, 2}));
  }
  // Reading a size of a graph built by hand is an error that says so.
  EXPECT_THROW(n.guard_int(), Error);
}

TEST(JitSymbolic, MarkDynamicAndMarkStatic) {
  auto f = jit([](const Tensor& x) { return sum(slice(x, 1, 0, sym_size(x, 1) - 1), {1}); },
               JitOptions{.name = "marked"});
  for (int64_t T : {6, 7, 9}) {
    Tensor x = randn({2, T});
    mark_dynamic(x, 1);  // dynamic from the first version: one compile for every length
    EXPECT_LT(max_diff(f(x), sum(slice(x, 1, 0, T - 1), {1})), 1e-5);
  }
  EXPECT_EQ(f.stats().compiles, 1) << f.explain();
  auto g = jit([](const Tensor& x) { return mul(x, 2.0); }, JitOptions{.name = "pinned"});
  for (int64_t T : {3, 4, 5}) {
    Tensor x = randn({T});
    mark_static(x, 0);  // never dynamic: a version per size
    EXPECT_LT(max_diff(g(x), mul(x, 2.0)), 1e-6);
  }
  EXPECT_EQ(g.stats().compiles, 3) << g.explain();
  EXPECT_THROW(mark_dynamic(randn({2}), 3), Error);
}
