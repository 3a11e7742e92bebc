// Sequence modules: RNN/LSTM/GRU against a hand-written per-step host reference, gradchecks
// (float64) through LSTM, GRU, causal attention and MoE, causal masking, MoE top-k routing,
// capacity drops and the load-balancing loss, and eager == jit for a MoE transformer block.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "kiln/kiln.h"
#include "kiln/nn/attention.h"
#include "kiln/nn/moe.h"
#include "kiln/nn/rnn.h"
#include "test_util.h"

using namespace kiln;
using namespace kiln::nn;

namespace {

using Vec = std::vector<double>;

double sigm(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// y = W x + b with W [rows, cols] row-major.
Vec affine(const Vec& W, const Vec& b, const Vec& x, int64_t rows) {
  const size_t cols = x.size();
  Vec y(static_cast<size_t>(rows), 0.0);
  for (size_t r = 0; r < y.size(); ++r) {
    double s = b.empty() ? 0.0 : b[r];
    for (size_t c = 0; c < cols; ++c) s += W[r * cols + c] * x[c];
    y[r] = s;
  }
  return y;
}

// Host reference of one layer of RNN/LSTM/GRU over x[t][b] (vectors), PyTorch equations.
struct RefOut {
  std::vector<std::vector<Vec>> y;  // [T][B] -> H
  std::vector<Vec> h, c;            // [B] -> H
};
RefOut reference(RNNBase::Mode mode, const std::map<std::string, Vec>& p, int l,
                 const std::vector<std::vector<Vec>>& x, std::vector<Vec> h, std::vector<Vec> c,
                 int64_t H) {
  std::string s = "_l" + std::to_string(l);
  const Vec &wih = p.at("weight_ih" + s), &whh = p.at("weight_hh" + s);
  const Vec &bih = p.at("bias_ih" + s), &bhh = p.at("bias_hh" + s);
  const int64_t G = mode == RNNBase::Mode::LSTM ? 4 : mode == RNNBase::Mode::GRU ? 3 : 1;
  RefOut out;
  for (const auto& xt : x) {
    std::vector<Vec> yt;
    for (size_t b = 0; b < xt.size(); ++b) {
      Vec gi = affine(wih, bih, xt[b], G * H), gh = affine(whh, bhh, h[b], G * H);
      Vec nh(static_cast<size_t>(H));
      for (int64_t j = 0; j < H; ++j) {
        auto I = [&](int64_t g) { return static_cast<size_t>(g * H + j); };
        if (mode == RNNBase::Mode::RNN) {
          nh[j] = std::tanh(gi[I(0)] + gh[I(0)]);
        } else if (mode == RNNBase::Mode::LSTM) {
          double i = sigm(gi[I(0)] + gh[I(0)]), f = sigm(gi[I(1)] + gh[I(1)]);
          double g = std::tanh(gi[I(2)] + gh[I(2)]), o = sigm(gi[I(3)] + gh[I(3)]);
          c[b][j] = f * c[b][j] + i * g;
          nh[j] = o * std::tanh(c[b][j]);
        } else {
          double r = sigm(gi[I(0)] + gh[I(0)]), z = sigm(gi[I(1)] + gh[I(1)]);
          double n = std::tanh(gi[I(2)] + r * gh[I(2)]);
          nh[j] = (1 - z) * n + z * h[b][j];
        }
      }
      h[b] = nh;
      yt.push_back(nh);
    }
    out.y.push_back(yt);
  }
  out.h = h, out.c = c;
  return out;
}

std::map<std::string, Vec> params_of(const Module& m) {
  std::map<std::string, Vec> p;
  for (auto& [n, t] : m.named_parameters()) p[n] = t.to_vector<double>();
  return p;
}

// Splits a [T, B, F] tensor into host vectors.
std::vector<std::vector<Vec>> to_steps(const Tensor& x) {
  const int64_t T = x.size(0), B = x.size(1), F = x.size(2);
  Vec v = x.contiguous().to_vector<double>();
  std::vector<std::vector<Vec>> out(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t b = 0; b < B; ++b)
      out[t].push_back(Vec(v.begin() + (t * B + b) * F, v.begin() + (t * B + b + 1) * F));
  return out;
}

void check_rnn(RNNBase::Mode mode, int64_t T, int64_t layers, bool batch_first, bool init_state) {
  manual_seed(11);
  const int64_t I = 3, H = 4, B = 2;
  RNNOptions o{.input_size = I, .hidden_size = H, .num_layers = layers, .batch_first = batch_first};
  std::unique_ptr<RNNBase> m;
  if (mode == RNNBase::Mode::RNN) m = std::make_unique<RNN>(o);
  if (mode == RNNBase::Mode::LSTM) m = std::make_unique<LSTM>(o);
  if (mode == RNNBase::Mode::GRU) m = std::make_unique<GRU>(o);
  Tensor x_tbf = randn({T, B, I});
  RNNState st;
  if (init_state) {
    st.h = randn({layers, B, H});
    if (mode == RNNBase::Mode::LSTM) st.c = randn({layers, B, H});
  }
  auto [y, fin] = (*m)(batch_first ? x_tbf.transpose(0, 1).contiguous() : x_tbf, st);
  Tensor y_tbf = batch_first ? y.transpose(0, 1) : y;
  ASSERT_EQ(y_tbf.shape(), (Shape{T, B, H}));
  ASSERT_EQ(fin.h.shape(), (Shape{layers, B, H}));

  auto p = params_of(*m);
  auto steps = to_steps(x_tbf);
  for (int l = 0; l < layers; ++l) {
    std::vector<Vec> h0(B, Vec(H, 0.0)), c0(B, Vec(H, 0.0));
    if (init_state)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < H; ++j) {
          h0[b][j] = st.h.at({l, b, j});
          if (mode == RNNBase::Mode::LSTM) c0[b][j] = st.c.at({l, b, j});
        }
    RefOut r = reference(mode, p, l, steps, h0, c0, H);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < H; ++j) {
        EXPECT_NEAR(fin.h.at({l, b, j}), r.h[b][j], 1e-5);
        if (mode == RNNBase::Mode::LSTM) {
          EXPECT_NEAR(fin.c.at({l, b, j}), r.c[b][j], 1e-5);
        }
      }
    steps = r.y;
  }
  for (int64_t t = 0; t < T; ++t)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < H; ++j) EXPECT_NEAR(y_tbf.at({t, b, j}), steps[t][b][j], 1e-5);
}

