// Session planning and execution. A plan is a flat vector of steps (op, attrs, input slots,
// output slots) with each slot's last use precomputed, so a run does no graph walking, no
// hashing and frees intermediates as soon as they are dead. Dataflow deadness (switch/merge): a
// dead value is an undefined slot; a step with a dead input is skipped and leaves its outputs
// dead, except merge, which forwards its live input. Skipped steps are not counted as executed.
#include "kiln/exec/session.h"

#include <algorithm>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "kiln/core/allocator.h"
#include "kiln/core/interrupt.h"
#include "kiln/dispatch/dispatch.h"
#include "kiln/dispatch/profile.h"
#include "kiln/graph/node.h"
#include "kiln/passes/memory_plan.h"

using namespace kiln::detail;

namespace kiln {

struct Session::Plan {
  struct Step {
    const OpDef* op;
    Attrs attrs;
    std::vector<int> in;
    std::vector<int> out;
    std::vector<int> free_after;  // slots whose last use is this step
    // Symbolic size attributes (Node::patches): the last patches.size() inputs are their
    // values; out_shapes are the node's output shapes, whose static dims each run checks.
    std::vector<SizePatch> patches;
    std::vector<Shape> out_shapes;
    bool takes_dead = false;  // merge: runs with dead inputs and forwards the live one
  };
  Program program;
  std::vector<Step> steps;
  int num_slots = 0;
  std::vector<std::pair<int, Tensor>> constants;          // slot, value
  std::vector<std::pair<int, std::string>> variables;     // slot, name
  std::vector<std::pair<int, const Node*>> placeholders;  // slot, node (in the program)
  std::vector<std::string> placeholder_names;
  std::vector<int> fetch_slots;
  std::string passes;
  bool has_control_flow = false;
  // The first step that writes a variable (steps.size(): none). Interrupts are taken only
  // before it, so an interrupted run leaves every variable as it was.
  size_t first_write = 0;

