// Kiln's side of the workload suite (docs/design.md section 10), eager mode: W1 matmul beside raw
// oneDNN and raw OpenBLAS in the same process (W1_BF16: in bfloat16, beside Kiln float32 and
// oneDNN's bfloat16 matmul called directly), W2 gelu(x*a+b) and layer_norm beside a
// memory-bandwidth copy loop, W3 dependent small adds (eager and graph), W4 MLP training step
// (eager and graph), HEAL graph breaks healed into Switch/Merge. One workload per process so that
// peak RSS is per workload: kiln_bench WORKLOAD THREADS.
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <oneapi/dnnl/dnnl.hpp>

#include "bench/bench_util.h"
#include "kiln/kernels/cpu/gemm.h"
#include "kiln/kernels/cpu/parallel.h"
#include "kiln/kiln.h"
#include "kiln/optim/optim.h"
#include "kiln/passes/memory_plan.h"

using namespace kiln::detail;

using namespace kiln;
using namespace kiln::bench;

namespace {

std::string jparams(const std::string& k, long v) {
  return "{\"" + k + "\": " + std::to_string(v) + "}";
}

void w1(int threads) {
  for (long n : {64L, 256L, 1024L, 2048L}) {
    manual_seed(1);
    Tensor a = randn({n, n}), b = randn({n, n});
    Tensor c = empty({n, n});
    double flop = 2.0 * n * n * n;
    const float* A = a.data_ptr<float>();
    const float* B = b.data_ptr<float>();
    float* C = c.data_ptr<float>();
    auto kiln_f = [&] { Tensor r = matmul(a, b); };
    auto dnnl_f = [&] { dnnl_sgemm('N', 'N', n, n, n, 1.f, A, n, B, n, 0.f, C, n); };
    auto blas_f = [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.f, A, (int)n,
                  B, (int)n, 0.f, C, (int)n);
    };
    int inner = calibrate(dnnl_f);
    // Interleave the three so that machine noise hits them alike.
    std::vector<double> tk, td, tb;
    for (int r = 0; r < 5; ++r) {
      tk.push_back(median_time(kiln_f, 1, inner, r == 0 ? 2 : 0));
      td.push_back(median_time(dnnl_f, 1, inner, r == 0 ? 2 : 0));
      tb.push_back(median_time(blas_f, 1, inner, r == 0 ? 2 : 0));
    }
    auto med = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    std::string p = jparams("n", n);
    emit("W1", "matmul", "kiln", "eager", threads, p, "GFLOP/s", flop / med(tk) / 1e9);
    emit("W1", "matmul", "onednn", "raw", threads, p, "GFLOP/s", flop / med(td) / 1e9);
    emit("W1", "matmul", "openblas", "raw", threads, p, "GFLOP/s", flop / med(tb) / 1e9);
  }
}

// ---- W1_BF16: matmul in bfloat16 --------------------------------------------------------------
// Peak rates of the two instructions the GEMMs are built from, one stream of independent
// instructions per thread: vfmadd231ps zmm (16 float32 FMAs, 32 flop) and vdpbf16ps zmm (16
// lanes each adding two bfloat16 products into float32, 64 flop). The floor for a GEMM is its
// flop over these.
__attribute__((target("avx512f"))) double fma_gflops(double seconds) {
  double total = 0;
#pragma omp parallel reduction(+ : total)
  {
    __m512 acc[24];
    for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(0.f);
    const __m512 a = _mm512_set1_ps(1e-7f), b = _mm512_set1_ps(0.999f);
    int64_t iters = 0;
    const double t0 = now_s();
    double t1 = t0;
    while (t1 - t0 < seconds) {
      for (int r = 0; r < 4096; ++r)
      // unrolled, so the 24 accumulators live in registers: as a loop GCC kept them in
      // memory and the rate measured was the load/store port's, half what GEMMs reach
#pragma GCC unroll 24
        for (int i = 0; i < 24; ++i) acc[i] = _mm512_fmadd_ps(acc[i], b, a);
      iters += 4096;
      t1 = now_s();
    }
    alignas(64) float lanes[16];
    float sink = 0;
    for (int i = 0; i < 24; ++i) {
      _mm512_store_ps(lanes, acc[i]);
      sink += lanes[0];
    }
    volatile float keep = sink;
    (void)keep;
    total += static_cast<double>(iters) * 24 * 32 / (t1 - t0) / 1e9;
  }
  return total;
}