TEST(Rnn, LstmOneStepMatchesReference) { check_rnn(RNNBase::Mode::LSTM, 1, 1, false, false); }
TEST(Rnn, LstmSequenceTwoLayersBatchFirst) { check_rnn(RNNBase::Mode::LSTM, 5, 2, true, true); }
TEST(Rnn, GruOneStepMatchesReference) { check_rnn(RNNBase::Mode::GRU, 1, 1, false, true); }
TEST(Rnn, GruSequenceTwoLayers) { check_rnn(RNNBase::Mode::GRU, 5, 2, false, true); }
TEST(Rnn, TanhRnnOneStepAndSequence) {
  check_rnn(RNNBase::Mode::RNN, 1, 1, false, false);
  check_rnn(RNNBase::Mode::RNN, 4, 2, true, true);
}

TEST(Rnn, PyTorchParameterNamesAndShapes) {
  LSTM m(RNNOptions{.input_size = 3, .hidden_size = 5, .num_layers = 2});
  auto np = m.named_parameters();
  ASSERT_EQ(np.size(), 8u);
  EXPECT_EQ(np[0].first, "weight_ih_l0");
  EXPECT_EQ(np[0].second.shape(), (Shape{20, 3}));
  EXPECT_EQ(np[1].first, "weight_hh_l0");
  EXPECT_EQ(np[2].first, "bias_ih_l0");
  EXPECT_EQ(np[4].first, "weight_ih_l1");
  EXPECT_EQ(np[4].second.shape(), (Shape{20, 5}));
  // PyTorch's init: U(-1/sqrt(H), 1/sqrt(H)).
  for (auto& [n, t] : np)
    for (double v : t.to_vector<double>()) EXPECT_LE(std::fabs(v), 1.0 / std::sqrt(5.0) + 1e-7);
}

