// Elementwise fusion: groups of elementwise ops of one output shape become one `fused` node
// (kiln/ops/fused.h) that reads each input once and writes its outputs in the same pass, instead
// of one pass over memory per op. Broadcast operands (a bias row, a scalar constant) join as
// inputs read in place. A member whose value is also needed outside the group (fetched, or used
// by an op after the group) becomes an extra output rather than a group boundary: an optimizer
// update's new moments and new parameter come out of one pass over p, g, m, v.
#include <set>
#include <unordered_map>

#include "kiln/graph/node.h"
#include "kiln/ops/fused.h"
#include "kiln/passes/passes.h"

namespace kiln::detail {
namespace {

bool is_float(DType d) { return d == Float32 || d == Float64; }

// Whether n can be a member of a group computing dtype `dt` over `shape`.
bool can_join(const Node& n, DType dt, const Shape& shape) {
  if (n.kind != NodeKind::Op || n.outputs.size() != 1 || !fused::supported(*n.op)) return false;
  if (n.op->has(kRandom) || n.op->has(kSideEffect) || !n.patches.empty()) return false;
  const TensorMeta& m = n.outputs[0];
  // Dynamic dims join too: a member computed at the group's shape gives its broadcast value,
  // and an extra output that broadcasts at run time keeps its own shape (fused.cpp own_shape).
  if (m.shape != shape) return false;
  if (m.dtype == Bool) {
    if (!fused::bool_valued(*n.op)) return false;
  } else if (m.dtype != dt) {
    return false;
  }
  // Ops without an interpreter loop run their own kernel on the group's tiles: only with the
  // group's dtype in and out and double attributes (what a program's text carries).
  const bool native = fused::native(*n.op);
  if (!native) {
    if (m.dtype != dt) return false;
    for (size_t k = 0; k < n.attrs.size(); ++k)
      if (!std::holds_alternative<double>(n.attrs[k])) return false;
  }
  for (const auto& in : n.inputs) {
    DType d = in.node->outputs[static_cast<size_t>(in.index)].dtype;
    if (d != dt && (d != Bool || !native)) return false;
  }
  return true;
}

}  // namespace

int fuse_elementwise(Program& p, int max_inputs) {
  auto& nodes = p.graph->nodes;
  for (size_t i = 0; i < nodes.size(); ++i) nodes[i]->id = static_cast<int>(i);
  // Uses of each node's (single) output: consumers by id, plus whether a fetch reads it.
  std::vector<std::vector<int>> users(nodes.size());
  std::vector<char> fetched(nodes.size(), 0);
  for (const auto& n : nodes)
    for (const auto& in : n->inputs) users[static_cast<size_t>(in.node->id)].push_back(n->id);
  for (const auto& f : p.fetches) fetched[static_cast<size_t>(f.node->id)] = 1;
  // With switch/merge in the graph a group may mix live inputs and dead ones (the untaken side
  // of a switch): the fused node is then skipped as a whole, so a member whose value is needed
  // outside would go dead with it. Such graphs keep single-output groups.
  bool control_flow = false;
  for (const auto& n : nodes)
    control_flow = control_flow || (n->kind == NodeKind::Op && n->op->has(kControlFlow));

  std::vector<int> group_of(nodes.size(), -1);
  int groups = 0;
  for (int ri = static_cast<int>(nodes.size()) - 1; ri >= 0; --ri) {
    Node& root = *nodes[static_cast<size_t>(ri)];
    if (group_of[static_cast<size_t>(ri)] >= 0 || root.kind != NodeKind::Op ||
        root.outputs.size() != 1 || !is_float(root.outputs[0].dtype))
      continue;
    const DType dt = root.outputs[0].dtype;
    const Shape shape = root.outputs[0].shape;
    if (!can_join(root, dt, shape)) continue;
    std::set<int> members = {ri};
    std::vector<int> extra;  // members that are also outputs, in output order 1, 2, ...
    // Producers are considered latest first, so every user of a candidate that could be in the
    // group has been decided before the candidate itself.
    std::set<int, std::greater<int>> frontier;
    auto push_inputs = [&](const Node& n) {
      for (const auto& in : n.inputs) frontier.insert(in.node->id);
    };
    push_inputs(root);
    while (!frontier.empty()) {
      int id = *frontier.begin();
      frontier.erase(frontier.begin());
      if (members.count(id) || group_of[static_cast<size_t>(id)] >= 0) continue;
      const Node& n = *nodes[static_cast<size_t>(id)];
      if (!can_join(n, dt, shape)) continue;
      // Users outside the group must all come after the root: the fused node takes the root's
      // place, so a user between the two (or on a path from the member back into the group)
      // would have to run before its input exists.
      bool outside = fetched[static_cast<size_t>(id)] != 0, after_root = true;
      for (int u : users[static_cast<size_t>(id)])
        if (!members.count(u)) {
          outside = true;
          after_root = after_root && u > ri;
        }
      if (outside) {
        if (control_flow || !after_root || n.outputs[0].dtype != dt ||
            static_cast<int>(extra.size()) + 1 >= fused::kMaxOutputs)
          continue;
        extra.push_back(id);
      }
      members.insert(id);
      push_inputs(n);
    }
    if (members.size() < 2) continue;
    // Program text over the members in topological order; external values become inputs.
    std::vector<ValueRef> inputs;
    std::unordered_map<int, int> temp_of;
    std::string text;
    int t = 0;
    for (int id : members) {
      const Node& n = *nodes[static_cast<size_t>(id)];
      std::vector<std::string> args;
      for (const auto& in : n.inputs) {
        if (members.count(in.node->id)) {
          args.push_back(std::string("t").append(std::to_string(temp_of.at(in.node->id))));
          continue;
        }
        size_t k = 0;
        while (k < inputs.size() && !(inputs[k] == in)) ++k;
        if (k == inputs.size()) inputs.push_back(in);
        args.push_back(std::string("i").append(std::to_string(k)));
      }
      if (!text.empty()) text += ";";
      text += fused::instr_text(*n.op, args, n.attrs);
      temp_of[id] = t++;
    }
    if (static_cast<int>(inputs.size()) > max_inputs) continue;
    for (size_t k = 0; k < extra.size(); ++k)
      text.append(k ? "," : ";>").append("t").append(std::to_string(temp_of.at(extra[k])));
    for (int id : members) group_of[static_cast<size_t>(id)] = groups;
    ++groups;
    // The root becomes the fused node (users and fetches keep pointing at it); the extra
    // outputs' users and fetches move to its outputs 1, 2, ...; the other members lose their
    // users and DCE removes them.
    root.op = &fused::fused_op();
    root.attrs = Attrs{AttrValue(text), AttrValue(fused::register_program(text))};
    root.inputs = inputs;
    for (size_t k = 0; k < extra.size(); ++k) {
      Node* member = nodes[static_cast<size_t>(extra[k])].get();
      root.outputs.push_back(member->outputs[0]);
      const ValueRef from{member, 0}, to{&root, static_cast<int>(k) + 1};
      // Every node after the root, not just the original users: a user fused into an earlier
      // group (processed first, roots run latest first) now reads through that group's node.
      for (size_t u = static_cast<size_t>(ri) + 1; u < nodes.size(); ++u)
        for (auto& in : nodes[u]->inputs)
          if (in == from) in = to;
      for (auto& f : p.fetches)
        if (f == from) f = to;
    }
  }
  if (groups) dce(p);
  return groups;
}

}  // namespace kiln::detail
