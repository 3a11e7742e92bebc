// Character-level LSTM language model on the fortunes corpus (docs/design.md W6 sizes: seq 32,
// batch 32, embedding 64, hidden 256), trained with AdamW eagerly or with the whole step jitted,
// then samples text.  ./char_lstm --mode eager|jit --steps N
#include "text_lm_common.h"

using namespace kiln;
using lm::CharLSTM;

int main(int argc, char** argv) {
  lm::Config cfg = lm::parse_args(argc, argv, lm::Config{.batch = 32, .seq = 32, .lr = 3e-3});
  manual_seed(cfg.seed);
  io::CharCorpus corpus = io::load_fortunes();
  CharLSTM model(corpus.vocab_size(), 64, 256);
  return lm::train_and_report("char_lstm", model, corpus, cfg);
}
