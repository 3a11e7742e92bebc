// Kiln graph -> standard ONNX (opset 17): walks the nodes the outputs need; each op node becomes
// one or a few ONNX nodes by its row in the rule table (onnx_export_rules.cpp, keyed by op
// handle); a cond's Merge becomes an If whose branches hold the nodes each side's Switches
// gate, a while a Loop. An op without a rule fails loudly, naming itself.
#include "kiln/onnx/onnx_export.h"

#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "kiln/exec/while_body.h"
#include "kiln/graph/node.h"
#include "kiln/onnx/onnx_export_rules.h"
#include "kiln/onnx/onnx_internal.h"

namespace kiln::onnx {
namespace kd = ::kiln::detail;
namespace od = ::kiln::onnx::detail;
namespace {

constexpr char kExp[] = "export_onnx";

using od::attr_i;
using od::fill_tensor;

// A graph input's or output's type; each dynamic dim gets a name of its own (d0, d1, ...).
void fill_type(::onnx::ValueInfoProto* v, const std::string& name, DType dt, const Shape& s,
               int* dyn) {
  od::fill_value_info(v, name, dt, s, [&] { return str_cat("d", (*dyn)++); });
}

// Names and counters shared by an exporter and the exporters of its subgraphs (If branches,
// Loop bodies): ONNX wants every name unique across a graph and the graphs nested in it.
struct Shared {
  int counter = 0, dyn = 0, scopes = 0;
  const std::map<std::string, std::string>* dim_names = nullptr;  // SaveOptions::dim_names
};

class Exporter : public od::ExportCtx {
 public:
  Exporter(::onnx::GraphProto* gp, const Session* sess, Exporter* parent = nullptr,
           Shared* shared = nullptr)
      : gp_(gp),
        sess_(sess),
        parent_(parent),
        shared_(shared ? shared : &own_),
        prefix_(parent ? str_cat("kiln_s", ++shared_->scopes, "_n") : "kiln_n"),
        dyn_(shared_->dyn) {}

  void run(const Graph& g, const NamedTensors& outputs) {
    std::vector<kd::ValueRef> roots;
    for (const auto& [name, t] : outputs) roots.push_back(g.value_of(t, kExp));
    emit(needed(g, roots));
    for (const auto& [name, t] : outputs) {
      kd::ValueRef v = g.value_of(t, kExp);
      auto* id = gp_->add_node();
      id->set_op_type("Identity");
      id->add_input(name_of(v));
      id->add_output(name);
      fill_type(gp_->add_output(), name, v.node->outputs[v.index].dtype,
                v.node->outputs[v.index].shape, &dyn_);
    }
  }

 private:
  // The nodes of `g` that `roots` need, in graph (topological) order.
  static std::vector<const kd::Node*> needed(const Graph& g,
                                             const std::vector<kd::ValueRef>& roots) {
    std::set<const kd::Node*> need;
    std::vector<const kd::Node*> stack;
    for (const auto& r : roots) stack.push_back(r.node);
    while (!stack.empty()) {
      const kd::Node* n = stack.back();
      stack.pop_back();
      if (!need.insert(n).second) continue;
      for (const auto& in : n->inputs) stack.push_back(in.node);
    }
    std::vector<const kd::Node*> out;
    for (const auto& up : g.nodes())
      if (need.count(up.get())) out.push_back(up.get());
    return out;
  }

  static bool is_switch(const kd::Node* n) {
    return n->kind == kd::NodeKind::Op && n->op->has(kd::kSwitch);
  }
  static bool is_merge(const kd::Node* n) {
    return n->kind == kd::NodeKind::Op && n->op->has(kd::kMerge);
  }

  // A merge of two values that Switches on one predicate P gate (what kiln::cond builds): as an
  // ONNX If, each side's nodes go into a branch graph, where each Switch's output is its data
  // input, read from the enclosing scope.
  struct IfPlan {
    kd::ValueRef pred;
    std::vector<const kd::Node*> region[2];    // by side (0: else, 1: then), in graph order
    std::vector<const kd::Node*> switches[2];  // the P-switches each side reads
    kd::ValueRef value[2];                     // the merge input of each side
  };

