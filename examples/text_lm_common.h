// Shared driver for the character language-model examples (char_lstm, gpt_mini, moe_gpt):
// command line, the fortunes corpus, the GPT model, eager and jitted AdamW training steps,
// validation loss, the unigram baseline and sampling. The same hyperparameters and data order
// are used by bench/text_models_pytorch.py, so the two end points can be compared.
#pragma once
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/io/text.h"
#include "kiln/kiln.h"
#include "kiln/nn/attention.h"
#include "kiln/nn/rnn.h"
#include "kiln/optim/optim.h"

namespace lm {

using namespace kiln;

struct Config {
  std::string mode = "eager";  // eager | jit
  int64_t steps = 300;
  int64_t batch = 16, seq = 64;
  double lr = 3e-3, weight_decay = 0.01;
  uint64_t seed = 1;
  int64_t eval_batches = 8;
  int64_t log_every = 50;
  int64_t sample_chars = 200;
};

/// --mode eager|jit --steps N --seed S --lr X (the rest is fixed per example).
inline Config parse_args(int argc, char** argv, Config c) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value after %s\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--mode") {
      c.mode = val();
    } else if (a == "--steps") {
      c.steps = std::stoll(val());
    } else if (a == "--seed") {
      c.seed = std::stoull(val());
    } else if (a == "--lr") {
      c.lr = std::stod(val());
    } else if (a == "--log-every") {
      c.log_every = std::stoll(val());
    } else if (a == "--sample") {
      c.sample_chars = std::stoll(val());
    } else {
      std::fprintf(stderr,
                   "usage: %s [--mode eager|jit] [--steps N] [--seed S] [--lr X] "
                   "[--log-every N] [--sample CHARS]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  if (c.mode != "eager" && c.mode != "jit") {
    std::fprintf(stderr, "--mode must be eager or jit, got %s\n", c.mode.c_str());
    std::exit(2);
  }
  if (c.steps < 1) c.steps = 1;
  return c;
}

/// A character model: logits for ids, plus the extra loss terms it adds (MoE aux loss).
class CharModel : public nn::Module {
 public:
  /// ids [B, T] int64 -> logits [B, T, V].
  virtual Tensor logits(const Tensor& ids) = 0;
  /// Loss terms added to the cross-entropy by the last logits() call (undefined: none).
  virtual Tensor extra_loss() { return Tensor(); }
  /// Tensors to report after a step (MoE expert loads), from the last logits() call.
  virtual std::vector<Tensor> stats() { return {}; }
  virtual void print_stats(const std::vector<Tensor>&) {}
  /// Next-character logits [V] for a context (used by sampling); default: rerun on the window.
  virtual std::string sample(const io::CharCorpus& corpus, const std::string& prompt, int64_t n,
                             int64_t window) {
    std::vector<int64_t> ids = corpus.encode(prompt).to_vector<int64_t>();
    NoGradGuard ng;
    for (int64_t i = 0; i < n; ++i) {
      int64_t start = std::max<int64_t>(0, static_cast<int64_t>(ids.size()) - window);
      std::vector<int64_t> ctx(ids.begin() + start, ids.end());
      Tensor x = tensor(ctx, {1, static_cast<int64_t>(ctx.size())});
      Tensor lg = logits(x).select(0, 0).select(0, static_cast<int64_t>(ctx.size()) - 1);
      ids.push_back(draw(lg));
    }
    return corpus.decode(ids);
  }

 protected:
  /// Samples an id from softmax(logits) with the seeded generator.
  static int64_t draw(const Tensor& lg) {
    std::vector<double> p = softmax(lg, -1).to_vector<double>();
    double u = rand({}).item<double>(), acc = 0;
    for (size_t k = 0; k < p.size(); ++k) {
      acc += p[k];
      if (u < acc) return static_cast<int64_t>(k);
    }
    return static_cast<int64_t>(p.size()) - 1;
  }
};

inline Tensor normal_init(const Shape& s) { return randn(s); }
inline Tensor uniform_init(const Shape& s, double bound) {
  return sub(mul(rand(s), 2.0 * bound), bound);
}

