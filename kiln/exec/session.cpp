// Session planning and execution. A plan is a flat vector of steps (op, attrs, input slots,
// output slots) with each slot's last use precomputed, so a run does no graph walking, no
// hashing and frees intermediates as soon as they are dead. Dataflow deadness (switch/merge): a
// dead value is an undefined slot; a step with a dead input is skipped and leaves its outputs
// dead, except merge, which forwards its live input. Skipped steps are not counted as executed.
#include "kiln/exec/session.h"

#include <algorithm>
#include <map>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "kiln/core/allocator.h"
#include "kiln/core/interrupt.h"
#include "kiln/dispatch/dispatch.h"
#include "kiln/dispatch/profile.h"
#include "kiln/exec/session_plan.h"
#include "kiln/graph/node.h"
#include "kiln/passes/memory_plan.h"

using namespace kiln::detail;

namespace kiln {

namespace {

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

// Session::run's argument checks: fetches of this graph; feeds keyed by its placeholders, live
// (unless dead values pass through), concrete, of the placeholder's dtype and of a shape its
// static dims admit.
void check_run_args(const Graph& g, const std::vector<Tensor>& fetches, const FeedDict& feeds,
                    bool dead_passthrough) {
  for (const auto& f : fetches) g.value_of(f, "Session::run");
  for (const auto& [k, v] : feeds) {
    Node* n = g.node_of(k, "Session::run");
    if (n->kind != NodeKind::Placeholder)
      fail("Session::run", "feed key %", n->id, " (", n->label(), ") is not a placeholder");
    if (v.is_dead()) {
      if (dead_passthrough) continue;
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
}

// Placeholder slot -> fed tensor (found by name once per run); every placeholder must be fed.
void find_feeds(const Session::Plan& p, const FeedDict& feeds,
                std::vector<const Tensor*>& feed_of) {
  feed_of.assign(p.placeholders.size(), nullptr);
  for (size_t i = 0; i < p.placeholders.size(); ++i) {
    const Node* node = p.placeholders[i].second;
    for (const auto& [k, v] : feeds)
      if (k.impl()->sym->node->kind == NodeKind::Placeholder &&
          k.impl()->sym->node->name == node->name)
        feed_of[i] = &v;
    if (!feed_of[i])
      fail("Session::run", "placeholder '", node->name, "' (", dtype_name(node->outputs[0].dtype),
           node->outputs[0].shape, ") must be fed");
  }
}

// The tensors handed to the caller from a run's slots (bound: the bound form's).
std::vector<Tensor> fetched_results(const Session::Plan& p, const std::vector<Tensor>& slots,
                                    bool bound, const std::map<std::string, Tensor>& vars,
                                    bool dead_passthrough) {
  std::vector<Tensor> out;
  out.reserve(p.fetch_slots.size());
  for (size_t i = 0; i < p.fetch_slots.size(); ++i) {
    Tensor t = slots[static_cast<size_t>(p.fetch_slots[i])];
    if (!t.defined()) {
      const ValueRef& f = p.program.fetches[i];
      if (dead_passthrough) {
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
    for (auto& [name, v] : vars) aliases = aliases || t.shares_storage(v);
    // A bound view's tensor object is re-pointed by the next run: hand out a view of its own.
    const bool bound_view = bound && p.bound.is_view[static_cast<size_t>(p.fetch_slots[i])];
    out.push_back(aliases      ? t.clone()
                  : bound_view ? make_view(t, t.shape(), t.strides(), t.offset())
                               : t);
  }
  return out;
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
  check_run_args(graph_, fetches, feeds, dead_passthrough_);
  Plan& p = cached_plan(fetches, feeds);
  NoGradGuard ng;
  find_feeds(p, feeds, feed_of_);
  bool dead_feed = false;
  for (const Tensor* f : feed_of_) dead_feed = dead_feed || f->is_dead();
  stats_.relaid_out = false;
  const bool bound = p.bound.ok && !dead_feed && (feeds_match(p) || relayout(p));
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
  // Feeds whose shapes keep changing would rebind every run: after a few, stay generic.
  if (!bound && !p.has_control_flow && p.binds < 4 && pass_enabled("plan_memory")) {
    ++p.binds;
    bind(p);
  }
  if (last_plan_ != &p) {
    stats_.passes = p.passes;
    last_plan_ = &p;
  }
  stats_.plan_steps = static_cast<int64_t>(p.steps.size());
  stats_.relayouts = p.relayouts;
  std::vector<Tensor>& slots = bound ? p.bound.slots : generic_slots_;
  std::vector<Tensor> out = fetched_results(p, slots, bound, vars_, dead_passthrough_);
  stats_.arena_bytes = p.bound.ok ? p.bound.arena_bytes : 0;
  stats_.unplanned_bytes = p.bound.ok ? p.bound.unplanned_bytes : 0;
  stats_.pieces_in_place = p.bound.ok ? p.bound.pieces_in_place : 0;
  // Drop this run's fresh buffers and feeds from the bound slots (the caller owns them now).
  if (bound) {
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
    before_step(p, i, writing);
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
                                           : run_patched_step(st, in_span);
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