  // The side (0 or 1) of the Switches on `pred` that value `v` depends on, and the nodes that
  // depend on them (the gated nodes: dead on the untaken side); -1 when `v` is not gated or
  // depends on both sides. Nodes it reads that no Switch gates (constants, outer values) stay
  // outside, read from the enclosing scope.
  static int side_of(const kd::ValueRef& v, const kd::ValueRef& pred,
                     std::vector<const kd::Node*>& region, std::set<const kd::Node*>& sws) {
    auto is_p_switch = [&](const kd::Node* n) {
      return is_switch(n) && n->inputs[1].node == pred.node && n->inputs[1].index == pred.index;
    };
    std::set<const kd::Node*> anc;
    std::vector<const kd::Node*> stack{v.node};
    while (!stack.empty()) {
      const kd::Node* n = stack.back();
      stack.pop_back();
      if (is_p_switch(n) || !anc.insert(n).second) continue;
      for (const auto& in : n->inputs) stack.push_back(in.node);
    }
    std::vector<const kd::Node*> order(anc.begin(), anc.end());
    std::sort(order.begin(), order.end(),
              [](const kd::Node* a, const kd::Node* c) { return a->id < c->id; });
    std::set<const kd::Node*> gated;
    int side = -1;
    for (const kd::Node* n : order) {
      bool g = false;
      for (const auto& in : n->inputs) {
        if (is_p_switch(in.node)) {
          if (side >= 0 && side != in.index) return -1;
          side = in.index;
          sws.insert(in.node);
          g = true;
        } else if (gated.count(in.node)) {
          g = true;
        }
      }
      if (g) {
        gated.insert(n);
        region.push_back(n);
      }
    }
    if (is_p_switch(v.node)) {  // the branch returns a switched value as it is
      if (side >= 0 && side != v.index) return -1;
      sws.insert(v.node);
      return v.index;
    }
    return gated.count(v.node) ? side : -1;
  }

  static std::optional<IfPlan> plan_if(const kd::Node* m) {
    if (m->inputs.size() != 2) return std::nullopt;
    // Candidate predicates: those of the Switches first reached from input 0.
    std::vector<kd::ValueRef> preds;
    {
      std::set<const kd::Node*> seen;
      std::vector<const kd::Node*> stack{m->inputs[0].node};
      while (!stack.empty() && seen.size() < 100000) {
        const kd::Node* n = stack.back();
        stack.pop_back();
        if (!seen.insert(n).second) continue;
        if (is_switch(n)) preds.push_back(n->inputs[1]);
        for (const auto& in : n->inputs) stack.push_back(in.node);
      }
    }
    for (const auto& p : preds) {
      IfPlan plan;
      plan.pred = p;
      std::vector<const kd::Node*> region[2];
      std::set<const kd::Node*> sws[2];
      const int s0 = side_of(m->inputs[0], p, region[0], sws[0]);
      const int s1 = side_of(m->inputs[1], p, region[1], sws[1]);
      if (s0 < 0 || s1 < 0 || s0 == s1) continue;
      // The predicate must come from outside both branches.
      bool inner = false;
      for (int k = 0; k < 2; ++k)
        inner = inner || std::find(region[k].begin(), region[k].end(), p.node) != region[k].end();
      if (inner) continue;
      const int side[2] = {s0, s1};
      for (int k = 0; k < 2; ++k) {
        plan.value[side[k]] = m->inputs[k];
        plan.region[side[k]] = std::move(region[k]);
        plan.switches[side[k]].assign(sws[k].begin(), sws[k].end());
      }
      return plan;
    }
    return std::nullopt;
  }

  // Emits `nodes` (graph order): each cond's merge as an If (its branches' nodes go into the
  // If, not here), a while as a Loop, the rest op by op.
  void emit(const std::vector<const kd::Node*>& nodes) {
    std::map<const kd::Node*, IfPlan> plans;
    std::set<const kd::Node*> inside;
    // From the last merge back: an outer cond's merge comes after its inner conds', so the
    // outer If takes the inner ones into its branches, where they become nested Ifs.
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      const kd::Node* m = *it;
      if (!is_merge(m) || inside.count(m)) continue;
      if (auto plan = plan_if(m)) {
        for (int b = 0; b < 2; ++b) inside.insert(plan->region[b].begin(), plan->region[b].end());
        plans.emplace(m, std::move(*plan));
      }
    }
    for (size_t i = 0; i < nodes.size(); ++i) {
      const kd::Node* n = nodes[i];
      if (inside.count(n) || is_switch(n)) continue;  // a Switch alone has no ONNX form
      if (is_merge(n)) {
        auto it = plans.find(n);
        if (it == plans.end())
          fail(kExp, n->label(),
               " is not a cond's merge (two values gated by Switches on one predicate) and has "
               "no standard ONNX form; save_graph keeps it in the ",
               kKilnDomain, " domain");
        // cond makes its merges one after another: adjacent merges on one predicate are one
        // cond, one If with an output per result, so the branches' shared work runs once.
        std::vector<std::pair<const kd::Node*, const IfPlan*>> group{{n, &it->second}};
        while (i + 1 < nodes.size() && is_merge(nodes[i + 1])) {
          auto nx = plans.find(nodes[i + 1]);
          if (nx == plans.end() || !(nx->second.pred.node == it->second.pred.node &&
                                     nx->second.pred.index == it->second.pred.index))
            break;
          group.emplace_back(nx->first, &nx->second);
          ++i;
        }
        emit_if(group);
        continue;
      }
      node(n);
    }
  }

