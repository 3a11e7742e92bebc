// Kiln's side of the model workloads W5 (LeNet-5), W7 (GPT-mini; W7_BF16 under bfloat16
// autocast beside float32) and W8 (top-2 MoE layer) of
// docs/design.md section 10, each as a training step (W8: forward + backward) in eager, graph and
// jit modes. The models are plain functions of a parameter list written in Kiln ops, so one
// function serves all three modes. One workload per process, so that peak RSS is per workload:
//   kiln_models_bench W5|W7|W7_BF16|W8 THREADS [eager,graph,jit | latency | jitfwd |
//   jitfwd_peak_saved | jitfwd_peak_recompute]
// JSON lines as kiln_bench (bench/bench_util.h).
#include <cblas.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "bench/bench_util.h"
#include "kiln/codegen/codegen.h"
#include "kiln/kernels/cpu/gemm.h"
#include "kiln/kiln.h"
#include "kiln/optim/optim.h"

using namespace kiln::detail;

using namespace kiln;
using namespace kiln::bench;

namespace {

using Params = std::vector<Tensor>;
using LossFn = Tensor (*)(const Params&, const Tensor&, const Tensor&);

// torch.nn.Linear / Conv2d default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias.
Tensor uinit(const Shape& s, int64_t fan_in) {
  double b = 1.0 / std::sqrt(static_cast<double>(fan_in));
  return sub(mul(rand(s), 2.0 * b), b);
}

bool want(const std::string& modes, const char* m) { return modes.find(m) != std::string::npos; }

// The loss of each mode's first step (all start from the same parameters, so they must agree),
// printed to stderr as a check that the modes compute the same thing.
struct FirstLoss {
  std::vector<std::pair<std::string, double>> seen;
  void note(const std::string& mode, const Tensor& loss) {
    for (const auto& s : seen)
      if (s.first == mode) return;
    seen.emplace_back(mode, loss.item<double>());
  }
  void print(const std::string& workload) const {
    std::cerr << "[kiln_models_bench] " << workload << " first-step loss:";
    for (const auto& [m, v] : seen) std::cerr << " " << m << " " << v;
    std::cerr << "\n";
  }
};

// Times the enabled step functions interleaved over `rounds` rounds (so that drift in machine
// load hits every mode alike) and returns each one's median seconds per step.
std::vector<double> time_interleaved(const std::vector<std::function<void()>>& fs, int rounds) {
  std::vector<int> inner;
  for (const auto& f : fs) {
    f();  // first call: traces/compiles (jit), builds plans (graph), fills caches
    inner.push_back(calibrate(f, 0.15));
  }
  // KILN_PROFILE=1: the table at exit covers the timed rounds only, not tracing and warm-up.
  profile_reset();
  std::vector<std::vector<double>> t(fs.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < fs.size(); ++i)
      t[i].push_back(median_time(fs[i], 1, inner[i], r == 0 ? 1 : 0));
  std::vector<double> med;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    med.push_back(v[v.size() / 2]);
  }
  return med;
}

// A training step of `loss_fn` in the requested modes, timed and emitted. opt: "sgd" (lr 0.01)
// or "adamw" (lr 1e-3, weight decay 0.01, betas 0.9/0.999, eps 1e-8, as torch.optim.AdamW).
struct TrainBench {
  std::string workload, name, params_json, opt;
  LossFn loss_fn;
  Params init;
  Tensor x, y;  // one fixed batch, as the PyTorch side
};

constexpr double kSgdLr = 0.01, kAdamLr = 1e-3, kWd = 0.01, kB1 = 0.9, kB2 = 0.999, kEps = 1e-8;

// The bound Session plan's arena (planned peak of the step's intermediates) beside the sum of
// the same buffers without reuse.
void emit_plan(const std::string& w, const std::string& name, int threads, const std::string& p,
               const RunStats& st) {
  if (st.unplanned_bytes <= 0) return;
  double mib = 1024.0 * 1024.0;
  std::string params =
      p.substr(0, p.size() - 1) +
      ", \"unplanned_MiB\": " + std::to_string(st.unplanned_bytes / mib) +
      ", \"ratio\": " + std::to_string(double(st.arena_bytes) / double(st.unplanned_bytes)) + "}";
  emit(w, name, "kiln", "graph", threads, params, "planned_peak_MiB", st.arena_bytes / mib);
}

// One SGD step written with grad() (the jitted steps' body): the new parameters, then the loss.
Params sgd_update(LossFn lf, const Params& prm, const Tensor& xin, const Tensor& yin) {
  Params q;
  for (const auto& t : prm) q.push_back(t.detach().requires_grad_());
  Tensor l = lf(q, xin, yin);
  Params gs = grad({l}, q);
  Params out;
  for (size_t i = 0; i < prm.size(); ++i) out.push_back(sub(prm[i], mul(gs[i], kSgdLr)));
  out.push_back(l.detach());
  return out;
}

