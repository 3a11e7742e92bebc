// Session planning and execution. A plan is a flat vector of steps (op, attrs, input slots,
// output slots) with each slot's last use precomputed, so a run does no graph walking, no
// hashing and frees intermediates as soon as they are dead. Dataflow deadness (switch/merge): a
// dead value is an undefined slot; a step with a dead input is skipped and leaves its outputs
// dead, except merge, which forwards its live input. Skipped steps are not counted as executed.
#include "kiln/exec/session.h"

#include <algorithm>
#include <sstream>
#include <unordered_map>

#include "kiln/dispatch/dispatch.h"

namespace kiln {

struct Session::Plan {
  struct Step {
    const OpDef* op;
    Attrs attrs;
    std::vector<int> in;
    std::vector<int> out;
    std::vector<int> free_after;  // slots whose last use is this step
    bool takes_dead = false;      // merge: runs with dead inputs and forwards the live one
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
};

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
  auto is_write = [](const Node* n) { return n->kind == NodeKind::Op && n->op->name == "assign"; };
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

size_t Session::plans_built() const { return plans_.size(); }

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
        st.takes_dead = n->op->has(kControlFlow) && n->op->name == "merge";
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
  Plan& ref = *plan;
  plans_[sig] = std::move(plan);
  return ref;
}

std::vector<Tensor> Session::run(const std::vector<Tensor>& fetches, const FeedDict& feeds) {
  if (fetches.empty()) return {};
  for (const auto& f : fetches) graph_.value_of(f, "Session::run");
  for (const auto& [k, v] : feeds) {
    Node* n = graph_.node_of(k, "Session::run");
    if (n->kind != NodeKind::Placeholder)
      fail("Session::run", "feed key %", n->id, " (", n->label(), ") is not a placeholder");
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
  Plan& p = plan_for(fetches, feeds);
  std::vector<Tensor> slots(static_cast<size_t>(p.num_slots));
  for (auto& [s, v] : p.constants) slots[static_cast<size_t>(s)] = v;
  for (auto& [s, name] : p.variables) {
    auto it = vars_.find(name);
    if (it == vars_.end()) {  // a variable added to the graph after this Session was made
      Node* n = graph_.find(name);
      it = vars_.emplace(name, n->value.clone()).first;
    }
    slots[static_cast<size_t>(s)] = it->second;
  }
  for (auto& [s, node] : p.placeholders) {
    const Tensor* found = nullptr;
    for (const auto& [k, v] : feeds)
      if (k.impl()->sym->node->name == node->name &&
          k.impl()->sym->node->kind == NodeKind::Placeholder)
        found = &v;
    if (!found)
      fail("Session::run", "placeholder '", node->name, "' (", dtype_name(node->outputs[0].dtype),
           node->outputs[0].shape, ") must be fed");
    slots[static_cast<size_t>(s)] = *found;
  }
  NoGradGuard ng;
  int64_t executed = 0;
  TensorList ins;
  for (auto& st : p.steps) {
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
    TensorList outs =
        st.takes_dead ? st.op->view(in_span, st.attrs) : run_kernel(*st.op, in_span, st.attrs);
    if (st.takes_dead && !outs[0].defined()) {  // every input dead: no work was done
      for (int s : st.free_after) slots[static_cast<size_t>(s)] = Tensor();
      continue;
    }
    for (size_t i = 0; i < st.out.size(); ++i)
      slots[static_cast<size_t>(st.out[i])] = std::move(outs[i]);
    for (int s : st.free_after) slots[static_cast<size_t>(s)] = Tensor();
    ++executed;
  }
  ins.clear();
  stats_.nodes_executed = executed;
  stats_.plan_steps = static_cast<int64_t>(p.steps.size());
  stats_.passes = p.passes;
  std::vector<Tensor> out;
  for (size_t i = 0; i < p.fetch_slots.size(); ++i) {
    Tensor t = slots[static_cast<size_t>(p.fetch_slots[i])];
    if (!t.defined()) {
      const ValueRef& f = p.program.fetches[i];
      fail(
          "Session::run", "fetch ", i, " (", f.node->label(), " output ", f.index,
          ") is dead: it lies on the untaken side of a switch, so it was not computed in this run");
    }
    // Results that alias Session state are copied, so later runs do not change them.
    bool aliases = false;
    for (auto& [name, v] : vars_) aliases = aliases || t.shares_storage(v);
    out.push_back(aliases ? t.clone() : t);
  }
  return out;
}

Tensor Session::run(const Tensor& fetch, const FeedDict& feeds) {
  return run(std::vector<Tensor>{fetch}, feeds)[0];
}

Tensor Session::variable(const std::string& name) const {
  auto it = vars_.find(name);
  if (it == vars_.end()) fail("Session::variable", "no variable named '", name, "'");
  return it->second.clone();
}

void Session::set_variable(const std::string& name, const Tensor& value) {
  auto it = vars_.find(name);
  if (it == vars_.end()) fail("Session::set_variable", "no variable named '", name, "'");
  if (value.shape() != it->second.shape() || value.dtype() != it->second.dtype())
    fail("Session::set_variable", "variable '", name, "' is ", it->second.dtype(),
         it->second.shape(), ", got ", value.dtype(), value.shape());
  NoGradGuard ng;
  it->second.copy_(value);
}

}  // namespace kiln
