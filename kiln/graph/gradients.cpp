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

std::vector<Tensor> gradients(const std::vector<Tensor>& ys, const std::vector<Tensor>& xs,
                              const std::vector<Tensor>& grad_ys) {
  if (ys.empty()) fail("gradients", "no ys given");
  // Each gradient rule runs in the dtypes its forward op saw (the casts' rules cast back).
  AutocastGuard no_autocast(false);
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

  auto key = [](const Node* n, int i) { return std::make_pair(n->id, i); };
  auto sym = [&](ValueRef v) { return g->tensor_of(g, v); };

  // Nodes that depend on some x (forward reachability), so gradients flow only where needed.
  std::set<int> from_x;
  for (const auto& x : xs) from_x.insert(x.impl()->sym->node->id);
  for (const auto& n : g->nodes)
    for (const auto& in : n->inputs)
      if (from_x.count(in.node->id)) {
        from_x.insert(n->id);
        break;
      }
  // Nodes that some y depends on.
  std::set<int> to_y;
  for (const auto& y : ys) to_y.insert(y.impl()->sym->node->id);
  for (auto it = g->nodes.rbegin(); it != g->nodes.rend(); ++it)
    if (to_y.count((*it)->id))
      for (const auto& in : (*it)->inputs) to_y.insert(in.node->id);

  std::map<std::pair<int, int>, Tensor> grads;
  for (size_t i = 0; i < ys.size(); ++i) {
    ValueRef v{ys[i].impl()->sym->node, ys[i].impl()->sym->index};
    Tensor gy = (!grad_ys.empty() && grad_ys[i].defined()) ? grad_ys[i] : ones_like(ys[i]);
    auto k = key(v.node, v.index);
    grads[k] = grads.count(k) ? add(grads[k], gy) : gy;
  }

  // Nodes were appended in topological order; iterate a snapshot backwards (rules append more).
  std::vector<Node*> order;
  for (const auto& n : g->nodes) order.push_back(n.get());
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* n = *it;
    if (n->kind != NodeKind::Op || !from_x.count(n->id) || !to_y.count(n->id)) continue;
    bool any = false;
    for (int i = 0; i < static_cast<int>(n->outputs.size()); ++i)
      any = any || grads.count(key(n, i));
    if (!any) continue;
    TensorList ins, outs, gout;
    SmallVec<bool, 4> needs, flows;
    bool any_need = false;
    const size_t n_in = n->op_inputs();
    TensorList sizes;
    for (size_t k = n_in; k < n->inputs.size(); ++k) sizes.push_back(sym(n->inputs[k]));
    for (size_t k = 0; k < n_in; ++k) {
      const ValueRef& in = n->inputs[k];
      ins.push_back(sym(in));
      needs.push_back(from_x.count(in.node->id) > 0 &&
                      is_floating(in.node->outputs[in.index].dtype));
      any_need = any_need || needs.back();
    }
    // An x itself (e.g. the output of detach) needs no gradient for its inputs.
    if (!any_need) continue;
    if (!n->op->grad)
      fail("gradients", "op '", n->op->name, "' (node %", n->id, ") has no gradient rule");
    for (int i = 0; i < static_cast<int>(n->outputs.size()); ++i) {
      Tensor o = sym(ValueRef{n, i});
      outs.push_back(o);
      auto gi = grads.find(key(n, i));
      flows.push_back(gi != grads.end());
      if (gi != grads.end())
        gout.push_back(gi->second);
      else
        gout.push_back(is_floating(o.dtype()) ? zeros_like(o) : Tensor());
    }
    GradCtx ctx{*n->op,
                n->attrs,
                std::span<const Tensor>(ins.data(), ins.size()),
                std::span<const Tensor>(outs.data(), outs.size()),
                std::span<const Tensor>(gout.data(), gout.size()),
                std::span<const bool>(needs.data(), needs.size()),
                std::span<const bool>(flows.data(), flows.size()),
                {},
                std::span<const SizePatch>(n->patches.data(), n->patches.size()),
                std::span<const Tensor>(sizes.data(), sizes.size())};
    TensorList gin = n->op->grad(ctx);
    if (gin.size() != n_in)
      fail("gradients", "gradient rule of '", n->op->name, "' returned ", gin.size(),
           " gradients for ", n_in, " inputs");
    for (size_t k = 0; k < gin.size(); ++k) {
      if (!needs[k] || !gin[k].defined()) continue;
      Tensor gk = gin[k];
      const TensorMeta& m = n->inputs[k].node->outputs[n->inputs[k].index];
      // With dynamic dims the shapes may agree at build time and differ at run time (a [?, 4]
      // placeholder fed [1, 4] next to a [3, 4] tensor): reduce to the input's run-time shape.
      if (!m.shape.is_static() || !gk.shape().is_static())
        gk = sum_to_like(gk, ins[k]);
      else if (gk.shape() != m.shape)
        gk = sum_to(gk, m.shape);
      auto kk = key(n->inputs[k].node, n->inputs[k].index);
      auto gi = grads.find(kk);
      if (gi == grads.end())
        grads[kk] = gk;
      else
        gi->second = add(gi->second, gk);
    }
  }
  std::vector<Tensor> out;
  for (const auto& x : xs) {
    auto gi = grads.find(key(x.impl()->sym->node, x.impl()->sym->index));
    out.push_back(gi == grads.end() ? Tensor() : gi->second);
  }
  return out;
}

}  // namespace kiln
