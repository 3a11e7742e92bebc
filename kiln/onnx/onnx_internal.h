// Internals shared by the ONNX importer's driver (onnx_import.cpp) and its op converters
// (onnx_ops*.cpp), and by the writers (onnx_export.cpp, saved_graph.cpp): the import context, a
// node's inputs and checked attribute reads, dtype codes and the proto fill helpers.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/onnx/onnx_import.h"
#include "kiln/onnx/saved_graph.h"
#include "kiln/ops/ops.h"
#include "onnx/onnx_pb.h"

namespace kiln::onnx::detail {

/// The tag every importer error starts with.
inline constexpr char kOp[] = "onnx_import";

struct Ctx;

/// One node being converted: its proto, its inputs (undefined for an omitted optional input)
/// and the opset in force. Attribute reads check the attribute's type.
struct NodeIn {
  const ::onnx::NodeProto& proto;
  std::vector<Tensor> in;
  int64_t opset;
  Ctx& ctx;

  const std::string& type() const { return proto.op_type(); }
  /// Input i, or an undefined tensor when absent.
  Tensor input(size_t i) const { return i < in.size() ? in[i] : Tensor(); }
  bool has_input(size_t i) const { return i < in.size() && in[i].defined(); }
  /// Input i, which must be present.
  const Tensor& req(size_t i) const;
  const ::onnx::AttributeProto* attr(const char* name) const;
  bool has(const char* name) const { return attr(name) != nullptr; }
  int64_t i(const char* name, int64_t def) const;
  double f(const char* name, double def) const;
  std::string s(const char* name, const std::string& def) const;
  std::vector<int64_t> ints(const char* name, std::vector<int64_t> def = {}) const;
  std::vector<double> floats(const char* name, std::vector<double> def = {}) const;
  Tensor t(const char* name) const;
  /// An integer attribute that must be present.
  int64_t req_i(const char* name) const;
  /// Raises "[onnx_import] <Op> (opset N): ..." for this node.
  template <typename... A>
  [[noreturn]] void fail(const A&... a) const {
    ::kiln::fail(kOp, type(), " (opset ", opset, ", node '", proto.name(), "'): ", a...);
  }
};

using Converter = std::function<std::vector<Tensor>(NodeIn&)>;

/// The converters by op type (default domain). Filled by the onnx_ops*.cpp files.
std::unordered_map<std::string, Converter>& converters();
struct RegisterConverter {
  RegisterConverter(const char* op, Converter c) { converters().emplace(op, std::move(c)); }
};

/// Defines the converter of ONNX op NAME and registers it: `KILN_ONNX_OP(Relu) { ... }`, the body
/// reading the node through `n` and returning the outputs (used in an onnx_ops*.cpp file's
/// anonymous namespace).
#define KILN_ONNX_OP(NAME)                                \
  std::vector<Tensor> conv_##NAME(NodeIn& n);             \
  const RegisterConverter reg_##NAME(#NAME, conv_##NAME); \
  std::vector<Tensor> conv_##NAME(NodeIn& n)

/// A converter's outputs.
using TL = std::vector<Tensor>;

/// ONNX's unsigned types past uint8, which Kiln holds widened (onnx_ops_unsigned.cpp): uint16
/// as int32, uint32 as int64, uint64 as int64 bit for bit (below 2^63 where read; U64Wrapped
/// after wrapping arithmetic, whose bits may stand for 2^63 or more).
enum class Unsigned : uint8_t { None, U16, U32, U64, U64Wrapped };

/// A sequence or optional value (onnx_ops_sequence.cpp). Kiln has no such types: the importer
/// keeps them as lists of tensors whose count is known at import (a sequence's length, whether
/// an optional holds its value); the elements are ordinary graph values.
struct SeqValue {
  enum class Kind { Sequence, OptionalTensor, OptionalSequence };
  Kind kind = Kind::Sequence;
  bool present = true;        ///< optionals: whether there is a value
  std::vector<Tensor> items;  ///< a sequence's elements; an optional tensor's value as items[0]
  DType dtype = Float32;      ///< the element type, for empty sequences
};
/// A value a subgraph takes or gives: a tensor or a sequence/optional.
struct Value {
  Tensor tensor;
  std::optional<SeqValue> seq;
  Value() = default;
  Value(Tensor t) : tensor(std::move(t)) {}  // NOLINT: implicit, as a tensor is a value
  Value(SeqValue s) : seq(std::move(s)) {}   // NOLINT
};

/// Import state: the graph under construction and name -> value (concrete = known at import).
struct Ctx {
  Graph graph;
  std::vector<std::unordered_map<std::string, Tensor>> scopes;  // innermost last
  int64_t opset = 0;
  int64_t depth = 0;        // subgraph nesting, bounded against hostile recursion
  int64_t fold_budget = 0;  // elements import-time folding may still create
  int64_t node_budget = 0;  // nodes unrolling (Loop, RNNs) may still create

