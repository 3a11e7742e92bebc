// Kiln's side of the workload suite (DESIGN section 10), eager mode: W1 matmul beside raw
// oneDNN and raw OpenBLAS in the same process, W2 gelu(x*a+b) and layer_norm beside a
// memory-bandwidth copy loop, W3 dependent small adds (eager and graph), W4 MLP training step
// (eager and graph). One workload per process so that peak
// RSS is per workload: kiln_bench WORKLOAD THREADS.
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include <cmath>
#include <cstring>
#include <iostream>

#include "bench/bench_util.h"
#include "kiln/kiln.h"
#include "kiln/optim/optim.h"

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
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.f, A,
                  (int)n, B, (int)n, 0.f, C, (int)n);
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
  std::vector<double> tc, tg, tl;
  for (int r = 0; r < 7; ++r) {
    tc.push_back(median_time(copy_f, 1, 5, r == 0 ? 3 : 0));
    tg.push_back(median_time(gelu_f, 1, 5, r == 0 ? 3 : 0));
    tl.push_back(median_time(ln_f, 1, 5, r == 0 ? 3 : 0));
  }
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::string p = "{\"shape\": [4096, 1024]}";
  emit("W2", "copy", "kiln", "raw", threads, p, "GB/s", bytes / med(tc) / 1e9);
  emit("W2", "gelu_affine", "kiln", "eager", threads, p, "GB/s", bytes / med(tg) / 1e9);
  emit("W2", "layer_norm", "kiln", "eager", threads, p, "GB/s", bytes / med(tl) / 1e9);
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
  std::vector<double> te, tg;
  for (int r = 0; r < 9; ++r) {
    te.push_back(median_time(f, 1, 20, r == 0 ? 5 : 0));
    tg.push_back(median_time(fg, 1, 20, r == 0 ? 5 : 0));
  }
  std::sort(te.begin(), te.end());
  std::sort(tg.begin(), tg.end());
  std::string p = "{\"ops\": 1000, \"numel\": 16}";
  emit("W3", "dependent_adds", "kiln", "eager", threads, p, "us/op", te[4] / 1000 * 1e6);
  emit("W3", "dependent_adds", "kiln", "graph", threads, p, "us/op", tg[4] / 1000 * 1e6);
}

// W4: MLP 784-256-256-10, ReLU, batch 128, cross-entropy, one SGD step.
void w4(int threads) {
  manual_seed(4);
  const int64_t B = 128;
  Tensor xb = rand({B, 784}), yb = randint(0, 10, {B});
  auto init = [](int64_t o, int64_t i) { return mul(randn({o, i}), std::sqrt(2.0 / static_cast<double>(i))); };
  Tensor wa = init(256, 784), wb = init(256, 256), wc = init(10, 256);
  Tensor ba = zeros({256}), bb = zeros({256}), bc = zeros({10});
  std::string p = "{\"batch\": 128, \"layers\": [784, 256, 256, 10]}";

  // Eager: define-by-run with autograd.
  std::vector<Tensor> ps;
  for (Tensor* t : std::vector<Tensor*>{&wa, &ba, &wb, &bb, &wc, &bc}) ps.push_back(t->clone().requires_grad_());
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
  std::vector<double> te, tg;
  for (int r = 0; r < 7; ++r) {
    te.push_back(median_time(eager_step, 1, 20, r == 0 ? 5 : 0));
    tg.push_back(median_time(graph_step, 1, 20, r == 0 ? 5 : 0));
  }
  std::sort(te.begin(), te.end());
  std::sort(tg.begin(), tg.end());
  emit("W4", "mlp_train_step", "kiln", "eager", threads, p, "steps/s", 1.0 / te[3]);
  emit("W4", "mlp_train_step", "kiln", "graph", threads, p, "steps/s", 1.0 / tg[3]);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: kiln_bench W1|W2|W3 THREADS\n";
    return 2;
  }
  std::string w = argv[1];
  int threads = std::atoi(argv[2]);
  set_num_threads(threads);
  openblas_set_num_threads(threads);
  if (w == "W1") w1(threads);
  else if (w == "W2") w2(threads);
  else if (w == "W3") w3(threads);
  else if (w == "W4") w4(threads);
  else {
    std::cerr << "unknown workload " << w << "\n";
    return 2;
  }
  return 0;
}
