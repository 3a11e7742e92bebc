// W9 on Kiln: an exported ONNX model imported into a Graph and run by a Session (all passes),
// images/s over the median timed run. Usage: kiln_onnx_bench MODEL INPUT.npy THREADS [NAME]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_util.h"
#include "kiln/io/npy.h"
#include "kiln/kiln.h"
#include "kiln/onnx/onnx_import.h"

using namespace kiln;

int main(int argc, char** argv) {
  // Inference only: back off to one thread while other processes starve this one (the load
  // guard, kiln/kernels/cpu/parallel.h), unless the caller said otherwise.
  setenv("KILN_LOAD_GUARD", "1", /*overwrite=*/0);
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: kiln_onnx_bench MODEL INPUT.npy THREADS [NAME]\n");
    return 2;
  }
  const int threads = std::stoi(argv[3]);
  set_num_threads(threads);
  Tensor x = io::read_npy(argv[2]);
  onnx::ImportedModel m = onnx::import_model(argv[1]);
  Session sess(m.graph);
  for (int i = 0; i < 2; ++i) m.run(sess, {x});
  std::vector<double> times;
  const double start = bench::now_s();
  while (times.size() < 5 || (bench::now_s() - start < 3 && times.size() < 200)) {
    const double t = bench::now_s();
    m.run(sess, {x});
    times.push_back(bench::now_s() - t);
  }
  std::sort(times.begin(), times.end());
  const double med = times[times.size() / 2];
  const int64_t b = x.size(0);
  bench::emit("W9", argc == 5 ? argv[4] : "resnet18_onnx", "kiln", "graph", threads,
              "{\"batch\": " + std::to_string(b) + "}", "images/s", static_cast<double>(b) / med);
  return 0;
}
