// cond and while_loop. cond builds Switch/Merge dataflow (kiln/ops/control_flow.cpp) by
// capturing what each branch reads from outside it. while_loop is a structured `while` node: its
// cond and body are one subgraph run by a Session per iteration (the executor nests), and its
// gradient op `while_grad` runs the body's symbolic gradient backwards over the saved
// per-iteration loop vars. See docs/control_flow.md.
#include <deque>
#include <map>
#include <mutex>

#include "kiln/core/interrupt.h"
#include "kiln/exec/session.h"
#include "kiln/exec/while_body.h"
#include "kiln/graph/node.h"
#include "kiln/ops/op_util.h"

using namespace kiln::detail;

namespace kiln {
namespace {

using Key = std::pair<const Node*, int>;

Key key_of(const Tensor& t) { return {t.impl()->sym->node, t.impl()->sym->index}; }

// Restores the previous capture hook on scope exit (also when a branch function throws).
class CaptureScope {
 public:
  explicit CaptureScope(InputCapture* c) : prev_(set_input_capture(c)) {}
  ~CaptureScope() { set_input_capture(prev_); }
  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;

 private:
  InputCapture* prev_;
};

// ---- cond ----------------------------------------------------------------------------------

// One branch being built: a value made outside the branch is routed through switch(v, pred) to
// this branch's side, once per value. Nodes made inside the branch (ops only; constants are
// shared and always live) are used as they are.
class CondCapture : public InputCapture {
 public:
  CondCapture(InputCapture* parent, Tensor pred, int branch)
      : parent_(parent),
        pred_(std::move(pred)),
        branch_(branch),
        graph_(pred_.impl()->sym->graph),
        start_(static_cast<int>(graph_->nodes.size())) {}

  Tensor capture(const Tensor& t) override {
    const SymbolicValue& sv = *t.impl()->sym;
    if (sv.graph == graph_ && sv.node->id >= start_ && sv.node->kind == NodeKind::Op) return t;
    auto it = cache_.find(key_of(t));
    if (it != cache_.end()) return it->second;
    Tensor s;
    {
      // The switch itself belongs to the enclosing context, which captures t and pred in turn.
      CaptureScope scope(parent_);
      s = switch_(t, pred_)[static_cast<size_t>(branch_)];
    }
    cache_[key_of(t)] = s;
    return s;
  }

