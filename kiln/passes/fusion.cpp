// Elementwise fusion: groups of elementwise ops of one output shape become one `fused` node
// (kiln/ops/fused.h) that reads each input once and writes one output, instead of one pass over
// memory per op. Broadcast operands (a bias row, a scalar constant) join as inputs read in place.
#include <set>
#include <unordered_map>

#include "kiln/ops/fused.h"
#include "kiln/passes/passes.h"

namespace kiln {
namespace {

bool is_float(DType d) { return d == Float32 || d == Float64; }

bool bool_producer(const OpDef& op) {
  static const std::set<std::string> names = {"lt", "le",          "gt",         "ge",         "eq",
                                              "ne", "logical_and", "logical_or", "logical_not"};
  return names.count(op.name) != 0;
}

// Whether n can be a member of a group computing dtype `dt` over `shape`.
bool can_join(const Node& n, DType dt, const Shape& shape) {
  if (n.kind != NodeKind::Op || n.outputs.size() != 1 || !fused::supported(*n.op)) return false;
  if (n.op->has(kRandom) || n.op->has(kSideEffect)) return false;
  const TensorMeta& m = n.outputs[0];
  if (!m.shape.is_static() || m.shape != shape) return false;
  if (m.dtype == Bool) {
    if (!bool_producer(*n.op)) return false;
  } else if (m.dtype != dt) {
    return false;
  }
  for (const auto& in : n.inputs) {
    DType d = in.node->outputs[static_cast<size_t>(in.index)].dtype;
    if (d != dt && d != Bool) return false;
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
      if (fetched[static_cast<size_t>(id)] || !can_join(n, dt, shape)) continue;
      bool all_inside = true;
      for (int u : users[static_cast<size_t>(id)]) all_inside = all_inside && members.count(u);
      if (!all_inside) continue;
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
    for (int id : members) group_of[static_cast<size_t>(id)] = groups;
    ++groups;
    // The root becomes the fused node (users and fetches keep pointing at it); the other
    // members lose their users and DCE removes them.
    root.op = &fused::fused_op();
    root.attrs = Attrs{AttrValue(text), AttrValue(fused::register_program(text))};
    root.inputs = inputs;
  }
  if (groups) dce(p);
  return groups;
}

}  // namespace kiln