TEST(Rnn, BadInputRaisesNamedError) {
  GRU m(RNNOptions{.input_size = 3, .hidden_size = 4});
  try {
    m(zeros({2, 5, 7}));
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[GRU]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[2, 5, 7]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(m(zeros({2, 5})), Error);
  EXPECT_THROW(m(zeros({2, 1, 3}), RNNState{.h = zeros({1, 2, 4})}), Error);  // batch 1 != 2
  EXPECT_THROW(LSTM(RNNOptions{.input_size = 0, .hidden_size = 4}), Error);
}

// gradcheck of fn(x, params...) with the module's parameters swapped for float64 copies.
GradcheckResult module_gradcheck(Module& m, const Tensor& x,
                                 const std::function<Tensor(const Tensor&)>& fn) {
  std::vector<Tensor> in{x.to(Float64)};
  for (auto& p : m.parameters()) in.push_back(p.detach().to(Float64));
  return gradcheck(
      [&](const std::vector<Tensor>& a) {
        ParameterSwap swap(m, std::vector<Tensor>(a.begin() + 1, a.end()));
        return fn(a[0]);
      },
      in);
}

TEST(Rnn, GradcheckLstm) {
  manual_seed(3);
  LSTM m(RNNOptions{.input_size = 3, .hidden_size = 4, .batch_first = true});
  auto r = module_gradcheck(m, randn({2, 3, 3}), [&](const Tensor& x) {
    auto [y, s] = m(x);
    return add(sum(y), sum(mul(s.c, s.c)));
  });
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Rnn, GradcheckGru) {
  manual_seed(4);
  GRU m(RNNOptions{.input_size = 3, .hidden_size = 4, .num_layers = 2});
  auto r = module_gradcheck(m, randn({3, 2, 3}), [&](const Tensor& x) {
    auto [y, s] = m(x);
    return mul(y, y);
  });
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Attention, GradcheckCausal) {
  manual_seed(5);
  MultiheadAttention m(MultiheadAttentionOptions{.embed_dim = 4, .num_heads = 2, .causal = true});
  auto r = module_gradcheck(m, randn({2, 3, 4}), [&](const Tensor& x) { return m(x); });
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Attention, CausalMaskReallyMasks) {
  manual_seed(6);
  MultiheadAttention m(MultiheadAttentionOptions{.embed_dim = 8, .num_heads = 2, .causal = true});
  NoGradGuard ng;
  Tensor x = randn({2, 6, 8});
  Tensor y = m(x);
  Tensor x2 = x.clone();
  x2.slice(1, 4, 5).copy_(randn({2, 1, 8}));  // perturb position 4 only
  Tensor y2 = m(x2);
  for (int64_t t = 0; t < 6; ++t) {
    double d = max(abs(sub(y.select(1, t), y2.select(1, t)))).item<double>();
    if (t < 4) {
      EXPECT_EQ(d, 0.0) << "output at t=" << t << " depends on input at t=4";
    } else {
      EXPECT_GT(d, 1e-4) << "output at t=" << t << " ignores input at t=4";
    }
  }
  // Without the causal option every position sees position 4; an explicit bool mask (true =
  // blocked, as PyTorch) equal to the causal pattern gives the causal result.
  MultiheadAttention full(MultiheadAttentionOptions{.embed_dim = 8, .num_heads = 2});
  full.load_state_dict(m.state_dict());
  EXPECT_GT(max(abs(sub(full(x).select(1, 0), full(x2).select(1, 0)))).item<double>(), 1e-4);
  std::vector<bool> blocked;
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 6; ++j) blocked.push_back(j > i);
  Tensor masked = full.forward(x, x, x, tensor(blocked, {6, 6}));
  EXPECT_LT(max(abs(sub(masked, y))).item<double>(), 1e-6);
}

