// The trace tree (trace_tree.h): a traced graph laid out over the version's slot table, as one
// optimized piece or as pieces cut at its graph breaks and inserted beside the paths traced.
#include "kiln/jit/trace_tree.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "kiln/passes/passes.h"

namespace kiln::detail::jit_engine {
namespace {

// First slot of each node's outputs (node order), growing the version's slot table to fit.
std::vector<int> slot_bases(Version& v, const std::vector<std::unique_ptr<Node>>& nodes,
                            int* total) {
  std::vector<int> base(nodes.size());
  int slots = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    base[i] = slots;
    slots += static_cast<int>(nodes[i]->outputs.size());
  }
  v.num_slots = std::max(v.num_slots, slots);
  if (static_cast<int>(v.slots.size()) < v.num_slots)
    v.slots.resize(static_cast<size_t>(v.num_slots));
  *total = slots;
  return base;
}

// Which slot each flattened argument is loaded into (placeholders in argument order).
template <typename SlotOf>
void assign_arg_slots(Version& v, const std::vector<Tensor>& phs, SlotOf slot_of) {
  v.arg_slots.clear();
  size_t p = 0;
  for (size_t i = 0; i < v.key.size(); ++i) {
    std::vector<int> s;
    size_t n = v.key[i].kind == Arg::kTensor || v.key[i].runtime ? 1 : v.key[i].shapes.size();
    if (v.key[i].kind == Arg::kScalar || v.key[i].kind == Arg::kBool) n = v.key[i].runtime ? 1 : 0;
    for (size_t t = 0; t < n; ++t) s.push_back(slot_of(phs[p++]));
    v.arg_slots.push_back(s);
  }
}

// Whether a single-piece trace replays through a Session: KILN_JIT_SESSION=0 keeps the
// interpreter loop (to measure what the Session buys), and side effects or control flow need it.
bool session_replays(const std::vector<std::unique_ptr<Node>>& nodes) {
  static const bool use_session = [] {
    const char* e = std::getenv("KILN_JIT_SESSION");
    return !(e && std::string(e) == "0");
  }();
  bool plain = use_session;
  for (const auto& n : nodes)
    if (n->kind == NodeKind::Op && (n->op->has(kSideEffect) || n->op->has(kControlFlow)))
      plain = false;
  return plain;
}

// Each slot no output or constant holds is freed after the step that reads it last.
void free_after_last_use(TreeNode& tn, const std::vector<int>& last, int slots) {
  std::vector<char> keep(static_cast<size_t>(slots), 0);
  for (int s : tn.out_slots) keep[static_cast<size_t>(s)] = 1;
  for (auto& [s, val] : tn.constants) keep[static_cast<size_t>(s)] = 1;
  for (int s = 0; s < slots; ++s)
    if (!keep[static_cast<size_t>(s)] && last[static_cast<size_t>(s)] >= 0)
      tn.steps[static_cast<size_t>(last[static_cast<size_t>(s)])].free_after.push_back(s);
}

// What a path with graph breaks needs of its graph: the outputs, the guard values and side
// effects (print), and what they read.
std::vector<char> path_needs(const Graph& g, const std::vector<BreakRec>& breaks,
                             const std::vector<Tensor>& outs) {
  const auto& nodes = g.nodes();
  std::vector<char> need(nodes.size(), 0);
  for (const auto& o : outs) need[static_cast<size_t>(g.node_of(o)->id)] = 1;
  for (const auto& b : breaks) need[static_cast<size_t>(b.v.node->id)] = 1;
  for (const auto& n : nodes)
    if (n->kind == NodeKind::Op && n->op->has(kSideEffect)) need[static_cast<size_t>(n->id)] = 1;
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it)
    if (need[static_cast<size_t>((*it)->id)])
      for (const auto& in : (*it)->inputs) need[static_cast<size_t>(in.node->id)] = 1;
  return need;
}

// Inserts a path's pieces into the trace tree, sharing the prefix already there: piece i + 1 is
// the child for the value break i read. Returns the pieces added.
int insert_path(Version& v, std::vector<std::unique_ptr<TreeNode>> pieces,
                const std::vector<BreakRec>& breaks) {
  int added = 0;
  if (!v.root) {
    v.root = std::move(pieces[0]);
    added += 1;
  }
  TreeNode* cur = v.root.get();
  for (size_t pi = 0; pi + 1 < pieces.size(); ++pi) {
    const Tensor& val = breaks[pi].value;
    TreeNode* next = nullptr;
    for (auto& [gv, child] : cur->children)
      if (same_value(gv, val)) next = child.get();
    if (!next) {
      cur->children.push_back({val, std::move(pieces[pi + 1])});
      next = cur->children.back().second.get();
      added += 1;
    }
    cur = next;
  }
  return added;
}

}  // namespace

bool same_value(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  return a.to_vector<double>() == b.to_vector<double>();
}

