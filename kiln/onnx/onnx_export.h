// ONNX export: a Kiln static Graph written with standard ONNX ops (opset 17) so that other
// engines (onnxruntime) run it; cond's Switch/Merge becomes If, while_loop becomes Loop. What
// has no standard form (a Switch no cond-shaped Merge gates, ops without an ONNX equivalent) is
// refused, naming the node; save_graph (saved_graph.h) keeps those in the Kiln domain.
#pragma once
#include <string>

#include "kiln/onnx/saved_graph.h"

namespace kiln::onnx {

/// Writes the part of `g` that `outputs` need: placeholders become inputs (named as in the
/// graph; dynamic dims symbolic), variables initializers with their values in `sess` when
/// given. Raises kiln::Error naming the first Kiln op that has no standard ONNX form.
/// With SaveOptions::external_data the initializers go to a safetensors file beside it, as
/// ONNX external data (onnxruntime and onnx.load read it).
void export_onnx(const std::string& path, const Graph& g, const NamedTensors& outputs,
                 const Session* sess = nullptr, const SaveOptions& options = {});
std::string export_onnx_bytes(const Graph& g, const NamedTensors& outputs,
                              const Session* sess = nullptr);

}  // namespace kiln::onnx
