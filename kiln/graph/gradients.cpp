// Symbolic autodiff (TF1 tf.gradients): walks the graph backwards from ys and calls each op's
// gradient rule on symbolic tensors, so the rules add backward nodes to the same graph. No rule
// is written twice: eager backward uses the very same OpDef::grad.
#include <map>
#include <set>

#include "kiln/dispatch/autocast.h"
#include "kiln/dispatch/dispatch.h"
#include "kiln/graph/graph.h"
#include "kiln/graph/node.h"
#include "kiln/ops/grad_ops.h"
#include "kiln/ops/ops.h"

using namespace kiln::detail;

namespace kiln {

namespace {

using Key = std::pair<int, int>;  // (node id, output index)
Key key(const Node* n, int i) { return std::make_pair(n->id, i); }

// The graph ys and xs belong to (all to one).
std::shared_ptr<GraphImpl> graph_of(const std::vector<Tensor>& ys, const std::vector<Tensor>& xs,
                                    const std::vector<Tensor>& grad_ys) {
  if (ys.empty()) fail("gradients", "no ys given");
  std::shared_ptr<GraphImpl> g;
  for (const auto& y : ys) {
    if (!y.defined() || !y.is_symbolic())
      fail("gradients", "ys must be symbolic tensors of a graph");
    if (g && y.impl()->sym->graph != g) fail("gradients", "ys belong to different graphs");
    g = y.impl()->sym->graph;
  }
  for (const auto& x : xs)
    if (!x.defined() || !x.is_symbolic() || x.impl()->sym->graph != g)
      fail("gradients", "xs must be symbolic tensors of the same graph as ys");
  if (!grad_ys.empty() && grad_ys.size() != ys.size())
    fail("gradients", "got ", grad_ys.size(), " grad_ys for ", ys.size(), " ys");
  return g;
}

// Ids of the nodes that depend on some x (forward reachability), so gradients flow only where
// needed.
std::set<int> depending_on(const GraphImpl& g, const std::vector<Tensor>& xs) {
  std::set<int> from_x;
  for (const auto& x : xs) from_x.insert(x.impl()->sym->node->id);
  for (const auto& n : g.nodes)
    for (const auto& in : n->inputs)
      if (from_x.count(in.node->id)) {
        from_x.insert(n->id);
        break;
      }
  return from_x;
}

// Ids of the nodes that some y depends on.
std::set<int> needed_by(const GraphImpl& g, const std::vector<Tensor>& ys) {
  std::set<int> to_y;
  for (const auto& y : ys) to_y.insert(y.impl()->sym->node->id);
  for (auto it = g.nodes.rbegin(); it != g.nodes.rend(); ++it)
    if (to_y.count((*it)->id))
      for (const auto& in : (*it)->inputs) to_y.insert(in.node->id);
  return to_y;
}

// The gradients of one gradients() call, per node output, as the rules add their nodes.
class SymbolicBackward {
 public:
  SymbolicBackward(std::shared_ptr<GraphImpl> g, const std::set<int>& from_x)
      : g_(std::move(g)), from_x_(from_x) {}

  void add(const ValueRef& v, const Tensor& grad) {
    auto gi = grads_.find(key(v.node, v.index));
    if (gi == grads_.end())
      grads_[key(v.node, v.index)] = grad;
    else
      gi->second = kiln::add(gi->second, grad);
  }

  Tensor grad_of(const Tensor& x) const {
    auto gi = grads_.find(key(x.impl()->sym->node, x.impl()->sym->index));
    return gi == grads_.end() ? Tensor() : gi->second;
  }

  // Runs n's gradient rule on symbolic tensors when a gradient reaches an output of n and some
  // input of n needs one; adds what the rule returns to n's inputs.
  void backward(Node* n) {
    bool any = false;
    for (int i = 0; i < static_cast<int>(n->outputs.size()); ++i)
      any = any || grads_.count(key(n, i));
    if (!any) return;
    TensorList ins, sizes;
    SmallVec<bool, 4> needs;
    bool any_need = false;
    const size_t n_in = n->op_inputs();
    for (size_t k = n_in; k < n->inputs.size(); ++k) sizes.push_back(sym(n->inputs[k]));
    for (size_t k = 0; k < n_in; ++k) {
      const ValueRef& in = n->inputs[k];
      ins.push_back(sym(in));
      needs.push_back(from_x_.count(in.node->id) > 0 &&
                      is_floating(in.node->outputs[in.index].dtype));
      any_need = any_need || needs.back();
    }
    // An x itself (e.g. the output of detach) needs no gradient for its inputs.
    if (!any_need) return;
    if (!n->op->grad)
      fail("gradients", "op '", n->op->name, "' (node %", n->id, ") has no gradient rule");
    TensorList gin = apply_rule(n, ins, needs, sizes);
    for (size_t k = 0; k < gin.size(); ++k)
      if (needs[k] && gin[k].defined()) add(n->inputs[k], fit_to_input(*n, k, gin[k], ins[k]));
  }