TEST(Attention, MatchesHandComputedSingleHead) {
  manual_seed(9);
  MultiheadAttention m(MultiheadAttentionOptions{.embed_dim = 3, .num_heads = 1});
  NoGradGuard ng;
  Tensor x = randn({1, 4, 3});
  auto p = params_of(m);
  // q, k, v rows by hand; softmax(q k^T / sqrt(3)) v; then out_proj.
  std::vector<Vec> q, k, v;
  Vec xv = x.to_vector<double>(), W = p["in_proj_weight"], b = p["in_proj_bias"];
  for (int t = 0; t < 4; ++t) {
    Vec xt(xv.begin() + 3 * t, xv.begin() + 3 * t + 3);
    Vec all = affine(W, b, xt, 9);
    q.push_back(Vec(all.begin(), all.begin() + 3));
    k.push_back(Vec(all.begin() + 3, all.begin() + 6));
    v.push_back(Vec(all.begin() + 6, all.end()));
  }
  Tensor y = m(x);
  for (int t = 0; t < 4; ++t) {
    Vec s(4);
    for (int u = 0; u < 4; ++u)
      s[u] = (q[t][0] * k[u][0] + q[t][1] * k[u][1] + q[t][2] * k[u][2]) / std::sqrt(3.0);
    double mx = *std::max_element(s.begin(), s.end()), z = 0;
    for (auto& e : s) z += (e = std::exp(e - mx));
    Vec o(3, 0.0);
    for (int u = 0; u < 4; ++u)
      for (int j = 0; j < 3; ++j) o[j] += s[u] / z * v[u][j];
    Vec out = affine(p["out_proj.weight"], p["out_proj.bias"], o, 3);
    for (int j = 0; j < 3; ++j) EXPECT_NEAR(y.at({0, t, j}), out[j], 1e-5);
  }
}

// Expert e's MLP on one token, with Kiln ops on the expert's slices.
Tensor expert_ref(MoE& m, int64_t e, const Tensor& x) {
  auto p = m.parameters();  // router, w1, b1, w2, b2
  Tensor h = gelu(linear(x, p[1].select(0, e), p[2].select(0, e)));
  return linear(h, p[3].select(0, e), p[4].select(0, e));
}

TEST(MoE, RoutesEachTokenToTopKExperts) {
  manual_seed(12);
  const int64_t N = 10, D = 4, E = 4, K = 2;
  MoE m(MoEOptions{.d_model = D,
                   .d_hidden = 6,
                   .num_experts = E,
                   .top_k = K,
                   .capacity_factor = 4.0});  // room for every token: nothing dropped
  NoGradGuard ng;
  Tensor x = randn({2, N / 2, D});
  MoEOutput o = m.route(x);
  ASSERT_EQ(o.y.shape(), x.shape());
  EXPECT_EQ(o.dropped.item<double>(), 0.0);
  EXPECT_EQ(sum(o.expert_assigned).item<double>(), double(N * K));
  Tensor xf = reshape(x, {N, D});
  Tensor probs = softmax(linear(xf, m.parameters()[0]), -1);
  std::vector<double> counts(E, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    Vec pr = probs.select(0, n).to_vector<double>();
    std::vector<int64_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return pr[a] > pr[b]; });
    Tensor want = zeros({D});
    for (int64_t j = 0; j < K; ++j) {
      want = add(want, mul(expert_ref(m, order[j], xf.select(0, n)), pr[order[j]]));
      counts[order[j]] += 1;
    }
    EXPECT_LT(max(abs(sub(reshape(o.y, {N, D}).select(0, n), want))).item<double>(), 1e-5)
        << "token " << n;
  }
  EXPECT_EQ(o.expert_assigned.to_vector<double>(), counts);
}

TEST(MoE, CapacityDropsOverflowTokens) {
  const int64_t N = 8, D = 3, E = 2;
  MoE m(MoEOptions{
      .d_model = D, .d_hidden = 5, .num_experts = E, .top_k = 1, .capacity_factor = 0.5});
  EXPECT_EQ(m.capacity(N), 2);  // ceil(0.5 * 8 * 1 / 2)
  NoGradGuard ng;
  // Router sends every token to expert 0 (feature 0 is positive, only expert 0 reads it).
  m.parameters()[0].copy_(tensor({5.f, 0.f, 0.f, 0.f, 0.f, 0.f}, {2, 3}));
  Tensor x = add(rand({N, D}), tensor({1.f, 0.f, 0.f}));
  MoEOutput o = m.route(x);
  EXPECT_EQ(o.capacity, 2);
  EXPECT_EQ(o.expert_assigned.to_vector<double>(), (Vec{8, 0}));
  EXPECT_EQ(o.expert_kept.to_vector<double>(), (Vec{2, 0}));
  EXPECT_EQ(o.dropped.item<double>(), 6.0);
  Tensor probs = softmax(linear(x, m.parameters()[0]), -1);
  for (int64_t n = 0; n < N; ++n) {
    Tensor yn = o.y.select(0, n);
    if (n < 2) {  // the first tokens fill the buffer
      Tensor want = mul(expert_ref(m, 0, x.select(0, n)), probs.at({n, 0}));
      EXPECT_LT(max(abs(sub(yn, want))).item<double>(), 1e-5);
    } else {
      EXPECT_EQ(max(abs(yn)).item<double>(), 0.0) << "dropped token " << n << " got output";
    }
  }
}