  // ---- the bound form: built after a first run, replayed while feeds keep their layouts ----
  // Every op output lives at a planned offset in one arena (kiln/passes/memory_plan.h), or is a
  // view whose storage is re-pointed each run; kernels are called directly on prebuilt tensors.
  // A replay allocates only the fetched results.
  struct SlotInfo {
    DType dtype = Float32;
    Shape shape;
    Strides strides;
    int64_t offset = 0;
    bool seen = false;
    int view_of = -1;      // slot whose storage this value aliases (view steps), -1: none
    int64_t view_rel = 0;  // its offset minus the aliased value's offset (elements)
  };
  enum class StepKind : uint8_t { Kernel, View, Generic };
  struct Bound {
    bool ok = false;
    std::vector<StepKind> kind;             // per step
    std::vector<char> fresh;                // per slot: allocate a new buffer each run
    std::vector<char> is_view;              // per slot: a prebuilt view re-pointed each run
    std::vector<Tensor> slots;              // prebuilt tensors (arena-backed or views)
    std::vector<std::vector<int>> release;  // per step: fresh slots to drop after it
    std::shared_ptr<Storage> arena;
    int64_t arena_bytes = 0, unplanned_bytes = 0;
    // Per slot: the placeholder (index into placeholders) whose buffer this fetched result may
    // be written into when that placeholder is donated, or -1 (see set_donated).
    std::vector<int> reuse;
    int64_t donated_gen = -1;      // the Session's set_donated generation of ph_donated
    std::vector<char> ph_donated;  // per placeholder: named in set_donated
    std::vector<char> donate_now;  // per placeholder: donated and safe to write this run
    bool any_reuse = false;
  };
  std::vector<SlotInfo> info;  // recorded by the last generic run
  Bound bound;
  int binds = 0;  // times this plan was bound (a new feed layout rebinds it)
};

namespace {

bool same_strides(const Strides& a, const Strides& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

std::string signature(const std::vector<Tensor>& fetches, const FeedDict& feeds) {
  std::ostringstream os;
  for (const auto& f : fetches) os << f.impl()->sym->node->id << ":" << f.impl()->sym->index << ",";
  os << "|";
  std::vector<int> fed;
  for (const auto& [k, v] : feeds) fed.push_back(k.impl()->sym->node->id);
  std::sort(fed.begin(), fed.end());
  for (int id : fed) os << id << ",";
  return os.str();
}

// Topological order with assignments deferred: every read of a variable happens before any
// write to it in the same run (TF1 leaves this to control dependencies; we make it the rule).
// Results that nothing reads and that could be written over a placeholder they read (addmm onto
// input 0, elementwise ops) are deferred too, so the placeholder's other readers come first and
// a donated feed's buffer can take the result (set_donated; an SGD weight update otherwise runs
// before the backward's last read of that weight).
std::vector<Node*> schedule(GraphImpl& g) {
  std::unordered_map<const Node*, int> pending;
  std::unordered_map<const Node*, std::vector<Node*>> users;
  for (auto& n : g.nodes) {
    pending[n.get()] = static_cast<int>(n->inputs.size());
    for (auto& in : n->inputs) users[in.node].push_back(n.get());
  }
  std::vector<Node*> ready, deferred, order;
  for (auto it = g.nodes.rbegin(); it != g.nodes.rend(); ++it)
    if ((*it)->inputs.empty()) ready.push_back(it->get());
  auto is_write = [&](const Node* n) {
    if (n->kind != NodeKind::Op) return false;
    if (n->op->has(kWritesVariable)) return true;
    if (!users[n].empty() || n->outputs.size() != 1) return false;
    const bool accumulates = n->op->has(kAccumulates);
    if (!accumulates && !(n->op->has(kElementwise) && n->op->has(kInplaceable))) return false;
    for (size_t k = 0; k < (accumulates ? 1 : n->inputs.size()); ++k)
      if (n->inputs[k].node->kind == NodeKind::Placeholder) return true;
    return false;
  };
  while (!ready.empty() || !deferred.empty()) {
    Node* n;
    if (!ready.empty()) {
      n = ready.back();
      ready.pop_back();
    } else {
      n = deferred.back();
      deferred.pop_back();
    }
    order.push_back(n);
    for (Node* u : users[n])
      if (--pending[u] == 0) (is_write(u) ? deferred : ready).push_back(u);
  }
  return order;
}

}  // namespace

Session::Session(const Graph& g) : graph_(g) {
  graph_.verify();
  for (Node* v : graph_.variables()) vars_[v->name] = v->value.clone();
}

Session::~Session() = default;

size_t Session::plans_built() const {
  std::lock_guard<std::mutex> lk(mu_);
  return plans_.size();
}

RunStats Session::last_run() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

Session::Plan& Session::plan_for(const std::vector<Tensor>& fetches, const FeedDict& feeds) {
  std::string sig = signature(fetches, feeds);
  auto it = plans_.find(sig);
  if (it != plans_.end()) return *it->second;

  auto plan = std::make_unique<Plan>();
  std::vector<ValueRef> refs;
  for (const auto& f : fetches) refs.push_back(graph_.value_of(f, "Session::run"));
  plan->program = prune(*graph_.impl(), refs);
  plan->passes = optimize(plan->program);
  GraphImpl& pg = *plan->program.graph;

  std::unordered_map<const Node*, int> base;  // first slot of each node
  int slots = 0;
  std::vector<Node*> order = schedule(pg);
  for (Node* n : order) {
    base[n] = slots;
    slots += static_cast<int>(n->outputs.size());
  }
  plan->num_slots = slots;
  std::vector<int> last_use(static_cast<size_t>(slots), -1);
  for (Node* n : order) {
    int s = base[n];
    switch (n->kind) {
      case NodeKind::Constant:
        plan->constants.push_back({s, n->value});
        break;
      case NodeKind::Variable:
        plan->variables.push_back({s, n->name});
        break;
      case NodeKind::Placeholder:
        plan->placeholders.push_back({s, n});
        plan->placeholder_names.push_back(n->name);
        break;
      case NodeKind::Op: {
        Plan::Step st;
        st.op = n->op;
        st.attrs = n->attrs;
        st.patches = n->patches;
        if (!st.patches.empty())
          for (const auto& m : n->outputs) st.out_shapes.push_back(m.shape);
        st.takes_dead = n->op->has(kMerge);
        plan->has_control_flow = plan->has_control_flow || n->op->has(kControlFlow);
        for (auto& in : n->inputs) st.in.push_back(base[in.node] + in.index);
        for (int i = 0; i < static_cast<int>(n->outputs.size()); ++i) st.out.push_back(s + i);
        for (int x : st.in) last_use[static_cast<size_t>(x)] = static_cast<int>(plan->steps.size());
        plan->steps.push_back(std::move(st));
        break;
      }
    }
  }
  for (const auto& f : plan->program.fetches) {
    int s = base[f.node] + f.index;
    plan->fetch_slots.push_back(s);
    last_use[static_cast<size_t>(s)] = static_cast<int>(plan->steps.size());  // keep
  }
  // Constants and variables are never freed by the run (they are owned elsewhere).
  for (auto& [s, v] : plan->constants)
    last_use[static_cast<size_t>(s)] = static_cast<int>(plan->steps.size());
  for (auto& [s, v] : plan->variables)
    last_use[static_cast<size_t>(s)] = static_cast<int>(plan->steps.size());
  for (int s = 0; s < slots; ++s) {
    int lu = last_use[static_cast<size_t>(s)];
    if (lu >= 0 && lu < static_cast<int>(plan->steps.size()))
      plan->steps[static_cast<size_t>(lu)].free_after.push_back(s);
  }
  for (auto& st : plan->steps)  // outputs nobody reads die at once
    for (int o : st.out)
      if (last_use[static_cast<size_t>(o)] < 0) st.free_after.push_back(o);
  plan->first_write = plan->steps.size();
  for (size_t i = 0; i < plan->steps.size() && plan->first_write == plan->steps.size(); ++i)
    if (plan->steps[i].op->has(kWritesVariable)) plan->first_write = i;
  Plan& ref = *plan;
  plans_[sig] = std::move(plan);
  return ref;
}

std::vector<Tensor> Session::run(const std::vector<Tensor>& fetches, const FeedDict& feeds) {
  if (fetches.empty()) return {};
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& f : fetches) graph_.value_of(f, "Session::run");
  for (const auto& [k, v] : feeds) {
    Node* n = graph_.node_of(k, "Session::run");
    if (n->kind != NodeKind::Placeholder)
      fail("Session::run", "feed key %", n->id, " (", n->label(), ") is not a placeholder");
    if (v.is_dead()) {
      if (dead_passthrough_) continue;
      fail("Session::run", "feed for placeholder '", n->name,
           "' is dead (an eager value on the untaken side of a switch_): it has no value to feed");
    }
    if (!v.defined() || !v.is_concrete())
      fail("Session::run", "feed for placeholder '", n->name, "' must be a concrete tensor");
    const TensorMeta& m = n->outputs[0];
    if (v.dtype() != m.dtype)
      fail("Session::run", "feed for placeholder '", n->name, "' has dtype ", v.dtype(),
           ", expected ", m.dtype);
    bool ok = v.shape().rank() == m.shape.rank();
    for (int64_t d = 0; ok && d < m.shape.rank(); ++d)
      ok = m.shape[d] < 0 || m.shape[d] == v.shape()[d];
    if (!ok)
      fail("Session::run", "feed for placeholder '", n->name, "' has shape ", v.shape(),
           ", expected ", m.shape);
  }
  Plan& p = cached_plan(fetches, feeds);
  NoGradGuard ng;
  // Placeholder slot -> fed tensor (found by name once per run).
  feed_of_.assign(p.placeholders.size(), nullptr);
  for (size_t i = 0; i < p.placeholders.size(); ++i) {
    const Node* node = p.placeholders[i].second;
    for (const auto& [k, v] : feeds)
      if (k.impl()->sym->node->kind == NodeKind::Placeholder &&
          k.impl()->sym->node->name == node->name)
        feed_of_[i] = &v;
    if (!feed_of_[i])
      fail("Session::run", "placeholder '", node->name, "' (", dtype_name(node->outputs[0].dtype),
           node->outputs[0].shape, ") must be fed");
  }
  bool dead_feed = false;
  for (const Tensor* f : feed_of_) dead_feed = dead_feed || f->is_dead();
  std::vector<Tensor>* slots_ptr;
  const bool bound = p.bound.ok && !dead_feed && feeds_match(p);
  try {
    if (bound) {
      run_bound(p);
    } else {
      // run_generic records this run's feeds in p.info, which the bound form was not built
      // for: drop that form first. Kept, it was replayed for the next run with these feeds
      // (after the rebinds below were used up, or after this run raised half-way), writing
      // results of this run's shapes into arena buffers planned for others.
      p.bound = Plan::Bound();
      run_generic(p);
    }
  } catch (...) {
    // A kernel raised or the run was interrupted: hold no feed or intermediate until the next
    // run (which reassigns every slot it reads before reading it).
    if (bound) {
      for (size_t s = 0; s < p.bound.slots.size(); ++s)
        if (p.bound.fresh[s] && !p.bound.is_view[s]) p.bound.slots[s] = Tensor();
      for (auto& [sl, node] : p.placeholders) p.bound.slots[static_cast<size_t>(sl)] = Tensor();
    } else {
      for (auto& t : generic_slots_) t = Tensor();
    }
    throw;
  }
  if (bound) {
    slots_ptr = &p.bound.slots;
  } else {
    slots_ptr = &generic_slots_;
    // Feeds whose shapes keep changing would rebind every run: after a few, stay generic.
    if (!p.has_control_flow && p.binds < 4 && pass_enabled("plan_memory")) {
      ++p.binds;
      bind(p);
    }
  }
  std::vector<Tensor>& slots = *slots_ptr;
  if (last_plan_ != &p) {
    stats_.passes = p.passes;
    last_plan_ = &p;
  }
  stats_.plan_steps = static_cast<int64_t>(p.steps.size());
  std::vector<Tensor> out;
  out.reserve(p.fetch_slots.size());
  for (size_t i = 0; i < p.fetch_slots.size(); ++i) {
    Tensor t = slots[static_cast<size_t>(p.fetch_slots[i])];
    if (!t.defined()) {
      const ValueRef& f = p.program.fetches[i];
      if (dead_passthrough_) {
        const TensorMeta& m = f.node->outputs[static_cast<size_t>(f.index)];
        out.push_back(dead_tensor(m.shape, m.dtype));
        continue;
      }
      fail(
          "Session::run", "fetch ", i, " (", f.node->label(), " output ", f.index,
          ") is dead: it lies on the untaken side of a switch, so it was not computed in this run");
    }
    // Results that alias Session state are copied, so later runs do not change them.
    bool aliases = false;
    for (auto& [name, v] : vars_) aliases = aliases || t.shares_storage(v);
    // A bound view's tensor object is re-pointed by the next run: hand out a view of its own.
    bool bound_view =
        slots_ptr == &p.bound.slots && p.bound.is_view[static_cast<size_t>(p.fetch_slots[i])];
    out.push_back(aliases      ? t.clone()
                  : bound_view ? make_view(t, t.shape(), t.strides(), t.offset())
                               : t);
  }
  stats_.arena_bytes = p.bound.ok ? p.bound.arena_bytes : 0;
  stats_.unplanned_bytes = p.bound.ok ? p.bound.unplanned_bytes : 0;
  // Drop this run's fresh buffers and feeds from the bound slots (the caller owns them now).
  if (slots_ptr == &p.bound.slots) {
    for (int f : p.fetch_slots)
      if (p.bound.fresh[static_cast<size_t>(f)] && !p.bound.is_view[static_cast<size_t>(f)])
        slots[static_cast<size_t>(f)] = Tensor();
    for (auto& [sl, node] : p.placeholders) slots[static_cast<size_t>(sl)] = Tensor();
  } else {
    for (auto& t : generic_slots_) t = Tensor();
  }
  return out;
}

Session::Plan& Session::cached_plan(const std::vector<Tensor>& fetches, const FeedDict& feeds) {
  // The same fetch and feed tensors as last time: no signature string, no map lookup.
  bool same = last_plan_ && last_fetches_.size() == fetches.size() &&
              last_feed_keys_.size() == feeds.size();
  // Compared by graph node and output index (stable for the graph's life), not by tensor
  // object, whose address a temporary may reuse.
  auto key = [](const Tensor& t) {
    return std::pair<const void*, int>(t.impl()->sym->node, t.impl()->sym->index);
  };
  for (size_t i = 0; same && i < fetches.size(); ++i) same = last_fetches_[i] == key(fetches[i]);
  for (size_t i = 0; same && i < feeds.size(); ++i)
    same = last_feed_keys_[i] == key(feeds[i].first);
  if (same) return *last_plan_;
  Plan& p = plan_for(fetches, feeds);
  last_fetches_.clear();
  for (const auto& f : fetches) last_fetches_.push_back(key(f));
  last_feed_keys_.clear();
  for (const auto& [k, v] : feeds) last_feed_keys_.push_back(key(k));
  last_plan_ = nullptr;  // stats_.passes is refreshed below
  return p;
}

bool Session::feeds_match(const Plan& p) const {
  for (size_t i = 0; i < p.placeholders.size(); ++i) {
    const Plan::SlotInfo& si = p.info[static_cast<size_t>(p.placeholders[i].first)];
    const Tensor& v = *feed_of_[i];
    if (v.dtype() != si.dtype || v.shape() != si.shape || !same_strides(v.strides(), si.strides) ||
        v.offset() != si.offset)
      return false;
  }
  return true;
}

// Runs a step whose size attributes are symbolic: their values come from its trailing inputs.
// A static dim of the node's outputs that came out otherwise is an error (the graph was built
// believing it fixed), which the JIT answers by compiling the call for its concrete shape.
static TensorList run_patched(const Session::Plan::Step& st, std::span<const Tensor> ins) {
  TensorList outs = run_node_kernel(*st.op, ins, st.attrs, st.patches);
  for (size_t o = 0; o < outs.size() && o < st.out_shapes.size(); ++o) {
    const Shape& want = st.out_shapes[o];
    const Shape& got = outs[o].shape();
    bool ok = want.rank() == got.rank();
    for (int64_t d = 0; ok && d < want.rank(); ++d) ok = want[d] < 0 || want[d] == got[d];
    if (!ok)
      fail(st.op->name.c_str(), "output ", o, " has shape ", got, " where the graph has ", want,
           ": a symbolic size changed a dim taken as static (needs a static size)");
  }
  return outs;
}

void Session::run_generic(Plan& p) {
  stats_.donated_writes = 0;
  std::vector<Tensor>& slots = generic_slots_;
  slots.assign(static_cast<size_t>(p.num_slots), Tensor());
  p.info.assign(static_cast<size_t>(p.num_slots), Plan::SlotInfo());
  auto record = [&](int s, const Tensor& t) {
    auto& si = p.info[static_cast<size_t>(s)];
    si.dtype = t.dtype();
    si.shape = t.shape();
    si.strides = t.strides();
    si.offset = t.offset();
    si.seen = true;
  };
  for (auto& [s, v] : p.constants) {
    slots[static_cast<size_t>(s)] = v;
    record(s, v);
  }
  for (auto& [s, name] : p.variables) {
    auto it = vars_.find(name);
    if (it == vars_.end()) {  // a variable added to the graph after this Session was made
      Node* n = graph_.find(name);
      it = vars_.emplace(name, n->value.clone()).first;
    }
    slots[static_cast<size_t>(s)] = it->second;
    record(s, it->second);
  }
  for (size_t i = 0; i < p.placeholders.size(); ++i) {
    if (feed_of_[i]->is_dead()) {  // set_dead_passthrough: the placeholder is dead in this run
      slots[static_cast<size_t>(p.placeholders[i].first)] = Tensor();
      continue;
    }
    slots[static_cast<size_t>(p.placeholders[i].first)] = *feed_of_[i];
    record(p.placeholders[i].first, *feed_of_[i]);
  }
  int64_t executed = 0;
  TensorList ins;
  std::optional<NoInterruptGuard> writing;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    if (i < p.first_write) [[likely]]
      interruption_point("Session::run");
    else if (i == p.first_write)
      writing.emplace();
    const auto& st = p.steps[i];
    ins.clear();
    bool dead = false;
    for (int x : st.in) {
      ins.push_back(slots[static_cast<size_t>(x)]);
      dead = dead || !ins.back().defined();
    }
    if (dead && !st.takes_dead) {  // outputs stay undefined: dead
      for (int s : st.free_after) slots[static_cast<size_t>(s)] = Tensor();
      continue;
    }
    std::span<const Tensor> in_span(ins.data(), ins.size());
    TensorList outs = st.takes_dead        ? st.op->view(in_span, st.attrs)
                      : st.patches.empty() ? run_kernel(*st.op, in_span, st.attrs)
                                           : run_patched(st, in_span);
    if (st.takes_dead && !outs[0].defined()) {  // every input dead: no work was done
      for (int s : st.free_after) slots[static_cast<size_t>(s)] = Tensor();
      continue;
    }
    for (size_t i = 0; i < st.out.size(); ++i) {
      if (!outs[i].defined()) {  // a dead output (control flow): nothing to record
        slots[static_cast<size_t>(st.out[i])] = Tensor();
        continue;
      }
      record(st.out[i], outs[i]);
      if (st.op->view && !ins.empty() && ins[0].defined() && outs[i].shares_storage(ins[0])) {
        p.info[static_cast<size_t>(st.out[i])].view_of = st.in[0];
        p.info[static_cast<size_t>(st.out[i])].view_rel = outs[i].offset() - ins[0].offset();
      }
      slots[static_cast<size_t>(st.out[i])] = std::move(outs[i]);
    }
    for (int s : st.free_after) slots[static_cast<size_t>(s)] = Tensor();
    ++executed;
  }
  stats_.nodes_executed = executed;
}

