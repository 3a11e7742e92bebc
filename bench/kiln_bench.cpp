// Kiln's side of the workload suite (DESIGN section 10), eager mode: W1 matmul beside raw
// oneDNN and raw OpenBLAS in the same process, W2 gelu(x*a+b) and layer_norm beside a
// memory-bandwidth copy loop, W3 dependent small adds. One workload per process so that peak
// RSS is per workload: kiln_bench WORKLOAD THREADS.
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include <cstring>
#include <iostream>

#include "bench/bench_util.h"
#include "kiln/kiln.h"

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
  double t = median_time(f, 15, 20, 5);
  emit("W3", "dependent_adds", "kiln", "eager", threads, "{\"ops\": 1000, \"numel\": 16}",
       "us/op", t / 1000 * 1e6);
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
  else {
    std::cerr << "unknown workload " << w << "\n";
    return 2;
  }
  return 0;
}
