// prune, CSE, constant folding and DCE over a Program.
#include "kiln/passes/passes.h"

#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "kiln/dispatch/dispatch.h"
#include "kiln/graph/node.h"
#include "kiln/passes/simplify.h"

namespace kiln::detail {
namespace {

// Rewrites every use of `from` into `to` (inputs and fetches).
void replace_uses(Program& p, const std::unordered_map<const Node*, Node*>& node_map) {
  for (auto& n : p.graph->nodes)
    for (auto& in : n->inputs) {
      auto it = node_map.find(in.node);
      if (it != node_map.end()) in.node = it->second;
    }
  for (auto& f : p.fetches) {
    auto it = node_map.find(f.node);
    if (it != node_map.end()) f.node = it->second;
  }
}

void renumber(GraphImpl& g) {
  for (size_t i = 0; i < g.nodes.size(); ++i) g.nodes[i]->id = static_cast<int>(i);
}

// A switch whose predicate is a constant routes statically: users of the taken output read the
// data directly, the untaken output is dead for every run, and so is whatever depends on it
// (a merge forwards its one remaining input). DCE then drops the untaken branch.
int fold_constant_switches(Program& p) {
  using Key = std::pair<const Node*, int>;
  std::map<Key, ValueRef> rewire;
  std::set<Key> dead;
  std::vector<std::unique_ptr<Node>> new_constants;
  int folded = 0;
  for (auto& up : p.graph->nodes) {
    Node* n = up.get();
    for (auto& in : n->inputs) {
      auto it = rewire.find({in.node, in.index});
      if (it != rewire.end()) in = it->second;
    }
    if (n->kind != NodeKind::Op) continue;
    if (n->op->has(kSwitch) && n->inputs[1].node->kind == NodeKind::Constant &&
        n->inputs[1].node->value.numel() == 1) {
      int taken = n->inputs[1].node->value.item<bool>() ? 1 : 0;
      rewire[{n, taken}] = n->inputs[0];
      dead.insert({n, 1 - taken});
      ++folded;
      continue;
    }
    std::vector<int> live;
    for (int k = 0; k < static_cast<int>(n->inputs.size()); ++k)
      if (!dead.count(
              {n->inputs[static_cast<size_t>(k)].node, n->inputs[static_cast<size_t>(k)].index}))
        live.push_back(k);
    if (live.size() == n->inputs.size()) continue;
    if (n->op->has(kMerge) && !live.empty()) {
      if (live.size() == 1) {  // the merge forwards its one live input; the index is constant
        rewire[{n, 0}] = n->inputs[static_cast<size_t>(live[0])];
        auto c = std::make_unique<Node>();
        c->kind = NodeKind::Constant;
        c->value = scalar_tensor(static_cast<double>(live[0]), Int64);
        c->outputs.push_back(TensorMeta{Int64, Shape{}});
        rewire[{n, 1}] = ValueRef{c.get(), 0};
        new_constants.push_back(std::move(c));
      }
      continue;
    }
    for (int i = 0; i < static_cast<int>(n->outputs.size()); ++i) dead.insert({n, i});
  }
  for (auto& f : p.fetches) {
    auto it = rewire.find({f.node, f.index});
    if (it != rewire.end()) f = it->second;
  }
  // Constants go first so the node list stays in topological order.
  if (!new_constants.empty()) {
    for (auto& n : p.graph->nodes) new_constants.push_back(std::move(n));
    p.graph->nodes = std::move(new_constants);
    renumber(*p.graph);
  }
  return folded;
}

}  // namespace

Program prune(const GraphImpl& g, const std::vector<ValueRef>& fetches) {
  std::vector<char> need(g.nodes.size(), 0);
  for (const auto& f : fetches) need[static_cast<size_t>(f.node->id)] = 1;
  for (auto it = g.nodes.rbegin(); it != g.nodes.rend(); ++it)
    if (need[static_cast<size_t>((*it)->id)])
      for (const auto& in : (*it)->inputs) need[static_cast<size_t>(in.node->id)] = 1;
  Program p;
  std::unordered_map<const Node*, Node*> map;
  for (const auto& n : g.nodes) {
    if (!need[static_cast<size_t>(n->id)]) continue;
    auto c = std::make_unique<Node>(*n);
    for (auto& in : c->inputs) in.node = map.at(in.node);
    map[n.get()] = p.graph->add_node(std::move(c));
  }
  for (const auto& f : fetches) p.fetches.push_back(ValueRef{map.at(f.node), f.index});
  return p;
}

int cse(Program& p) {
  auto hash_node = [](const Node* n) {
    size_t h = std::hash<const void*>()(n->op) ^ (n->attrs.hash() * 31);
    for (const auto& in : n->inputs)
      h = h * 1000003u ^ (std::hash<const void*>()(in.node) + static_cast<size_t>(in.index));
    return h;
  };
  auto same = [](const Node* a, const Node* b) {
    if (a->op != b->op || a->inputs.size() != b->inputs.size() || !(a->attrs == b->attrs) ||
        a->patches != b->patches)
      return false;
    for (size_t i = 0; i < a->inputs.size(); ++i)
      if (!(a->inputs[i] == b->inputs[i])) return false;
    return true;
  };
  std::unordered_multimap<size_t, Node*> seen;
  std::unordered_map<const Node*, Node*> map;
  int merged = 0;
  for (auto& up : p.graph->nodes) {
    Node* n = up.get();
    // Inputs may point at merged nodes: rewrite as we go (topological order).
    for (auto& in : n->inputs) {
      auto it = map.find(in.node);
      if (it != map.end()) in.node = it->second;
    }
    if (n->kind != NodeKind::Op || n->op->has(kRandom) || n->op->has(kSideEffect) ||
        n->op->has(kControlFlow))
      continue;
    size_t h = hash_node(n);
    Node* found = nullptr;
    auto range = seen.equal_range(h);
    for (auto it = range.first; it != range.second; ++it)
      if (same(it->second, n)) found = it->second;
    if (found) {
      map[n] = found;
      ++merged;
    } else {
      seen.emplace(h, n);
    }
  }
  if (merged) {
    replace_uses(p, map);
    dce(p);
  }
  return merged;
}

int const_fold(Program& p, int64_t max_elems) {
  int folded = 0;
  NoGradGuard ng;
  for (auto& up : p.graph->nodes) {
    Node* n = up.get();
    if (n->kind != NodeKind::Op || n->op->has(kRandom) || n->op->has(kSideEffect) ||
        n->op->has(kControlFlow) || n->inputs.empty())
      continue;
    bool all_const = true;
    for (const auto& in : n->inputs) all_const = all_const && in.node->kind == NodeKind::Constant;
    if (!all_const) continue;
    bool small = true;
    for (const auto& m : n->outputs)
      small = small && m.shape.is_static() && m.shape.numel() <= max_elems;
    if (!small || n->outputs.size() != 1) continue;
    TensorList ins;
    for (const auto& in : n->inputs) ins.push_back(in.node->value);
    TensorList outs = run_node_kernel(*n->op, std::span<const Tensor>(ins.data(), ins.size()),
                                      n->attrs, n->patches);
    n->kind = NodeKind::Constant;
    n->patches.clear();
    n->value = outs[0].is_contiguous() ? outs[0] : raw_contiguous_copy(outs[0]);
    n->inputs.clear();
    n->op = nullptr;
    n->attrs = Attrs();
    ++folded;
  }
  folded += fold_constant_switches(p);
  if (folded) dce(p);
  return folded;
}

int dce(Program& p) {
  auto& nodes = p.graph->nodes;
  renumber(*p.graph);
  std::vector<char> need(nodes.size(), 0);
  for (const auto& f : p.fetches) need[static_cast<size_t>(f.node->id)] = 1;
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it)
    if (need[static_cast<size_t>((*it)->id)])
      for (const auto& in : (*it)->inputs) need[static_cast<size_t>(in.node->id)] = 1;
  int removed = 0;
  std::vector<std::unique_ptr<Node>> kept;
  for (auto& n : nodes) {
    if (need[static_cast<size_t>(n->id)])
      kept.push_back(std::move(n));
    else
      ++removed;
  }
  nodes = std::move(kept);
  renumber(*p.graph);
  return removed;
}