// Builds the bound form from what the generic run recorded: step kinds, which slots need a
// fresh buffer each run (fetched results and what they alias, outputs of generic steps), and
// an arena plan for the rest over lifetimes in this plan's own step order.
void Session::bind(Plan& p) {
  Plan::Bound b;
  const size_t S = p.steps.size(), N = static_cast<size_t>(p.num_slots);
  for (const auto& si : p.info)
    if (!si.seen) return;  // some value was never computed
  b.kind.resize(S);
  b.fresh.assign(N, 0);
  std::vector<int> def(N, -1), last(N, -1);
  for (size_t i = 0; i < S; ++i) {
    const auto& st = p.steps[i];
    Plan::StepKind k = Plan::StepKind::Kernel;
    if (st.op->has(kSideEffect) || st.op->has(kControlFlow) || !st.patches.empty()) {
      // assign is a view that writes; a patched op resolves its sizes on every run
      k = Plan::StepKind::Generic;
    } else if (st.op->view) {
      k = Plan::StepKind::View;
      for (int o : st.out)
        k = p.info[static_cast<size_t>(o)].view_of >= 0 ? k : Plan::StepKind::Generic;
    } else if (!st.op->kernel) {
      k = Plan::StepKind::Generic;
    } else if (st.op->contiguous_inputs) {
      for (int x : st.in) {
        const auto& si = p.info[static_cast<size_t>(x)];
        if (!same_strides(si.strides, contiguous_strides(si.shape))) k = Plan::StepKind::Generic;
      }
    }
    b.kind[i] = k;
    for (int o : st.out) {
      def[static_cast<size_t>(o)] = static_cast<int>(i);
      if (k == Plan::StepKind::Generic) b.fresh[static_cast<size_t>(o)] = 1;
    }
    for (int x : st.in) last[static_cast<size_t>(x)] = static_cast<int>(i);
  }
  auto root = [&](int s) {
    while (p.info[static_cast<size_t>(s)].view_of >= 0) s = p.info[static_cast<size_t>(s)].view_of;
    return s;
  };
  for (int f : p.fetch_slots) {
    // Fetched results get buffers of their own (the caller keeps them); a fetched variable or
    // constant is the Session's own tensor, copied out by run() and kept in its slot (marking
    // it fresh dropped it after the first bound run: the third run of a plan fetching a
    // variable reported it dead).
    if (def[static_cast<size_t>(root(f))] >= 0) {
      b.fresh[static_cast<size_t>(f)] = 1;
      b.fresh[static_cast<size_t>(root(f))] = 1;
    }
    last[static_cast<size_t>(f)] = static_cast<int>(S);
  }
  // A view keeps the buffer it aliases alive until its own last use.
  for (size_t i = S; i-- > 0;)
    if (b.kind[i] == Plan::StepKind::View)
      for (int o : p.steps[i].out) {
        int base = p.info[static_cast<size_t>(o)].view_of;
        last[static_cast<size_t>(base)] =
            std::max(last[static_cast<size_t>(base)], last[static_cast<size_t>(o)]);
      }
  // Donation candidates: a fetched result of an in-place-capable kernel step (addmm onto its
  // input 0; an elementwise op onto any input) over a contiguous placeholder of its own shape
  // and dtype that no later step reads (views included) and no other input of the step aliases.
  b.reuse.assign(N, -1);
  {
    std::vector<int> ph_of(N, -1);
    for (size_t k = 0; k < p.placeholders.size(); ++k)
      ph_of[static_cast<size_t>(p.placeholders[k].first)] = static_cast<int>(k);
    std::vector<char> taken(p.placeholders.size(), 0);
    auto contiguous = [&](int s) {
      const auto& si = p.info[static_cast<size_t>(s)];
      return same_strides(si.strides, contiguous_strides(si.shape));
    };
    for (size_t i = 0; i < S; ++i) {
      const auto& st = p.steps[i];
      if (b.kind[i] != Plan::StepKind::Kernel || st.out.size() != 1) continue;
      const int o = st.out[0];
      const bool accumulates = st.op->has(kAccumulates);
      if (!b.fresh[static_cast<size_t>(o)] || !contiguous(o) ||
          (!accumulates && !(st.op->has(kElementwise) && st.op->has(kInplaceable))))
        continue;
      const auto& oi = p.info[static_cast<size_t>(o)];
      for (size_t j = 0; j < (accumulates ? 1 : st.in.size()); ++j) {
        const int x = st.in[j];
        const int k = ph_of[static_cast<size_t>(x)];
        if (k < 0 || taken[static_cast<size_t>(k)] ||
            last[static_cast<size_t>(x)] != static_cast<int>(i) || !contiguous(x) ||
            p.info[static_cast<size_t>(x)].dtype != oi.dtype ||
            p.info[static_cast<size_t>(x)].shape != oi.shape)
          continue;
        bool aliased = false;
        for (size_t q = 0; q < st.in.size(); ++q)
          aliased = aliased || (q != j && root(st.in[q]) == x);
        if (aliased) continue;
        b.reuse[static_cast<size_t>(o)] = k;
        taken[static_cast<size_t>(k)] = 1;
        b.any_reuse = true;
        break;
      }
    }
  }
  std::vector<ValueLife> life(N);
  for (size_t s = 0; s < N; ++s) {
    const auto& si = p.info[s];
    bool kernel_out = def[s] >= 0 && b.kind[static_cast<size_t>(def[s])] == Plan::StepKind::Kernel;
    life[s].plannable = kernel_out && !b.fresh[s];
    life[s].bytes =
        static_cast<int64_t>(si.shape.numel() * static_cast<int64_t>(dtype_size(si.dtype)));
    life[s].def = std::max(def[s], 0);
    life[s].last_use = std::max(last[s], life[s].def);
  }
  MemoryPlan mp = plan_memory(life);
  b.arena_bytes = mp.arena_bytes;
  b.unplanned_bytes = mp.unplanned_bytes;
  // The generic run's intermediates sit freed in the allocator's cache, sized for a run that
  // bound runs no longer make: hand them back before the arena comes, so that peak memory is the
  // larger of the two, not their sum (W6 graph: 154 -> 114 MiB peak RSS).
  empty_cache();
  b.arena = std::make_shared<Storage>(static_cast<size_t>(std::max<int64_t>(mp.arena_bytes, 64)));
  b.slots.assign(N, Tensor());
  b.is_view.assign(N, 0);
  for (size_t s = 0; s < N; ++s) {
    const auto& si = p.info[s];
    bool is_view = def[s] >= 0 && b.kind[static_cast<size_t>(def[s])] == Plan::StepKind::View;
    b.is_view[s] = is_view;
    if (mp.offset[s] < 0 && !is_view) continue;
    auto impl = make_tensor_impl();
    impl->dtype = si.dtype;
    impl->shape = si.shape;
    if (is_view) {  // storage re-pointed each run at the aliased buffer
      impl->strides = si.strides;
      impl->offset = si.offset;
    } else {
      impl->storage = b.arena;
      impl->strides = contiguous_strides(si.shape);
      impl->offset = mp.offset[s] / static_cast<int64_t>(dtype_size(si.dtype));
    }
    impl->recompute_contiguous();
    b.slots[s] = Tensor(std::move(impl));
  }
  for (auto& [s, v] : p.constants) b.slots[static_cast<size_t>(s)] = v;
  for (auto& [s, name] : p.variables) b.slots[static_cast<size_t>(s)] = vars_.at(name);
  // Fresh, unfetched buffers go at their last use, as in the generic run.
  b.release.assign(S, {});
  std::vector<char> fetched(N, 0);
  for (int f : p.fetch_slots) fetched[static_cast<size_t>(f)] = 1;
  // A value nobody reads (an unused second output) goes right after the step that made it
  // (last is -1 there: indexing release with it wrote out of bounds).
  for (size_t s = 0; s < N; ++s)
    if (b.fresh[s] && !fetched[s] && def[s] >= 0 && !b.is_view[s]) {
      const int at = std::min<int>(std::max(last[s], def[s]), static_cast<int>(S) - 1);
      b.release[static_cast<size_t>(at)].push_back(static_cast<int>(s));
    }
  b.ok = true;
  p.bound = std::move(b);
}