/// The character LSTM (examples/char_lstm.cpp): embedding, one LSTM layer, linear head. Under
/// jit a varying length runs the LSTM's time loop as one while_loop.
class CharLSTM : public CharModel {
 public:
  CharLSTM(int64_t vocab, int64_t emb, int64_t hidden)
      : lstm_(nn::RNNOptions{.input_size = emb, .hidden_size = hidden, .batch_first = true}) {
    emb_ = normal_init({vocab, emb});
    register_parameter("emb.weight", &emb_);
    register_module("lstm", &lstm_);
    const double b = 1.0 / std::sqrt(static_cast<double>(hidden));
    head_w_ = uniform_init({vocab, hidden}, b), head_b_ = uniform_init({vocab}, b);
    register_parameter("head.weight", &head_w_);
    register_parameter("head.bias", &head_b_);
  }
  Tensor logits(const Tensor& ids) override {
    auto [out, state] = lstm_(embedding(emb_, ids));  // [B, T, H]
    return linear(out, head_w_, head_b_);
  }

 private:
  Tensor emb_, head_w_, head_b_;
  nn::LSTM lstm_;
};

/// GPT: token + position embeddings (N(0, 1), as nn.Embedding), pre-LN blocks, final LayerNorm,
/// untied linear head.
class GPT : public CharModel {
 public:
  GPT(int64_t vocab, int64_t seq, int64_t d, int64_t heads, int64_t layers, int64_t moe_experts = 0,
      int64_t top_k = 2, double capacity = 1.25, double aux_coef = 0.01)
      : d_(d), aux_coef_(aux_coef) {
    tok_ = normal_init({vocab, d});
    pos_ = normal_init({seq, d});
    register_parameter("tok_emb.weight", &tok_);
    register_parameter("pos_emb.weight", &pos_);
    for (int64_t l = 0; l < layers; ++l) {
      blocks_.push_back(std::make_unique<nn::TransformerBlock>(
          nn::TransformerBlockOptions{.d_model = d,
                                      .num_heads = heads,
                                      .causal = true,
                                      .moe_experts = moe_experts,
                                      .moe_top_k = top_k,
                                      .moe_capacity_factor = capacity}));
      register_module("blocks." + std::to_string(l), blocks_.back().get());
    }
    lnf_w_ = ones({d}), lnf_b_ = zeros({d});
    register_parameter("ln_f.weight", &lnf_w_);
    register_parameter("ln_f.bias", &lnf_b_);
    const double b = 1.0 / std::sqrt(static_cast<double>(d));
    head_w_ = uniform_init({vocab, d}, b), head_b_ = uniform_init({vocab}, b);
    register_parameter("head.weight", &head_w_);
    register_parameter("head.bias", &head_b_);
  }
  Tensor logits(const Tensor& ids) override {
    // A symbol under jit with a dynamic length: one compiled version serves every length.
    const SymInt T = sym_size(ids, 1);
    Tensor h = add(embedding(tok_, ids), slice(pos_, 0, 0, T));
    for (auto& b : blocks_) h = b->forward(h);
    return linear(layer_norm(h, {d_}, lnf_w_, lnf_b_), head_w_, head_b_);
  }
  Tensor extra_loss() override {
    Tensor aux;
    for (auto& b : blocks_)
      if (b->last_moe().aux_loss.defined())
        aux = aux.defined() ? add(aux, b->last_moe().aux_loss) : b->last_moe().aux_loss;
    return aux.defined() ? mul(aux, aux_coef_) : aux;
  }
  std::vector<Tensor> stats() override {
    std::vector<Tensor> s;
    for (auto& b : blocks_)
      if (b->moe()) s.push_back(b->last_moe().expert_assigned), s.push_back(b->last_moe().dropped);
    return s;
  }
  void print_stats(const std::vector<Tensor>& s) override {
    for (size_t l = 0; 2 * l + 1 < s.size(); ++l) {
      std::vector<double> load = s[2 * l].to_vector<double>();
      double total = 0;
      for (double v : load) total += v;
      std::printf("  block %zu expert load:", l);
      for (double v : load) std::printf(" %5.1f%%", 100.0 * v / total);
      std::printf("  dropped %.0f of %.0f assignments (capacity %lld)\n",
                  s[2 * l + 1].item<double>(), total,
                  static_cast<long long>(blocks_[l]->last_moe().capacity));
    }
  }

