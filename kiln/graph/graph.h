// The dataflow-graph IR: nodes are ops (or placeholders, variables, constants), edges are data.
// Symbolic tensors name a node output; every registered op accepts them through the dispatcher,
// which hands the call to the graph builder here.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

/// A graph's node, a reference to one output of a node, and the graph's node list: opaque here
/// (what Graph's node-level accessors hand out); their members are in kiln/graph/node.h, for
/// passes and extensions.
struct Node;
struct ValueRef;
struct GraphImpl;

/// A TensorFlow-1 style graph: build with placeholders, variables and ordinary Kiln ops, then
/// run it with a Session.
class Graph {
 public:
  Graph();
  /// The graph a symbolic tensor belongs to.
  static Graph of(const Tensor& t);
  /// A named input fed at run time. Dims may be Dim::any().
  Tensor placeholder(const std::string& name, DType dtype, const Shape& shape);
  /// The sizes an example input has (an exporter tracing a model from example inputs): the
  /// symbolic sizes of the placeholder's dynamic dims carry them as hints, and comparisons of
  /// sizes read while building are taken at them.
  void set_hint(const Tensor& placeholder, const Shape& sizes);
  /// A named piece of state, initialized from `initial` in each Session.
  Tensor variable(const std::string& name, const Tensor& initial);
  /// A constant node holding `value` (concrete tensors used in ops become constants anyway).
  Tensor constant(const Tensor& value, const std::string& name = "");

  /// The node behind a symbolic tensor of this graph (kiln::Error if it belongs elsewhere).
  Node* node_of(const Tensor& t, const char* what = "graph") const;
  ValueRef value_of(const Tensor& t, const char* what = "graph") const;
  Tensor tensor_of(ValueRef v) const;
  const std::vector<std::unique_ptr<Node>>& nodes() const;
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

/// Symbolic gradients (TF1 tf.gradients): adds backward nodes computing d(sum of ys * grad_ys)
/// / d xs to the graph, with the same gradient rules eager backward uses. Entries for xs that do
/// not influence ys are undefined.
std::vector<Tensor> gradients(const std::vector<Tensor>& ys, const std::vector<Tensor>& xs,
                              const std::vector<Tensor>& grad_ys = {});

}  // namespace kiln
