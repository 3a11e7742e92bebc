// Elementwise fusion: groups of elementwise ops of one output shape become one `fused` node
// (kiln/ops/fused.h) that reads each input once and writes its outputs in the same pass, instead
// of one pass over memory per op. Broadcast operands (a bias row, a scalar constant) join as
// inputs read in place. A member whose value is also needed outside the group (fetched, or used
// by an op after the group) becomes an extra output rather than a group boundary: an optimizer
// update's new moments and new parameter come out of one pass over p, g, m, v.
#include <memory>
#include <set>
#include <string>
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

// fuse_elementwise over one program: each node's users and whether a fetch reads it, and the
// group each node already belongs to. Roots are taken latest first, so every group ends at its
// latest member.
class Fuser {
 public:
  explicit Fuser(Program& p)
      : p_(p),
        nodes_(p.graph->nodes),
        users_(nodes_.size()),
        fetched_(nodes_.size(), 0),
        group_of_(nodes_.size(), -1) {
    for (size_t i = 0; i < nodes_.size(); ++i) nodes_[i]->id = static_cast<int>(i);
    for (const auto& n : nodes_)
      for (const auto& in : n->inputs) users_[static_cast<size_t>(in.node->id)].push_back(n->id);
    for (const auto& f : p.fetches) fetched_[static_cast<size_t>(f.node->id)] = 1;
    // With switch/merge in the graph a group may mix live inputs and dead ones (the untaken side
    // of a switch): the fused node is then skipped as a whole, so a member whose value is needed
    // outside would go dead with it. Such graphs keep single-output groups.
    for (const auto& n : nodes_)
      control_flow_ = control_flow_ || (n->kind == NodeKind::Op && n->op->has(kControlFlow));
  }

  // Fuses every group it can; returns how many it made.
  int run(int max_inputs) {
    int groups = 0;
    for (int ri = static_cast<int>(nodes_.size()) - 1; ri >= 0; --ri) {
      const Node& root = *nodes_[static_cast<size_t>(ri)];
      if (group_of_[static_cast<size_t>(ri)] >= 0 || root.kind != NodeKind::Op ||
          root.outputs.size() != 1 || !is_float(root.outputs[0].dtype) ||
          !can_join(root, root.outputs[0].dtype, root.outputs[0].shape))
        continue;
      Group g = grow(ri);
      if (g.members.size() < 2) continue;
      write_program(g);
      if (static_cast<int>(g.inputs.size()) > max_inputs) continue;
      for (int id : g.members) group_of_[static_cast<size_t>(id)] = groups;
      ++groups;
      rewrite_root(ri, g);
    }
    return groups;
  }

 private:
  struct Group {
    std::set<int> members;   // node ids, in topological order
    std::vector<int> extra;  // members that are also outputs, in output order 1, 2, ...
    std::vector<ValueRef> inputs;
    std::string text;  // the fused program (kiln/ops/fused.h)
  };

  // The members a group rooted at ri can take: producers of the root's dtype and shape whose
  // values are needed outside only after the root.
  Group grow(int ri) const {
    const Node& root = *nodes_[static_cast<size_t>(ri)];
    const DType dt = root.outputs[0].dtype;
    const Shape& shape = root.outputs[0].shape;
    Group g;
    g.members = {ri};
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
      if (g.members.count(id) || group_of_[static_cast<size_t>(id)] >= 0) continue;
      const Node& n = *nodes_[static_cast<size_t>(id)];
      if (!can_join(n, dt, shape)) continue;
      // Users outside the group must all come after the root: the fused node takes the root's
      // place, so a user between the two (or on a path from the member back into the group)
      // would have to run before its input exists.
      bool outside = fetched_[static_cast<size_t>(id)] != 0, after_root = true;
      for (int u : users_[static_cast<size_t>(id)])
        if (!g.members.count(u)) {
          outside = true;
          after_root = after_root && u > ri;
        }
      if (outside) {
        if (control_flow_ || !after_root || n.outputs[0].dtype != dt ||
            static_cast<int>(g.extra.size()) + 1 >= fused::kMaxOutputs)
          continue;
        g.extra.push_back(id);
      }
      g.members.insert(id);
      push_inputs(n);
    }
    return g;
  }

  // Program text over the members in topological order; external values become inputs.
  void write_program(Group& g) const {
    std::unordered_map<int, int> temp_of;
    int t = 0;
    for (int id : g.members) {
      const Node& n = *nodes_[static_cast<size_t>(id)];
      std::vector<std::string> args;
      for (const auto& in : n.inputs) {
        if (g.members.count(in.node->id)) {
          args.push_back(std::string("t").append(std::to_string(temp_of.at(in.node->id))));
          continue;
        }
        size_t k = 0;
        while (k < g.inputs.size() && !(g.inputs[k] == in)) ++k;
        if (k == g.inputs.size()) g.inputs.push_back(in);
        args.push_back(std::string("i").append(std::to_string(k)));
      }
      if (!g.text.empty()) g.text += ";";
      g.text += fused::instr_text(*n.op, args, n.attrs);
      temp_of[id] = t++;
    }
    for (size_t k = 0; k < g.extra.size(); ++k)
      g.text.append(k ? "," : ";>").append("t").append(std::to_string(temp_of.at(g.extra[k])));
  }

  // The root becomes the fused node (users and fetches keep pointing at it); the extra
  // outputs' users and fetches move to its outputs 1, 2, ...; the other members lose their
  // users and DCE removes them.
  void rewrite_root(int ri, const Group& g) {
    Node& root = *nodes_[static_cast<size_t>(ri)];
    root.op = &fused::fused_op();
    root.attrs = Attrs{AttrValue(g.text), AttrValue(fused::register_program(g.text))};
    root.inputs = g.inputs;
    for (size_t k = 0; k < g.extra.size(); ++k) {
      Node* member = nodes_[static_cast<size_t>(g.extra[k])].get();
      root.outputs.push_back(member->outputs[0]);
      const ValueRef from{member, 0}, to{&root, static_cast<int>(k) + 1};
      // Every node after the root, not just the original users: a user fused into an earlier
      // group (processed first, roots run latest first) now reads through that group's node.
      for (size_t u = static_cast<size_t>(ri) + 1; u < nodes_.size(); ++u)
        for (auto& in : nodes_[u]->inputs)
          if (in == from) in = to;
      for (auto& f : p_.fetches)
        if (f == from) f = to;
    }
  }

  Program& p_;
  std::vector<std::unique_ptr<Node>>& nodes_;
  std::vector<std::vector<int>> users_;  // consumers of each node's (single) output, by id
  std::vector<char> fetched_;
  std::vector<int> group_of_;
  bool control_flow_ = false;
};

}  // namespace

int fuse_elementwise(Program& p, int max_inputs) {
  const int groups = Fuser(p).run(max_inputs);
  if (groups) dce(p);
  return groups;
}

}  // namespace kiln::detail
