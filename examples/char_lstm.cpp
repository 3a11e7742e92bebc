// Character-level LSTM language model on the fortunes corpus (docs/design.md W6 sizes: seq 32,
// batch 32, embedding 64, hidden 256), trained with AdamW eagerly or with the whole step jitted,
// then samples text.  ./char_lstm --mode eager|jit --steps N
#include "text_lm_common.h"

namespace {

using namespace kiln;

class CharLSTM : public lm::CharModel {
 public:
  CharLSTM(int64_t vocab, int64_t emb, int64_t hidden)
      : lstm_(nn::RNNOptions{.input_size = emb, .hidden_size = hidden, .batch_first = true}) {
    emb_ = lm::normal_init({vocab, emb});
    register_parameter("emb.weight", &emb_);
    register_module("lstm", &lstm_);
    const double b = 1.0 / std::sqrt(static_cast<double>(hidden));
    head_w_ = lm::uniform_init({vocab, hidden}, b), head_b_ = lm::uniform_init({vocab}, b);
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

}  // namespace

int main(int argc, char** argv) {
  lm::Config cfg = lm::parse_args(argc, argv, lm::Config{.batch = 32, .seq = 32, .lr = 3e-3});
  manual_seed(cfg.seed);
  io::CharCorpus corpus = io::load_fortunes();
  CharLSTM model(corpus.vocab_size(), 64, 256);
  return lm::train_and_report("char_lstm", model, corpus, cfg);
}