  void emit_if(const std::vector<std::pair<const kd::Node*, const IfPlan*>>& group) {
    const kd::Node* m0 = group[0].first;
    auto* node = gp_->add_node();
    node->set_op_type("If");
    node->add_input(name_of(group[0].second->pred));
    for (const auto& [m, plan] : group) node->add_output(str_cat(prefix_, m->id));
    for (int b = 1; b >= 0; --b) {
      auto* a = node->add_attribute();
      a->set_name(b ? "then_branch" : "else_branch");
      a->set_type(::onnx::AttributeProto::GRAPH);
      ::onnx::GraphProto* sub = a->mutable_g();
      sub->set_name(str_cat("kiln_if", m0->id, b ? "_then" : "_else"));
      Exporter child(sub, sess_, this, shared_);
      std::set<const kd::Node*> region;
      for (const auto& [m, plan] : group) {
        region.insert(plan->region[b].begin(), plan->region[b].end());
        for (const kd::Node* sw : plan->switches[b]) child.names_[{sw, b}] = name_of(sw->inputs[0]);
      }
      std::vector<const kd::Node*> ordered(region.begin(), region.end());
      std::sort(ordered.begin(), ordered.end(),
                [](const kd::Node* x, const kd::Node* y) { return x->id < y->id; });
      child.emit(ordered);
      for (const auto& [m, plan] : group) {
        const kd::ValueRef& v = plan->value[b];
        const std::string r = fresh();
        child.emit("Identity", {child.name_of(v)}, r);
        fill_type(sub->add_output(), r, v.node->outputs[v.index].dtype,
                  v.node->outputs[v.index].shape, &dyn_);
      }
    }
    for (const auto& [m, plan] : group) names_[{m, 0}] = str_cat(prefix_, m->id);
  }