TEST(MoE, AuxLossHandChecked) {
  MoE m(MoEOptions{
      .d_model = 2, .d_hidden = 3, .num_experts = 2, .top_k = 1, .capacity_factor = 2.0});
  NoGradGuard ng;
  m.parameters()[0].copy_(tensor({1.f, 0.f, 0.f, 1.f}, {2, 2}));  // logits = x
  Tensor x = tensor({2.f, 0.f, 0.f, 2.f, 2.f, 0.f, 2.f, 0.f}, {4, 2});
  MoEOutput o = m.route(x);
  const double s = 1.0 / (1.0 + std::exp(-2.0));  // softmax([2, 0])[0]
  const double f0 = 0.75, f1 = 0.25;              // 3 tokens chose expert 0, 1 chose expert 1
  const double P0 = (3 * s + (1 - s)) / 4, P1 = (3 * (1 - s) + s) / 4;
  EXPECT_NEAR(o.aux_loss.item<double>(), 2 * (f0 * P0 + f1 * P1), 1e-6);
  // Perfectly balanced, uniform router: exactly 1.
  m.parameters()[0].fill_(0.0);
  MoE m4(MoEOptions{.d_model = 2, .d_hidden = 3, .num_experts = 2, .top_k = 2});
  EXPECT_NEAR(m4.route(x).aux_loss.item<double>(), 1.0, 1e-6);  // k = E: every expert, every token
}

