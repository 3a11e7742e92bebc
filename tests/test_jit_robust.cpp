// Regression tests for the compiled modes at varying sizes and after failures: a trace that
// throws leaves the jitted function working, dynamic-dim recompiles that fail fall back to a
// static version (then to eager), captured modules never keep traced values, identity outputs
// keep autograd right, arguments are type-checked, verify mode works with grad(), and the ops a
// batch-dynamic static graph used to refuse (gradients built from run-time shapes) agree with
// eager at two batch sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <random>

#include "examples/text_lm_common.h"
#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "test_util.h"

using namespace kiln;
using kiln_test::expect_error;

namespace {

using kiln_test::max_diff;

// ---- a trace that fails --------------------------------------------------------------------

TEST(JitRobust, FailedTraceRaisesEagersErrorAndLeavesFunctionWorking) {
  auto f = jit([](const Tensor& x) { return matmul(x, x); }, JitOptions{.name = "square"});
  Tensor bad = randn({2, 3});
  // The trace fails; eager fails the same way: the caller sees matmul's own error, twice (the
  // second call used to segfault in replay on a half-built version).
  expect_error([&] { f(bad); }, {"[matmul]"});
  expect_error([&] { f(bad); }, {"[matmul]"});
  Tensor ok = randn({3, 3});
  EXPECT_LT(max_diff(f(ok), matmul(ok, ok)), 1e-5);
  EXPECT_LT(max_diff(f(ok), matmul(ok, ok)), 1e-5);
  expect_error([&] { f(bad); }, {"[matmul]"});
}

TEST(JitRobust, TraceThatFailsWhereEagerWorksRunsEagerlyAndSaysSo) {
  // A graph cannot answer a host read the trace cannot turn into a guard (a value read inside
  // a static Session graph): the trace fails, eager works, that shape runs eagerly.
  int eager_calls = 0;
  auto f = jit(
      [&eager_calls](const Tensor& x) {
        if (x.is_symbolic()) fail("test", "this function cannot be traced");
        ++eager_calls;
        return mul(x, 2.0);
      },
      JitOptions{.name = "untraceable"});
  Tensor x = randn({3});
  EXPECT_LT(max_diff(f(x), mul(x, 2.0)), 1e-6);
  EXPECT_LT(max_diff(f(x), mul(x, 2.0)), 1e-6);
  EXPECT_EQ(eager_calls, 2);
  EXPECT_NE(f.explain().find("runs eagerly (trace or compiled run failed: [test] this function"),
            std::string::npos)
      << f.explain();
}

// ---- a captured module ---------------------------------------------------------------------

TEST(JitRobust, CapturedBatchNormKeepsConcreteBuffersAndUpdatesThemEveryCall) {
  manual_seed(3);
  nn::BatchNorm1d jbn(4), ebn(4);  // jitted and eager twins, same initial state
  auto f = jit([&jbn](const Tensor& x) { return jbn(x); }, JitOptions{.name = "bn"});
  for (int64_t batch : {8, 8, 5, 6, 8, 3}) {
    Tensor x = randn({batch, 4});
    Tensor y = f(x), ye = ebn(x);
    EXPECT_LT(max_diff(y, ye), 1e-5) << "batch " << batch;
    ASSERT_TRUE(jbn.running_mean().is_concrete()) << "a traced value stayed in the module";
    EXPECT_LT(max_diff(jbn.running_mean(), ebn.running_mean()), 1e-6) << "batch " << batch;
    EXPECT_LT(max_diff(jbn.running_var(), ebn.running_var()), 1e-6) << "batch " << batch;
  }
  // Compiled, not eager: the buffers are inputs and outputs of the compiled function (static,
  // then the batch dynamic).
  EXPECT_EQ(f.explain().find("runs eagerly"), std::string::npos) << f.explain();
  EXPECT_LE(f.stats().compiles, 2) << f.explain();
  // Outside the jitted function the module is an ordinary eager module again.
  jbn.eval();
  ebn.eval();
  Tensor x = randn({2, 4});
  EXPECT_LT(max_diff(jbn(x), ebn(x)), 1e-6);
}

TEST(JitRobust, FailedTraceRestoresModuleBuffers) {
  nn::BatchNorm1d bn(3);
  Tensor before = bn.running_mean().clone();
  auto f = jit(
      [&bn](const Tensor& x) {
        Tensor y = bn(x);
        return matmul(y, y);  // [N, 3] @ [N, 3]: fails after the buffers were assigned
      },
      JitOptions{.name = "bn_then_fail"});
  Tensor x = randn({4, 3});
  EXPECT_THROW(f(x), Error);
  ASSERT_TRUE(bn.running_mean().is_concrete());
  // The eager rerun that raised the error ran the module once (as eager code would have).
  EXPECT_EQ(bn.running_mean().shape(), before.shape());
}

// ---- nonzero after a dynamic-dim recompile ------------------------------------------------

TEST(JitRobust, NonzeroAfterBatchRecompileGivesEagersCoordinates) {
  auto f = jit([](const Tensor& x) { return nonzero(gt(x, 0.0)); }, JitOptions{.name = "nz"});
  for (int64_t n : {2, 4, 3, 5}) {
    std::vector<float> v;
    for (int64_t i = 0; i < n * 2; ++i) v.push_back((i % 3 == 0) ? 1.f : -1.f);
    Tensor x = tensor(v, {n, 2});
    EXPECT_EQ(f(x).to_vector<int64_t>(), nonzero(gt(x, 0.0)).to_vector<int64_t>()) << n;
  }
}

// ---- identity outputs under autograd -------------------------------------------------------

TEST(JitRobust, IdentityOutputKeepsLeafAndGradient) {
  for (int mode = 0; mode < 3; ++mode) {
    auto f = jit(
        [mode](const Tensor& x) {
          if (mode == 0) return x;
          return dropout(x, mode == 1 ? 0.0 : 0.5, /*training=*/mode == 1);
        },
        JitOptions{.name = "identity"});
    Tensor x = randn({3, 2}).requires_grad_();
    for (int call = 0; call < 2; ++call) {
      Tensor y = f(x);
      EXPECT_TRUE(x.is_leaf()) << "mode " << mode;
      Tensor g = grad({sum(mul(y, y))}, {x})[0];
      EXPECT_LT(max_diff(g, mul(x, 2.0)), 1e-6) << "mode " << mode << " call " << call;
    }
  }
}

// ---- argument types ------------------------------------------------------------------------

TEST(JitRobust, ArgumentKindsAreChecked) {
  auto f = jit([](const Tensor& x, int k) { return mul(x, static_cast<double>(k)); },
               JitOptions{.name = "scale"});
  Tensor x = ones({2});
  EXPECT_EQ(f(x, 3).to_vector<float>(), (std::vector<float>{3.f, 3.f}));
  expect_error([&] { f(x, x); }, {"[jit]", "'scale'", "argument 1 is a Tensor", "takes a number"});
  expect_error([&] { f(2.0, 3); }, {"[jit]", "argument 0 is a number", "takes a Tensor"});
  EXPECT_EQ(f(x, true).to_vector<float>(), (std::vector<float>{1.f, 1.f}));  // bool -> int
}

// ---- verify mode with a training step ------------------------------------------------------

TEST(JitRobust, VerifyModeRunsTrainingStepsThatCallGrad) {
  setenv("KILN_JIT_VERIFY", "1", 1);
  auto step = jit(
      [](const Tensor& w, const Tensor& x) {
        Tensor loss = mean(mul(matmul(x, w), matmul(x, w)));
        Tensor g = grad({loss}, {w})[0];
        return sub(w, mul(g, 0.1));
      },
      JitOptions{.name = "sgd"});
  unsetenv("KILN_JIT_VERIFY");
  Tensor w = randn({3, 2}).requires_grad_(), x = randn({4, 3});
  Tensor w1;
  EXPECT_NO_THROW(w1 = step(w, x));
  EXPECT_NO_THROW(w1 = step(w, x));
  EXPECT_EQ(step.stats().verify_mismatches, 0) << step.explain();
}

// ---- an LSTM called with several lengths --------------------------------------------------

TEST(JitRobust, LstmAtLengthsFiveSevenNineEqualsEager) {
  manual_seed(11);
  nn::LSTM lstm(nn::RNNOptions{.input_size = 3, .hidden_size = 4});
  auto f = jit([&lstm](const Tensor& x) { return lstm(x).first; }, JitOptions{.name = "lstm"});
  for (int64_t T : {5, 7, 9, 7, 5}) {
    Tensor x = randn({T, 2, 3});
    Tensor y;
    ASSERT_NO_THROW(y = f(x)) << "T = " << T << "\n" << f.explain();
    EXPECT_LT(max_diff(y, lstm(x).first), 1e-5) << "T = " << T;
  }
}

// ---- batch-dynamic static graphs: compositions that used to be refused ---------------------

// Builds fn on placeholders whose dim 0 is dynamic, takes gradients() of sum(out * out), and
// runs it at two batch sizes: values and gradients equal eager.
void check_dynamic_batch(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                         const std::vector<std::vector<Tensor>>& feeds_at_sizes,
                         const std::string& what) {
  Graph g;
  std::vector<Tensor> phs;
  for (size_t k = 0; k < feeds_at_sizes[0].size(); ++k) {
    Shape s = feeds_at_sizes[0][k].shape();
    s[0] = Dim::any();
    phs.push_back(g.placeholder("in" + std::to_string(k), feeds_at_sizes[0][k].dtype(), s));
  }
  Tensor out;
  std::vector<Tensor> grads;
  try {
    out = fn(phs);
    std::vector<Tensor> wrt;
    for (auto& p : phs)
      if (is_floating(p.dtype())) wrt.push_back(p);
    grads = gradients({sum(mul(out, out))}, wrt);
  } catch (const Error& e) {
    ADD_FAILURE() << what << ": cannot be built with a dynamic batch: " << e.what();
    return;
  }
  Session sess(g);
  for (const auto& ins : feeds_at_sizes) {
    FeedDict feeds;
    for (size_t k = 0; k < ins.size(); ++k) feeds.push_back({phs[k], ins[k]});
    std::vector<Tensor> fetch{out};
    for (auto& gr : grads) fetch.push_back(gr);
    std::vector<Tensor> got;
    try {
      got = sess.run(fetch, feeds);
    } catch (const Error& e) {
      ADD_FAILURE() << what << " at batch " << ins[0].size(0) << ": " << e.what();
      continue;
    }
    std::vector<Tensor> xs;
    for (auto& t : ins) xs.push_back(is_floating(t.dtype()) ? t.clone().requires_grad_() : t);
    Tensor e = fn(xs);
    std::vector<Tensor> wrt;
    for (auto& t : xs)
      if (is_floating(t.dtype())) wrt.push_back(t);
    std::vector<Tensor> eg = grad({sum(mul(e, e))}, wrt, {}, false, false, true);
    EXPECT_LT(max_diff(got[0], e), 1e-9) << what << " at batch " << ins[0].size(0);
    for (size_t j = 0; j < eg.size(); ++j) {
      Tensor want = eg[j].defined() ? eg[j] : zeros_like(wrt[j]);
      EXPECT_LT(max_diff(got[1 + j], want), 1e-9)
          << what << " gradient " << j << " at batch " << ins[0].size(0);
    }
  }
}

std::vector<std::vector<Tensor>> at_batches(
    const std::function<std::vector<Tensor>(int64_t)>& make) {
  return {make(4), make(2), make(5)};
}

Tensor r64(const Shape& s) { return randn(s, Float64); }

TEST(JitRobust, DynamicBatchGraphsTakeGradientRulesWithRunTimeShapes) {
  manual_seed(5);
  check_dynamic_batch([](const auto& x) { return topk(x[0], 2, 1).first; },
                      at_batches([](int64_t n) {
                        return std::vector<Tensor>{r64({n, 5})};
                      }),
                      "topk");
  check_dynamic_batch([](const auto& x) { return sort(x[0], 1).first; }, at_batches([](int64_t n) {
                        return std::vector<Tensor>{r64({n, 4})};
                      }),
                      "sort");
  check_dynamic_batch([](const auto& x) { return gather(x[0], 1, x[1]); },
                      at_batches([](int64_t n) {
                        return std::vector<Tensor>{r64({n, 4}), randint(0, 4, {n, 3})};
                      }),
                      "gather");
  check_dynamic_batch(
      [](const auto& x) { return index_select(x[0], 0, x[1]); }, at_batches([](int64_t n) {
        return std::vector<Tensor>{r64({n, 3}), tensor(std::vector<int64_t>{0, 1, 0}, {3})};
      }),
      "index_select of the dynamic dim");
  check_dynamic_batch([](const auto& x) { return embedding(x[1], x[0]); },
                      at_batches([](int64_t n) {
                        return std::vector<Tensor>{randint(0, 6, {n}), r64({6, 3})};
                      }),
                      "embedding with dynamic indices");
  check_dynamic_batch(
      [](const auto& x) {
        return cat({x[0], x[1], x[0]}, 0);
      },
      at_batches([](int64_t n) {
        return std::vector<Tensor>{r64({n, 3}), r64({n, 3})};
      }),
      "cat along the dynamic dim");
  check_dynamic_batch(
      [](const auto& x) { return batch_norm(x[0], Tensor(), Tensor(), Tensor(), Tensor(), true); },
      at_batches([](int64_t n) {
        return std::vector<Tensor>{r64({n, 3})};
      }),
      "functional batch_norm training");
  check_dynamic_batch(
      [](const auto& x) {
        return pad(x[0], {1, 2, 2, 1}, 0.5);
      },
      at_batches([](int64_t n) {
        return std::vector<Tensor>{r64({n, 3})};
      }),
      "pad of the dynamic dim");
  check_dynamic_batch(
      [](const auto& x) {
        return pad(x[0], {-1, 1, -1, 0});
      },
      at_batches([](int64_t n) {
        return std::vector<Tensor>{r64({n, 4})};
      }),
      "negative pad of the dynamic dim");
  check_dynamic_batch(
      [](const auto& x) {
        return einsum("bij,jk->bik", {x[0], x[1]});
      },
      at_batches([](int64_t n) {
        return std::vector<Tensor>{r64({n, 2, 3}), r64({3, 4})};
      }),
      "einsum with a dynamic batch label");
  check_dynamic_batch(
      [](const auto& x) {
        return einsum("bi,bj->ij", {x[0], x[1]});
      },
      at_batches([](int64_t n) {
        return std::vector<Tensor>{r64({n, 2}), r64({n, 3})};
      }),
      "einsum contracting the dynamic label");
  check_dynamic_batch(
      [](const auto& x) {
        return flip(x[0], {0, 1});
      },
      at_batches([](int64_t n) {
        return std::vector<Tensor>{r64({n, 3})};
      }),
      "flip of the dynamic dim");
  check_dynamic_batch([](const auto& x) { return flip(x[0], {0}); },
                      at_batches([](int64_t n) { return std::vector<Tensor>{r64({n})}; }),
                      "flip of a 1-D dynamic tensor");
  check_dynamic_batch(
      [](const auto& x) {
        // Attention's head split, reshape(t, {B, T, 2, 2}), and the merge back by flatten.
        Tensor t = reshape(x[0], {x[0].size(0), x[0].size(1), 2, 2});
        return flatten(permute(t, {0, 2, 1, 3}), 2);
      },
      at_batches([](int64_t n) {
        return std::vector<Tensor>{r64({n, 3, 4})};
      }),
      "head split and flatten with a dynamic batch");
  check_dynamic_batch([](const auto& x) { return slice(x[0], 0, 1, INT64_MAX, 2); },
                      at_batches([](int64_t n) {
                        return std::vector<Tensor>{r64({n, 3})};
                      }),
                      "slice of the dynamic dim");
  check_dynamic_batch(
      [](const auto& x) {
        auto p = chunk(x[0], 2, 1);
        return mul(p[0], p[1]);
      },
      at_batches([](int64_t n) {
        return std::vector<Tensor>{r64({n, 4})};
      }),
      "chunk");
  check_dynamic_batch([](const auto& x) { return x[0].select(0, -1); }, at_batches([](int64_t n) {
                        return std::vector<Tensor>{r64({n, 3})};
                      }),
                      "select(0, -1)");
  check_dynamic_batch(
      [](const auto& x) {
        return expand(x[0], {-1, 5});
      },
      at_batches([](int64_t n) {
        return std::vector<Tensor>{r64({n, 1})};
      }),
      "expand [?, 1] to [?, 5]");
}

TEST(JitRobust, SeveralMinusOnesOnlyKeepDynamicSizesInGraphs) {
  // Eagerly torch's rule: one inferred dim.
  expect_error([] { reshape(zeros({2, 3, 4}), {-1, -1, 4}); }, "reshape", {"only one dim"});
  // In a graph, a -1 before the last keeps the input's (dynamic) size at its position.
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), Dim::any(), 8});
  Tensor y = reshape(x, {-1, -1, 2, 4});
  EXPECT_EQ(y.shape(), Shape({-1, -1, 2, 4}));
  Session s(g);
  Tensor v = randn({3, 5, 8});
  EXPECT_EQ(max_diff(s.run(y, {{x, v}}), reshape(v, {3, 5, 2, 4})), 0.0);
  expect_error([&] { reshape(x, {-1, -1, -1, -1, 2}); }, "reshape", {"leading run of -1s"});
  expect_error([&] { reshape(x, {-1, 2, -1, -1}); }, "reshape", {"only one dim can be -1"});
  // reshape(x, {-1, x.size(-1)}) with every size dynamic could mean "keep" or "infer" for its
  // first -1: refused rather than guessed.
  Graph g3;
  Tensor x3 = g3.placeholder("x", Float32, {Dim::any(), Dim::any(), Dim::any()});
  expect_error([&] { reshape(x3, {-1, -1}); }, "reshape", {"leading run of -1s"});
  expect_error([&] { flatten(x3, 0, 1); }, "flatten", {"needs a static size"});
}