void Session::run_bound(Plan& p) {
  auto& b = p.bound;
  auto& slots = b.slots;
  for (size_t i = 0; i < p.placeholders.size(); ++i)
    slots[static_cast<size_t>(p.placeholders[i].first)] = *feed_of_[i];
  // Which donated feeds this run may write into: contiguous, and sharing storage with no other
  // feed and no variable (the result would change what another input or the Session holds).
  int64_t donated_writes = 0;
  if (b.any_reuse) {
    const size_t P = p.placeholders.size();
    if (b.donated_gen != donated_gen_) {
      b.ph_donated.assign(P, 0);
      for (size_t i = 0; i < P; ++i)
        b.ph_donated[i] = std::find(donated_.begin(), donated_.end(),
                                    p.placeholders[i].second->name) != donated_.end();
      b.donated_gen = donated_gen_;
    }
    b.donate_now.assign(P, 0);
    for (size_t i = 0; i < P; ++i) {
      if (!b.ph_donated[i]) continue;
      const Tensor& t = *feed_of_[i];
      bool ok = t.is_contiguous();
      for (size_t j = 0; ok && j < P; ++j) ok = j == i || !t.shares_storage(*feed_of_[j]);
      for (auto it = vars_.begin(); ok && it != vars_.end(); ++it)
        ok = !t.shares_storage(it->second);
      b.donate_now[i] = ok;
    }
  }
  TensorList ins, outs;
  std::optional<NoInterruptGuard> writing;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    if (i < p.first_write) [[likely]]
      interruption_point("Session::run");
    else if (i == p.first_write)
      writing.emplace();
    const auto& st = p.steps[i];
    switch (b.kind[i]) {
      case Plan::StepKind::View:
        for (int o : st.out) {
          const auto& si = p.info[static_cast<size_t>(o)];
          const Tensor& base = slots[static_cast<size_t>(si.view_of)];
          TensorImpl* impl = slots[static_cast<size_t>(o)].impl();
          impl->storage = base.impl()->storage;
          impl->offset = base.impl()->offset + si.view_rel;  // the base may sit in the arena
        }
        break;
      case Plan::StepKind::Kernel: {
        ins.clear();
        outs.clear();
        for (int x : st.in) ins.push_back(slots[static_cast<size_t>(x)]);
        for (int o : st.out) {
          Tensor& t = slots[static_cast<size_t>(o)];
          if (b.fresh[static_cast<size_t>(o)]) {
            const int k = b.reuse[static_cast<size_t>(o)];
            if (k >= 0 && b.donate_now[static_cast<size_t>(k)]) {
              t = slots[static_cast<size_t>(p.placeholders[static_cast<size_t>(k)].first)];
              ++donated_writes;
            } else {
              const auto& si = p.info[static_cast<size_t>(o)];
              t = empty(si.shape, si.dtype);
            }
          }
          outs.push_back(t);
        }
        const double t0 = profiling_enabled() ? profile_now() : 0;
        invoke_kernel(*st.op, std::span<const Tensor>(ins.data(), ins.size()),
                      std::span<Tensor>(outs.data(), outs.size()), st.attrs);
        if (profiling_enabled())
          profile_record(*st.op, profile_now() - t0,
                         std::span<const Tensor>(ins.data(), ins.size()));
        break;
      }
      case Plan::StepKind::Generic: {
        ins.clear();
        for (int x : st.in) ins.push_back(slots[static_cast<size_t>(x)]);
        const std::span<const Tensor> in_span(ins.data(), ins.size());
        TensorList o =
            st.patches.empty() ? run_kernel(*st.op, in_span, st.attrs) : run_patched(st, in_span);
        for (size_t k = 0; k < st.out.size(); ++k)
          slots[static_cast<size_t>(st.out[k])] = std::move(o[k]);
        break;
      }
    }
    for (int r : b.release[i]) slots[static_cast<size_t>(r)] = Tensor();
  }
  stats_.nodes_executed = static_cast<int64_t>(p.steps.size());
  stats_.donated_writes = donated_writes;
}

