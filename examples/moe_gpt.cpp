// GPT-mini with a mixture of experts in place of each block's MLP (4 experts of 128-512-128,
// top-2 routing, capacity factor 1.25, Switch load-balancing loss weighted 0.01). Prints each
// block's expert load and dropped assignments.  ./moe_gpt --mode eager|jit --steps N
#include "text_lm_common.h"

int main(int argc, char** argv) {
  using namespace kiln;
  lm::Config cfg = lm::parse_args(argc, argv, lm::Config{.batch = 16, .seq = 64, .lr = 3e-3});
  manual_seed(cfg.seed);
  io::CharCorpus corpus = io::load_fortunes();
  lm::GPT model(corpus.vocab_size(), cfg.seq, 128, 4, 2, /*moe_experts=*/4, /*top_k=*/2,
                /*capacity=*/1.25, /*aux_coef=*/0.01);
  return lm::train_and_report("moe_gpt", model, corpus, cfg);
}
