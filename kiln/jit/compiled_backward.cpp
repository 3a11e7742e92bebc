// The compiled backward of a version (compiled_backward.h): gradients() of the traced forward,
// and the backward graph of its own that reads saved activations instead of recomputing them.
#include "kiln/jit/compiled_backward.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "kiln/dispatch/dispatch.h"
#include "kiln/graph/node.h"

namespace kiln::detail::jit_engine {
namespace {

// The backward's nodes (gradients() added them from n_fwd on) that the input gradients need,
// marked in `need`, and the forward op values they read: what the forward must save. A gradient
// that is a forward value itself (d(x * c)/dx with c a traced value) is saved too.
std::vector<ValueRef> backward_reads(const Version& v, const Graph& g, size_t n_fwd,
                                     std::vector<char>& need) {
  need.assign(g.nodes().size(), 0);
  std::vector<const Node*> stack;
  for (const auto& t : v.g_in_grads)
    if (t.defined()) stack.push_back(g.node_of(t));
  std::vector<ValueRef> saved;
  auto note_saved = [&](ValueRef r) {
    if (std::find(saved.begin(), saved.end(), r) == saved.end()) saved.push_back(r);
  };
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (need[static_cast<size_t>(n->id)]) continue;
    need[static_cast<size_t>(n->id)] = 1;
    if (n->kind != NodeKind::Op) continue;
    for (const auto& in : n->inputs) {
      if (static_cast<size_t>(in.node->id) >= n_fwd) {
        stack.push_back(in.node);
      } else if (in.node->kind == NodeKind::Op) {
        note_saved(in);
      }
    }
  }
  for (const auto& t : v.g_in_grads)
    if (t.defined()) {
      ValueRef r = g.value_of(t);
      if (static_cast<size_t>(r.node->id) < n_fwd && r.node->kind == NodeKind::Op) note_saved(r);
    }
  return saved;
}

// The backward on its own (nodes gradients() added, from n_fwd on), reading the forward values
// it needs as placeholders; v.saved lists those values in the forward graph.
void build_saved_backward(Version& v, Graph& g, size_t n_fwd) {
  const auto& nodes = g.nodes();
  // A forward with Switch/Merge (a cond, a healed break) leaves the saved values of the
  // untaken branch dead: both sessions pass them through as dead tensors, and the backward's
  // own Switch/Merge skip the steps that would read them.
  bool control = false;
  for (size_t id = 0; id < n_fwd; ++id)
    control = control || (nodes[id]->kind == NodeKind::Op && nodes[id]->op->has(kControlFlow));
  std::vector<char> need;
  const std::vector<ValueRef> saved = backward_reads(v, g, n_fwd, need);
  Graph bg;
  std::unordered_map<const Node*, std::vector<Tensor>> made;
  auto ph_like = [&](const std::string& name, ValueRef r) {
    const TensorMeta& m = r.node->outputs[static_cast<size_t>(r.index)];
    return bg.placeholder(name, m.dtype, m.shape);
  };
  v.s_inputs.clear();
  v.s_out_grads.clear();
  v.s_saved.clear();
  v.saved.clear();
  for (size_t k = 0; k < v.g_inputs.size(); ++k) {
    ValueRef r = g.value_of(v.g_inputs[k]);
    v.s_inputs.push_back(ph_like(str_cat("in", k), r));
    made[r.node] = {v.s_inputs.back()};
  }
  for (size_t k = 0; k < v.g_out_grads.size(); ++k) {
    if (!v.g_out_grads[k].defined()) {
      v.s_out_grads.emplace_back();
      continue;
    }
    ValueRef r = g.value_of(v.g_out_grads[k]);
    v.s_out_grads.push_back(ph_like(str_cat("grad_out", k), r));
    made[r.node] = {v.s_out_grads.back()};
  }
  std::map<std::pair<const Node*, int>, Tensor> saved_ph;
  for (size_t i = 0; i < saved.size(); ++i) {
    v.s_saved.push_back(ph_like(str_cat("saved", i), saved[i]));
    saved_ph[{saved[i].node, saved[i].index}] = v.s_saved.back();
    v.saved.push_back(g.tensor_of(saved[i]));
  }
  auto value = [&](ValueRef r) -> Tensor {
    if (auto it = saved_ph.find({r.node, r.index}); it != saved_ph.end()) return it->second;
    if (r.node->kind == NodeKind::Constant) return bg.constant(r.node->value);
    auto it = made.find(r.node);
    if (it == made.end())
      fail("jit", "internal: the backward reads a forward value that is not saved");
    return it->second[static_cast<size_t>(r.index)];
  };
  for (size_t id = n_fwd; id < nodes.size(); ++id) {
    const Node& n = *nodes[id];
    if (!need[id] || n.kind != NodeKind::Op) continue;
    TensorList ins;
    for (const auto& in : n.inputs) ins.push_back(value(in));
    TensorList o =
        call_node(*n.op, std::span<const Tensor>(ins.data(), ins.size()), n.attrs, n.patches);
    made[&n] = std::vector<Tensor>(o.begin(), o.end());
  }
  v.s_in_grads.clear();
  for (const auto& t : v.g_in_grads)
    v.s_in_grads.push_back(t.defined() ? value(g.value_of(t)) : Tensor());
  v.bwd_graph = bg;
  v.bwd_saved_session = std::make_unique<Session>(bg);
  v.fwd_saved_session = std::make_unique<Session>(g);
  v.bwd_saved_session->set_dead_passthrough(true);
  v.fwd_saved_session->set_dead_passthrough(control);
  v.saved_ok = true;
}

}  // namespace

void build_backward(Version& v, Graph& g, const std::vector<Tensor>& phs,
                    const std::vector<Tensor>& outs, bool save_activations) {
  v.with_grad = true;
  v.graph = g;
  v.g_inputs = phs;
  v.g_outputs = outs;
  const size_t n_fwd = g.nodes().size();
  std::vector<Tensor> gys, diff_outs;
  for (size_t k = 0; k < outs.size(); ++k) {
    // Past the function's own outputs come the new values of state it writes (BatchNorm's
    // running statistics, computed under no_grad): no gradient flows back through them.
    if (is_floating(outs[k].dtype()) && k < v.num_user_outputs) {
      Tensor gy = g.placeholder(str_cat("grad_out", k), outs[k].dtype(), outs[k].shape());
      v.g_out_grads.push_back(gy);
      diff_outs.push_back(outs[k]);
      gys.push_back(gy);
    } else {
      v.g_out_grads.emplace_back();
    }
  }
  std::vector<Tensor> xs;
  for (const auto& p : phs) xs.push_back(p);
  v.g_in_grads =
      diff_outs.empty() ? std::vector<Tensor>(phs.size()) : gradients(diff_outs, xs, gys);
  v.bwd_session = std::make_unique<Session>(g);
  // A dead output (on the untaken side of a Switch) feeds a dead gradient (jit_call.cpp).
  v.bwd_session->set_dead_passthrough(true);
  for (const auto& n : g.nodes())
    if (n->kind == NodeKind::Op && n->op->has(kRandom)) v.has_random = true;
  if (save_activations) {
    try {
      build_saved_backward(v, g, n_fwd);
    } catch (const Error&) {
      v.saved_ok = false;  // the recomputing backward serves
    }
  }
}

}  // namespace kiln::detail::jit_engine