 private:
  InputCapture* parent_;
  Tensor pred_;
  int branch_;
  std::shared_ptr<GraphImpl> graph_;
  int start_;
  std::map<Key, Tensor> cache_;
};

void check_pred(const char* op, const Tensor& pred) {
  if (!pred.defined()) fail(op, "predicate is undefined");
  if (pred.dtype() != Bool)
    fail(op, "predicate must be a bool scalar, got ", pred.dtype(), " (shape ", pred.shape(), ")");
  if (pred.shape().is_static() && pred.numel() != 1)
    fail(op, "predicate must be a bool scalar, got shape ", pred.shape());
}

std::vector<Tensor> build_branch(const Tensor& pred, int branch,
                                 const std::function<std::vector<Tensor>()>& fn) {
  CondCapture ctx(input_capture(), pred, branch);
  std::vector<Tensor> rs;
  {
    CaptureScope scope(&ctx);
    rs = fn();
  }
  Graph g = Graph::of(pred);
  for (size_t k = 0; k < rs.size(); ++k) {
    if (!rs[k].defined())
      fail("cond", (branch ? "true" : "false"), " branch result ", k, " is undefined");
    // A result computed without any op of the branch (a constant or an outside value) must still
    // be gated by the predicate, so that the merge sees exactly one live input.
    Tensor r = rs[k].is_symbolic() ? rs[k] : g.constant(rs[k]);
    rs[k] = ctx.capture(r);
  }
  return rs;
}

}  // namespace

std::vector<Tensor> cond(const Tensor& pred, const std::function<std::vector<Tensor>()>& true_fn,
                         const std::function<std::vector<Tensor>()>& false_fn) {
  check_pred("cond", pred);
  if (!true_fn || !false_fn) fail("cond", "both branch functions must be given");
  // Dead results would need their shapes, which only running a branch gives.
  if (pred.is_dead())
    fail("cond",
         "the predicate is dead (it lies on the untaken side of an eager switch_); "
         "eagerly cond needs a live predicate");
  if (pred.is_concrete()) {
    if (pred.numel() != 1)
      fail("cond", "predicate must be a bool scalar, got shape ", pred.shape());
    // Eager: only the taken branch runs.
    return pred.item<bool>() ? true_fn() : false_fn();
  }
  Tensor p = pred;
  if (InputCapture* c = input_capture()) p = c->capture(p);
  std::vector<Tensor> t = build_branch(p, 1, true_fn);
  std::vector<Tensor> f = build_branch(p, 0, false_fn);
  if (t.size() != f.size())
    fail("cond", "true branch returned ", t.size(), " results, false branch ", f.size());
  std::vector<Tensor> out;
  for (size_t k = 0; k < t.size(); ++k) {
    if (t[k].dtype() != f[k].dtype())
      fail("cond", "branches disagree on the dtype of result ", k, ": true branch gives ",
           t[k].dtype(), t[k].shape(), ", false branch gives ", f[k].dtype(), f[k].shape());
    if (t[k].dim() != f[k].dim())
      fail("cond", "branches disagree on the rank of result ", k, ": true branch gives shape ",
           t[k].shape(), ", false branch gives ", f[k].shape());
    out.push_back(merge({f[k], t[k]})[0]);
  }
  return out;
}

Tensor cond(const Tensor& pred, const std::function<Tensor()>& true_fn,
            const std::function<Tensor()>& false_fn) {
  if (!true_fn || !false_fn) fail("cond", "both branch functions must be given");
  return cond(
      pred, std::function<std::vector<Tensor>()>([&] { return std::vector<Tensor>{true_fn()}; }),
      std::function<std::vector<Tensor>()>([&] { return std::vector<Tensor>{false_fn()}; }))[0];
}

// ---- while_loop ----------------------------------------------------------------------------

namespace {

// The subgraph of one while node: placeholders for the loop vars and for captured outer
// values, the cond and body results, and (built on the first gradients() through the node) the
// body's vector-Jacobian product as more nodes of the same subgraph.
struct WhileBody {
  Graph sub;
  std::vector<Tensor> var_ph, cap_ph;
  std::vector<TensorMeta> var_meta;
  Tensor cond_out;
  std::vector<Tensor> body_out;
  std::unique_ptr<Session> sess;
  std::vector<Tensor> cot_ph;  // cotangent of each float loop var's body result
  // The body's VJP, one per set of captured values that need a gradient (so values such as the
  // input sequence of an RNN get no gradient work).
  struct Vjp {
    std::vector<Tensor> fetch;            // d/d float vars, then d/d needed captures
    std::vector<int> var_slot, cap_slot;  // index into fetch, -1: no gradient
  };
  std::map<std::vector<int64_t>, Vjp> vjps;

  Session& session() {
    if (!sess) sess = std::make_unique<Session>(sub);
    return *sess;
  }
  Vjp& vjp(const std::vector<int64_t>& cap_needs);
};

// Bodies are referenced from the node's attributes by index: attributes stay plain values, so
// printing, hashing and copying nodes work unchanged. Bodies live as long as the process.
std::mutex g_bodies_mu;
std::deque<std::shared_ptr<WhileBody>> g_bodies;

int64_t add_body(std::shared_ptr<WhileBody> b) {
  std::lock_guard<std::mutex> lk(g_bodies_mu);
  g_bodies.push_back(std::move(b));
  return static_cast<int64_t>(g_bodies.size()) - 1;
}
WhileBody& body(int64_t id) {
  std::lock_guard<std::mutex> lk(g_bodies_mu);
  if (id < 0 || id >= static_cast<int64_t>(g_bodies.size())) fail("while", "no loop body #", id);
  return *g_bodies[static_cast<size_t>(id)];
}

// While building a body: values of any other graph become placeholders of the body graph (the
// outer values turn into inputs of the while node).
class WhileCapture : public InputCapture {
 public:
  explicit WhileCapture(WhileBody& b) : b_(b) {}
  Tensor capture(const Tensor& t) override {
    if (t.impl()->sym->graph == b_.sub.impl()) return t;
    auto it = cache_.find(key_of(t));
    if (it != cache_.end()) return it->second;
    Tensor ph =
        b_.sub.placeholder("capture" + std::to_string(b_.cap_ph.size()), t.dtype(), t.shape());
    b_.cap_ph.push_back(ph);
    outer.push_back(t);
    cache_[key_of(t)] = ph;
    return ph;
  }
  std::vector<Tensor> outer;

