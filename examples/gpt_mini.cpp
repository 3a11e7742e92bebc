// GPT-mini character language model on the fortunes corpus (docs/design.md W7: 2 pre-LN blocks, d
// 128, 4 heads, seq 64, batch 16, vocab 96, AdamW), eager or with the whole training step jitted,
// then samples text.  ./gpt_mini --mode eager|jit --steps N
#include "text_lm_common.h"

int main(int argc, char** argv) {
  using namespace kiln;
  lm::Config cfg = lm::parse_args(argc, argv, lm::Config{.batch = 16, .seq = 64, .lr = 3e-3});
  manual_seed(cfg.seed);
  io::CharCorpus corpus = io::load_fortunes();
  lm::GPT model(corpus.vocab_size(), cfg.seq, 128, 4, 2);
  return lm::train_and_report("gpt_mini", model, corpus, cfg);
}