void Session::set_donated(const std::vector<Tensor>& placeholders) {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<std::string> names;
  for (const auto& t : placeholders) {
    if (!t.defined() || !t.is_symbolic())
      fail("Session::set_donated", "expects placeholders of the Session's graph");
    Node* n = graph_.node_of(t, "Session::set_donated");
    if (n->kind != NodeKind::Placeholder)
      fail("Session::set_donated", "%", n->id, " (", n->label(), ") is not a placeholder");
    names.push_back(n->name);
  }
  if (names == donated_) return;
  donated_ = std::move(names);
  ++donated_gen_;
}

Tensor Session::run(const Tensor& fetch, const FeedDict& feeds) {
  return run(std::vector<Tensor>{fetch}, feeds)[0];
}

Tensor Session::variable(const std::string& name) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = vars_.find(name);
  if (it == vars_.end()) fail("Session::variable", "no variable named '", name, "'");
  return it->second.clone();
}

void Session::set_variable(const std::string& name, const Tensor& value) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = vars_.find(name);
  if (it == vars_.end()) fail("Session::set_variable", "no variable named '", name, "'");
  if (value.shape() != it->second.shape() || value.dtype() != it->second.dtype())
    fail("Session::set_variable", "variable '", name, "' is ", it->second.dtype(),
         it->second.shape(), ", got ", value.dtype(), value.shape());
  NoGradGuard ng;
  it->second.copy_(value);
}

}  // namespace kiln
