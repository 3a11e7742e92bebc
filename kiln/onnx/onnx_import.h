// ONNX import: a ModelProto (opsets 7-17 of the default domain) becomes a Kiln static Graph whose
// placeholders are the model's inputs; a Session runs it. Part of libkiln_onnx, which links
// Debian's libonnx_proto and libprotobuf so that libkiln itself stays free of them.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kiln/exec/session.h"
#include "kiln/graph/graph.h"

namespace kiln::onnx {

struct ImportOptions {
  /// Sizes for inputs whose model shape has symbolic dims ("batch"); an input not listed keeps
  /// such dims dynamic, and ops that need static sizes (Shape, Reshape from computed shapes)
  /// then fail at import, naming the op.
  std::map<std::string, Shape> input_shapes;
  /// Inputs bound to values at import, as constants (a specialization, as the JIT compiles per
  /// constant): a model whose Reshape or Range reads an input can then be imported for that
  /// value. The bound inputs are no longer placeholders; `ImportedModel::run` still takes a
  /// feed for them (ignored), so callers feed every input either way.
  std::map<std::string, Tensor> constant_inputs;
  /// Sequence and optional inputs (Kiln has neither type): the elements the graph is built for,
  /// a sequence's or an optional's value (none for an absent optional). Only their count,
  /// dtypes and shapes are taken: each element becomes a placeholder `name[k]` of `inputs`, fed
  /// at run like any input. A model with such inputs needs them here.
  std::map<std::string, std::vector<Tensor>> sequence_inputs;
  /// Optional inputs that hold no value (fed nothing at run).
  std::vector<std::string> absent_inputs;
};

/// The imported graph. Values the model computes from constants alone are folded at import, so
/// an output may be concrete (no Session needed); the others are symbolic tensors of `graph`.
struct ImportedModel {
  Graph graph;
  std::vector<std::string> input_names;
  std::vector<Tensor> inputs;  ///< placeholders, in the model's input order
  /// The ONNX element types the model declares for `inputs`, one each (0 for a sequence's
  /// elements). A uint16/32/64 input is fed widened, as int32 (uint16) or int64.
  std::vector<int32_t> input_elem_types;
  std::vector<std::string> output_names;
  std::vector<Tensor> outputs;
  /// The ONNX element types the model declares for its outputs (0 where it declares none).
  /// Kiln has no uint16/32/64: it holds them as int32 (uint16) and int64 (uint32; uint64 bit for
  /// bit), exactly; `write_tensor_pb` with the declared type writes them back as that type.
  std::vector<int32_t> output_elem_types;
  /// Per model input and output, in order: its name and how many entries of inputs/outputs it
  /// takes (1 for a tensor, a sequence's length, 0 or 1 for an optional).
  std::vector<std::pair<std::string, int64_t>> input_layout, output_layout;
  int64_t opset = 0;                  ///< the default domain's opset the model imports
  std::vector<std::string> op_types;  ///< distinct op types of the main graph, in order seen

  /// Runs the model: `feeds` in input order; concrete outputs are returned as they are.
  std::vector<Tensor> run(Session& sess, const std::vector<Tensor>& feeds) const;
};

/// Parses and imports a model file. Every field is checked before use: a truncated, corrupt or
/// hostile file gives a kiln::Error ("[onnx_import] ..."), and no tensor is allocated larger
/// than the data the file holds for it. Unsupported ops fail naming the op and the opset.
ImportedModel import_model(const std::string& path, const ImportOptions& options = {});
ImportedModel import_model_bytes(const void* data, size_t size, const ImportOptions& options = {},
                                 const std::string& what = "model");

/// The model's input names and placeholders only (no nodes converted): to learn what to feed.
ImportedModel import_model_inputs_only(const std::string& path);

/// The distinct op types of a model's main graph, in order seen (empty if it does not parse).
std::vector<std::string> model_op_types(const std::string& path);

/// A serialized TensorProto (the backend test suite's input_0.pb, output_0.pb) as a tensor:
/// uint16 as int32, uint32 as int64, uint64 as int64 (values of 2^63 or more refused).
Tensor read_tensor_pb(const std::string& path);
Tensor parse_tensor_pb(const void* data, size_t size, const std::string& what = "tensor");
/// Writes a concrete tensor as a serialized TensorProto (raw data, little-endian). An
/// `elem_type` of UINT16, UINT32 or UINT64 (an output's declared type) narrows the int32/int64
/// tensor Kiln holds such values in back to that type, refusing a value it cannot hold.
void write_tensor_pb(const std::string& path, const Tensor& t, const std::string& name = "",
                     int32_t elem_type = 0);

}  // namespace kiln::onnx