TEST(JitRobust, SqueezeOfADynamicDimSaysItNeedsAStaticSize) {
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), 3});
  expect_error([&] { squeeze(x); }, {"[squeeze]", "needs a static size"});
  expect_error([&] { squeeze(x, 0); }, {"[squeeze]", "needs a static size"});
  // Under jit the call is compiled for the concrete shape instead.
  auto f = jit([](const Tensor& t) { return squeeze(t); }, JitOptions{.name = "sq"});
  for (int64_t n : {2, 1, 3}) {
    Tensor t = randn({n, 1, 3});
    EXPECT_EQ(f(t).shape(), squeeze(t).shape()) << n;
  }
}

}  // namespace

// ---- models at varying sizes -----------------------------------------------------------------

// Embedding, LSTM, linear head: a character language model.
struct CharLm : nn::Module {
  static constexpr int64_t V = 12, E = 8, H = 16;
  nn::Embedding emb{V, E};
  nn::LSTM lstm{nn::RNNOptions{.input_size = E, .hidden_size = H}};
  nn::Linear head{H, V};
  CharLm() {
    register_module("emb", &emb);
    register_module("lstm", &lstm);
    register_module("head", &head);
  }
  Tensor loss(const Tensor& tokens, const Tensor& targets) {
    Tensor h = lstm(emb(tokens)).first;  // [T, B, H]
    return cross_entropy(reshape(head(h), {-1, V}), reshape(targets, {-1}));
  }
};