 private:
  int64_t d_;
  double aux_coef_;
  Tensor tok_, pos_, lnf_w_, lnf_b_, head_w_, head_b_;
  std::vector<std::unique_ptr<nn::TransformerBlock>> blocks_;
};

/// AdamW whose update rule (written in Kiln ops) can be called inside a traced step.
struct FunctionalAdamW : optim::AdamW {
  using optim::Adam::update;
  using optim::AdamW::AdamW;
};

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Mean cross-entropy over the fixed validation batches (eval mode, no grad).
inline double validation_loss(CharModel& m, const std::vector<io::LmBatch>& batches) {
  NoGradGuard ng;
  m.eval();
  double total = 0;
  for (const auto& b : batches) {
    Tensor lg = m.logits(b.x);
    const int64_t V = lg.size(-1);
    total += cross_entropy(reshape(lg, {-1, V}), reshape(b.y, {-1})).item<double>();
  }
  m.train();
  return total / static_cast<double>(batches.size());
}

/// Entropy (nats) of the training character distribution.
inline double train_entropy(const io::CharCorpus& c) {
  std::vector<double> n(static_cast<size_t>(c.vocab_size()), 0.0);
  for (int64_t id : c.train.to_vector<int64_t>()) n[static_cast<size_t>(id)] += 1;
  double total = static_cast<double>(c.train.numel()), h = 0;
  for (double k : n)
    if (k > 0) h -= k / total * std::log(k / total);
  return h;
}