std::string value_str(const Tensor& t) {
  std::ostringstream os;
  if (t.numel() == 1)
    os << t.item<double>();
  else
    os << t.shape() << " tensor";
  return os.str();
}

int add_single(Version& v, Graph& g, const std::vector<Tensor>& phs,
               const std::vector<Tensor>& outs) {
  std::vector<ValueRef> roots;
  for (const auto& o : outs) roots.push_back(g.value_of(o));
  for (const auto& n : g.nodes())
    if (n->kind == NodeKind::Op && n->op->has(kSideEffect))
      for (int i = 0; i < static_cast<int>(n->outputs.size()); ++i)
        roots.push_back(ValueRef{n.get(), i});
  Program prog = prune(*g.impl(), roots);
  optimize(prog);
  const auto& nodes = prog.graph->nodes;
  if (session_replays(nodes)) {
    v.fwd_session = std::make_unique<Session>(g);
    v.fwd_feeds.clear();
    for (const auto& ph : phs) v.fwd_feeds.emplace_back(ph, Tensor());
    v.fwd_outs = outs;
  }
  int slots = 0;
  std::vector<int> base = slot_bases(v, nodes, &slots);
  auto slot = [&](ValueRef r) { return base[static_cast<size_t>(r.node->id)] + r.index; };
  auto ph_slot = [&](const Tensor& ph) {
    const std::string& name = g.node_of(ph)->name;
    for (const auto& n : nodes)
      if (n->kind == NodeKind::Placeholder && n->name == name) return slot(ValueRef{n.get(), 0});
    return -1;  // the argument is not used
  };
  assign_arg_slots(v, phs, ph_slot);
  auto tn = std::make_unique<TreeNode>();
  tn->leaf = true;
  for (size_t k = 0; k < outs.size(); ++k) tn->out_slots.push_back(slot(prog.fetches[k]));
  std::vector<int> last(static_cast<size_t>(slots), -1);
  for (const auto& n : nodes) {
    if (n->kind == NodeKind::Constant)
      tn->constants.push_back({base[static_cast<size_t>(n->id)], n->value});
    if (n->kind != NodeKind::Op) continue;
    Step st{n->op, n->attrs, {}, {}, {}, n->patches};
    for (const auto& in : n->inputs) {
      st.in.push_back(slot(in));
      last[static_cast<size_t>(slot(in))] = static_cast<int>(tn->steps.size());
    }
    for (int o = 0; o < static_cast<int>(n->outputs.size()); ++o)
      st.out.push_back(base[static_cast<size_t>(n->id)] + o);
    tn->steps.push_back(std::move(st));
    ++tn->nodes;
  }
  free_after_last_use(*tn, last, slots);
  v.root = std::move(tn);
  v.traced_graph = g;
  v.traced_phs = phs;
  v.traced_outs = outs;
  return 1;
}

int add_path(Version& v, Graph& g, const std::vector<BreakRec>& breaks,
             const std::vector<Tensor>& phs, const std::vector<Tensor>& outs) {
  const auto& nodes = g.nodes();
  int slots = 0;
  std::vector<int> base = slot_bases(v, nodes, &slots);
  auto slot = [&](ValueRef r) { return base[static_cast<size_t>(r.node->id)] + r.index; };
  assign_arg_slots(v, phs, [&](const Tensor& ph) { return slot(g.value_of(ph)); });
  const std::vector<char> need = path_needs(g, breaks, outs);
  std::vector<int> cuts;
  for (const auto& b : breaks) cuts.push_back(b.cut);
  cuts.push_back(static_cast<int>(nodes.size()));
  std::vector<std::unique_ptr<TreeNode>> pieces;
  int lo = 0;
  for (size_t pi = 0; pi < cuts.size(); ++pi) {
    auto tn = std::make_unique<TreeNode>();
    for (int id = lo; id < cuts[pi]; ++id) {
      const Node& n = *nodes[static_cast<size_t>(id)];
      if (!need[static_cast<size_t>(id)]) continue;
      if (n.kind == NodeKind::Constant)
        tn->constants.push_back({base[static_cast<size_t>(id)], n.value});
      if (n.kind != NodeKind::Op) continue;
      Step st{n.op, n.attrs, {}, {}, {}, n.patches};
      for (const auto& in : n.inputs) st.in.push_back(slot(in));
      for (int o = 0; o < static_cast<int>(n.outputs.size()); ++o)
        st.out.push_back(base[static_cast<size_t>(id)] + o);
      tn->steps.push_back(std::move(st));
      ++tn->nodes;
    }
    if (pi < breaks.size()) {
      tn->guard_slot = slot(breaks[pi].v);
      tn->guard_what = breaks[pi].what;
      tn->guard_where = breaks[pi].where;
    } else {
      tn->leaf = true;
      for (const auto& o : outs) tn->out_slots.push_back(slot(g.value_of(o)));
    }
    pieces.push_back(std::move(tn));
    lo = cuts[pi];
  }
  return insert_path(v, std::move(pieces), breaks);
}

}  // namespace kiln::detail::jit_engine
