// GPT-mini (the W7 model: 2 pre-LN blocks, d 128, 4 heads, seq 64, global batch 16, AdamW) on
// the fortunes corpus, trained data-parallel:
//   mpirun -np 2 ./build/release/examples/ddp_gpt_mini [--mode eager|jit] [--steps N] ...
// Each rank draws its own windows (the sampler seeded with seed + rank) for batch / ranks rows;
// gradients are averaged by DistributedDataParallel (eager) or by one all_reduce node per bucket
// inside the jitted step (jit). Rank 0 alone logs, evaluates and samples. Exits non-zero unless
// the validation loss fell. Without mpirun it runs as one process.
#include "kiln/dist/ddp.h"
#include "text_lm_common.h"

using namespace kiln;

int main(int argc, char** argv) {
  dist::init();
  lm::Config cfg = lm::parse_args(argc, argv, lm::Config{.batch = 16, .seq = 64, .lr = 3e-3});
  const int ranks = dist::world_size();
  if (cfg.batch % ranks != 0) {
    if (dist::is_main()) std::fprintf(stderr, "ddp_gpt_mini: batch must divide by the ranks\n");
    return 2;
  }
  const int64_t local_batch = cfg.batch / ranks;
  manual_seed(cfg.seed);
  io::CharCorpus corpus = io::load_fortunes();
  lm::GPT model(corpus.vocab_size(), cfg.seq, 128, 4, 2);
  dist::DDP ddp(model);
  auto val_batches = io::lm_eval_batches(corpus.val, cfg.batch, cfg.seq, cfg.eval_batches);
  const double val0 = dist::is_main() ? lm::validation_loss(model, val_batches) : 0;
  if (dist::is_main())
    std::printf(
        "ddp_gpt_mini: %lld parameters, %s, %d rank(s) x %d thread(s), global batch %lld (%lld "
        "per rank), %lld steps, %zu gradient bucket(s); validation loss at init %.4f\n",
        static_cast<long long>(model.num_parameters()), cfg.mode.c_str(), ranks, get_num_threads(),
        static_cast<long long>(cfg.batch), static_cast<long long>(local_batch),
        static_cast<long long>(cfg.steps), ddp.buckets().size(), val0);
  io::LmSampler sampler(corpus.train, local_batch, cfg.seq,
                        cfg.seed + static_cast<uint64_t>(dist::rank()));
  optim::AdamOptions ao{.lr = cfg.lr, .weight_decay = cfg.weight_decay};
  auto ce = [](const Tensor& lg, const Tensor& y) {
    return cross_entropy(reshape(lg, {-1, lg.size(-1)}), reshape(y, {-1}));
  };
  std::vector<Tensor> P = model.parameters();
  const size_t np = P.size();
  auto t0 = std::chrono::steady_clock::now();
  auto log = [&](int64_t s, const Tensor& loss) {
    if (dist::is_main() && (s % cfg.log_every == 0 || s == cfg.steps)) {
      std::printf("step %5lld  loss %.4f (rank 0's shard)\n", static_cast<long long>(s),
                  loss.item<double>());
      std::fflush(stdout);
    }
  };
  if (cfg.mode == "eager") {
    optim::AdamW opt(P, ao);
    for (int64_t s = 1; s <= cfg.steps; ++s) {
      io::LmBatch b = sampler.next();
      Tensor loss = ce(model.logits(b.x), b.y);
      opt.zero_grad();
      loss.backward();  // buckets all-reduced while backward runs
      opt.step();
      log(s, loss);
    }
  } else {
    lm::FunctionalAdamW opt(ao);
    auto jstep = jit(
        [&](const std::vector<Tensor>& st, const Tensor& t, const Tensor& x, const Tensor& y) {
          std::vector<Tensor> leaves;
          for (size_t i = 0; i < np; ++i) leaves.push_back(st[i].detach().requires_grad_());
          nn::ParameterSwap swap(model, leaves);
          Tensor loss = ce(model.logits(x), y);
          std::vector<Tensor> g = grad({loss}, leaves);
          ddp.average_gradients(g);
          std::vector<Tensor> out(3 * np);
          for (size_t i = 0; i < np; ++i) {
            std::vector<Tensor> slots{st[np + i], st[2 * np + i]};
            out[i] = opt.update(st[i], g[i], slots, t);
            out[np + i] = slots[0], out[2 * np + i] = slots[1];
          }
          out.push_back(loss.detach());
          return out;
        },
        JitOptions{.name = "ddp_gpt_mini_step"});
    std::vector<Tensor> state;
    {
      NoGradGuard ng;
      for (auto& p : P) state.push_back(p.detach());
      for (int k = 0; k < 2; ++k)
        for (auto& p : P) state.push_back(zeros_like(p));
    }
    for (int64_t s = 1; s <= cfg.steps; ++s) {
      io::LmBatch b = sampler.next();
      std::vector<Tensor> out =
          jstep(state, scalar_tensor(static_cast<double>(s), Float64), b.x, b.y);
      state.assign(out.begin(), out.begin() + static_cast<long>(3 * np));
      log(s, out.back());
    }
    NoGradGuard ng;
    for (size_t i = 0; i < np; ++i) P[i].copy_(state[i]);
    if (dist::is_main())
      std::printf("jit: %lld compile(s), %lld graph break(s)\n",
                  static_cast<long long>(jstep.stats().compiles),
                  static_cast<long long>(jstep.stats().graph_breaks));
  }
  const double secs = lm::seconds_since(t0);
  Tensor ok = scalar_tensor(0.0, Float64);
  if (dist::is_main()) {
    const double val = lm::validation_loss(model, val_batches);
    std::printf("final validation loss %.4f (at init %.4f); %.2f global steps/s\n", val, val0,
                static_cast<double>(cfg.steps) / secs);
    if (cfg.sample_chars > 0) {
      model.eval();
      std::printf("--- sample ---\n%s\n--------------\n",
                  model.sample(corpus, "The ", cfg.sample_chars, cfg.seq).c_str());
    }
    ok = scalar_tensor(std::isfinite(val) && val < val0 ? 1.0 : 0.0, Float64);
  }
  dist::broadcast(ok, 0);  // every rank exits with rank 0's verdict
  return ok.item<double>() > 0 ? 0 : 1;
}