namespace {
// Every name KILN_DISABLE_PASSES accepts: each pass's function name, plan_memory (a Session's
// bound arenas), concat_in_place (its concatenations' pieces written in place), all and none.
constexpr const char* kPassNames[] = {
    "const_fold",  "simplify",       "fold_transposes",    "merge_matmul_sums", "cse",
    "dce",         "fuse_addmm",     "fuse_conv_epilogue", "block_layout",      "fuse_elementwise",
    "plan_memory", "concat_in_place"};
}  // namespace

bool pass_enabled(const std::string& name) {
  const char* env = std::getenv("KILN_DISABLE_PASSES");
  if (!env) return true;
  std::stringstream ss(env);
  std::string item;
  bool enabled = true;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    bool known = item == "all" || item == "none";
    for (const char* n : kPassNames) known = known || item == n;
    // A misspelt name would otherwise leave the pass on without a word.
    if (!known) {
      std::string all;
      for (const char* n : kPassNames) all += std::string(all.empty() ? "" : ", ") + n;
      fail("passes", "KILN_DISABLE_PASSES names no pass '", item, "'; passes: ", all,
           ", all, none");
    }
    if (item == name || item == "all") enabled = false;
  }
  return enabled;
}

void verify_program(const Program& p, const std::string& after) {
  std::unordered_map<const Node*, size_t> pos;
  const auto& nodes = p.graph->nodes;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = *nodes[i];
    for (const auto& in : n.inputs) {
      auto it = pos.find(in.node);
      if (it == pos.end())
        fail("verify", "after ", after, ": node ", i, " (", n.label(),
             ") uses a node that is not before it in the program");
      if (in.index < 0 || in.index >= static_cast<int>(in.node->outputs.size()))
        fail("verify", "after ", after, ": node ", i, " (", n.label(), ") uses output ", in.index,
             " of a node with ", in.node->outputs.size(), " outputs");
    }
    if (n.kind == NodeKind::Op) {
      if (!n.op) fail("verify", "after ", after, ": op node ", i, " has no op");
      if (n.op->num_inputs >= 0 && static_cast<int>(n.op_inputs()) != n.op->num_inputs)
        fail("verify", "after ", after, ": node ", i, " (", n.op->name, ") has ", n.op_inputs(),
             " inputs, expected ", n.op->num_inputs);
      if (n.outputs.empty()) fail("verify", "after ", after, ": node ", i, " has no outputs");
    } else if (!n.inputs.empty()) {
      fail("verify", "after ", after, ": node ", i, " (", n.label(),
           ") is not an op but has inputs");
    }
    pos[&n] = i;
  }
  for (const auto& f : p.fetches)
    if (!pos.count(f.node) || f.index < 0 || f.index >= static_cast<int>(f.node->outputs.size()))
      fail("verify", "after ", after, ": a fetch refers to a value outside the program");
}

