// Read access to the subgraph of a structured `while` node, for code that serializes graphs
// (kiln/onnx's saved graphs). Internal (kiln::detail); the bodies themselves stay private to
// control_flow.cpp, referenced from the node's attributes by index.
#pragma once
#include <vector>

#include "kiln/graph/graph.h"
#include "kiln/registry/op_def.h"

namespace kiln::detail {

struct WhileBodyView {
  Graph sub;                     ///< the body graph: placeholders, then cond and body nodes
  std::vector<Tensor> var_ph;    ///< one placeholder per loop var
  std::vector<Tensor> cap_ph;    ///< one placeholder per captured outer value (the node's
                                 ///< inputs after the loop vars)
  Tensor cond_out;               ///< the loop condition (bool scalar)
  std::vector<Tensor> body_out;  ///< the next loop vars
  int64_t max_iterations = -1;
};

/// Whether `op` is the structured while op, or the op of its gradient.
bool is_while_op(const OpDef* op);
bool is_while_grad_op(const OpDef* op);
/// The body of a while node, from its attributes.
WhileBodyView while_body_of(const Attrs& attrs);

}  // namespace kiln::detail