// The same model's parameters passed in (ParameterSwap), so the jitted loss is differentiable in
// them: gradients through the compiled backward of the time loop (while_loop's gradient) at
// lengths that change every call equal eager's.
TEST(JitModels, CharLstmGradientsThroughTheDynamicTimeLoopEqualEager) {
  manual_seed(23);
  CharLm m;
  auto f = jit(
      [&m](const Tensor& tok, const Tensor& tgt, const std::vector<Tensor>& params) {
        nn::ParameterSwap swap(m, params);
        return m.loss(tok, tgt);
      },
      JitOptions{.name = "char_lstm_params"});
  std::vector<Tensor> params = m.parameters();
  for (int64_t T : {6, 9, 13, 7}) {
    Tensor tok = randint(0, CharLm::V, {T, 2}), tgt = randint(0, CharLm::V, {T, 2});
    Tensor lj = f(tok, tgt, params);
    Tensor le = m.loss(tok, tgt);
    ASSERT_LT(max_diff(lj, le), 1e-5) << "T = " << T << "\n" << f.explain();
    auto gj = grad({lj}, params), ge = grad({le}, params);
    for (size_t k = 0; k < params.size(); ++k)
      EXPECT_LT(max_diff(gj[k], ge[k]), 1e-5) << "T = " << T << " parameter " << k;
  }
  EXPECT_LE(f.stats().compiles, 2) << f.explain();
  EXPECT_EQ(f.explain().find("runs eagerly"), std::string::npos) << f.explain();
}