 private:
  Tensor sym(ValueRef v) const { return g_->tensor_of(g_, v); }

  TensorList apply_rule(Node* np, const TensorList& ins, const SmallVec<bool, 4>& needs,
                        const TensorList& sizes) {
    const Node& n = *np;
    TensorList outs, gout;
    SmallVec<bool, 4> flows;
    for (int i = 0; i < static_cast<int>(n.outputs.size()); ++i) {
      Tensor o = sym(ValueRef{np, i});
      outs.push_back(o);
      auto gi = grads_.find(key(np, i));
      flows.push_back(gi != grads_.end());
      if (gi != grads_.end())
        gout.push_back(gi->second);
      else
        gout.push_back(is_floating(o.dtype()) ? zeros_like(o) : Tensor());
    }
    GradCtx ctx{*n.op,
                n.attrs,
                std::span<const Tensor>(ins.data(), ins.size()),
                std::span<const Tensor>(outs.data(), outs.size()),
                std::span<const Tensor>(gout.data(), gout.size()),
                std::span<const bool>(needs.data(), needs.size()),
                std::span<const bool>(flows.data(), flows.size()),
                {},
                std::span<const SizePatch>(n.patches.data(), n.patches.size()),
                std::span<const Tensor>(sizes.data(), sizes.size())};
    TensorList gin = n.op->grad(ctx);
    if (gin.size() != ins.size())
      fail("gradients", "gradient rule of '", n.op->name, "' returned ", gin.size(),
           " gradients for ", ins.size(), " inputs");
    return gin;
  }

  // The gradient of input k reduced to that input's shape (a broadcast input's is summed).
  static Tensor fit_to_input(const Node& n, size_t k, const Tensor& gk, const Tensor& in) {
    const TensorMeta& m = n.inputs[k].node->outputs[n.inputs[k].index];
    // With dynamic dims the shapes may agree at build time and differ at run time (a [?, 4]
    // placeholder fed [1, 4] next to a [3, 4] tensor): reduce to the input's run-time shape.
    if (!m.shape.is_static() || !gk.shape().is_static()) return sum_to_like(gk, in);
    if (gk.shape() != m.shape) return sum_to(gk, m.shape);
    return gk;
  }

  std::shared_ptr<GraphImpl> g_;
  const std::set<int>& from_x_;
  std::map<Key, Tensor> grads_;
};

}  // namespace

std::vector<Tensor> gradients(const std::vector<Tensor>& ys, const std::vector<Tensor>& xs,
                              const std::vector<Tensor>& grad_ys) {
  // Each gradient rule runs in the dtypes its forward op saw (the casts' rules cast back).
  AutocastGuard no_autocast(false);
  std::shared_ptr<GraphImpl> g = graph_of(ys, xs, grad_ys);
  // (Both before ones_like below adds its nodes.)
  const std::set<int> from_x = depending_on(*g, xs), to_y = needed_by(*g, ys);
  SymbolicBackward b(g, from_x);
  for (size_t i = 0; i < ys.size(); ++i)
    b.add(ValueRef{ys[i].impl()->sym->node, ys[i].impl()->sym->index},
          (!grad_ys.empty() && grad_ys[i].defined()) ? grad_ys[i] : ones_like(ys[i]));
  // Nodes were appended in topological order; iterate a snapshot backwards (rules append more).
  std::vector<Node*> order;
  for (const auto& n : g->nodes) order.push_back(n.get());
  for (auto it = order.rbegin(); it != order.rend(); ++it)
    if ((*it)->kind == NodeKind::Op && from_x.count((*it)->id) && to_y.count((*it)->id))
      b.backward(*it);
  std::vector<Tensor> out;
  for (const auto& x : xs) out.push_back(b.grad_of(x));
  return out;
}

}  // namespace kiln