/// Trains `m` with AdamW for cfg.steps, eagerly or with the whole step jitted, then reports
/// validation loss, baselines, speed and a sample. Returns the process exit code: non-zero
/// unless the validation loss fell below its value at initialization.
inline int train_and_report(const char* name, CharModel& m, const io::CharCorpus& corpus,
                            const Config& cfg) {
  std::printf("%s: %lld parameters, mode %s, steps %lld, batch %lld, seq %lld, lr %g\n", name,
              static_cast<long long>(m.num_parameters()), cfg.mode.c_str(),
              static_cast<long long>(cfg.steps), static_cast<long long>(cfg.batch),
              static_cast<long long>(cfg.seq), cfg.lr);
  std::printf("corpus: %lld train / %lld validation characters, vocab %lld\n",
              static_cast<long long>(corpus.train.numel()),
              static_cast<long long>(corpus.val.numel()),
              static_cast<long long>(corpus.vocab_size()));
  auto val_batches = io::lm_eval_batches(corpus.val, cfg.batch, cfg.seq, cfg.eval_batches);
  const double val0 = validation_loss(m, val_batches);
  std::printf("validation loss at init: %.4f\n", val0);
  io::LmSampler sampler(corpus.train, cfg.batch, cfg.seq, cfg.seed);
  optim::AdamOptions ao{.lr = cfg.lr, .weight_decay = cfg.weight_decay};

  auto ce_of = [&](const Tensor& lg, const Tensor& y) {
    const int64_t V = lg.size(-1);
    return cross_entropy(reshape(lg, {-1, V}), reshape(y, {-1}));
  };
  std::vector<Tensor> P = m.parameters();
  const size_t np = P.size();
  double first_compile_s = 0, train_s = 0;
  int64_t timed_steps = 0;
  auto report = [&](int64_t step, double loss, const std::vector<Tensor>& stats) {
    if (step % cfg.log_every == 0 || step == cfg.steps) {
      std::printf("step %5lld  loss %.4f\n", static_cast<long long>(step), loss);
      m.print_stats(stats);
      std::fflush(stdout);
    }
  };
  if (cfg.mode == "eager") {
    optim::AdamW opt(P, ao);
    for (int64_t s = 1; s <= cfg.steps; ++s) {
      io::LmBatch b = sampler.next();
      auto t0 = std::chrono::steady_clock::now();
      opt.zero_grad();
      Tensor loss = ce_of(m.logits(b.x), b.y);
      Tensor extra = m.extra_loss();
      Tensor total = extra.defined() ? add(loss, extra) : loss;
      total.backward();
      opt.step();
      double l = loss.item<double>();
      train_s += seconds_since(t0), ++timed_steps;
      report(s, l, m.stats());
    }
  } else {
    FunctionalAdamW opt(ao);
    // params, adam m, adam v, step -> new params, new m, new v, loss, stats (one flat list:
    // jit results support one trailing vector).
    auto step_fn = [&](const std::vector<Tensor>& state, const Tensor& t, const Tensor& x,
                       const Tensor& y) {
      std::vector<Tensor> leaves;
      for (size_t i = 0; i < np; ++i) leaves.push_back(state[i].detach().requires_grad_());
      nn::ParameterSwap swap(m, leaves);
      Tensor loss = ce_of(m.logits(x), y);
      Tensor extra = m.extra_loss();
      Tensor total = extra.defined() ? add(loss, extra) : loss;
      std::vector<Tensor> g = grad({total}, leaves);
      std::vector<Tensor> out(3 * np);
      for (size_t i = 0; i < np; ++i) {
        std::vector<Tensor> slots{state[np + i], state[2 * np + i]};
        out[i] = opt.update(state[i], g[i], slots, t);
        out[np + i] = slots[0], out[2 * np + i] = slots[1];
      }
      out.push_back(loss.detach());
      for (auto& s : m.stats()) out.push_back(s);
      return out;
    };
    auto jstep = jit(step_fn, JitOptions{.name = std::string(name) + "_train_step"});
    std::vector<Tensor> state;
    {
      NoGradGuard ng;
      for (auto& p : P) state.push_back(p.detach());
      for (int k = 0; k < 2; ++k)
        for (auto& p : P) state.push_back(zeros_like(p));
    }
    for (int64_t s = 1; s <= cfg.steps; ++s) {
      io::LmBatch b = sampler.next();
      auto t0 = std::chrono::steady_clock::now();
      std::vector<Tensor> out =
          jstep(state, scalar_tensor(static_cast<double>(s), Float64), b.x, b.y);
      double l = out[3 * np].item<double>();
      if (s == 1) {
        first_compile_s = seconds_since(t0);
      } else {
        train_s += seconds_since(t0), ++timed_steps;
      }
      state.assign(out.begin(), out.begin() + static_cast<long>(3 * np));
      report(s, l, std::vector<Tensor>(out.begin() + static_cast<long>(3 * np + 1), out.end()));
    }
    // Write the trained values back into the module.
    NoGradGuard ng;
    for (size_t i = 0; i < np; ++i) P[i].copy_(state[i]);
    std::printf(
        "jit: first step (trace + compile + run) %.2f s; compiles %lld, graph breaks %lld\n",
        first_compile_s, static_cast<long long>(jstep.stats().compiles),
        static_cast<long long>(jstep.stats().graph_breaks));
  }
  const double val = validation_loss(m, val_batches);
  const double h_train = train_entropy(corpus);
  const double uni = corpus.unigram_baseline();
  std::printf("steps/s: %.2f (%lld timed steps)\n",
              timed_steps > 0 ? static_cast<double>(timed_steps) / train_s : 0.0,
              static_cast<long long>(timed_steps));
  std::printf(
      "unigram baseline: %.4f nats (entropy of the training characters; "
      "train-unigram cross-entropy on validation %.4f)\n",
      h_train, uni);
  std::printf("final validation loss: %.4f  (%s the unigram baseline by %.4f nats)\n", val,
              val < h_train ? "beats" : "does NOT beat", std::fabs(h_train - val));
  if (cfg.sample_chars > 0) {
    m.eval();
    std::string text = m.sample(corpus, "The ", cfg.sample_chars, cfg.seq);
    std::printf("--- sample ---\n%s\n--------------\n", text.c_str());
  }
  std::printf("RESULT %s mode=%s steps=%lld val_loss=%.6f unigram=%.6f\n", name, cfg.mode.c_str(),
              static_cast<long long>(cfg.steps), val, h_train);
  return std::isfinite(val) && val < val0 ? 0 : 1;
}

}  // namespace lm