// A character LSTM (embedding, LSTM, linear, cross-entropy) jitted and called with lengths
// 5..50 in random order: the time dim becomes dynamic after the second length (a while_loop over
// the steps), so it compiles at most twice; every loss equals eager's.
TEST(JitModels, CharLstmLengthsFiveToFiftyCompileTwice) {
  manual_seed(21);
  const int64_t V = 12, E = 8, H = 16, B = 3;
  nn::Embedding emb(V, E);
  nn::LSTM lstm(nn::RNNOptions{.input_size = E, .hidden_size = H});
  nn::Linear head(H, V);
  auto loss_of = [&](const Tensor& tokens, const Tensor& targets) {
    Tensor h = lstm(emb(tokens)).first;  // [T, B, H]
    return cross_entropy(reshape(head(h), {-1, V}), reshape(targets, {-1}));
  };
  auto f = jit(loss_of, JitOptions{.name = "char_lstm"});
  std::vector<int64_t> lengths;
  for (int64_t t = 5; t <= 50; ++t) lengths.push_back(t);
  std::shuffle(lengths.begin(), lengths.end(), std::mt19937(7));
  for (int64_t T : lengths) {
    Tensor tok = randint(0, V, {T, B}), tgt = randint(0, V, {T, B});
    Tensor lj = f(tok, tgt), le = loss_of(tok, tgt);
    ASSERT_LT(max_diff(lj, le), 1e-5) << "T = " << T << "\n" << f.explain();
  }
  EXPECT_LE(f.stats().compiles, 2) << f.explain();
  EXPECT_FALSE(f.stats().eager_fallback);
}

