// Saved graphs: a Kiln static Graph (placeholders, variables with their current values,
// constants, every op including switch/merge, cond, while_loop and print) written to one ONNX
// file and loaded in another process, where a Session gives the same results bit for bit. Every
// node is kept as the Kiln op it is (domain ai.kiln, attributes by position), so the loaded
// graph runs the same kernels; the container is ONNX so standard tools (onnx.checker, Netron)
// open it. For standard ONNX ops that other engines run, see onnx_export.h.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kiln/exec/session.h"
#include "kiln/graph/graph.h"

namespace kiln::onnx {

/// The format version written; a file from a newer version is refused with a clear error.
inline constexpr int64_t kSavedGraphVersion = 1;
/// The ONNX domain of Kiln's ops in saved graphs.
inline constexpr char kKilnDomain[] = "ai.kiln";

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// Options of the savers that write a file (save_graph, save_jit, export_onnx).
struct SaveOptions {
  /// Initializers (variables, constants) go to a safetensors file beside the model instead of
  /// into it, pointed at with ONNX's external-data fields (onnxruntime reads them too): for
  /// models near protobuf's 2 GiB limit, and weights other tools can map.
  bool external_data = false;
  /// That file, relative to the model's directory (no ".."); empty: the model's file name with
  /// the extension .safetensors.
  std::string external_file;
  /// Initializers smaller than this stay inside the model.
  int64_t external_min_bytes = 0;
  /// ONNX export: names of the inputs' dynamic dims, keyed "input:axis" (torch.onnx.export's
  /// dynamic_axes names); a dynamic dim without one is named d0, d1, ...
  std::map<std::string, std::string> dim_names;
};

/// Writes the part of `g` that `outputs` (named symbolic tensors of g) need. Variables are
/// saved with their values in `sess` when given (a trained model), else their initial values.
/// A gradient through a while_loop is refused, naming it.
void save_graph(const std::string& path, const Graph& g, const NamedTensors& outputs,
                const Session* sess = nullptr, const SaveOptions& options = {});
std::string save_graph_bytes(const Graph& g, const NamedTensors& outputs,
                             const Session* sess = nullptr);

struct LoadedGraph {
  Graph graph;
  NamedTensors inputs;   ///< placeholders, by name
  NamedTensors outputs;  ///< the saved outputs, by name
  /// A placeholder or an output by name (kiln::Error if there is none).
  Tensor input(const std::string& name) const;
  Tensor output(const std::string& name) const;
};

/// Loads a saved graph. A truncated, corrupt or hostile file, or one from a newer format
/// version, gives a kiln::Error ("[load_graph] ..."), never a crash, and no allocation larger
/// than the file's data justifies. External data (SaveOptions::external_data) is read from the
/// model's directory, checked as external_data.h says; load_graph_bytes refuses it.
LoadedGraph load_graph(const std::string& path);
LoadedGraph load_graph_bytes(const void* data, size_t size, const std::string& what = "graph");

/// Whether the file at `path` is a Kiln saved graph (it carries the format-version key), found
/// by reading the model's top-level fields and skipping the graph, so a large ONNX model costs a
/// few reads, not a parse: kiln-run picks load_graph or onnx::import_model by it. False for
/// anything unreadable or malformed (the loader then says what is wrong).
bool is_saved_graph(const std::string& path);

}  // namespace kiln::onnx