 private:
  WhileBody& b_;
  std::map<Key, Tensor> cache_;
};

Shape drop_first(const Shape& s) {
  Shape r;
  for (int64_t d = 1; d < s.rank(); ++d) r.push_back(s[d]);
  return r;
}

MetaList while_infer(std::span<const Tensor> in, const Attrs& a) {
  WhileBody& b = body(a.i(0));
  size_t n = b.var_ph.size();
  if (in.size() != n + b.cap_ph.size())
    fail("while", "expected ", n + b.cap_ph.size(), " inputs, got ", in.size());
  MetaList m;
  for (size_t k = 0; k < n; ++k) m.push_back(b.var_meta[k]);
  for (size_t k = 0; k < n; ++k) {  // the loop vars each iteration started from, stacked
    Shape s{Dim::any()};
    for (auto d : b.var_meta[k].shape) s.push_back(d);
    m.push_back(TensorMeta{b.var_meta[k].dtype, s});
  }
  return m;
}

TensorList while_run(std::span<const Tensor> in, const Attrs& a) {
  WhileBody& b = body(a.i(0));
  int64_t max_iter = a.i(1);
  size_t n = b.var_ph.size();
  Session& s = b.session();
  FeedDict feeds;
  for (size_t k = 0; k < n; ++k) feeds.push_back({b.var_ph[k], in[k]});
  for (size_t j = 0; j < b.cap_ph.size(); ++j) feeds.push_back({b.cap_ph[j], in[n + j]});
  std::vector<std::vector<Tensor>> hist(n);
  for (int64_t it = 0; max_iter < 0 || it < max_iter; ++it) {
    interruption_point("while");  // also where the body has no step of its own to poll
    Tensor c = s.run(b.cond_out, feeds);
    if (c.numel() != 1) fail("while", "cond must give one bool element, got shape ", c.shape());
    if (!c.item<bool>()) break;
    for (size_t k = 0; k < n; ++k) hist[k].push_back(feeds[k].second);
    std::vector<Tensor> next = s.run(b.body_out, feeds);
    for (size_t k = 0; k < n; ++k) {
      if (next[k].dtype() != in[k].dtype())
        fail("while", "body changed the dtype of loop var ", k, " from ", in[k].dtype(), " to ",
             next[k].dtype());
      feeds[k].second = next[k];
    }
  }
  TensorList out;
  for (size_t k = 0; k < n; ++k) out.push_back(feeds[k].second);
  for (size_t k = 0; k < n; ++k) {
    if (hist[k].empty()) {
      Shape s0{0};
      for (auto d : in[k].shape()) s0.push_back(d);
      out.push_back(empty(s0, in[k].dtype()));
    } else {
      out.push_back(stack(hist[k], 0));
    }
  }
  return out;
}

WhileBody::Vjp& WhileBody::vjp(const std::vector<int64_t>& cap_needs) {
  auto it = vjps.find(cap_needs);
  if (it != vjps.end()) return it->second;
  CaptureScope none(nullptr);  // the gradient subgraph captures nothing
  if (cot_ph.empty())
    for (size_t k = 0; k < var_ph.size(); ++k)
      if (is_floating(var_meta[k].dtype))
        cot_ph.push_back(
            sub.placeholder("cotangent" + std::to_string(k), var_meta[k].dtype, var_meta[k].shape));
  std::vector<Tensor> ys, xs;
  for (size_t k = 0; k < var_ph.size(); ++k)
    if (is_floating(var_meta[k].dtype)) {
      ys.push_back(body_out[k]);
      xs.push_back(var_ph[k]);
    }
  for (size_t j = 0; j < cap_ph.size(); ++j)
    if (cap_needs[j]) xs.push_back(cap_ph[j]);
  std::vector<Tensor> gs;
  if (!ys.empty() && !xs.empty()) gs = gradients(ys, xs, cot_ph);
  Vjp v;
  size_t j = 0;
  auto take = [&](const Tensor& x) {
    Tensor g = j < gs.size() ? gs[j] : Tensor();
    ++j;
    v.fetch.push_back(g.defined() ? g : zeros_like(x));
    return static_cast<int>(v.fetch.size()) - 1;
  };
  for (size_t k = 0; k < var_ph.size(); ++k)
    v.var_slot.push_back(is_floating(var_meta[k].dtype) ? take(var_ph[k]) : -1);
  for (size_t c = 0; c < cap_ph.size(); ++c)
    v.cap_slot.push_back(cap_needs[c] ? take(cap_ph[c]) : -1);
  return vjps.emplace(cap_needs, std::move(v)).first->second;
}

// Inputs: the stacked loop vars (n), the captured values (m), the gradient of each final loop
// var (n; ignored for non-float vars). Outputs: the gradient of each initial loop var (n), then
// of each captured value (m); a 0-d zero where the dtype is not floating.
MetaList while_grad_infer(std::span<const Tensor> in, const Attrs& a) {
  WhileBody& b = body(a.i(0));
  size_t n = b.var_ph.size(), m = b.cap_ph.size();
  if (in.size() != 2 * n + m)
    fail("while_grad", "expected ", 2 * n + m, " inputs, got ", in.size());
  MetaList out;
  for (size_t k = 0; k < n; ++k)
    out.push_back(is_floating(b.var_meta[k].dtype)
                      ? TensorMeta{b.var_meta[k].dtype, drop_first(in[k].shape())}
                      : TensorMeta{Float32, Shape{}});
  const auto& needs = a.ints(1);
  if (needs.size() != m) fail("while_grad", "needs ", m, " capture flags, got ", needs.size());
  for (size_t j = 0; j < m; ++j)
    out.push_back(needs[j] ? TensorMeta{in[n + j].dtype(), in[n + j].shape()}
                           : TensorMeta{Float32, Shape{}});
  return out;
}

TensorList while_grad_run(std::span<const Tensor> in, const Attrs& a) {
  WhileBody& b = body(a.i(0));
  const WhileBody::Vjp& v = b.vjp(a.ints(1));
  size_t n = b.var_ph.size(), m = b.cap_ph.size();
  Session& s = b.session();
  int64_t trips = in[0].size(0);
  std::vector<Tensor> g(n), gc(m);
  for (size_t k = 0; k < n; ++k)
    if (v.var_slot[k] >= 0) g[k] = in[n + m + k];
  FeedDict feeds;
  for (size_t k = 0; k < n; ++k) feeds.push_back({b.var_ph[k], Tensor()});
  for (size_t j = 0; j < m; ++j) feeds.push_back({b.cap_ph[j], in[n + j]});
  size_t cot0 = feeds.size();
  for (size_t k = 0, c = 0; k < n; ++k)
    if (v.var_slot[k] >= 0) feeds.push_back({b.cot_ph[c++], Tensor()});
  // Backwards over the iterations: each step is the body's VJP at that iteration's inputs.
  for (int64_t t = trips - 1; t >= 0; --t) {
    interruption_point("while_grad");
    for (size_t k = 0; k < n; ++k) feeds[k].second = in[k].select(0, t);
    for (size_t k = 0, c = 0; k < n; ++k)
      if (v.var_slot[k] >= 0) feeds[cot0 + c++].second = g[k];
    std::vector<Tensor> r = s.run(v.fetch, feeds);
    for (size_t k = 0; k < n; ++k)
      if (v.var_slot[k] >= 0) g[k] = r[static_cast<size_t>(v.var_slot[k])];
    for (size_t j = 0; j < m; ++j)
      if (v.cap_slot[j] >= 0) {
        const Tensor& x = r[static_cast<size_t>(v.cap_slot[j])];
        gc[j] = gc[j].defined() ? add(gc[j], x) : x;
      }
  }
  TensorList out;
  for (size_t k = 0; k < n; ++k) out.push_back(v.var_slot[k] >= 0 ? g[k] : scalar_tensor(0.0));
  for (size_t j = 0; j < m; ++j) {
    if (v.cap_slot[j] < 0)
      out.push_back(scalar_tensor(0.0));
    else
      out.push_back(gc[j].defined() ? gc[j] : zeros(in[n + j].shape(), in[n + j].dtype()));
  }
  return out;
}

TensorList while_grad_rule(const GradCtx& c);

const OpDef& kWhile = def_op(
    {.name = "while",
     .num_inputs = -1,
     .num_outputs = -1,
     .attr_names = {"body", "max_iterations"},
     .traits = kControlFlow,
     .infer = while_infer,
     .view = while_run,
     .grad = while_grad_rule,
     .doc = "structured loop: runs its body subgraph while its cond subgraph is true; outputs the "
            "final loop vars and, for gradients, the loop vars of every iteration stacked"});

const OpDef& kWhileGrad = def_op(
    {.name = "while_grad",
     .num_inputs = -1,
     .num_outputs = -1,
     .attr_names = {"body", "capture_needs"},
     .traits = kControlFlow,
     .infer = while_grad_infer,
     .view = while_grad_run,
     .doc = "gradient of a while node: the body's vector-Jacobian product run over the saved "
            "iterations in reverse"});

TensorList while_grad_rule(const GradCtx& c) {
  WhileBody& b = body(c.attrs.i(0));
  size_t n = b.var_ph.size(), m = b.cap_ph.size();
  std::vector<int64_t> needs;
  for (size_t j = 0; j < m; ++j) needs.push_back(c.need(n + j) && is_floating(c.in(n + j).dtype()));
  const WhileBody::Vjp& v = b.vjp(needs);
  TensorList ins;
  for (size_t k = 0; k < n; ++k) ins.push_back(c.out(n + k));
  for (size_t j = 0; j < m; ++j) ins.push_back(c.in(n + j));
  for (size_t k = 0; k < n; ++k)
    ins.push_back(c.g(k).defined() ? c.g(k) : c.out(k));  // non-float vars: ignored placeholder
  TensorList g =
      call(kWhileGrad, std::span<const Tensor>(ins.data(), ins.size()), {c.attrs[0], needs});
  TensorList out;
  for (size_t k = 0; k < n; ++k) out.push_back(v.var_slot[k] >= 0 ? g[k] : Tensor());
  for (size_t j = 0; j < m; ++j) out.push_back(v.cap_slot[j] >= 0 ? g[n + j] : Tensor());
  return out;
}

bool compatible(const Shape& a, const Shape& b) {
  if (a.rank() != b.rank()) return false;
  for (int64_t d = 0; d < a.rank(); ++d)
    if (a[d] >= 0 && b[d] >= 0 && a[d] != b[d]) return false;
  return true;
}

std::vector<Tensor> build_while(
    const std::function<Tensor(const std::vector<Tensor>&)>& cond_fn,
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& body_fn,
    const std::vector<Tensor>& vars, const WhileOptions& options) {
  auto b = std::make_shared<WhileBody>();
  for (size_t k = 0; k < vars.size(); ++k) {
    b->var_ph.push_back(
        b->sub.placeholder("var" + std::to_string(k), vars[k].dtype(), vars[k].shape()));
    b->var_meta.push_back(TensorMeta{vars[k].dtype(), vars[k].shape()});
  }
  WhileCapture cap(*b);
  Tensor c;
  std::vector<Tensor> r;
  {
    CaptureScope scope(&cap);
    c = cond_fn(b->var_ph);
    r = body_fn(b->var_ph);
  }
  // Results that are concrete or from another graph become nodes of the body graph.
  auto own = [&](const Tensor& t) { return t.is_symbolic() ? cap.capture(t) : b->sub.constant(t); };
  if (!c.defined()) fail("while_loop", "cond_fn returned an undefined tensor");
  check_pred("while_loop", c);
  b->cond_out = own(c);
  if (r.size() != vars.size())
    fail("while_loop", "body_fn returned ", r.size(), " values for ", vars.size(), " loop vars");
  for (size_t k = 0; k < r.size(); ++k) {
    if (!r[k].defined()) fail("while_loop", "body_fn result ", k, " is undefined");
    if (r[k].dtype() != vars[k].dtype() || !compatible(r[k].shape(), vars[k].shape()))
      fail("while_loop", "body_fn result ", k, " is ", r[k].dtype(), r[k].shape(), " but loop var ",
           k, " is ", vars[k].dtype(), vars[k].shape(),
           "; a loop var must keep its dtype and shape");
    b->body_out.push_back(own(r[k]));
  }
  std::vector<Tensor> ins = vars;
  for (const auto& o : cap.outer) ins.push_back(o);
  int64_t id = add_body(b);
  TensorList o =
      call(kWhile, std::span<const Tensor>(ins.data(), ins.size()), {id, options.max_iterations});
  return std::vector<Tensor>(o.begin(), o.begin() + static_cast<std::ptrdiff_t>(vars.size()));
}

}  // namespace

namespace detail {
bool is_while_op(const OpDef* op) { return op == &kWhile; }
bool is_while_grad_op(const OpDef* op) { return op == &kWhileGrad; }
WhileBodyView while_body_of(const Attrs& a) {
  WhileBody& b = body(a.i(0));
  return WhileBodyView{b.sub, b.var_ph, b.cap_ph, b.cond_out, b.body_out, a.i(1)};
}
}  // namespace detail

std::vector<Tensor> while_loop(
    const std::function<Tensor(const std::vector<Tensor>&)>& cond_fn,
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& body_fn,
    const std::vector<Tensor>& loop_vars, const WhileOptions& options) {
  if (!cond_fn || !body_fn) fail("while_loop", "cond_fn and body_fn must be given");
  if (loop_vars.empty()) fail("while_loop", "needs at least one loop var");
  bool symbolic = false;
  for (size_t k = 0; k < loop_vars.size(); ++k) {
    if (!loop_vars[k].defined()) fail("while_loop", "loop var ", k, " is undefined");
    symbolic = symbolic || loop_vars[k].is_symbolic();
  }
  if (symbolic) return build_while(cond_fn, body_fn, loop_vars, options);
  // Eager: a plain loop; autograd records every iteration.
  std::vector<Tensor> vars = loop_vars;
  for (int64_t it = 0; options.max_iterations < 0 || it < options.max_iterations; ++it) {
    interruption_point("while_loop");
    Tensor c = cond_fn(vars);
    if (!c.defined()) fail("while_loop", "cond_fn returned an undefined tensor");
    if (c.is_dead())
      fail("while_loop", "cond_fn returned a dead tensor (a loop var or a value it read lies on ",
           "the untaken side of an eager switch_); eagerly the loop needs a live condition");
    // A cond that reads a graph value makes this a graph loop (concrete vars become constants).
    if (c.is_symbolic()) {
      if (it > 0) fail("while_loop", "cond_fn became symbolic after ", it, " eager iterations");
      Graph g = Graph::of(c);
      std::vector<Tensor> gv;
      for (const auto& v : vars) gv.push_back(g.constant(v));
      return build_while(cond_fn, body_fn, gv, options);
    }
    check_pred("while_loop", c);
    if (c.numel() != 1)
      fail("while_loop", "cond_fn must return a bool scalar, got shape ", c.shape());
    if (!c.item<bool>()) break;
    std::vector<Tensor> next = body_fn(vars);
    if (next.size() != vars.size())
      fail("while_loop", "body_fn returned ", next.size(), " values for ", vars.size(),
           " loop vars");
    for (size_t k = 0; k < next.size(); ++k) {
      if (!next[k].defined()) fail("while_loop", "body_fn result ", k, " is undefined");
      if (next[k].dtype() != vars[k].dtype())
        fail("while_loop", "body_fn result ", k, " is ", next[k].dtype(), next[k].shape(),
             " but loop var ", k, " is ", vars[k].dtype(), vars[k].shape());
    }
    vars = std::move(next);
  }
  return vars;
}

}  // namespace kiln