  // while_loop(cond, body, vars) checks cond before each step; ONNX's Loop checks the body's
  // condition output after it. So the condition runs once on the initial vars before the Loop,
  // and the body graph computes the next vars, then the condition on them.
  void emit_loop(const kd::Node* n) {
    const kd::WhileBodyView b = kd::while_body_of(n->attrs);
    const size_t nv = b.var_ph.size();
    if (n->inputs.size() != nv + b.cap_ph.size())
      fail(kExp, n->label(), ": inputs do not match its body");
    const kd::ValueRef cond_ref = b.sub.value_of(b.cond_out, kExp);
    std::vector<kd::ValueRef> body_refs;
    for (const auto& t : b.body_out) body_refs.push_back(b.sub.value_of(t, kExp));
    auto bind_caps = [&](Exporter& e) {
      for (size_t k = 0; k < b.cap_ph.size(); ++k)
        e.names_[{b.sub.node_of(b.cap_ph[k], kExp), 0}] = name_of(n->inputs[nv + k]);
    };
    // The first check, here.
    Exporter first(gp_, sess_, this, shared_);
    for (size_t k = 0; k < nv; ++k)
      first.names_[{b.sub.node_of(b.var_ph[k], kExp), 0}] = name_of(n->inputs[k]);
    bind_caps(first);
    first.emit(needed(b.sub, {cond_ref}));
    const std::string cond0 = first.name_of(cond_ref);

    auto* loop = gp_->add_node();
    loop->set_op_type("Loop");
    loop->add_input("");  // no trip count: the condition ends it
    loop->add_input(cond0);
    for (size_t k = 0; k < nv; ++k) loop->add_input(name_of(n->inputs[k]));
    auto* a = loop->add_attribute();
    a->set_name("body");
    a->set_type(::onnx::AttributeProto::GRAPH);
    ::onnx::GraphProto* body = a->mutable_g();
    body->set_name(str_cat("kiln_loop", n->id));
    const std::string iter = fresh(), cond_in = fresh();
    fill_type(body->add_input(), iter, Int64, Shape{}, &dyn_);
    fill_type(body->add_input(), cond_in, Bool, Shape{}, &dyn_);
    Exporter step(body, sess_, this, shared_);
    for (size_t k = 0; k < nv; ++k) {
      const kd::Node* ph = b.sub.node_of(b.var_ph[k], kExp);
      const std::string in = fresh();
      step.names_[{ph, 0}] = in;
      fill_type(body->add_input(), in, ph->outputs[0].dtype, ph->outputs[0].shape, &dyn_);
    }
    bind_caps(step);
    step.emit(needed(b.sub, body_refs));
    Exporter next(body, sess_, &step, shared_);
    for (size_t k = 0; k < nv; ++k)
      next.names_[{b.sub.node_of(b.var_ph[k], kExp), 0}] = step.name_of(body_refs[k]);
    bind_caps(next);
    next.emit(needed(b.sub, {cond_ref}));
    const std::string cond_out = fresh();
    step.emit("Identity", {next.name_of(cond_ref)}, cond_out);
    fill_type(body->add_output(), cond_out, Bool, Shape{}, &dyn_);
    for (size_t k = 0; k < nv; ++k) {
      const kd::Node* ph = b.sub.node_of(b.var_ph[k], kExp);
      const std::string o = fresh();
      step.emit("Identity", {step.name_of(body_refs[k])}, o);
      fill_type(body->add_output(), o, ph->outputs[0].dtype, ph->outputs[0].shape, &dyn_);
    }
    for (size_t k = 0; k < nv; ++k) {
      const std::string o = str_cat(prefix_, n->id, "_", k);
      names_[{n, static_cast<int>(k)}] = o;
      loop->add_output(o);
    }
  }

  const std::string& name_of(const kd::ValueRef& v) {
    for (Exporter* e = this; e; e = e->parent_) {
      auto it = e->names_.find({v.node, v.index});
      if (it != e->names_.end()) return it->second;
    }
    if (is_switch(v.node))
      fail(kExp, "output ", v.index, " of ", v.node->label(),
           " is used outside a cond: a switch whose outputs do not meet in one merge has no "
           "standard ONNX form; save_graph keeps it in the ",
           kKilnDomain, " domain");
    fail(kExp, "output ", v.index, " of ", v.node->label(), " has no standard ONNX form");
  }
  std::string fresh() override { return str_cat("kiln_t", shared_->counter++); }
  std::string constant(const Tensor& t) override {
    const std::string n = fresh();
    fill_tensor(gp_->add_initializer(), t, n);
    return n;
  }
  std::string ints_const(const std::vector<int64_t>& v) override {
    Tensor t = empty(Shape{static_cast<int64_t>(v.size())}, Int64);
    std::copy(v.begin(), v.end(), t.data_ptr<int64_t>());
    return constant(t);
  }
  ::onnx::NodeProto* emit(const char* op, std::vector<std::string> ins, std::string out) override {
    auto* n = gp_->add_node();
    n->set_op_type(op);
    for (auto& i : ins) n->add_input(i);
    n->add_output(out);
    return n;
  }
  std::string extra_output(const kd::Node* n, int k) override {
    const std::string o = str_cat(prefix_, n->id, "_", k);
    names_[{n, k}] = o;
    return o;
  }

