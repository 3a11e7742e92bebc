// A compiled version as kiln::onnx saves it (Engine::traced_version): its graph as traced, with
// the captured tensors it is fed inlined as constants, or why it cannot stand alone.
#include <unordered_map>
#include <unordered_set>

#include "kiln/dispatch/dispatch.h"
#include "kiln/graph/node.h"
#include "kiln/jit/engine.h"

namespace kiln::detail::jit_engine {

namespace {
// A saved version takes the function's own arguments: the captured tensors it is fed become
// constants again (their values now), its traced graph rebuilt op by op around them.
void inline_captures(const Version& v, const std::vector<Tensor>& captures, TracedVersion& r) {
  size_t n_user = 0;
  for (size_t i = 0; i < v.user_arity && i < v.key.size(); ++i) {
    const ArgKey& ak = v.key[i];
    if (ak.kind == Arg::kTensor || ak.kind == Arg::kTensorList)
      n_user += ak.shapes.size();
    else if (ak.runtime)
      n_user += 1;
  }
  const Graph& tg = v.traced_graph;
  std::unordered_map<const Node*, size_t> ph_index;
  for (size_t p = 0; p < v.traced_phs.size(); ++p) ph_index[tg.node_of(v.traced_phs[p])] = p;
  // Only what the outputs need: a version with gradients holds its backward in the same graph
  // (grad_out placeholders, which no argument feeds).
  std::unordered_set<const Node*> need;
  std::vector<const Node*> stack;
  for (const auto& o : v.traced_outs) stack.push_back(tg.value_of(o).node);
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!need.insert(n).second) continue;
    for (const auto& in : n->inputs) stack.push_back(in.node);
  }
  Graph g;
  std::unordered_map<const Node*, std::vector<Tensor>> made;
  std::vector<Tensor> phs(n_user);
  for (const auto& np : tg.nodes()) {
    const Node& n = *np;
    if (!need.count(&n) && !(n.kind == NodeKind::Placeholder && ph_index.count(&n))) continue;
    if (n.kind == NodeKind::Placeholder) {
      auto it = ph_index.find(&n);
      if (it == ph_index.end()) fail("jit", "internal: a placeholder that is no argument");
      const TensorMeta& m = n.outputs[0];
      if (it->second < n_user) {
        phs[it->second] = g.placeholder(n.name, m.dtype, m.shape);
        made[&n] = {phs[it->second]};
      } else {
        // Trailing arguments past the user's: the captures, in order (no state slots here).
        size_t j = it->second - n_user;
        if (j >= captures.size()) fail("jit", "internal: a capture that is not held");
        made[&n] = {g.constant(captures[j])};
      }
    } else if (n.kind == NodeKind::Constant || n.kind == NodeKind::Variable) {
      made[&n] = {g.constant(n.value)};
    } else {
      TensorList ins;
      for (const auto& in : n.inputs)
        ins.push_back(made.at(in.node)[static_cast<size_t>(in.index)]);
      TensorList o =
          call_node(*n.op, std::span<const Tensor>(ins.data(), ins.size()), n.attrs, n.patches);
      made[&n] = std::vector<Tensor>(o.begin(), o.end());
    }
  }
  r.graph = g;
  r.placeholders = phs;
  for (const auto& o : v.traced_outs) {
    ValueRef ref = tg.value_of(o);
    r.outputs.push_back(made.at(ref.node)[static_cast<size_t>(ref.index)]);
  }
  r.key.resize(std::min(r.key.size(), v.user_arity));
}
}  // namespace

// For kiln::onnx::save_jit: a version stands alone only as one traced graph without host code.
TracedVersion Engine::traced_version(const std::vector<Arg>& args) const {
  std::lock_guard<std::recursive_mutex> lk(mu);
  TracedVersion r;
  r.name = opts.name;
  std::vector<Arg> ext = args;
  for (Tensor* slot : held.state_slots) ext.push_back(to_arg(*slot));
  for (const Tensor& c : held.captures) ext.push_back(to_arg(c));
  const Key k = key_of(ext, opts.runtime_scalars);
  const Version* v = nullptr;
  for (const auto& cand : versions)
    if (mismatch(cand->key, k).empty()) {
      v = cand.get();
      break;
    }
  if (!v) {
    r.refusal = str_cat("no compiled version accepts these arguments (", key_str(k),
                        "); call the function with them first");
    return r;
  }
  r.key = v->key;
  if (v->eager_only) {
    r.refusal = str_cat("the version runs eagerly (", v->eager_reason, ")");
  } else if (v->lazy) {
    r.refusal = "the version has graph breaks whose host code reruns on every call";
  } else if (!v->root || !v->root->leaf) {
    r.refusal = v->root ? str_cat("the version has a graph break at ", v->root->guard_where, ": ",
                                  v->root->guard_what, "() of a traced value (a trace tree)")
                        : "the version has no compiled trace";
  } else if (!v->state_slots.empty() || v->traced_outs.size() != v->num_user_outputs) {
    r.refusal =
        "the function assigns module buffers (nn::assign_buffer), state a file cannot carry";
  } else if (!v->capture_writes.empty()) {
    r.refusal = "the function writes captured tensors in place, state a file cannot carry";
  } else if (v->traced_outs.empty()) {
    r.refusal = "the version keeps no traced graph";
  } else if (v->key.size() > v->user_arity) {
    inline_captures(*v, held.captures, r);
  } else {
    r.graph = v->traced_graph;
    r.placeholders = v->traced_phs;
    r.outputs = v->traced_outs;
  }
  return r;
}

}  // namespace kiln::detail::jit_engine