// One AdamW step written with grad() (the jitted steps' body): the new parameters, first and
// second moments, then the loss. amp: the forward under bfloat16 autocast (traced with its casts;
// the gradients come back float32 through them).
Params adam_update(LossFn lf, bool amp, const Params& prm, const Params& m, const Params& v,
                   const Tensor& xin, const Tensor& yin, const Tensor& bc1, const Tensor& bc2) {
  Params q;
  for (const auto& t : prm) q.push_back(t.detach().requires_grad_());
  Tensor l;
  {
    AutocastGuard ac(BF16, amp);
    l = lf(q, xin, yin);
  }
  Params gs = grad({l}, q);
  Params np, nm, nv;
  for (size_t i = 0; i < prm.size(); ++i) {
    nm.push_back(add(mul(m[i], kB1), mul(gs[i], 1 - kB1)));
    nv.push_back(add(mul(v[i], kB2), mul(mul(gs[i], gs[i]), 1 - kB2)));
    Tensor upd = div(div(nm[i], bc1), add(sqrt(div(nv[i], bc2)), kEps));
    np.push_back(sub(prm[i], mul(add(upd, mul(prm[i], kWd)), kAdamLr)));
  }
  Params out = np;
  out.insert(out.end(), nm.begin(), nm.end());
  out.insert(out.end(), nv.begin(), nv.end());
  out.push_back(l.detach());
  return out;
}

// The eager optimizer of a TrainBench: AdamW or SGD with the constants above.
std::unique_ptr<optim::Optimizer> make_optimizer(const Params& p, bool adam) {
  if (adam)
    return std::make_unique<optim::AdamW>(
        p, optim::AdamOptions{
               .lr = kAdamLr, .beta1 = kB1, .beta2 = kB2, .eps = kEps, .weight_decay = kWd});
  return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = kSgdLr});
}

double ms_of(const std::function<void()>& f) {
  const double t0 = now_s();
  f();
  return (now_s() - t0) * 1e3;
}

