// LibTorch (PyTorch 1.13's C++ API, Debian libtorch-dev) on W3: the same 1000 dependent adds on a
// 16-float tensor as kiln_bench W3, so Kiln's eager dispatch is compared with PyTorch's without
// Python in the way. Usage: libtorch_bench W3 THREADS CONFIG (CONFIG names the environment that
// bench/run set up, e.g. default or tuned; it is only recorded).
#include <torch/torch.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "bench_util.h"

using namespace kiln::bench;

int main(int argc, char** argv) {
  if (argc < 4 || std::string(argv[1]) != "W3") {
    std::cerr << "usage: libtorch_bench W3 THREADS CONFIG\n";
    return 2;
  }
  const int threads = std::atoi(argv[2]);
  const std::string config = argv[3];
  at::set_num_threads(threads);
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  torch::Tensor x0 = torch::randn({16}), y = torch::randn({16});
  torch::Tensor sink;
  auto chain = [&] {
    torch::Tensor x = x0;
    for (int i = 0; i < 1000; ++i) x = torch::add(x, y);
    sink = x;
  };
  // Same protocol as kiln_bench W3: warm up, then the median of timed batches of chains.
  double t = median_time(chain, 15, 5, 3);
  const std::string p = "{\"ops\": 1000, \"numel\": 16, \"config\": \"" + config + "_cpp\"}";
  emit("W3", "dependent_adds", "pytorch", "eager", threads, p, "us/op", t / 1000 * 1e6);
  return sink.numel() == 16 ? 0 : 1;
}