// RNN and GRU (batch-first), a GPT block and an MoE layer, jitted and called at several batch
// sizes and lengths: equal to eager; the block compiles at most three times. MoE's capacity depends
// on the token count, so its calls are compiled per shape (it says it needs a static size) and
// still agree.
TEST(JitModels, RecurrentTransformerAndMoeAtVaryingSizesEqualEager) {
  manual_seed(22);
  nn::RNN rnn(nn::RNNOptions{.input_size = 4, .hidden_size = 5, .batch_first = true});
  nn::GRU gru(nn::RNNOptions{.input_size = 4, .hidden_size = 5, .num_layers = 2});
  nn::TransformerBlock block(nn::TransformerBlockOptions{.d_model = 8, .num_heads = 2});
  nn::MoE moe(nn::MoEOptions{.d_model = 8, .d_hidden = 16, .num_experts = 4, .top_k = 2});
  auto fr = jit([&](const Tensor& x) { return rnn(x).first; }, JitOptions{.name = "rnn"});
  auto fg = jit([&](const Tensor& x) { return gru(x).second.h; }, JitOptions{.name = "gru"});
  auto fb = jit([&](const Tensor& x) { return block(x); }, JitOptions{.name = "gpt_block"});
  auto fm = jit([&](const Tensor& x) { return moe(x); }, JitOptions{.name = "moe"});
  for (auto [b, t] : {std::pair<int64_t, int64_t>{2, 5}, {2, 7}, {3, 7}, {1, 4}, {2, 5}}) {
    Tensor xr = randn({b, t, 4}), xg = randn({t, b, 4}), xb = randn({b, t, 8});
    EXPECT_LT(max_diff(fr(xr), rnn(xr).first), 1e-5) << b << "x" << t << "\n" << fr.explain();
    EXPECT_LT(max_diff(fg(xg), gru(xg).second.h), 1e-5) << b << "x" << t << "\n" << fg.explain();
    EXPECT_LT(max_diff(fb(xb), block(xb)), 1e-5) << b << "x" << t << "\n" << fb.explain();
    EXPECT_LT(max_diff(fm(xb), moe(xb)), 1e-5) << b << "x" << t << "\n" << fm.explain();
  }
  // Static, then the length dynamic, then the batch too: attention's head split keeps both.
  EXPECT_LE(fb.stats().compiles, 3) << fb.explain();
  EXPECT_FALSE(fr.stats().eager_fallback);
  EXPECT_FALSE(fg.stats().eager_fallback);
}

