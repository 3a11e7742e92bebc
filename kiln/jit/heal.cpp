// Healing graph breaks (heal.h): the trace tree rebuilt op by op into one graph, each bool guard
// a cond() whose branches are built from the guard's two children.
#include "kiln/jit/heal.h"

#include "kiln/dispatch/dispatch.h"
#include "kiln/jit/compiled_backward.h"
#include "kiln/jit/trace_tree.h"
#include "kiln/ops/ops.h"

namespace kiln::detail::jit_engine {
namespace {

// Every guard a bool read traced both ways, down to the leaves.
bool healable(const TreeNode& t) {
  if (t.leaf) return true;
  if (t.children.size() != 2) return false;
  bool seen[2] = {false, false};
  for (const auto& [val, child] : t.children) {
    if (val.dtype() != Bool || val.numel() != 1) return false;
    seen[val.item<bool>() ? 1 : 0] = true;
    if (!healable(*child)) return false;
  }
  return seen[0] && seen[1];
}

// The piece's steps recorded into the graph being built (s: slot -> value in it); at a guard,
// cond() on the predicate, each branch built from its child on a copy of the slots, so a value
// the branch reads from the prefix is captured through a Switch.
std::vector<Tensor> build_healed(Graph& h, const TreeNode& t, std::vector<Tensor> s,
                                 std::vector<std::string>& healed) {
  for (const auto& [slot, val] : t.constants) s[static_cast<size_t>(slot)] = h.constant(val);
  TensorList ins;
  for (const auto& st : t.steps) {
    ins.clear();
    for (int x : st.in) ins.push_back(s[static_cast<size_t>(x)]);
    TensorList o =
        call_node(*st.op, std::span<const Tensor>(ins.data(), ins.size()), st.attrs, st.patches);
    for (size_t k = 0; k < st.out.size() && k < o.size(); ++k)
      s[static_cast<size_t>(st.out[k])] = o[k];
  }
  if (t.leaf) {
    std::vector<Tensor> outs;
    for (int x : t.out_slots) outs.push_back(s[static_cast<size_t>(x)]);
    return outs;
  }
  const TreeNode* branch[2] = {nullptr, nullptr};
  for (const auto& [val, child] : t.children) branch[val.item<bool>() ? 1 : 0] = child.get();
  healed.push_back(str_cat(t.guard_what, "() at ", t.guard_where));
  return cond(
      s[static_cast<size_t>(t.guard_slot)], [&] { return build_healed(h, *branch[1], s, healed); },
      [&] { return build_healed(h, *branch[0], s, healed); });
}

// Placeholders of the healed graph in argument order (as the trace made them), each also put in
// the slot the version loads that argument into.
std::vector<Tensor> healed_placeholders(const Version& v, Graph& h, std::vector<Tensor>& s) {
  std::vector<Tensor> phs;
  for (size_t i = 0; i < v.key.size(); ++i) {
    const ArgKey& ak = v.key[i];
    size_t n = ak.kind == Arg::kTensor || ak.kind == Arg::kTensorList ? ak.shapes.size() : 0;
    if ((ak.kind == Arg::kScalar || ak.kind == Arg::kBool) && ak.runtime) n = 1;
    for (size_t t = 0; t < n; ++t) {
      Tensor ph = ak.runtime
                      ? h.placeholder(str_cat("arg", phs.size()), Float32, Shape{})
                      : h.placeholder(str_cat("arg", phs.size()), ak.dtypes[t], ak.shapes[t]);
      phs.push_back(ph);
      const int slot = t < v.arg_slots[i].size() ? v.arg_slots[i][t] : -1;
      if (slot >= 0) s[static_cast<size_t>(slot)] = ph;
    }
  }
  return phs;
}

}  // namespace

HealResult heal(Version& v, bool save_activations) {
  HealResult r;
  if (!v.root || v.root->leaf || !healable(*v.root)) return r;
  Graph h;
  std::vector<Tensor> s(static_cast<size_t>(v.num_slots));
  const std::vector<Tensor> phs = healed_placeholders(v, h, s);
  std::vector<std::string> healed;
  std::vector<Tensor> outs;
  try {
    outs = build_healed(h, *v.root, s, healed);
    for (auto& o : outs)
      if (!o.is_symbolic()) o = h.constant(o);
  } catch (const Error& e) {
    r.refused = e.what();
    return r;
  }
  if (v.grad_tree) {
    build_backward(v, h, phs, outs, save_activations);
    v.grad_tree = false;
  }
  v.root.reset();
  r.pieces = 1 + add_single(v, h, phs, outs);
  r.healed = true;
  v.healed = std::move(healed);
  return r;
}

}  // namespace kiln::detail::jit_engine
