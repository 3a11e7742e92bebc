// The autograd tape's node (one per recorded op) and the hook graph building installs so grad()
// on symbolic tensors adds gradient nodes. Internal: kiln/autograd/engine.cpp and the graph and
// JIT layers read it; users see Tensor::grad_fn() only as an opaque handle.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/registry/op_def.h"

namespace kiln::detail {

/// The node type by its internal name (the public one, kiln::GradNode, is opaque in tensor.h).
using kiln::GradNode;

/// Where a gradient flows: into another node's output slot, or into a leaf tensor.
struct Edge {
  std::shared_ptr<GradNode> fn;
  uint32_t output_nr = 0;
  std::shared_ptr<TensorImpl> leaf;
  bool defined() const { return fn || leaf; }
};

/// Symbolic counterpart used when grad() is called on symbolic tensors (installed by kiln/graph:
/// graph building and JIT tracing then get gradients() nodes from the same call).
using SymbolicGradHook = std::vector<Tensor> (*)(const std::vector<Tensor>& ys,
                                                 const std::vector<Tensor>& xs,
                                                 const std::vector<Tensor>& grad_ys);
void set_symbolic_grad_hook(SymbolicGradHook h);

}  // namespace kiln::detail

namespace kiln {

/// One recorded op application.
struct GradNode {
  const detail::OpDef* op = nullptr;
  detail::Attrs attrs;
  detail::TensorList inputs;                         // saved with their autograd identity
  detail::TensorList outputs;                        // saved data-only aliases (no cycle)
  SmallVec<std::weak_ptr<TensorImpl>, 2> out_impls;  // for retain_grad
  SmallVec<uint32_t, 4> input_versions;
  SmallVec<uint32_t, 2> output_versions;  // outputs are saved too (exp, sqrt, tanh use them)
  SmallVec<detail::Edge, 4> next;         // one per input
  uint64_t seq = 0;
  bool released = false;
  std::string name() const { return op ? op->name : "?"; }
};

}  // namespace kiln