// The examples' GPT-mini and MoE-GPT models (examples/text_lm_common.h), their logits jitted and
// called at several batch sizes and lengths: equal to eager every time.
TEST(JitModels, GptMiniAndMoeGptAtVaryingBatchAndLengthEqualEager) {
  for (int64_t experts : {0, 4}) {
    manual_seed(24);
    lm::GPT model(/*vocab=*/11, /*seq=*/16, /*d=*/16, /*heads=*/2, /*layers=*/2, experts);
    model.eval();
    auto f = jit([&model](const Tensor& ids) { return model.logits(ids); },
                 JitOptions{.name = experts ? "moe_gpt" : "gpt_mini"});
    for (auto [b, t] : {std::pair<int64_t, int64_t>{2, 5}, {2, 8}, {3, 8}, {1, 16}, {2, 5}}) {
      Tensor ids = randint(0, 11, {b, t});
      EXPECT_LT(max_diff(f(ids), model.logits(ids)), 1e-5)
          << (experts ? "moe " : "") << b << "x" << t << "\n"
          << f.explain();
    }
    EXPECT_FALSE(f.stats().eager_fallback) << f.explain();
  }
}

// ---- backward through a jitted call ---------------------------------------------------------

// A runtime scalar is an input of the compiled function like a tensor: with inputs requiring
// grad its value reaches the forward and the backward (it used to be dropped, so the backward
// graph's inputs were off by one).
TEST(JitRobust, RuntimeScalarWithGradientsUsesItsValue) {
  auto f = jit([](const Tensor& x, const Tensor& s) { return mul(x, s); },
               JitOptions{.runtime_scalars = {1}, .name = "scale_rt"});
  Tensor x = randn({3}).requires_grad_();
  for (double s : {2.0, -3.0}) {
    Tensor y = f(x, s);
    EXPECT_LT(max_diff(y, mul(x, s)), 1e-6) << s;
    EXPECT_LT(max_diff(grad({sum(y)}, {x})[0], full({3}, s)), 1e-6) << s;
  }
}