  // Values of ONNX unsigned types by name (names are unique across a model and its subgraphs),
  // and how many nodes took such values (a subgraph that does is refused: see import_nodes).
  std::unordered_map<std::string, Unsigned> unsigned_values;
  int64_t unsigned_nodes = 0;
  // Sequence and optional values by name (as unsigned_values, names are unique in a model).
  std::unordered_map<std::string, SeqValue> seqs;

  const Tensor* lookup(const std::string& name) const;
  void bind(const std::string& name, const Tensor& t) {
    scopes.back()[name] = t;
    seqs.erase(name);
  }
  const SeqValue* lookup_seq(const std::string& name) const {
    auto it = seqs.find(name);
    return it == seqs.end() ? nullptr : &it->second;
  }
  void bind_seq(const std::string& name, SeqValue v) {
    scopes.back().erase(name);
    seqs[name] = std::move(v);
  }
  /// Binds a tensor or a sequence/optional.
  void bind_value(const std::string& name, const Value& v) {
    if (v.seq)
      bind_seq(name, *v.seq);
    else
      bind(name, v.tensor);
  }
  /// The unsigned tag of a value (None for the others).
  Unsigned unsigned_of(const std::string& name) const {
    auto it = unsigned_values.find(name);
    return it == unsigned_values.end() ? Unsigned::None : it->second;
  }
  void tag(const std::string& name, Unsigned u) {
    if (u == Unsigned::None)
      unsigned_values.erase(name);
    else
      unsigned_values[name] = u;
  }
};

/// A TensorProto as a concrete tensor (sizes and data checked). uint16/32/64 are read widened
/// only when `widen_unsigned` (the importer, which tags them); else refused.
Tensor tensor_from_proto(const ::onnx::TensorProto& p, const std::string& what,
                         bool widen_unsigned = false);
/// The unsigned kind of an ONNX element type (None for the others).
Unsigned unsigned_of_onnx(int32_t elem_type);
/// The Kiln dtype holding an ONNX element type at the import boundary: dtype_from_onnx's, and
/// uint16 -> int32, uint32/uint64 -> int64.
DType boundary_dtype(int32_t elem_type, const std::string& what);
/// A uint16/32/64 TensorProto of `n` elements as its widened tensor (uint64 >= 2^63 refused).
Tensor unsigned_from_proto(const ::onnx::TensorProto& p, const Shape& shape, int64_t n,
                           const std::string& what);
/// The unsigned kind a Constant or ConstantOfShape node produces (None for other nodes).
Unsigned produced_unsigned(const ::onnx::NodeProto& node);
/// Converts a node some of whose inputs are unsigned (`tags`, per input) where Kiln's result is
/// exact, wrapping arithmetic masked back; refuses the node otherwise. Sets its outputs' tag.
std::vector<Tensor> convert_unsigned(NodeIn& n, const Converter& conv,
                                     const std::vector<Unsigned>& tags, Unsigned* out_tag);
/// The Kiln dtype of an ONNX element type; fails naming it when Kiln has none.
DType dtype_from_onnx(int32_t elem_type, const std::string& what);
int32_t onnx_from_dtype(DType dt);

/// Writers' helpers (onnx_export.cpp, saved_graph.cpp): a tensor as a TensorProto (raw data),
/// and a value's type as a ValueInfoProto, each dynamic dim named by `dim_param()`.
void fill_tensor(::onnx::TensorProto* p, const Tensor& t, const std::string& name);
void fill_value_info(::onnx::ValueInfoProto* v, const std::string& name, DType dt, const Shape& s,
                     const std::function<std::string()>& dim_param);

/// Host integers of an input that must be known at import (shapes, axes, pads, ...).
std::vector<int64_t> const_ints(const NodeIn& n, size_t i, const char* what);
/// Whether every value is concrete (the node folds at import).
bool all_concrete(const std::vector<Tensor>& ts);
/// Refuses to fold a value of `numel` elements past the budget the file's size justifies.
void charge_fold(const NodeIn& n, int64_t numel);
/// The element count of a static shape (-1 when dynamic or past 2^62), for charge_fold.
int64_t static_numel(const Shape& s);
/// Refuses an op whose result the Session would allocate at run time past 2^28 elements (1 GiB
/// of float32) when its size comes from attributes or constants rather than from the data fed,
/// so that a small file cannot make a run allocate gigabytes (pads of 10^9, Expand to [10^6,
/// 10^6], Resize by 10^4).
void check_result_size(const NodeIn& n, const Shape& result);
/// Refuses to unroll past the node budget the file's size justifies (nested Loops, long RNNs).
void charge_nodes(const NodeIn& n, int64_t nodes);

/// Imports a subgraph (If branches, Loop bodies) with `inputs` bound to its inputs, in a new
/// scope that sees the enclosing ones; returns its outputs (tensors: a sequence output is
/// refused; import_subgraph_values takes and gives sequences too).
std::vector<Tensor> import_subgraph(Ctx& ctx, const ::onnx::GraphProto& g,
                                    const std::vector<Tensor>& inputs, const std::string& what);
std::vector<Value> import_subgraph_values(Ctx& ctx, const ::onnx::GraphProto& g,
                                          const std::vector<Value>& inputs,
                                          const std::string& what);
/// Converts a node that takes or gives sequences or optionals (onnx_ops_sequence.cpp), binding
/// its outputs; false when the node is not one (the ordinary converters take it).
bool convert_sequence_node(Ctx& ctx, const ::onnx::NodeProto& node);
/// A sequence or optional graph input as the elements ImportOptions::sequence_inputs gives for
/// it (checked against the declared type); refused, saying so, when none are given.
SeqValue sequence_input(const ::onnx::ValueInfoProto& v, const ImportOptions& options);

/// The saved-graph writer's model, and the loader from a parsed model (external data resolved
/// or refused before), shared with saved_jit.cpp.
::onnx::ModelProto saved_graph_model(const Graph& g, const NamedTensors& outputs,
                                     const Session* sess);
LoadedGraph load_graph_model(const ::onnx::ModelProto& m, const std::string& what);
/// Raises unless `m` is a saved graph of a format version this Kiln reads.
void check_version(const ::onnx::ModelProto& m, const std::string& what);
/// Parses a model (at most protobuf's 2 GiB, nesting bounded); raises "[op] what: ..." if the
/// bytes are not one.
::onnx::ModelProto parse_model(const void* data, size_t size, const std::string& what,
                               const char* op);
/// Serializes `m` (external data first when `opts` asks) and writes it to `path`.
void write_model(::onnx::ModelProto& m, const std::string& path, const SaveOptions& opts,
                 const char* op);

}  // namespace kiln::onnx::detail
