// The dataflow-graph IR: nodes are ops (or placeholders, variables, constants), edges are data.
// Symbolic tensors name a node output; every registered op accepts them through the dispatcher,
// which hands the call to the graph builder here.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/ops/op_def.h"

namespace kiln {

enum class NodeKind : uint8_t { Op, Placeholder, Variable, Constant };

struct Node;
struct ValueRef {
  Node* node = nullptr;
  int index = 0;
  bool operator==(const ValueRef& o) const { return node == o.node && index == o.index; }
};

struct Node {
  int id = 0;
  NodeKind kind = NodeKind::Op;
  const OpDef* op = nullptr;  ///< for NodeKind::Op
  Attrs attrs;
  std::vector<ValueRef> inputs;
  std::vector<TensorMeta> outputs;
  std::string name;  ///< placeholder/variable name; optional for others
  Tensor value;      ///< Constant: its value; Variable: the initial value
  /// Short label for printers: the name, or the op name.
  std::string label() const;
};

struct GraphImpl;

/// What a symbolic tensor refers to: one output of one node of one graph.
struct SymbolicValue {
  std::shared_ptr<GraphImpl> graph;
  Node* node = nullptr;
  int index = 0;
};

struct GraphImpl {
  std::vector<std::unique_ptr<Node>> nodes;
  // Concrete tensor -> its constant node. The tensor is held so its address is not reused.
  std::unordered_map<const TensorImpl*, std::pair<Tensor, Node*>> constants;
  uint64_t uid = 0;
  Node* add_node(std::unique_ptr<Node> n);
  /// A symbolic tensor for a node output.
  Tensor tensor_of(const std::shared_ptr<GraphImpl>& self, ValueRef v) const;
};

/// A TensorFlow-1 style graph: build with placeholders, variables and ordinary Kiln ops, then
/// run it with a Session.
class Graph {
 public:
  Graph();
  /// The graph a symbolic tensor belongs to.
  static Graph of(const Tensor& t);
  /// A named input fed at run time. Dims may be Dim::any().
  Tensor placeholder(const std::string& name, DType dtype, const Shape& shape);
  /// A named piece of state, initialized from `initial` in each Session.
  Tensor variable(const std::string& name, const Tensor& initial);
  /// A constant node holding `value` (concrete tensors used in ops become constants anyway).
  Tensor constant(const Tensor& value, const std::string& name = "");

  /// The node behind a symbolic tensor of this graph (kiln::Error if it belongs elsewhere).
  Node* node_of(const Tensor& t, const char* what = "graph") const;
  ValueRef value_of(const Tensor& t, const char* what = "graph") const;
  Tensor tensor_of(ValueRef v) const { return impl_->tensor_of(impl_, v); }
  const std::vector<std::unique_ptr<Node>>& nodes() const { return impl_->nodes; }
  std::vector<Node*> variables() const;
  std::vector<Node*> placeholders() const;
  /// `base`, or `base_1`, `base_2`... whichever no placeholder or variable uses yet.
  std::string unique_name(const std::string& base) const;
  /// Finds a variable or placeholder by name (null if none).
  Node* find(const std::string& name) const;

  /// One line per node: `%3 = matmul(%0, %1) : float32[?, 10]`.
  std::string to_text() const;
  /// Graphviz DOT.
  std::string to_dot() const;
  /// Mermaid `graph LR` as in the lecture: inputs by name, ops by op name.
  std::string to_mermaid() const;
  /// Checks structure: inputs precede uses, arities and metas match the registry's inference.
  void verify() const;

  const std::shared_ptr<GraphImpl>& impl() const { return impl_; }
  bool operator==(const Graph& o) const { return impl_ == o.impl_; }

 private:
  explicit Graph(std::shared_ptr<GraphImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<GraphImpl> impl_;
};

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

/// Symbolic gradients (TF1 tf.gradients): adds backward nodes computing d(sum of ys * grad_ys)
/// / d xs to the graph, with the same gradient rules eager backward uses. Entries for xs that do
/// not influence ys are undefined.
std::vector<Tensor> gradients(const std::vector<Tensor>& ys, const std::vector<Tensor>& xs,
                              const std::vector<Tensor>& grad_ys = {});

}  // namespace kiln
