// libFuzzer target: kiln::onnx::load_graph_bytes (saved graphs) on arbitrary bytes, then a run of
// what loaded on zeros when the inputs are small and static; and load_jit_bytes (saved jitted
// functions: the guard lines besides the graph); and is_saved_graph, which must accept every file
// load_graph_bytes does.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "kiln/onnx/saved_graph.h"
#include "kiln/onnx/saved_jit.h"
#include "run_bounded.h"

namespace {

// is_saved_graph (kiln-run's choice of loader) on the same bytes, from a memory file: it must
// not crash, and it must say yes to whatever load_graph_bytes accepts.
bool scan_says_saved(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("kiln_fuzz_saved", MFD_CLOEXEC);
  if (fd < 0) __builtin_trap();
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size))
    __builtin_trap();
  return kiln::onnx::is_saved_graph("/proc/self/fd/" + std::to_string(fd));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    kiln::onnx::LoadedJit j = kiln::onnx::load_jit_bytes(data, size);
  } catch (const kiln::Error&) {
  }
  const bool saved = scan_says_saved(data, size);
  try {
    kiln::onnx::LoadedGraph g = kiln::onnx::load_graph_bytes(data, size);
    if (!saved) __builtin_trap();  // loaded, yet kiln-run would have imported it as ONNX
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