__attribute__((target("avx512f,avx512bf16"))) double dpbf16_gflops(double seconds) {
  double total = 0;
#pragma omp parallel reduction(+ : total)
  {
    __m512 acc[24];
    for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(0.f);
    const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);
    int64_t iters = 0;
    const double t0 = now_s();
    double t1 = t0;
    while (t1 - t0 < seconds) {
      for (int r = 0; r < 4096; ++r)
      // unrolled, so the 24 accumulators live in registers: as a loop GCC kept them in
      // memory and the rate measured was the load/store port's, half what GEMMs reach
#pragma GCC unroll 24
        for (int i = 0; i < 24; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
      iters += 4096;
      t1 = now_s();
    }
    alignas(64) float lanes[16];
    float sink = 0;
    for (int i = 0; i < 24; ++i) {
      _mm512_store_ps(lanes, acc[i]);
      sink += lanes[0];
    }
    volatile float keep = sink;
    (void)keep;
    total += static_cast<double>(iters) * 24 * 64 / (t1 - t0) / 1e9;
  }
  return total;
}

// Kiln's bfloat16 matmul beside Kiln's float32 one and oneDNN's bfloat16 matmul primitive called
// directly on the same shapes and data, interleaved; TFLOP/s. The ISA oneDNN dispatched to and
// the two instruction peaks are in the params and the peak rows.
void w1_bf16(int threads) {
  const bool has_bf16 = __builtin_cpu_supports("avx512bf16");
  const std::string isa = dnnl_isa();
  // Best of three short runs: other processes on the machine only ever lower the rate.
  double fma_peak = 0, bf16_peak = 0;
  for (int r = 0; r < 3; ++r) {
    if (__builtin_cpu_supports("avx512f")) fma_peak = std::max(fma_peak, fma_gflops(0.2));
    if (has_bf16) bf16_peak = std::max(bf16_peak, dpbf16_gflops(0.2));
  }
  const std::string pp = "{\"isa\": \"" + isa + "\"}";
  if (fma_peak > 0)
    emit("W1_BF16", "peak_vfmadd231ps_fp32", "cpu", "instr", threads, pp, "TFLOP/s",
         fma_peak / 1e3);
  if (bf16_peak > 0)
    emit("W1_BF16", "peak_vdpbf16ps_bf16", "cpu", "instr", threads, pp, "TFLOP/s", bf16_peak / 1e3);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  for (long n : {256L, 1024L, 2048L}) {
    manual_seed(1);
    Tensor a = randn({n, n}), b = randn({n, n});
    Tensor ab = cast(a, BF16), bb = cast(b, BF16);
    const double flop = 2.0 * n * n * n;
    using md = dnnl::memory::desc;
    md amd({n, n}, dnnl::memory::data_type::bf16, dnnl::memory::format_tag::ab);
    md cmd({n, n}, dnnl::memory::data_type::bf16, dnnl::memory::format_tag::ab);
    dnnl::matmul prim(dnnl::matmul::primitive_desc(dnnl::matmul::desc(amd, amd, cmd), eng));
    Tensor c = empty({n, n}, BF16);
    dnnl::memory ma(amd, eng, ab.raw_data()), mb(amd, eng, bb.raw_data()),
        mc(cmd, eng, c.raw_data());
    auto kiln_bf16 = [&] { Tensor r = matmul(ab, bb); };
    auto kiln_f32 = [&] { Tensor r = matmul(a, b); };
    auto dnnl_bf16 = [&] {
      prim.execute(strm, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
      strm.wait();
    };
    // The two bfloat16 products agree (same library, same kernel), checked once.
    {
      Tensor r = matmul(ab, bb);
      dnnl_bf16();
      const double diff = max(abs(sub(cast(r, Float32), cast(c, Float32)))).item<double>();
      const double ref = max(abs(sub(cast(r, Float32), matmul(a, b)))).item<double>();
      std::cerr << "[kiln_bench] W1_BF16 n=" << n << ": |kiln - onednn| max " << diff
                << ", |bf16 - fp32| max " << ref << " (isa " << isa << ")\n";
    }
    const int inner = calibrate(dnnl_bf16);
    std::vector<double> tk, tf, td;
    for (int r = 0; r < 5; ++r) {
      tk.push_back(median_time(kiln_bf16, 1, inner, r == 0 ? 2 : 0));
      tf.push_back(median_time(kiln_f32, 1, std::max(1, inner / 2), r == 0 ? 2 : 0));
      td.push_back(median_time(dnnl_bf16, 1, inner, r == 0 ? 2 : 0));
    }
    auto med = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    std::string p = "{\"n\": " + std::to_string(n) + ", \"isa\": \"" + isa + "\"}";
    emit("W1_BF16", "matmul", "kiln", "bf16", threads, p, "TFLOP/s", flop / med(tk) / 1e12);
    emit("W1_BF16", "matmul", "kiln", "fp32", threads, p, "TFLOP/s", flop / med(tf) / 1e12);
    emit("W1_BF16", "matmul", "onednn", "raw_bf16", threads, p, "TFLOP/s", flop / med(td) / 1e12);
  }
}

void w2(int threads) {
  const long R = 4096, C = 1024;
  manual_seed(2);
  Tensor x = randn({R, C}), a = randn({C}), b = randn({C});
  Tensor w = ones({C}), bias = zeros({C});
  double bytes = 2.0 * R * C * sizeof(float);  // read x, write y: the floor for both
  // Bandwidth reference: a plain parallel copy of the same bytes.
  Tensor dst = empty({R, C});
  const float* src = x.data_ptr<float>();
  float* d = dst.data_ptr<float>();
  auto copy_f = [&] {
    parallel_for(R * C, 1 << 16, [&](int64_t s, int64_t e) {
      std::memcpy(d + s, src + s, static_cast<size_t>(e - s) * sizeof(float));
    });
  };
  auto gelu_f = [&] { Tensor y = gelu(add(mul(x, a), b)); };
  auto ln_f = [&] { Tensor y = layer_norm(x, {C}, w, bias); };
  // Graph: x, a and b are placeholders; the fusion pass makes one kernel of the three ops.
  Graph g;
  Tensor xs = g.placeholder("x", Float32, {R, C}), as = g.placeholder("a", Float32, {C}),
         bs = g.placeholder("b", Float32, {C});
  Tensor gy = gelu(add(mul(xs, as), bs));
  Tensor ly = layer_norm(xs, {C}, g.constant(w), g.constant(bias));
  Session sess(g);
  auto gelu_g = [&] { sess.run(gy, {{xs, x}, {as, a}, {bs, b}}); };
  auto ln_g = [&] { sess.run(ly, {{xs, x}}); };
  auto jg = jit(
      [](const Tensor& x, const Tensor& a, const Tensor& b) { return gelu(add(mul(x, a), b)); });
  auto jl = jit([&](const Tensor& x) { return layer_norm(x, {C}, w, bias); });
  auto gelu_j = [&] { jg(x, a, b); };
  auto ln_j = [&] { jl(x); };
  std::vector<double> tc, tg, tl, tgg, tlg, tgj, tlj;
  for (int r = 0; r < 7; ++r) {
    tc.push_back(median_time(copy_f, 1, 5, r == 0 ? 3 : 0));
    tg.push_back(median_time(gelu_f, 1, 5, r == 0 ? 3 : 0));
    tl.push_back(median_time(ln_f, 1, 5, r == 0 ? 3 : 0));
    tgg.push_back(median_time(gelu_g, 1, 5, r == 0 ? 3 : 0));
    tlg.push_back(median_time(ln_g, 1, 5, r == 0 ? 3 : 0));
    tgj.push_back(median_time(gelu_j, 1, 5, r == 0 ? 3 : 0));
    tlj.push_back(median_time(ln_j, 1, 5, r == 0 ? 3 : 0));
  }
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::string p = "{\"shape\": [4096, 1024]}";
  emit("W2", "copy", "kiln", "raw", threads, p, "GB/s", bytes / med(tc) / 1e9);
  emit("W2", "gelu_affine", "kiln", "eager", threads, p, "GB/s", bytes / med(tg) / 1e9);
  emit("W2", "layer_norm", "kiln", "eager", threads, p, "GB/s", bytes / med(tl) / 1e9);
  emit("W2", "gelu_affine", "kiln", "graph", threads, p, "GB/s", bytes / med(tgg) / 1e9);
  emit("W2", "layer_norm", "kiln", "graph", threads, p, "GB/s", bytes / med(tlg) / 1e9);
  emit("W2", "gelu_affine", "kiln", "jit", threads, p, "GB/s", bytes / med(tgj) / 1e9);
  emit("W2", "layer_norm", "kiln", "jit", threads, p, "GB/s", bytes / med(tlj) / 1e9);
}

void w3(int threads) {
  Tensor x0 = randn({16}), y = randn({16});
  auto f = [&] {
    Tensor x = x0;
    for (int i = 0; i < 1000; ++i) x = add(x, y);
  };
  // The same chain as a static graph, run by a Session.
  Graph g;
  Tensor xs = g.placeholder("x", Float32, {16});
  Tensor ys = g.variable("y", y);
  Tensor z = xs;
  for (int i = 0; i < 1000; ++i) z = add(z, ys);
  Session sess(g);
  auto fg = [&] { sess.run(z, {{xs, x0}}); };
  // And traced from the eager code by jit.
  auto jf = jit([](const Tensor& a, const Tensor& b) {
    Tensor r = a;
    for (int i = 0; i < 1000; ++i) r = add(r, b);
    return r;
  });
  auto fj = [&] { jf(x0, y); };
  std::vector<double> te, tg, tj;
  for (int r = 0; r < 9; ++r) {
    te.push_back(median_time(f, 1, 20, r == 0 ? 5 : 0));
    tg.push_back(median_time(fg, 1, 20, r == 0 ? 5 : 0));
    tj.push_back(median_time(fj, 1, 20, r == 0 ? 5 : 0));
  }
  std::sort(te.begin(), te.end());
  std::sort(tg.begin(), tg.end());
  std::sort(tj.begin(), tj.end());
  std::string p = "{\"ops\": 1000, \"numel\": 16}";
  emit("W3", "dependent_adds", "kiln", "eager", threads, p, "us/op", te[4] / 1000 * 1e6);
  emit("W3", "dependent_adds", "kiln", "graph", threads, p, "us/op", tg[4] / 1000 * 1e6);
  emit("W3", "dependent_adds", "kiln", "jit", threads, p, "us/op", tj[4] / 1000 * 1e6);
  // The guard check alone on a 4-tensor-argument function (target: under 1 us).
  auto g4 = jit([](const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& d) {
    return add(add(a, b), add(c, d));
  });
  Tensor a4 = randn({8, 8}), b4 = randn({8, 8}), c4 = randn({8, 8}), d4 = randn({8, 8});
  g4(a4, b4, c4, d4);
  bool ok = true;
  double tgc = median_time([&] { ok = ok && g4.guards_accept(a4, b4, c4, d4); }, 9, 20000, 1);
  emit("W3", "jit_guard_check_4_tensors", "kiln", "jit", threads, "{\"args\": 4}", "us/call",
       ok ? tgc * 1e6 : -1);
}

// Plans memory for the optimized program that computes `fetch` and reports the planned arena
// (metric planned_peak_MiB) beside the unplanned sum of the same buffers.
bool want(const std::string& modes, const char* m) { return modes.find(m) != std::string::npos; }

void emit_memory_plan(const char* w, const char* name, int threads, const std::string& p,
                      const Graph& g, const Tensor& fetch) {
  Program prog = prune(*g.impl(), {g.value_of(fetch)});
  optimize(prog);
  MemoryPlan mp = plan_program_memory(prog);
  double mib = 1024.0 * 1024.0;
  std::string params =
      p.substr(0, p.size() - 1) +
      ", \"unplanned_MiB\": " + std::to_string(mp.unplanned_bytes / mib) + ", \"ratio\": " +
      std::to_string(mp.unplanned_bytes ? double(mp.arena_bytes) / double(mp.unplanned_bytes) : 0) +
      "}";
  emit(w, name, "kiln", "graph", threads, params, "planned_peak_MiB", mp.arena_bytes / mib);
}

// W4: MLP 784-256-256-10, ReLU, batch 128, cross-entropy, one SGD step.
void w4(int threads, const std::string& modes) {
  manual_seed(4);
  const int64_t B = 128;
  Tensor xb = rand({B, 784}), yb = randint(0, 10, {B});
  auto init = [](int64_t o, int64_t i) {
    return mul(randn({o, i}), std::sqrt(2.0 / static_cast<double>(i)));
  };
  Tensor wa = init(256, 784), wb = init(256, 256), wc = init(10, 256);
  Tensor ba = zeros({256}), bb = zeros({256}), bc = zeros({10});
  std::string p = "{\"batch\": 128, \"layers\": [784, 256, 256, 10]}";

  // Eager: define-by-run with autograd.
  std::vector<Tensor> ps;
  for (Tensor* t : std::vector<Tensor*>{&wa, &ba, &wb, &bb, &wc, &bc})
    ps.push_back(t->clone().requires_grad_());
  optim::SGD opt(ps, {.lr = 0.01});
  auto eager_step = [&] {
    Tensor h = relu(linear(xb, ps[0], ps[1]));
    h = relu(linear(h, ps[2], ps[3]));
    Tensor loss = cross_entropy(linear(h, ps[4], ps[5]), yb);
    opt.zero_grad();
    loss.backward();
    opt.step();
  };
  // Graph: the same model defined once; one Session run per step.
  Graph g;
  Tensor x = g.placeholder("x", Float32, {Dim::any(), 784});
  Tensor y = g.placeholder("y", Int64, {Dim::any()});
  Tensor gw1 = g.variable("w1", wa), gb1 = g.variable("b1", ba);
  Tensor gw2 = g.variable("w2", wb), gb2 = g.variable("b2", bb);
  Tensor gw3 = g.variable("w3", wc), gb3 = g.variable("b3", bc);
  Tensor h = relu(linear(x, gw1, gb1));
  h = relu(linear(h, gw2, gb2));
  Tensor loss = cross_entropy(linear(h, gw3, gb3), y);
  Tensor step = optim::SGD(0.01).minimize(loss);
  Session sess(g);
  auto graph_step = [&] { sess.run(step, {{x, xb}, {y, yb}}); };
  // JIT: the training step written as a function of (params, batch) -> (new params, loss). The
  // parameters are donated (JitOptions::donate), as PyTorch's optimizer updates them in place:
  // the weight updates accumulate onto the old weights' buffers (addmm) and come back in them.
  auto jstep = jit(
      [](const std::vector<Tensor>& prm, const Tensor& xin, const Tensor& yin) {
        std::vector<Tensor> q;
        for (const auto& t : prm) q.push_back(t.detach().requires_grad_());
        Tensor hh = relu(linear(xin, q[0], q[1]));
        hh = relu(linear(hh, q[2], q[3]));
        Tensor l = cross_entropy(linear(hh, q[4], q[5]), yin);
        std::vector<Tensor> gs = grad({l}, q);
        std::vector<Tensor> out;
        for (size_t i = 0; i < prm.size(); ++i) out.push_back(sub(prm[i], mul(gs[i], 0.01)));
        out.push_back(l.detach());
        return out;
      },
      JitOptions{.donate = {0}, .name = "w4_step"});
  // Own copies: the donated buffers are overwritten (wa.. still seed the graph mode's variables).
  std::vector<Tensor> jp;
  for (const Tensor& t : {wa, ba, wb, bb, wc, bc}) jp.push_back(t.clone());
  auto jit_step = [&] {
    auto r = jstep(jp, xb, yb);
    for (size_t i = 0; i < jp.size(); ++i) jp[i] = r[i];
  };
  std::vector<double> te, tg, tj;
  for (int r = 0; r < 7; ++r) {
    if (want(modes, "eager")) te.push_back(median_time(eager_step, 1, 20, r == 0 ? 5 : 0));
    if (want(modes, "graph")) tg.push_back(median_time(graph_step, 1, 20, r == 0 ? 5 : 0));
    if (want(modes, "jit")) tj.push_back(median_time(jit_step, 1, 20, r == 0 ? 5 : 0));
  }
  std::sort(te.begin(), te.end());
  std::sort(tg.begin(), tg.end());
  std::sort(tj.begin(), tj.end());
  if (want(modes, "eager"))
    emit("W4", "mlp_train_step", "kiln", "eager", threads, p, "steps/s", 1.0 / te[3]);
  if (want(modes, "graph"))
    emit("W4", "mlp_train_step", "kiln", "graph", threads, p, "steps/s", 1.0 / tg[3]);
  if (want(modes, "jit"))
    emit("W4", "mlp_train_step", "kiln", "jit", threads, p, "steps/s", 1.0 / tj[3]);
  // Memory planning on the same training step with the batch dim static (the planner leaves
  // dynamic dims out): planned arena against the sum of every intermediate buffer.
  Graph gs;
  Tensor sx = gs.placeholder("x", Float32, {B, 784}), sy = gs.placeholder("y", Int64, {B});
  Tensor s1 = gs.variable("w1", wa), sb1 = gs.variable("b1", ba);
  Tensor s2 = gs.variable("w2", wb), sb2 = gs.variable("b2", bb);
  Tensor s3 = gs.variable("w3", wc), sb3 = gs.variable("b3", bc);
  Tensor sh = relu(linear(relu(linear(sx, s1, sb1)), s2, sb2));
  Tensor sloss = cross_entropy(linear(sh, s3, sb3), sy);
  if (want(modes, "graph"))
    emit_memory_plan("W4", "mlp_train_step", threads, p, gs, optim::SGD(0.01).minimize(sloss));
}

// W6: LSTM train step, cell written as a loop over time steps (seq 32, batch 32, input 64,
// hidden 256) + linear + cross-entropy + SGD, eagerly and as one jitted training step.
std::vector<Tensor> lstm_step(const std::vector<Tensor>& prm, const Tensor& x, const Tensor& y) {
  // prm: wx [64, 1024], wh [256, 1024], b [1024], wo [10, 256], bo [10]
  std::vector<Tensor> q;
  for (const auto& t : prm) q.push_back(t.detach().requires_grad_());
  const int64_t B = x.size(1), H = 256;
  Tensor h = zeros({B, H}), c = zeros({B, H});
  for (int64_t t = 0; t < x.size(0); ++t) {
    Tensor gates = add(add(matmul(x.select(0, t), q[0]), matmul(h, q[1])), q[2]);
    auto gc = chunk(gates, 4, 1);
    c = add(mul(sigmoid(gc[1]), c), mul(sigmoid(gc[0]), tanh(gc[2])));
    h = mul(sigmoid(gc[3]), tanh(c));
  }
  Tensor loss = cross_entropy(linear(h, q[3], q[4]), y);
  std::vector<Tensor> gs = grad({loss}, q);
  std::vector<Tensor> out;
  for (size_t i = 0; i < prm.size(); ++i) out.push_back(sub(prm[i], mul(gs[i], 0.01)));
  out.push_back(loss.detach());
  return out;
}

void w6(int threads, const std::string& modes) {
  manual_seed(6);
  Tensor x = randn({32, 32, 64}), y = randint(0, 10, {32});
  std::vector<Tensor> prm = {mul(randn({64, 1024}), 0.05), mul(randn({256, 1024}), 0.05),
                             zeros({1024}), mul(randn({10, 256}), 0.05), zeros({10})};
  std::vector<Tensor> pe = prm, pj = prm;
  auto eager_step = [&] {
    auto r = lstm_step(pe, x, y);
    for (size_t i = 0; i < pe.size(); ++i) pe[i] = r[i].detach();
  };
  auto jstep = jit(lstm_step);
  auto jit_step = [&] {
    auto r = jstep(pj, x, y);
    for (size_t i = 0; i < pj.size(); ++i) pj[i] = r[i];
  };
  // Graph: the same cell loop unrolled once into a static graph; one Session run per step.
  Graph g;
  Tensor gx = g.placeholder("x", Float32, {32, 32, 64}), gy = g.placeholder("y", Int64, {32});
  std::vector<Tensor> gq = {g.variable("wx", prm[0]), g.variable("wh", prm[1]),
                            g.variable("b", prm[2]), g.variable("wo", prm[3]),
                            g.variable("bo", prm[4])};
  Tensor gh = zeros({32, 256}), gc = zeros({32, 256});
  for (int64_t t = 0; t < 32; ++t) {
    Tensor gates = add(add(matmul(gx.select(0, t), gq[0]), matmul(gh, gq[1])), gq[2]);
    auto ch = chunk(gates, 4, 1);
    gc = add(mul(sigmoid(ch[1]), gc), mul(sigmoid(ch[0]), tanh(ch[2])));
    gh = mul(sigmoid(ch[3]), tanh(gc));
  }
  Tensor gstep = optim::SGD(0.01).minimize(cross_entropy(linear(gh, gq[3], gq[4]), gy));
  Session sess(g);
  auto graph_step = [&] { sess.run(gstep, {{gx, x}, {gy, y}}); };
  std::vector<double> te, tg, tj;
  for (int r = 0; r < 5; ++r) {
    if (want(modes, "eager")) te.push_back(median_time(eager_step, 1, 3, r == 0 ? 2 : 0));
    if (want(modes, "graph")) tg.push_back(median_time(graph_step, 1, 3, r == 0 ? 2 : 0));
    if (want(modes, "jit")) tj.push_back(median_time(jit_step, 1, 3, r == 0 ? 2 : 0));
  }
  std::sort(te.begin(), te.end());
  std::sort(tg.begin(), tg.end());
  std::sort(tj.begin(), tj.end());
  std::string p = "{\"seq\": 32, \"batch\": 32, \"input\": 64, \"hidden\": 256}";
  if (want(modes, "eager"))
    emit("W6", "lstm_cell_loop_train_step", "kiln", "eager", threads, p, "steps/s", 1.0 / te[2]);
  if (want(modes, "graph"))
    emit("W6", "lstm_cell_loop_train_step", "kiln", "graph", threads, p, "steps/s", 1.0 / tg[2]);
  if (want(modes, "jit"))
    emit("W6", "lstm_cell_loop_train_step", "kiln", "jit", threads, p, "steps/s", 1.0 / tj[2]);
  if (want(modes, "graph"))
    emit_memory_plan("W6", "lstm_cell_loop_train_step", threads, p, g, gstep);
}

}  // namespace