std::string optimize(Program& p) {
  // Debug builds (or KILN_VERIFY_PASSES=1) check the program after every pass.
#ifdef NDEBUG
  static const bool verify = [] {
    const char* e = std::getenv("KILN_VERIFY_PASSES");
    return e && std::string(e) == "1";
  }();
#else
  const bool verify = true;
#endif
  std::ostringstream os;
  auto run = [&](const char* name, auto&& pass) {
    if (!pass_enabled(name)) return;
    os << (os.tellp() > 0 ? "  " : "") << name << ": " << pass();
    if (verify) verify_program(p, name);
  };
  // A pass is switched off by its function's name.
#define KILN_RUN_PASS(pass) run(#pass, [&] { return pass(p); })
  KILN_RUN_PASS(const_fold);
  KILN_RUN_PASS(simplify);
  KILN_RUN_PASS(fold_transposes);
  KILN_RUN_PASS(merge_matmul_sums);
  KILN_RUN_PASS(cse);
  KILN_RUN_PASS(dce);
  KILN_RUN_PASS(fuse_addmm);
  KILN_RUN_PASS(fuse_conv_epilogue);
  KILN_RUN_PASS(block_layout);
  KILN_RUN_PASS(fuse_elementwise);
#undef KILN_RUN_PASS
  return os.str();
}

}  // namespace kiln::detail