  void node(const kd::Node* n) {
    switch (n->kind) {
      case kd::NodeKind::Placeholder:
        if (names_.count({n, 0})) return;  // a body's placeholder, bound by its Loop
        if (parent_) fail(kExp, "placeholder '", n->name, "' inside a subgraph is not bound");
        names_[{n, 0}] = n->name;
        {
          int axis = 0;  // the dim fill_value_info asks a name for next
          const Shape& s = n->outputs[0].shape;
          od::fill_value_info(gp_->add_input(), n->name, n->outputs[0].dtype, s, [&] {
            while (axis < s.rank() && s[axis] >= 0) ++axis;
            const std::string key = str_cat(n->name, ":", axis++);
            const auto* dn = shared_->dim_names;
            if (dn)
              if (auto it = dn->find(key); it != dn->end()) return it->second;
            return str_cat("d", dyn_++);
          });
        }
        return;
      case kd::NodeKind::Variable:
        names_[{n, 0}] = n->name;
        fill_tensor(gp_->add_initializer(), sess_ ? sess_->variable(n->name) : n->value, n->name);
        return;
      case kd::NodeKind::Constant:
        names_[{n, 0}] = constant(n->value);
        return;
      case kd::NodeKind::Op:
        if (kd::is_while_op(n->op))
          emit_loop(n);
        else
          op(n);
        return;
    }
  }

  // The ONNX name of input k, cast to `dt` when Kiln's promotion gave it another dtype.
  std::string in_as(const kd::Node* n, size_t k, DType dt) override {
    const kd::ValueRef& v = n->inputs.at(k);
    const std::string& name = name_of(v);
    if (v.node->outputs[v.index].dtype == dt) return name;
    const std::string o = fresh();
    attr_i(emit("Cast", {name}, o), "to", od::onnx_from_dtype(dt));
    return o;
  }
  std::string in(const kd::Node* n, size_t k) override { return name_of(n->inputs.at(k)); }

  void op(const kd::Node* n) {
    const od::ExportRule* rule = od::find_export_rule(n->op);
    if (!rule)
      fail(kExp, "Kiln op '", n->op->name, "' has no standard ONNX form here; save_graph keeps it",
           " in the ", kKilnDomain, " domain");
    const std::string out = str_cat(prefix_, n->id);
    names_[{n, 0}] = out;
    rule->fn(*rule, *this, n, out);
  }

  ::onnx::GraphProto* gp_;
  const Session* sess_;
  Exporter* parent_;
  Shared own_;
  Shared* shared_;
  std::string prefix_;
  int& dyn_;
  std::map<std::pair<const kd::Node*, int>, std::string> names_;
};

}  // namespace

namespace {

::onnx::ModelProto export_model(const Graph& g, const NamedTensors& outputs, const Session* sess,
                                const std::map<std::string, std::string>* dim_names = nullptr) {
  if (outputs.empty()) fail(kExp, "no outputs to export");
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("kiln");
  m.set_producer_version("0.1");
  auto* os = m.add_opset_import();
  os->set_domain("");
  os->set_version(17);
  auto* gp = m.mutable_graph();
  gp->set_name("kiln_export");
  for (const auto& [name, t] : outputs)
    if (!t.is_symbolic()) fail(kExp, "output '", name, "' is not a symbolic tensor of the graph");
  Shared shared;
  shared.dim_names = dim_names;
  Exporter e(gp, sess, nullptr, &shared);
  e.run(g, outputs);
  return m;
}

}  // namespace

std::string export_onnx_bytes(const Graph& g, const NamedTensors& outputs, const Session* sess) {
  ::onnx::ModelProto m = export_model(g, outputs, sess);
  std::string bytes;
  if (!m.SerializeToString(&bytes)) fail(kExp, "the model does not serialize (over 2 GiB?)");
  return bytes;
}

void detail::fill_tensor(::onnx::TensorProto* p, const Tensor& t, const std::string& name) {
  Tensor c = contiguous(t);
  p->set_name(name);
  p->set_data_type(onnx_from_dtype(c.dtype()));
  for (int64_t d : c.shape()) p->add_dims(d);
  p->set_raw_data(std::string(static_cast<const char*>(c.raw_data()),
                              static_cast<size_t>(c.numel()) * dtype_size(c.dtype())));
}

void detail::fill_value_info(::onnx::ValueInfoProto* v, const std::string& name, DType dt,
                             const Shape& s, const std::function<std::string()>& dim_param) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx_from_dtype(dt));
  auto* sh = tt->mutable_shape();
  for (int64_t d : s) {
    auto* dim = sh->add_dim();
    if (d >= 0)
      dim->set_dim_value(d);
    else
      dim->set_dim_param(dim_param());
  }
}

void export_onnx(const std::string& path, const Graph& g, const NamedTensors& outputs,
                 const Session* sess, const SaveOptions& options) {
  ::onnx::ModelProto m = export_model(g, outputs, sess, &options.dim_names);
  od::write_model(m, path, options, kExp);
}

}  // namespace kiln::onnx