// The dynamic version's compiled backward assumes scatter_add's src is as wide as its index
// along a dim that became dynamic; when it is wider the compiled backward fails at run time and
// the gradient is taken eagerly, equal to eager's.
TEST(JitRobust, BackwardThatFailsCompiledIsTakenEagerly) {
  auto fn = [](const Tensor& a, const Tensor& idx, const Tensor& src) {
    return scatter_add(a, 1, idx, src);
  };
  auto f = jit(fn, JitOptions{.name = "scatter"});
  Tensor idx = tensor(std::vector<int64_t>{0, 1, 1, 0, 2, 2}, {3, 2});
  for (int64_t w : {3, 4, 5}) {
    Tensor a = randn({3, 4}).requires_grad_(), src = randn({3, w}).requires_grad_();
    Tensor y = f(a, idx, src), ye = fn(a, idx, src);
    EXPECT_LT(max_diff(y, ye), 1e-6) << w;
    auto gj = grad({sum(mul(y, y))}, {a, src}), ge = grad({sum(mul(ye, ye))}, {a, src});
    EXPECT_LT(max_diff(gj[0], ge[0]), 1e-5) << w;
    EXPECT_LT(max_diff(gj[1], ge[1]), 1e-5) << w << "\n" << f.explain();
  }
}

// masked_select's size depends on the mask's values: under jit a graph break guarded on them,
// at varying batch sizes, with its gradient (index_select's) equal to eager's.
TEST(JitRobust, MaskedSelectAtVaryingBatchWithGradient) {
  auto fn = [](const Tensor& x) { return mul(masked_select(x, gt(x, 0.0)), 3.0); };
  auto f = jit(fn, JitOptions{.name = "masked"});
  for (int64_t n : {4, 6, 3}) {
    Tensor x = randn({n, 3}, Float64);
    EXPECT_LT(max_diff(f(x), fn(x)), 1e-12) << n;
    Tensor xg = x.clone().requires_grad_(), xe = x.clone().requires_grad_();
    Tensor gj = grad({sum(mul(f(xg), f(xg)))}, {xg})[0];
    Tensor ge = grad({sum(mul(fn(xe), fn(xe)))}, {xe})[0];
    EXPECT_LT(max_diff(gj, ge), 1e-12) << n;
  }
}
