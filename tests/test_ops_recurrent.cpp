// rnn_sequence beyond its registry samples: the threaded kernel (units split across an OpenMP
// team, a barrier per step, forward and backward) gives bitwise the numbers of one thread, at
// batch 1 and at batch 9, forward and reversed. Also in the TSan build (Makefile TSAN_TESTS),
// which checks that the team's barriers order the steps' reads and writes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "test_util.h"

using namespace kiln;

namespace {

struct SeqRun {
  std::vector<float> h, c, exact_grads;  // from the kernel alone
  Tensor dw, db;                         // summed over steps by a GEMM / a reduction
};

// Forward and backward of one rnn_sequence at `threads` threads (every input requires grad, so
// the forward keeps its hidden products for the backward).
SeqRun run(const std::string& mode, int64_t B, int64_t H, int threads, bool reverse) {
  const int64_t G = mode == "lstm" ? 4 : mode == "gru" ? 3 : 1, T = 7;
  manual_seed(11);
  Tensor xw = randn({T, B, G * H}).requires_grad_();
  Tensor w = mul(randn({G * H, H}), 0.1).detach().requires_grad_();
  Tensor b = mul(randn({G * H}), 0.1).detach().requires_grad_();
  Tensor h0 = randn({B, H}).requires_grad_();
  Tensor c0 = mode == "lstm" ? randn({B, H}).requires_grad_() : Tensor();
  const int prev = get_num_threads();
  set_num_threads(threads);
  RnnSequenceOut r = rnn_sequence(xw, w, b, h0, c0, mode, reverse);
  Tensor loss = sum(mul(r.h, r.h));
  if (r.c.defined()) loss = add(loss, sum(r.c));
  loss.backward();
  set_num_threads(prev);
  SeqRun out{r.h.to_vector<float>(),
             r.c.defined() ? r.c.to_vector<float>() : std::vector<float>(),
             {},
             w.grad(),
             b.grad()};
  for (const Tensor& t : {xw, h0})
    for (float v : t.grad().to_vector<float>()) out.exact_grads.push_back(v);
  if (c0.defined())
    for (float v : c0.grad().to_vector<float>()) out.exact_grads.push_back(v);
  return out;
}

}  // namespace

TEST(RnnSequence, ThreadedStepsEqualOneThreadBitwise) {
  // B H G H >= 2^16 multiply-adds a step: the threaded path (H = 160: 10 unit blocks forward,
  // 3 panels of 64 backward, the last partial).
  for (const char* mode : {"lstm", "gru", "rnn_tanh"})
    for (int64_t B : {1, 9})
      for (bool reverse : {false, true}) {
        const SeqRun one = run(mode, B, mode == std::string("rnn_tanh") ? 320 : 160, 1, reverse);
        const SeqRun two = run(mode, B, mode == std::string("rnn_tanh") ? 320 : 160, 2, reverse);
        SCOPED_TRACE(std::string(mode) + " B " + std::to_string(B) + (reverse ? " reverse" : ""));
        EXPECT_EQ(one.h, two.h);
        EXPECT_EQ(one.c, two.c);
        EXPECT_EQ(one.exact_grads, two.exact_grads);
        EXPECT_LE(kiln_test::max_diff(one.dw, two.dw), 1e-4);
        EXPECT_LE(kiln_test::max_diff(one.db, two.db), 1e-4);
        EXPECT_FALSE(one.h.empty());
      }
}