TEST(MoE, Gradcheck) {
  manual_seed(13);
  MoE m(MoEOptions{.d_model = 3,
                   .d_hidden = 4,
                   .num_experts = 3,
                   .top_k = 2,
                   .capacity_factor = 1.0});  // capacity 3 for 4 tokens * 2: some drops
  auto r = module_gradcheck(m, randn({4, 3}), [&](const Tensor& x) {
    MoEOutput o = m.route(x);
    return add(sum(mul(o.y, o.y)), o.aux_loss);
  });
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(MoE, BadInputRaisesNamedError) {
  MoE m(MoEOptions{.d_model = 3, .d_hidden = 4, .num_experts = 3, .top_k = 2});
  try {
    m(zeros({4, 5}));
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[MoE]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(MoE(MoEOptions{.d_model = 3, .d_hidden = 4, .num_experts = 2, .top_k = 3}), Error);
}

TEST(TransformerBlock, MoeBlockEagerEqualsJitWithoutBreaks) {
  manual_seed(14);
  TransformerBlock blk(
      TransformerBlockOptions{.d_model = 16, .num_heads = 2, .moe_experts = 4, .moe_top_k = 2});
  Tensor x = randn({2, 5, 16});
  Tensor eager, eager_aux;
  {
    NoGradGuard ng;
    eager = blk(x);
    eager_aux = blk.last_moe().aux_loss;
  }
  auto f = jit([&](const Tensor& xin) {
    Tensor y = blk(xin);
    return std::vector<Tensor>{y, blk.last_moe().aux_loss};
  });
  for (int i = 0; i < 2; ++i) {
    auto r = f(x);
    EXPECT_LT(max(abs(sub(r[0], eager))).item<double>(), 1e-5);
    EXPECT_NEAR(r[1].item<double>(), eager_aux.item<double>(), 1e-6);
  }
  EXPECT_EQ(f.stats().graph_breaks, 0);
  EXPECT_EQ(f.stats().compiles, 1);
}

TEST(TransformerBlock, DenseBlockGradcheck) {
  manual_seed(15);
  TransformerBlock blk(TransformerBlockOptions{.d_model = 4, .num_heads = 2, .mlp_ratio = 2});
  auto r = module_gradcheck(blk, randn({1, 3, 4}), [&](const Tensor& x) { return blk(x); });
  EXPECT_TRUE(r.ok) << r.message;
}

}  // namespace

// ---- bad input found by probing the public API ----------------------------------------------

TEST(SeqProbe, AttentionOptionsAndInputs) {
  using kiln_test::expect_error;
  const double nan = std::nan("");
  // NaN dropout passed the range check (and then meant no dropout).
  expect_error([&] { MultiheadAttention({.embed_dim = 4, .num_heads = 2, .dropout = nan}); },
               "MultiheadAttention", {"dropout", "nan"});
  // 3 * embed_dim overflowed into a negative shape.
  expect_error([] { MultiheadAttention({.embed_dim = int64_t(1) << 62}); }, "MultiheadAttention",
               {"embed_dim"});
  MultiheadAttention m({.embed_dim = 4, .num_heads = 2});
  Tensor x = randn({1, 3, 4});
  // An int64 mask was cast and added to the scores; PyTorch accepts bool or floating only.
  expect_error(
      [&] {
        m.forward(x, x, x, ones({3, 3}, Int64));
      },
      "MultiheadAttention", {"attn_mask", "int64"});
  expect_error(
      [&] {
        m.forward(x, randn({1, 3, 4}, Float64), x);
      },
      "MultiheadAttention", {"float32", "float64[1, 3, 4]"});
  EXPECT_EQ(m.forward(x, x, x, zeros({3, 3}, Bool)).shape(), Shape({1, 3, 4}));

  // TransformerBlock names itself rather than the attention layer it builds, and refuses what it
  // used to accept or overflow on.
  expect_error([] { TransformerBlock({.d_model = 6, .num_heads = 4}); }, "TransformerBlock",
               {"d_model (6)", "num_heads (4)"});
  expect_error([] { TransformerBlock({.d_model = 4, .mlp_ratio = int64_t(1) << 62}); },
               "TransformerBlock", {"mlp_ratio * d_model"});
  expect_error([] { TransformerBlock({.d_model = 4, .moe_experts = -1}); }, "TransformerBlock",
               {"moe_experts"});
  TransformerBlock blk({.d_model = 4, .num_heads = 2});
  expect_error([&] { blk(zeros({1, 2, 4}, Int64)); }, "TransformerBlock", {"int64"});
}

TEST(SeqProbe, MoECapacityStaysFinite) {
  using kiln_test::expect_error;
  // An infinite factor converted inf to int64 (undefined behaviour).
  expect_error(
      [] { MoE({.d_model = 4, .d_hidden = 4, .num_experts = 2, .capacity_factor = INFINITY}); },
      "MoE", {"capacity_factor", "inf"});
  MoE huge({.d_model = 4, .d_hidden = 4, .num_experts = 2, .capacity_factor = 1e300});
  expect_error([&] { huge.capacity(8); }, "MoE", {"too large"});
  expect_error([&] { huge(randn({8, 4})); }, "MoE", {"too large"});
  MoE m({.d_model = 4, .d_hidden = 4, .num_experts = 2});
  expect_error([&] { m.capacity(-5); }, "MoE", {"tokens must be >= 0"});
  expect_error([&] { m(randn({2, 4}, Float64)); }, "MoE", {"float32", "float64"});
  EXPECT_EQ(m.capacity(8), 5);
}

TEST(SeqProbe, RecurrentStateDtypeAndSizes) {
  using kiln_test::expect_error;
  LSTM l({.input_size = 3, .hidden_size = 4});
  Tensor x = zeros({5, 2, 3});
  expect_error(
      [&] {
        l(x, {zeros({1, 2, 4}, Float64), Tensor()});
      },
      "LSTM", {"initial h", "float32[1, 2, 4]", "float64[1, 2, 4]"});
  expect_error(
      [&] {
        l(x, {zeros({1, 2, 4}), zeros({1, 2, 4}, Int64)});
      },
      "LSTM", {"initial c", "int64"});
  expect_error([&] { l(zeros({5, 2, 3}, Float64)); }, "LSTM", {"float32", "float64[5, 2, 3]"});
  // gates * hidden_size overflowed into a negative weight shape.
  expect_error([] { GRU({.input_size = 3, .hidden_size = int64_t(1) << 62}); }, "GRU",
               {"hidden_size"});
}
