// libFuzzer target: kiln::onnx::load_graph_bytes (saved graphs) on arbitrary bytes, then a run of
// what loaded on zeros when the inputs are small and static; and load_jit_bytes (saved jitted
// functions: the guard lines besides the graph).
#include <cstdint>

#include "kiln/onnx/saved_graph.h"
#include "kiln/onnx/saved_jit.h"
#include "run_bounded.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    kiln::onnx::LoadedJit j = kiln::onnx::load_jit_bytes(data, size);
  } catch (const kiln::Error&) {
  }
  try {
    kiln::onnx::LoadedGraph g = kiln::onnx::load_graph_bytes(data, size);
    kiln::FeedDict feeds;
    for (const auto& [name, ph] : g.inputs) {
      if (!ph.shape().is_static() || ph.numel() > 4096) return 0;
      feeds.emplace_back(ph, kiln::zeros(ph.shape(), ph.dtype()));
    }
    kiln::Session sess(g.graph);
    std::vector<kiln::Tensor> fetches;
    for (const auto& [name, t] : g.outputs) fetches.push_back(t);
    kiln_fuzz::run_bounded(sess, fetches, feeds);
  } catch (const kiln::Error&) {
  }
  return 0;
}
