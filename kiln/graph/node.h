// The graph IR's nodes: what a Graph holds and what passes, the Session and the JIT rewrite.
// Internal (kiln::detail); users build graphs through kiln::Graph and ordinary ops.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/core/host_read.h"
#include "kiln/graph/graph.h"
#include "kiln/ops/handles.h"
#include "kiln/registry/op_def.h"

namespace kiln::detail {

enum class NodeKind : uint8_t { Op, Placeholder, Variable, Constant };

// The graph types by their internal names (kiln::Node, ValueRef, GraphImpl and SymbolicValue
// are opaque in the public graph.h and tensor.h; their members are here).
using kiln::GraphImpl;
using kiln::Node;
using kiln::SymbolicValue;
using kiln::ValueRef;

/// Rewrites the symbolic inputs of ops being added to a graph (thread-local hook). cond routes
/// values a branch captures from outside it through Switch nodes; while_loop turns values of an
/// enclosing graph into placeholders of the loop's body graph.
class InputCapture {
 public:
  virtual ~InputCapture() = default;
  virtual Tensor capture(const Tensor& t) = 0;
};
/// Installs `c` on this thread and returns the previous hook (restore it when done).
InputCapture* set_input_capture(InputCapture* c);
InputCapture* input_capture();

}  // namespace kiln::detail

namespace kiln {

/// One output of a node: `node`'s output `index`.
struct ValueRef {
  Node* node = nullptr;
  int index = 0;
  bool operator==(const ValueRef& o) const { return node == o.node && index == o.index; }
};

/// A node of a graph: an op application, a placeholder, a variable or a constant.
struct Node {
  int id = 0;
  detail::NodeKind kind = detail::NodeKind::Op;
  const detail::OpDef* op = nullptr;  ///< for NodeKind::Op
  detail::Attrs attrs;
  std::vector<ValueRef> inputs;
  std::vector<detail::TensorMeta> outputs;
  std::string name;  ///< placeholder/variable name; optional for others
  Tensor value;      ///< Constant: its value; Variable: the initial value
  /// Symbolic size attributes (op_def.h SizePatch): the last patches.size() inputs are their
  /// 0-d int64 values, which the executor writes into `attrs` before each run.
  std::vector<detail::SizePatch> patches;
  /// Per output, its shape in the trace that built the graph (a JIT trace with dynamic dims
  /// keeps the concrete sizes beside the dynamic ones; a symbolic size's hint). Empty: unknown.
  std::vector<Shape> hints;
  /// Inputs the op itself takes (the size inputs of `patches` follow them).
  size_t op_inputs() const { return inputs.size() - patches.size(); }
  /// Short label for printers: the name, or the op name.
  std::string label() const;
  /// Whether this is an application of `op` (passes match ops by handle, never by name).
  bool is(const detail::OpHandle& op) const {
    return kind == detail::NodeKind::Op && this->op == op;
  }
};

/// What a symbolic tensor refers to: one output of one node of one graph.
struct SymbolicValue {
  std::shared_ptr<GraphImpl> graph;
  Node* node = nullptr;
  int index = 0;
};

/// What a Graph holds: its nodes in the order they were added (inputs before uses).
struct GraphImpl {
  std::vector<std::unique_ptr<Node>> nodes;
  // Concrete tensor -> its constant node. The tensor is held so its address is not reused.
  std::unordered_map<const TensorImpl*, std::pair<Tensor, Node*>> constants;
  uint64_t uid = 0;
  /// Whether nodes added get Node::hints (a JIT trace with dynamic dims sets it).
  bool track_hints = false;
  Node* add_node(std::unique_ptr<Node> n);
  /// A symbolic tensor for a node output.
  Tensor tensor_of(const std::shared_ptr<GraphImpl>& self, ValueRef v) const;
};

}  // namespace kiln
