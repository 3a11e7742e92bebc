// libFuzzer target: kiln::onnx::import_model_bytes on arbitrary bytes (the ONNX loader and every
// converter it reaches). Any kiln::Error is a clean refusal; a crash, a sanitizer report or an
// out-of-memory is a bug.
#include <cstdint>

#include "kiln/onnx/onnx_import.h"
#include "run_bounded.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    kiln::onnx::ImportedModel m = kiln::onnx::import_model_bytes(data, size);
    // Run what imported, on zeros of the declared shapes, when small: kernels see what the
    // importer accepted.
    kiln::FeedDict feeds;
    for (const auto& ph : m.inputs) {
      if (!ph.is_symbolic()) continue;
      if (!ph.shape().is_static() || ph.numel() > 4096) return 0;
      feeds.emplace_back(ph, kiln::zeros(ph.shape(), ph.dtype()));
    }
    kiln::Session sess(m.graph);
    std::vector<kiln::Tensor> fetches;
    for (const auto& o : m.outputs)
      if (o.is_symbolic()) fetches.push_back(o);
    if (!fetches.empty()) kiln_fuzz::run_bounded(sess, fetches, feeds);
  } catch (const kiln::Error&) {
  }
  return 0;
}