// HEAL: a function with a data-dependent bool branch (the lecture's case 2), called with inputs
// that alternate between the branches. Per call without gradients: eager, kAuto's rerun (host
// code on every call), kReplay's trace tree (a guard read per call) and the tree healed into
// Switch/Merge. Per training step (forward + backward): eager against the healed graph's
// compiled backward fed saved activations (unhealed, such calls run eagerly). Interleaved
// rounds, medians.
void heal(int threads) {
  auto small = [](const Tensor& x) {
    Tensor h = tanh(x) * 2.0 + 1.0;
    if ((h.sum() > 0).item<bool>()) return relu(h) * 3.0;
    return h * h - 1.0;
  };
  using HC = JitOptions::HostCode;
  auto rerun = jit(small, JitOptions{.name = "rerun"});
  auto tree =
      jit(small, JitOptions{.name = "tree", .host_code = HC::kReplay, .heal_breaks = false});
  auto healed = jit(small, JitOptions{.name = "healed", .host_code = HC::kReplay});
  Tensor a = full({64}, 0.5), b = full({64}, -3.0);
  int k = 0;
  auto calls = [&](auto& f) {
    return [&] {
      for (int i = 0; i < 100; ++i) f((++k & 1) ? a : b);
    };
  };
  auto fe = calls(small);
  auto fr = calls(rerun);
  auto ft = calls(tree);
  auto fh = calls(healed);
  std::vector<double> te, tr, tt, th;
  for (int r = 0; r < 9; ++r) {
    te.push_back(median_time(fe, 1, 5, r == 0 ? 3 : 0));
    tr.push_back(median_time(fr, 1, 5, r == 0 ? 3 : 0));
    tt.push_back(median_time(ft, 1, 5, r == 0 ? 3 : 0));
    th.push_back(median_time(fh, 1, 5, r == 0 ? 3 : 0));
  }
  if (healed.stats().healed != 1) std::cerr << "HEAL: not healed\n" << healed.explain();
  for (auto* v : {&te, &tr, &tt, &th}) std::sort(v->begin(), v->end());
  const std::string p = "{\"numel\": 64, \"ops\": 8}";
  emit("HEAL", "branch_call", "kiln", "eager", threads, p, "us/call", te[4] / 100 * 1e6);
  emit("HEAL", "branch_call", "kiln", "jit_rerun", threads, p, "us/call", tr[4] / 100 * 1e6);
  emit("HEAL", "branch_call", "kiln", "jit_tree", threads, p, "us/call", tt[4] / 100 * 1e6);
  emit("HEAL", "branch_call", "kiln", "jit_healed", threads, p, "us/call", th[4] / 100 * 1e6);

  auto loss = [](const Tensor& x, const Tensor& w1, const Tensor& w2) {
    Tensor h = gelu(matmul(x, w1));
    if ((x.mean() > 0).item<bool>()) return tanh(matmul(h, w2) * 2.0).sum();
    return relu(matmul(h, w2)).sum();
  };
  auto jloss = jit(loss, JitOptions{.name = "healed_step"});
  Tensor w1 = (randn({256, 256}) * 0.05).requires_grad_(true);
  Tensor w2 = (randn({256, 256}) * 0.05).requires_grad_(true);
  Tensor xa = randn({64, 256}) + 2.0, xb = randn({64, 256}) - 2.0;
  auto steps = [&](auto& f) {
    return [&] {
      for (int i = 0; i < 10; ++i) {
        Tensor l = f((++k & 1) ? xa : xb, w1, w2);
        l.backward();
        w1.zero_grad();
        w2.zero_grad();
      }
    };
  };
  auto se = steps(loss);
  auto sh = steps(jloss);
  std::vector<double> ue, uh;
  for (int r = 0; r < 9; ++r) {
    ue.push_back(median_time(se, 1, 3, r == 0 ? 2 : 0));
    uh.push_back(median_time(sh, 1, 3, r == 0 ? 2 : 0));
  }
  if (jloss.stats().healed != 1) std::cerr << "HEAL: step not healed\n" << jloss.explain();
  std::sort(ue.begin(), ue.end());
  std::sort(uh.begin(), uh.end());
  const std::string q = "{\"batch\": 64, \"d\": 256}";
  emit("HEAL", "branch_grad_step", "kiln", "eager", threads, q, "us/step", ue[4] / 10 * 1e6);
  emit("HEAL", "branch_grad_step", "kiln", "jit_healed", threads, q, "us/step", uh[4] / 10 * 1e6);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: kiln_bench W1|W1_BF16|W2|W3|W4|W6|HEAL THREADS [eager,graph,jit]\n";
    return 2;
  }
  std::string w = argv[1];
  int threads = std::atoi(argv[2]);
  // W4 and W6 take the modes to run (default all): one mode per process gives its own peak RSS.
  const std::string modes = argc > 3 ? argv[3] : "eager,graph,jit";
  set_num_threads(threads);
  openblas_set_num_threads(threads);
  // On the 2-vCPU VM the first ~0.5 s of a process runs multi-threaded work far slower
  // (measured: the first GEMM timed in a process at 4 GFLOP/s, the same call 400 a moment
  // later, whichever library goes first). Keep every thread busy for a second before timing.
  {
    Tensor a = randn({512, 512}), b = randn({512, 512});
    double t0 = now_s();
    while (now_s() - t0 < 1.0) {
      Tensor c = matmul(a, b);
    }
  }
  if (w == "W1")
    w1(threads);
  else if (w == "W1_BF16")
    w1_bf16(threads);
  else if (w == "W2")
    w2(threads);
  else if (w == "W3")
    w3(threads);
  else if (w == "W4")
    w4(threads, modes);
  else if (w == "W6")
    w6(threads, modes);
  else if (w == "HEAL")
    heal(threads);
  else {
    std::cerr << "unknown workload " << w << "\n";
    return 2;
  }
  return 0;
}