double median_ms(const std::function<void()>& f, int n) {
  std::vector<double> t;
  for (int i = 0; i < n; ++i) t.push_back(ms_of(f));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Mode "latency": what the first jitted step costs beside an eager step, in this process (run it
// with an empty KILN_CACHE_DIR for a cold generated-code cache, again for a warm one, and with
// KILN_CODEGEN_ASYNC=0 to see the stall background compiles avoid). Both steps are SGD steps;
// the jitted one is the whole step (forward, grad(), update) as in run_train_bench.
void latency_bench(const TrainBench& tb, int threads) {
  // SGD on both sides, so that the two steps do the same work.
  Params pe;
  for (const auto& t : tb.init) pe.push_back(t.clone().requires_grad_());
  auto opt = std::make_unique<optim::SGD>(pe, optim::SGDOptions{.lr = kSgdLr});
  auto eager_step = [&] {
    Tensor loss = tb.loss_fn(pe, tb.x, tb.y);
    opt->zero_grad();
    loss.backward();
    opt->step();
  };
  const double eager_first = ms_of(eager_step);
  const double eager_ms = median_ms(eager_step, 5);
  LossFn lf = tb.loss_fn;
  auto step = jit([lf](const Params& prm, const Tensor& xin, const Tensor& yin) {
    return sgd_update(lf, prm, xin, yin);
  });
  Params pj = tb.init;
  auto jit_step = [&] {
    Params r = step(pj, tb.x, tb.y);
    for (size_t i = 0; i < pj.size(); ++i) pj[i] = r[i];
  };
  const auto cg0 = codegen::stats();
  const double first = ms_of(jit_step);
  // Trace + optimize + plan: the version's compile time as explain() reports it.
  double trace_ms = 0;
  {
    const std::string e = step.explain();
    const size_t at = e.find("compile time ");
    if (at != std::string::npos) trace_ms = std::atof(e.c_str() + at + 13);
  }
  std::vector<double> next;
  for (int i = 0; i < 5; ++i) next.push_back(ms_of(jit_step));
  const double t_wait0 = now_s();
  codegen::wait_idle();
  const double waited_ms = (now_s() - t_wait0) * 1e3;
  const auto cg1 = codegen::stats();
  const double steady = median_ms(jit_step, 7);
  const std::string p =
      tb.params_json.substr(0, tb.params_json.size() - 1) +
      ", \"step_opt\": \"sgd\", \"async\": " + (codegen::async() ? "true" : "false") +
      ", \"kernels_compiled\": " + std::to_string(cg1.compiles - cg0.compiles) +
      ", \"kernels_from_disk\": " + std::to_string(cg1.disk_hits - cg0.disk_hits) + "}";
  const std::string n = tb.name;
  emit(tb.workload, n, "kiln", "eager_first_step", threads, p, "ms", eager_first);
  emit(tb.workload, n, "kiln", "eager_step", threads, p, "ms", eager_ms);
  emit(tb.workload, n, "kiln", "jit_first_step", threads, p, "ms", first);
  emit(tb.workload, n, "kiln", "jit_trace_optimize", threads, p, "ms", trace_ms);
  emit(tb.workload, n, "kiln", "codegen_compile_cold", threads, p, "ms",
       cg1.compile_ms - cg0.compile_ms);
  emit(tb.workload, n, "kiln", "codegen_load_warm", threads, p, "ms", cg1.load_ms - cg0.load_ms);
  emit(tb.workload, n, "kiln", "jit_steps_2_to_6_max", threads, p, "ms",
       *std::max_element(next.begin(), next.end()));
  emit(tb.workload, n, "kiln", "jit_wait_for_background", threads, p, "ms", waited_ms);
  emit(tb.workload, n, "kiln", "jit_step", threads, p, "ms", steady);
}

// Mode "jitfwd": the loss's forward jitted, the backward through jit_call, the optimizer eager;
// the backward fed saved activations vs recomputing the forward (JitOptions::save_activations),
// steps/s interleaved. Modes "jitfwd_peak_saved" / "jitfwd_peak_recompute" run one of the two
// alone (so no other mode's buffers count) and report the allocator's peak in use over 3 steps.
void jit_forward_bench(const TrainBench& tb, int threads, int rounds, const std::string& mode) {
  const bool adam = tb.opt == "adamw";
  LossFn lf = tb.loss_fn;
  auto fwd = [lf](const Params& prm, const Tensor& xin, const Tensor& yin) {
    return lf(prm, xin, yin);
  };
  auto saving = jit(fwd);
  auto recomputing = jit(fwd, JitOptions{.save_activations = false});
  struct Run {
    Params p;
    std::unique_ptr<optim::Optimizer> opt;
  };
  auto make = [&] {
    Run r;
    for (const auto& t : tb.init) r.p.push_back(t.clone().requires_grad_());
    r.opt = make_optimizer(r.p, adam);
    return r;
  };
  Run rs = make(), rr = make();
  auto step_saved = [&] {
    Tensor l = saving(rs.p, tb.x, tb.y);
    rs.opt->zero_grad();
    l.backward();
    rs.opt->step();
  };
  auto step_recompute = [&] {
    Tensor l = recomputing(rr.p, tb.x, tb.y);
    rr.opt->zero_grad();
    l.backward();
    rr.opt->step();
  };
  if (mode != "jitfwd") {
    const bool saved = mode == "jitfwd_peak_saved";
    reset_peak_memory();
    for (int i = 0; i < 3; ++i) saved ? step_saved() : step_recompute();
    emit(tb.workload, tb.name, "kiln", saved ? "jit_fwd_saved" : "jit_fwd_recompute", threads,
         tb.params_json, "peak_in_use_MiB",
         double(allocator_stats().peak_in_use_bytes) / (1024.0 * 1024.0));
    return;
  }
  std::vector<double> med = time_interleaved({step_saved, step_recompute}, rounds);
  emit(tb.workload, tb.name, "kiln", "jit_fwd_saved", threads, tb.params_json, "steps/s",
       1.0 / med[0]);
  emit(tb.workload, tb.name, "kiln", "jit_fwd_recompute", threads, tb.params_json, "steps/s",
       1.0 / med[1]);
}

void run_train_bench(const TrainBench& tb, int threads, const std::string& modes, int rounds) {
  if (modes == "latency") return latency_bench(tb, threads);
  if (modes.rfind("jitfwd", 0) == 0) return jit_forward_bench(tb, threads, rounds, modes);
  std::vector<std::function<void()>> fs;
  std::vector<std::string> names;
  const bool adam = tb.opt == "adamw";
  FirstLoss fl;

  // Eager: autograd tape + torch.optim-style optimizer.
  Params pe;
  for (const auto& t : tb.init) pe.push_back(t.clone().requires_grad_());
  std::unique_ptr<optim::Optimizer> opt = make_optimizer(pe, adam);
  if (want(modes, "eager")) {
    fs.push_back([&] {
      Tensor loss = tb.loss_fn(pe, tb.x, tb.y);
      fl.note("eager", loss);
      opt->zero_grad();
      loss.backward();
      opt->step();
    });
    names.push_back("eager");
  }

  // Graph: placeholders for the batch, variables for the parameters, minimize() for the update.
  Graph g;
  Tensor gx = g.placeholder("x", tb.x.dtype(), tb.x.shape());
  Tensor gy = g.placeholder("y", tb.y.dtype(), tb.y.shape());
  Params pg;
  for (size_t i = 0; i < tb.init.size(); ++i)
    pg.push_back(g.variable("p" + std::to_string(i), tb.init[i]));
  Tensor gstep, gl;
  if (want(modes, "graph")) {
    gl = tb.loss_fn(pg, gx, gy);
    if (adam)
      gstep = optim::AdamW(
                  optim::AdamOptions{
                      .lr = kAdamLr, .beta1 = kB1, .beta2 = kB2, .eps = kEps, .weight_decay = kWd})
                  .minimize(gl);
    else
      gstep = optim::SGD(kSgdLr).minimize(gl);
  }
  std::unique_ptr<Session> sess;
  if (want(modes, "graph")) {
    sess = std::make_unique<Session>(g);
    fl.note("graph", sess->run(gl, {{gx, tb.x}, {gy, tb.y}}));  // before any update
    fs.push_back([&] { sess->run(gstep, {{gx, tb.x}, {gy, tb.y}}); });
    names.push_back("graph");
  }

  // JIT: the whole step (forward, grad(), update) as one function of (params[, m, v], batch),
  // returning the new state; the bias corrections come in as 0-d tensors so that every step
  // replays the same compiled version.
  LossFn lf = tb.loss_fn;
  auto sgd_step = jit([lf](const Params& prm, const Tensor& xin, const Tensor& yin) {
    return sgd_update(lf, prm, xin, yin);
  });
  auto adam_step = jit([lf](const Params& prm, const Params& m, const Params& v, const Tensor& xin,
                            const Tensor& yin, const Tensor& bc1, const Tensor& bc2) {
    return adam_update(lf, false, prm, m, v, xin, yin, bc1, bc2);
  });
  Params pj = tb.init, mj, vj;
  for (const auto& t : tb.init) {
    mj.push_back(zeros(t.shape()));
    vj.push_back(zeros(t.shape()));
  }
  int64_t jt = 0;
  if (want(modes, "jit")) {
    if (adam)
      fs.push_back([&] {
        ++jt;
        Tensor bc1 = scalar_tensor(1.0 - std::pow(kB1, static_cast<double>(jt)));
        Tensor bc2 = scalar_tensor(1.0 - std::pow(kB2, static_cast<double>(jt)));
        Params r = adam_step(pj, mj, vj, tb.x, tb.y, bc1, bc2);
        fl.note("jit", r.back());
        const size_t n = pj.size();
        for (size_t i = 0; i < n; ++i) {
          pj[i] = r[i];
          mj[i] = r[n + i];
          vj[i] = r[2 * n + i];
        }
      });
    else
      fs.push_back([&] {
        Params r = sgd_step(pj, tb.x, tb.y);
        fl.note("jit", r.back());
        for (size_t i = 0; i < pj.size(); ++i) pj[i] = r[i];
      });
    names.push_back("jit");
  }
  std::vector<double> med = time_interleaved(fs, rounds);
  fl.print(tb.workload);
  for (size_t i = 0; i < fs.size(); ++i)
    emit(tb.workload, tb.name, "kiln", names[i], threads, tb.params_json, "steps/s", 1.0 / med[i]);
  if (sess) emit_plan(tb.workload, tb.name, threads, tb.params_json, sess->last_run());
  if (want(modes, "jit")) {
    auto st = adam ? adam_step.stats() : sgd_step.stats();
    if (st.eager_fallback || st.graph_breaks > 0)
      std::cerr << "[kiln_models_bench] " << tb.workload << " jit ran with " << st.graph_breaks
                << " graph breaks, eager fallback " << st.eager_fallback << ":\n"
                << (adam ? adam_step.explain() : sgd_step.explain()) << "\n";
  }
}

// ---- W5: LeNet-5 ------------------------------------------------------------------------------
// conv 1->6 5x5 pad 2, ReLU, maxpool 2, conv 6->16 5x5, ReLU, maxpool 2, 400-120-84-10.
Tensor lenet_loss(const Params& q, const Tensor& x, const Tensor& y) {
  Tensor h = max_pool2d(relu(conv2d(x, q[0], q[1], {1, 1}, {2, 2})), {2, 2});
  h = max_pool2d(relu(conv2d(h, q[2], q[3])), {2, 2});
  h = flatten(h, 1);
  h = relu(linear(h, q[4], q[5]));
  h = relu(linear(h, q[6], q[7]));
  return cross_entropy(linear(h, q[8], q[9]), y);
}

void w5(int threads, const std::string& modes, int rounds) {
  manual_seed(5);
  TrainBench tb;
  tb.workload = "W5";
  tb.name = "lenet5_train_step";
  tb.params_json = "{\"batch\": 64, \"input\": [1, 28, 28], \"opt\": \"sgd\"}";
  tb.opt = "sgd";
  tb.loss_fn = lenet_loss;
  tb.init = {uinit({6, 1, 5, 5}, 25), uinit({6}, 25),         uinit({16, 6, 5, 5}, 150),
             uinit({16}, 150),        uinit({120, 400}, 400), uinit({120}, 400),
             uinit({84, 120}, 120),   uinit({84}, 120),       uinit({10, 84}, 84),
             uinit({10}, 84)};
  tb.x = randn({64, 1, 28, 28});
  tb.y = randint(0, 10, {64});
  run_train_bench(tb, threads, modes, rounds);
}

// ---- W7: GPT-mini -----------------------------------------------------------------------------
constexpr int64_t kB = 16, kT = 64, kD = 128, kH = 4, kV = 96, kLayers = 2;
// Per block: ln1 w b, qkv w b, proj w b, ln2 w b, fc1 w b, fc2 w b.
constexpr size_t kPerBlock = 12;

Tensor gpt_loss(const Params& q, const Tensor& idx, const Tensor& tgt) {
  const int64_t hd = kD / kH;
  Tensor h = add(embedding(q[0], idx), q[1]);  // [B, T, D] + [T, D]
  for (int64_t l = 0; l < kLayers; ++l) {
    const Tensor* p = &q[2 + static_cast<size_t>(l) * kPerBlock];
    Tensor a = layer_norm(h, {kD}, p[0], p[1]);
    auto qkv = chunk(linear(a, p[2], p[3]), 3, 2);  // 3 x [B, T, D]
    auto heads = [&](const Tensor& t) {
      return permute(reshape(t, {kB, kT, kH, hd}), {0, 2, 1, 3});
    };
    Tensor qh = heads(qkv[0]), kh = heads(qkv[1]), vh = heads(qkv[2]);  // [B, H, T, hd] views
    // softmax(q k^T / sqrt(hd) + causal -inf mask) v in one fused op each way (the same math as
    // matmul, mul, add(mask), softmax, matmul); its result is laid out [B, T, H, hd], so merging
    // the heads back is a view.
    Tensor o = scaled_dot_product_attention(qh, kh, vh, /*causal=*/true);  // [B, H, T, hd]
    o = reshape(permute(o, {0, 2, 1, 3}), {kB, kT, kD});
    h = add(h, linear(o, p[4], p[5]));
    Tensor m = layer_norm(h, {kD}, p[6], p[7]);
    h = add(h, linear(gelu(linear(m, p[8], p[9])), p[10], p[11]));
  }
  const Tensor* f = &q[2 + kLayers * kPerBlock];
  Tensor logits = linear(layer_norm(h, {kD}, f[0], f[1]), f[2], f[3]);  // [B, T, V]
  return cross_entropy(reshape(logits, {kB * kT, kV}), reshape(tgt, {kB * kT}));
}

TrainBench make_w7() {
  manual_seed(7);
  TrainBench tb;
  tb.workload = "W7";
  tb.name = "gpt_mini_train_step";
  tb.params_json =
      "{\"blocks\": 2, \"d\": 128, \"heads\": 4, \"seq\": 64, \"batch\": 16, \"vocab\": 96, "
      "\"opt\": \"adamw\"}";
  tb.opt = "adamw";
  tb.loss_fn = gpt_loss;
  tb.init = {mul(randn({kV, kD}), 0.02), mul(randn({kT, kD}), 0.02)};
  for (int64_t l = 0; l < kLayers; ++l) {
    for (const Tensor& t :
         {ones({kD}), zeros({kD}), uinit({3 * kD, kD}, kD), uinit({3 * kD}, kD),
          uinit({kD, kD}, kD), uinit({kD}, kD), ones({kD}), zeros({kD}), uinit({4 * kD, kD}, kD),
          uinit({4 * kD}, kD), uinit({kD, 4 * kD}, 4 * kD), uinit({kD}, 4 * kD)})
      tb.init.push_back(t);
  }
  for (const Tensor& t : {ones({kD}), zeros({kD}), uinit({kV, kD}, kD), uinit({kV}, kD)})
    tb.init.push_back(t);
  tb.x = randint(0, kV, {kB, kT});
  tb.y = randint(0, kV, {kB, kT});
  return tb;
}

void w7(int threads, const std::string& modes, int rounds) {
  run_train_bench(make_w7(), threads, modes, rounds);
}

// ---- W7_BF16: GPT-mini under bfloat16 autocast beside float32 ----------------------------------
// A synthetic language both sides generate bit for bit (bench/pytorch_workloads.py): a 64-bit
// LCG; each next token is (7 * previous + 3) mod V with probability 4/5, else uniform. The best
// possible loss is about 1.40 nats (ln V = 4.56 at the start).
struct Lcg {
  uint64_t s;
  uint64_t next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return s >> 33;
  }
};

std::vector<int64_t> token_stream(uint64_t seed, int64_t n) {
  Lcg g{seed};
  std::vector<int64_t> t(static_cast<size_t>(n));
  t[0] = static_cast<int64_t>(g.next() % kV);
  for (size_t i = 1; i < t.size(); ++i)
    t[i] = g.next() % 5 != 0 ? (7 * t[i - 1] + 3) % kV : static_cast<int64_t>(g.next() % kV);
  return t;
}

// Batch b of a stream: kB windows of kT + 1 tokens side by side; inputs and next-token targets.
std::pair<Tensor, Tensor> lm_batch(const std::vector<int64_t>& s, int64_t b) {
  std::vector<int64_t> x, y;
  for (int64_t j = 0; j < kB; ++j) {
    const int64_t at = (b * kB + j) * (kT + 1);
    for (int64_t t = 0; t < kT; ++t) {
      x.push_back(s[static_cast<size_t>(at + t)]);
      y.push_back(s[static_cast<size_t>(at + t + 1)]);
    }
  }
  return {tensor(x, {kB, kT}), tensor(y, {kB, kT})};
}

constexpr int64_t kTrainSteps = 300, kValBatches = 8;

// Steps/s of the AdamW step in eager and jit modes, float32 and under bfloat16 autocast,
// interleaved; then 300 eager steps of each from the same initial parameters on the same batches
// and the validation loss of each (evaluated as it trained: under autocast for the autocast
// model), with their relative difference.
void w7_bf16(int threads, int rounds) {
  TrainBench tb = make_w7();
  LossFn lf = tb.loss_fn;
  const std::string p =
      "{\"blocks\": 2, \"d\": 128, \"heads\": 4, \"seq\": 64, \"batch\": 16, \"vocab\": 96, "
      "\"opt\": \"adamw\", \"isa\": \"" +
      std::string(dnnl_isa()) + "\"}";
  struct Run {
    Params p;
    std::unique_ptr<optim::Optimizer> opt;
  };
  auto make = [&] {
    Run r;
    for (const auto& t : tb.init) r.p.push_back(t.clone().requires_grad_());
    r.opt = make_optimizer(r.p, true);
    return r;
  };
  auto eager_step = [&](Run& r, bool amp, const Tensor& x, const Tensor& y) {
    Tensor loss;
    {
      AutocastGuard ac(BF16, amp);
      loss = lf(r.p, x, y);
    }
    r.opt->zero_grad();
    loss.backward();
    r.opt->step();
    return loss;
  };
  struct JitRun {
    Params p, m, v;
    int64_t t = 0;
  };
  auto make_jit = [&] {
    JitRun r{tb.init, {}, {}};
    for (const auto& t : tb.init) {
      r.m.push_back(zeros(t.shape()));
      r.v.push_back(zeros(t.shape()));
    }
    return r;
  };
  auto jit_fp32 = jit([lf](const Params& prm, const Params& m, const Params& v, const Tensor& x,
                           const Tensor& y, const Tensor& bc1, const Tensor& bc2) {
    return adam_update(lf, false, prm, m, v, x, y, bc1, bc2);
  });
  auto jit_amp = jit([lf](const Params& prm, const Params& m, const Params& v, const Tensor& x,
                          const Tensor& y, const Tensor& bc1, const Tensor& bc2) {
    return adam_update(lf, true, prm, m, v, x, y, bc1, bc2);
  });
  auto jit_step = [&](auto& fn, JitRun& r) {
    ++r.t;
    Tensor bc1 = scalar_tensor(1.0 - std::pow(kB1, static_cast<double>(r.t)));
    Tensor bc2 = scalar_tensor(1.0 - std::pow(kB2, static_cast<double>(r.t)));
    Params out = fn(r.p, r.m, r.v, tb.x, tb.y, bc1, bc2);
    const size_t n = r.p.size();
    for (size_t i = 0; i < n; ++i) {
      r.p[i] = out[i];
      r.m[i] = out[n + i];
      r.v[i] = out[2 * n + i];
    }
    return out.back();
  };
  {
    Run e32 = make(), e16 = make();
    JitRun j32 = make_jit(), j16 = make_jit();
    std::vector<std::function<void()>> fs = {
        [&] { eager_step(e32, false, tb.x, tb.y); }, [&] { eager_step(e16, true, tb.x, tb.y); },
        [&] { jit_step(jit_fp32, j32); }, [&] { jit_step(jit_amp, j16); }};
    std::vector<double> med = time_interleaved(fs, rounds);
    const char* names[] = {"eager_fp32", "eager_autocast_bf16", "jit_fp32", "jit_autocast_bf16"};
    for (size_t i = 0; i < fs.size(); ++i)
      emit("W7_BF16", "gpt_mini_train_step", "kiln", names[i], threads, p, "steps/s", 1.0 / med[i]);
    auto report = [](auto& f) {
      if (f.stats().eager_fallback || f.stats().graph_breaks > 0)
        std::cerr << "[kiln_models_bench] W7_BF16 jit:\n" << f.explain() << "\n";
    };
    report(jit_fp32);
    report(jit_amp);
  }
  // Convergence: 300 eager steps each, the same batches, then the validation loss.
  const std::vector<int64_t> train = token_stream(1, kTrainSteps * kB * (kT + 1));
  const std::vector<int64_t> val = token_stream(2, kValBatches * kB * (kT + 1));
  double final_loss[2] = {0, 0};
  for (int amp = 0; amp < 2; ++amp) {
    Run r = make();
    const double t0 = now_s();
    Tensor last;
    for (int64_t s = 0; s < kTrainSteps; ++s) {
      auto [x, y] = lm_batch(train, s);
      last = eager_step(r, amp == 1, x, y);
    }
    const double secs = now_s() - t0;
    NoGradGuard ng;
    AutocastGuard ac(BF16, amp == 1);
    double vl = 0;
    for (int64_t b = 0; b < kValBatches; ++b) {
      auto [x, y] = lm_batch(val, b);
      vl += lf(r.p, x, y).item<double>();
    }
    final_loss[amp] = vl / kValBatches;
    const char* mode = amp ? "autocast_bf16" : "fp32";
    emit("W7_BF16", "gpt_mini_300_steps", "kiln", mode, threads, p, "val_loss", final_loss[amp]);
    emit("W7_BF16", "gpt_mini_300_steps", "kiln", mode, threads, p, "train_loss_last",
         last.item<double>());
    emit("W7_BF16", "gpt_mini_300_steps", "kiln", mode, threads, p, "s", secs);
  }
  emit("W7_BF16", "gpt_mini_300_steps", "kiln", "autocast_vs_fp32", threads, p,
       "val_loss_rel_diff_pct", 100.0 * std::abs(final_loss[1] - final_loss[0]) / final_loss[0]);
}

// ---- W8: MoE layer, top-2 ---------------------------------------------------------------------
// 8 experts 256->512->256 with GELU, softmax router, top-2 by topk, gate weights renormalized
// over the two, 1024 tokens, loss = MSE to a fixed random target, forward + backward (no
// optimizer step). Each expert runs only its own tokens: index_select of its rows, MLP, scaled by
// the gate, index_add back (as the PyTorch side's index_add_).
//
// Kiln has no data-dependent-shape op (nonzero), so the token lists per expert are built on the
// host from the router's top-2 (one small [1024, 8] read per step, counted in every mode) and
// passed in as int64 tensors; eager, graph (placeholders [?]) and jit (dynamic dims) run the
// same function of them. The gates stay differentiable: they are recomputed from the router
// inside the function (the choices themselves have no gradient).
constexpr int64_t kE = 8, kN = 1024, kDm = 256, kDh = 512;

struct Routing {
  std::vector<Tensor> tokens;  // per expert: int64 [n_e], the tokens that chose it
  Tensor mask;                 // float [N, E]: 1 where a token chose the expert
};

Routing route(const Tensor& router_w, const Tensor& x) {
  NoGradGuard ng;
  Tensor probs = softmax(linear(x, router_w), -1);
  Tensor experts = arange(0, static_cast<double>(kE), 1, Int64);
  Tensor top = topk(probs, 2, 1).second;  // [N, 2], as the PyTorch side's probs.topk(2)
  Tensor first = top.select(1, 0).contiguous(), second = top.select(1, 1).contiguous();
  Tensor m1 = cast(eq(unsqueeze(first, 1), experts), Float32);
  Tensor m2 = cast(eq(unsqueeze(second, 1), experts), Float32);
  std::vector<int64_t> a = first.to_vector<int64_t>(), b = second.to_vector<int64_t>();
  std::vector<std::vector<int64_t>> lists(kE);
  for (int64_t i = 0; i < kN; ++i) {
    lists[static_cast<size_t>(a[static_cast<size_t>(i)])].push_back(i);
    lists[static_cast<size_t>(b[static_cast<size_t>(i)])].push_back(i);
  }
  Routing r;
  for (auto& l : lists) r.tokens.push_back(tensor(l, {static_cast<int64_t>(l.size())}));
  r.mask = add(m1, m2);
  return r;
}

// q: router [E, D], then per expert fc1 w [H, D], b [H], fc2 w [D, H], b [D]. Returns the
// gradients of every parameter and the loss last.
Params moe_fwd_bwd(const Params& prm, const Tensor& x, const Tensor& target, const Params& tokens,
                   const Tensor& mask) {
  Params q;
  for (const auto& t : prm) q.push_back(t.detach().requires_grad_());
  Tensor probs = softmax(linear(x, q[0]), -1);                 // [N, E]
  Tensor gate = div(probs, sum(mul(probs, mask), {1}, true));  // renormalized over the top 2
  Tensor out = zeros_like(x);
  for (int64_t e = 0; e < kE; ++e) {
    const Tensor& tok = tokens[static_cast<size_t>(e)];
    const Tensor* p = &q[1 + 4 * static_cast<size_t>(e)];
    Tensor xe = index_select(x, 0, tok);
    Tensor ye = linear(gelu(linear(xe, p[0], p[1])), p[2], p[3]);
    Tensor ge = index_select(gate.select(1, e), 0, tok);
    Tensor contrib = mul(ye, unsqueeze(ge, 1));
    out = index_add(out, 0, tok, contrib);
  }
  Tensor loss = mse_loss(out, target);
  Params gs = grad({loss}, q, {}, false, false, /*allow_unused=*/true);
  gs.push_back(loss.detach());
  return gs;
}

void w8(int threads, const std::string& modes, int rounds) {
  manual_seed(8);
  Params init = {uinit({kE, kDm}, kDm)};
  for (int64_t e = 0; e < kE; ++e)
    for (const Tensor& t :
         {uinit({kDh, kDm}, kDm), uinit({kDh}, kDm), uinit({kDm, kDh}, kDh), uinit({kDm}, kDh)})
      init.push_back(t);
  Tensor x = randn({kN, kDm}), target = randn({kN, kDm});
  std::vector<std::function<void()>> fs;
  std::vector<std::string> names;
  FirstLoss fl;
  if (want(modes, "eager")) {
    fs.push_back([&] {
      Routing r = route(init[0], x);
      fl.note("eager", moe_fwd_bwd(init, x, target, r.tokens, r.mask).back());
    });
    names.push_back("eager");
  }
  Graph g;
  Tensor gx = g.placeholder("x", Float32, {kN, kDm});
  Tensor gt = g.placeholder("target", Float32, {kN, kDm});
  Tensor gm = g.placeholder("mask", Float32, {kN, kE});
  Params gtok, gp;
  for (int64_t e = 0; e < kE; ++e)
    gtok.push_back(g.placeholder("tokens" + std::to_string(e), Int64, {Dim::any()}));
  for (size_t i = 0; i < init.size(); ++i)
    gp.push_back(g.variable("p" + std::to_string(i), init[i]));
  Params gfetch;
  std::unique_ptr<Session> sess;
  if (want(modes, "graph")) {
    gfetch = moe_fwd_bwd(gp, gx, gt, gtok, gm);
    sess = std::make_unique<Session>(g);
    fs.push_back([&] {
      Routing r = route(init[0], x);  // the router variable never changes (no update step)
      FeedDict feeds = {{gx, x}, {gt, target}, {gm, r.mask}};
      for (int64_t e = 0; e < kE; ++e)
        feeds.push_back({gtok[static_cast<size_t>(e)], r.tokens[static_cast<size_t>(e)]});
      fl.note("graph", sess->run(gfetch, feeds).back());
    });
    names.push_back("graph");
  }
  auto jf = jit(moe_fwd_bwd);
  if (want(modes, "jit")) {
    fs.push_back([&] {
      Routing r = route(init[0], x);
      fl.note("jit", jf(init, x, target, r.tokens, r.mask).back());
    });
    names.push_back("jit");
  }
  std::vector<double> med = time_interleaved(fs, rounds);
  fl.print("W8");
  std::string p = "{\"experts\": 8, \"d\": 256, \"hidden\": 512, \"top_k\": 2, \"tokens\": 1024}";
  for (size_t i = 0; i < fs.size(); ++i)
    emit("W8", "moe_top2_fwd_bwd", "kiln", names[i], threads, p, "steps/s", 1.0 / med[i]);
  if (sess) emit_plan("W8", "moe_top2_fwd_bwd", threads, p, sess->last_run());
  if (want(modes, "jit") && (jf.stats().eager_fallback || jf.stats().graph_breaks > 0))
    std::cerr << "[kiln_models_bench] W8 jit:\n" << jf.explain() << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: kiln_models_bench W5|W7|W7_BF16|W8 THREADS [eager,graph,jit | latency | "
                 "jitfwd | "
                 "jitfwd_peak_saved | jitfwd_peak_recompute]\n";
    return 2;
  }
  std::string w = argv[1];
  int threads = std::atoi(argv[2]);
  std::string modes = argc > 3 ? argv[3] : "eager,graph,jit";
  const int rounds = 7;
  set_num_threads(threads);
  openblas_set_num_threads(threads);
  // As kiln_bench: the first ~0.5 s of a process on this VM runs multi-threaded work far slower;
  // keep every thread busy for a second before timing.
  {
    Tensor a = randn({512, 512}), b = randn({512, 512});
    double t0 = now_s();
    while (now_s() - t0 < 1.0) {
      Tensor c = matmul(a, b);
    }
  }
  try {
    if (w == "W5")
      w5(threads, modes, rounds);
    else if (w == "W7")
      w7(threads, modes, rounds);
    else if (w == "W7_BF16")
      w7_bf16(threads, rounds);
    else if (w == "W8")
      w8(threads, modes, rounds);
    else {
      std::cerr << "unknown workload " << w << " (W5, W7, W7_BF16, W8)\n";
      return 2;
    }
  } catch (const std::exception& e) {
    std::cerr << "kiln_models_bench " << w << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}
