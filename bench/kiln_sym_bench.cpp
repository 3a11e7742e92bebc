// SYM: one dynamic-length jit version against a per-length static one (docs/jit.md, "Symbolic
// sizes"). The examples' GPT (d 128, 4 heads, 2 layers, batch 16, the gpt_mini sizes) at three
// lengths: eager, a jitted function called at that length only (its static version), and one
// jitted function warmed at two other lengths first (the length dynamic, the position slice a
// symbol). Forward (logits) and a training step (loss and gradients of all parameters).
// Interleaved rounds, medians.  ./kiln_sym_bench THREADS
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "bench/bench_util.h"
#include "examples/text_lm_common.h"

using namespace kiln;
using namespace kiln::bench;

namespace {

constexpr int64_t kVocab = 96, kBatch = 16, kMaxT = 64;

Tensor loss_of(lm::CharModel& m, const Tensor& ids, const Tensor& y) {
  Tensor lg = m.logits(ids);
  return cross_entropy(reshape(lg, {-1, lg.size(-1)}), reshape(y, {-1}));
}

void run(int threads) {
  manual_seed(3);
  lm::GPT gpt(kVocab, kMaxT, 128, 4, 2);
  std::vector<Tensor> params = gpt.parameters();
  auto fwd_fn = [&gpt](const Tensor& ids) { return gpt.logits(ids); };
  auto loss_fn = [&gpt](const Tensor& ids, const Tensor& y) { return loss_of(gpt, ids, y); };
  // The dynamic versions: two other lengths first, so every timed length hits the one version.
  auto dyn_fwd = jit(fwd_fn, JitOptions{.name = "dyn_fwd"});
  auto dyn_loss = jit(loss_fn, JitOptions{.name = "dyn_loss"});
  for (int64_t t : {7, 9}) {
    Tensor ids = randint(0, kVocab, {kBatch, t});
    dyn_fwd(ids);
    grad({dyn_loss(ids, ids)}, params);
  }
  for (int64_t T : {16, 32, 64}) {
    Tensor ids = randint(0, kVocab, {kBatch, T}), y = randint(0, kVocab, {kBatch, T});
    auto st_fwd = jit(fwd_fn, JitOptions{.name = "static_fwd"});
    auto st_loss = jit(loss_fn, JitOptions{.name = "static_loss"});
    std::function<void()> f[3] = {[&] { gpt.logits(ids); }, [&] { st_fwd(ids); },
                                  [&] { dyn_fwd(ids); }};
    std::function<void()> s[3] = {[&] { grad({loss_of(gpt, ids, y)}, params); },
                                  [&] { grad({st_loss(ids, y)}, params); },
                                  [&] { grad({dyn_loss(ids, y)}, params); }};
    std::vector<double> tf[3], ts[3];
    for (int r = 0; r < 15; ++r)
      for (int k = 0; k < 3; ++k) {
        tf[k].push_back(median_time(f[k], 1, 5, r == 0 ? 3 : 0));
        ts[k].push_back(median_time(s[k], 1, 3, r == 0 ? 2 : 0));
      }
    const char* mode[3] = {"eager", "jit_static", "jit_dynamic"};
    const std::string p = str_cat("{\"T\": ", T, ", \"batch\": ", kBatch, ", \"d\": 128}");
    for (int k = 0; k < 3; ++k) {
      std::sort(tf[k].begin(), tf[k].end());
      std::sort(ts[k].begin(), ts[k].end());
      emit("SYM", "gpt_forward", "kiln", mode[k], threads, p, "us/call", tf[k][7] * 1e6);
      emit("SYM", "gpt_train_step", "kiln", mode[k], threads, p, "us/step", ts[k][7] * 1e6);
    }
    if (st_fwd.stats().compiles != 1 || st_loss.stats().compiles != 1)
      std::fprintf(stderr, "SYM: a static version recompiled\n");
  }
  if (dyn_fwd.stats().compiles > 2 || dyn_loss.stats().compiles > 2)
    std::fprintf(stderr, "SYM: the dynamic version recompiled:\n%s%s", dyn_fwd.explain().c_str(),
                 dyn_loss.explain().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  set_num_threads(threads);
  run(threads);
  return 0;
}
