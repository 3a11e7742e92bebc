// The JIT engine: guard checks, tracing with graph breaks into a trace tree of pieces, replay of
// compiled pieces over one slot table, dynamic-dim recompiles, the recompile budget, verify
// mode and explain(). Gradients through a compiled call are jit_call.cpp's.
#include "kiln/jit/jit.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "kiln/autograd/autograd.h"
#include "kiln/dispatch/dispatch.h"
#include "kiln/exec/session.h"
#include "kiln/graph/graph.h"
#include "kiln/graph/node.h"
#include "kiln/jit/capture.h"
#include "kiln/jit/guard_key.h"
#include "kiln/jit/version.h"
#include "kiln/nn/module.h"
#include "kiln/ops/ops.h"
#include "kiln/passes/passes.h"

using namespace kiln::detail;

namespace kiln::detail::jit_engine {
namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool env_has(const char* var, const char* word) {
  const char* e = std::getenv(var);
  if (!e) return false;
  std::string s(e);
  return s == "1" || s == "all" || s.find(word) != std::string::npos;
}

// ---- compiled pieces ------------------------------------------------------------------------

struct BreakRec {
  ValueRef v;
  Tensor value;
  int cut = 0;
  std::string what, where;
};

// The trace in progress on this thread (host reads consult it).
struct TraceCtx {
  Graph* g;
  FeedDict feeds;
  std::vector<BreakRec> breaks;
  // Module buffers the traced code gave new values: the member and its value before the trace.
  std::vector<std::pair<Tensor*, Tensor>> state_writes;
  // The trace's placeholders in argument order, and the size comparisons host code read.
  std::vector<Tensor> placeholders;
  std::vector<ShapeGuard> guards;
};
thread_local TraceCtx* t_trace = nullptr;

// A trace found a module buffer the function assigns that is not yet an input: the call is
// traced again with it fed (its old value would otherwise be a constant of the trace).
struct NewStateSlots {};

// nn::assign_buffer under a trace: the new (symbolic) value stands in the buffer while tracing
// goes on, and is logged so that the trace outputs it and puts the old value back when it ends.
bool on_buffer_write(Tensor& slot, const Tensor& value_in) {
  TraceCtx* c = t_trace;
  if (!c) return false;
  // A concrete new value (num_batches_tracked + 1 from concrete ops) is a write of state too:
  // the next trace has the buffer as an input and computes it.
  Tensor value = value_in;
  if (value.is_concrete() && slot.defined() && slot.is_concrete()) value = c->g->constant(value);
  if (!value.is_symbolic() || !(Graph::of(value) == *c->g)) return false;
  for (auto& w : c->state_writes)
    if (w.first == &slot) {
      slot = value;
      return true;
    }
  // A traced value put there by the caller (ParameterSwap) is the caller's to collect.
  if (slot.defined() && slot.is_symbolic()) return false;
  c->state_writes.push_back({&slot, slot});
  slot = value;
  return true;
}

Tensor on_host_read(const Tensor& t, const char* what, const std::string& where) {
  TraceCtx* c = t_trace;
  if (!c || !t.is_symbolic() || !(Graph::of(t) == *c->g))
    fail(what, "value is unknown while building a graph; fetch it with Session::run");
  CaptureScope::Pause pause;
  // A comparison of symbolic sizes: a guard on the argument shapes, not a break.
  const ValueRef vr = c->g->value_of(t);
  if (shape_only(vr)) {
    std::vector<Tensor> flat;
    for (const auto& f : c->feeds) flat.push_back(f.second);
    ShapeGuard probe =
        make_shape_guard(*c->g->impl(), vr, scalar_tensor(0, Int64), c->placeholders, what, where);
    Tensor v = eval_shape_guard(probe, flat);
    c->guards.push_back(make_shape_guard(*c->g->impl(), vr, v, c->placeholders, what, where));
    return v;
  }
  // Graph break: compile and run the piece so far to produce the value (nothing of it captured).
  Session s(*c->g);
  Tensor v = s.run(t, c->feeds);
  BreakRec b;
  b.v = c->g->value_of(t);
  b.value = v.clone();
  b.cut = static_cast<int>(c->g->nodes().size());
  b.what = what;
  b.where = where;
  c->breaks.push_back(b);
  return v;
}

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

}  // namespace

// ---- engine ---------------------------------------------------------------------------------

struct Engine::Impl {
  // Calls with concrete arguments, stats() and explain() hold it: the versions, their slot
  // tables and feeds, the stats and logs are shared by every call. Recursive: fn may call its
  // own jitted function (eagerly, on a fallback) on the same thread.
  mutable std::recursive_mutex mu;
  JitOptions opts;
  std::vector<std::unique_ptr<Version>> versions;
  Stats stats;
  std::vector<std::string> recompile_log, break_log;
  bool warned_fallback = false;
  // Module buffers fn assigns (nn::assign_buffer), fed as arguments after the user's own
  // user_arity ones and written back from the outputs after num_user_outputs.
  std::vector<Tensor*> state_slots;
  size_t user_arity = 0;
  // Captured tensors fed as inputs after the state slots (capture.h): parameters and buffers
  // fn reads without taking them as arguments, held by identity.
  std::vector<Tensor> captures;
  std::string fallback_reason;
  bool fallback_unstable = false;  // eager because captured state changed on every trace
  bool verify = env_has("KILN_JIT_VERIFY", "1");
  bool log_recompiles = env_has("KILN_JIT_LOG", "recompiles");
  bool log_breaks = env_has("KILN_JIT_LOG", "breaks");

  using Fn = std::function<std::vector<Tensor>(const std::vector<Arg>&)>;

  std::vector<Tensor> run_eager(const std::vector<Arg>& args, const Fn& fn) { return fn(args); }

  // Traces fn into `v` (adding a path to its trace tree). Raises what the trace raised; the
  // caller decides on the fallback. A function that assigns module buffers makes `v` eager-only.
  void trace(Version& v, const std::vector<Arg>& args, const Fn& fn) {
    double t0 = now_ms();
    Graph g;
    TraceCtx ctx{&g, {}, {}};
    std::vector<Arg> sym = args;
    std::vector<Tensor> placeholders;
    std::vector<std::vector<int>> ph_index(args.size());
    int pc = 0;
    auto make_ph = [&](const Tensor& t, const Shape& s) {
      Tensor p = g.placeholder(str_cat("arg", pc++), t.dtype(), s);
      // Dynamic dims keep their sizes as hints: the symbolic sizes host code sees (SymInt)
      // carry them, and a comparison of them is evaluated on them.
      if (!s.is_static()) {
        g.impl()->track_hints = true;
        g.node_of(p)->hints = {t.shape()};
      }
      ctx.feeds.push_back({p, t});
      placeholders.push_back(p);
      return p;
    };
    for (size_t i = 0; i < args.size(); ++i) {
      const ArgKey& ak = v.key[i];
      if (args[i].kind == Arg::kTensor) {
        sym[i].t = make_ph(args[i].t, ak.shapes[0]);
      } else if (args[i].kind == Arg::kTensorList) {
        for (size_t t = 0; t < args[i].ts.size(); ++t)
          sym[i].ts[t] = make_ph(args[i].ts[t], ak.shapes[t]);
      } else if (ak.runtime) {
        Tensor val = scalar_tensor(args[i].v, Float32);
        sym[i].kind = Arg::kTensor;
        sym[i].t = make_ph(val, Shape{});
      }
    }
    // Module buffers fed as inputs: the trailing arguments past the function's own.
    for (size_t j = 0; j < state_slots.size() && user_arity + j < args.size(); ++j) {
      Tensor* slot = state_slots[j];
      ctx.state_writes.push_back({slot, *slot});
      *slot = sym[user_arity + j].t;
    }
    ctx.placeholders = placeholders;
    const size_t cap_base = user_arity + state_slots.size();
    std::vector<std::pair<Tensor, Tensor>> known;
    for (size_t j = 0; j < captures.size() && cap_base + j < args.size(); ++j)
      known.push_back({captures[j], sym[cap_base + j].t});
    std::vector<Tensor> outs;
    bool new_slots = false;
    {
      TraceCtx* prev = t_trace;
      t_trace = &ctx;
      HostReadHook prev_hook = set_thread_host_read_hook(&on_host_read);
      nn::BufferWriteHook prev_write = nn::set_buffer_write_hook(&on_buffer_write);
      // Whatever happens, hooks are restored and every buffer gets its concrete value back.
      struct Restore {
        TraceCtx* prev;
        HostReadHook prev_hook;
        nn::BufferWriteHook prev_write;
        TraceCtx& ctx;
        ~Restore() {
          t_trace = prev;
          set_thread_host_read_hook(prev_hook);
          nn::set_buffer_write_hook(prev_write);
          for (auto& [slot, old] : ctx.state_writes) *slot = old;
        }
      } restore{prev, prev_hook, prev_write, ctx};
      CaptureScope scope(g, known, /*lazy=*/false);
      outs = fn(sym);
      scope.drop_temporaries();
      for (const auto& t : scope.found) {
        captures.push_back(t);
        new_slots = true;
      }
      for (auto& [slot, old] : ctx.state_writes)
        if (std::find(state_slots.begin(), state_slots.end(), slot) == state_slots.end()) {
          state_slots.push_back(slot);
          new_slots = true;
        }
      v.num_user_outputs = outs.size();
      for (Tensor* slot : state_slots) outs.push_back(*slot);
      v.num_state_outputs = state_slots.size();
      v.capture_writes.clear();
      for (const auto& w : scope.written)
        for (size_t j = 0; j < captures.size(); ++j)
          if (captures[j].is_same(w)) {
            v.capture_writes.push_back(j);
            outs.push_back(scope.value.at(w.impl()));
          }
    }
    if (new_slots) throw NewStateSlots{};
    for (auto& sg : ctx.guards) v.shape_guards.push_back(std::move(sg));
    v.fn = fn;
    v.user_arity = user_arity;
    v.state_slots = state_slots;
    for (auto& o : outs) {
      if (!o.defined()) fail("jit", "fn returned an undefined tensor");
      if (!o.is_symbolic()) o = g.constant(o);
    }
    stats.graph_breaks += static_cast<int64_t>(ctx.breaks.size());
    for (const auto& b : ctx.breaks) {
      std::string line = str_cat(b.where, ": ", b.what,
                                 "() of a traced value -> graph break, guard on its value (",
                                 value_str(b.value), ")");
      if (std::find(break_log.begin(), break_log.end(), line) == break_log.end())
        break_log.push_back(line);
      if (log_breaks) std::cerr << "[jit] " << opts.name << ": " << line << "\n";
    }

    bool any_grad = false;
    for (const auto& ak : v.key)
      for (bool gr : ak.grads) any_grad = any_grad || gr;
    if (any_grad) {
      if (ctx.breaks.empty()) {
        build_grad(v, g, placeholders, outs);
      } else if (opts.heal_breaks) {
        // The tree is kept to be healed; until then calls run eagerly.
        if (!v.grad_tree && !v.root)
          break_log.push_back(
              "graph break under autograd: eager until its bool breaks are traced both ways "
              "and healed");
        v.grad_tree = true;
      } else {
        v.eager_only = true;
        v.eager_reason = "graph break under autograd";
        break_log.push_back("graph break under autograd: this version runs eagerly");
      }
    }
    if (!v.eager_only) {
      if (ctx.breaks.empty() && !v.root) {
        add_single(v, g, placeholders, outs);
      } else {
        add_path(v, g, ctx, placeholders, outs);
        if (opts.heal_breaks) heal(v);
      }
    }
    v.compile_ms += now_ms() - t0;
    ++stats.compiles;
  }

  void build_grad(Version& v, Graph& g, const std::vector<Tensor>& phs,
                  const std::vector<Tensor>& outs) {
    v.with_grad = true;
    v.graph = g;
    v.g_inputs = phs;
    v.g_outputs = outs;
    const size_t n_fwd = g.nodes().size();
    std::vector<Tensor> gys, diff_outs;
    for (size_t k = 0; k < outs.size(); ++k) {
      // Past the function's own outputs come the new values of state it writes (BatchNorm's
      // running statistics, computed under no_grad): no gradient flows back through them.
      if (is_floating(outs[k].dtype()) && k < v.num_user_outputs) {
        Tensor gy = g.placeholder(str_cat("grad_out", k), outs[k].dtype(), outs[k].shape());
        v.g_out_grads.push_back(gy);
        diff_outs.push_back(outs[k]);
        gys.push_back(gy);
      } else {
        v.g_out_grads.emplace_back();
      }
    }
    std::vector<Tensor> xs;
    for (const auto& p : phs) xs.push_back(p);
    v.g_in_grads =
        diff_outs.empty() ? std::vector<Tensor>(phs.size()) : gradients(diff_outs, xs, gys);
    v.bwd_session = std::make_unique<Session>(g);
    // A dead output (on the untaken side of a Switch) feeds a dead gradient (jit_call.cpp).
    v.bwd_session->set_dead_passthrough(true);
    for (const auto& n : g.nodes())
      if (n->kind == NodeKind::Op && n->op->has(kRandom)) v.has_random = true;
    if (opts.save_activations) {
      try {
        build_saved_backward(v, g, n_fwd);
      } catch (const Error&) {
        v.saved_ok = false;  // the recomputing backward serves
      }
    }
  }

  // The backward on its own (nodes gradients() added, from n_fwd on), reading the forward values
  // it needs as placeholders; v.saved lists those values in the forward graph.
  static void build_saved_backward(Version& v, Graph& g, size_t n_fwd) {
    const auto& nodes = g.nodes();
    // A forward with Switch/Merge (a cond, a healed break) leaves the saved values of the
    // untaken branch dead: both sessions pass them through as dead tensors, and the backward's
    // own Switch/Merge skip the steps that would read them.
    bool control = false;
    for (size_t id = 0; id < n_fwd; ++id)
      control = control || (nodes[id]->kind == NodeKind::Op && nodes[id]->op->has(kControlFlow));
    std::vector<char> need(nodes.size(), 0);
    std::vector<const Node*> stack;
    for (const auto& t : v.g_in_grads)
      if (t.defined()) stack.push_back(g.node_of(t));
    std::vector<ValueRef> saved;
    auto note_saved = [&](ValueRef r) {
      if (std::find(saved.begin(), saved.end(), r) == saved.end()) saved.push_back(r);
    };
    while (!stack.empty()) {
      const Node* n = stack.back();
      stack.pop_back();
      if (need[static_cast<size_t>(n->id)]) continue;
      need[static_cast<size_t>(n->id)] = 1;
      if (n->kind != NodeKind::Op) continue;
      for (const auto& in : n->inputs) {
        if (static_cast<size_t>(in.node->id) >= n_fwd) {
          stack.push_back(in.node);
        } else if (in.node->kind == NodeKind::Op) {
          note_saved(in);
        }
      }
    }
    // A gradient that is a forward value itself (d(x * c)/dx with c a traced value) is saved too.
    for (const auto& t : v.g_in_grads)
      if (t.defined()) {
        ValueRef r = g.value_of(t);
        if (static_cast<size_t>(r.node->id) < n_fwd && r.node->kind == NodeKind::Op) note_saved(r);
      }
    Graph bg;
    std::unordered_map<const Node*, std::vector<Tensor>> made;
    auto ph_like = [&](const std::string& name, ValueRef r) {
      const TensorMeta& m = r.node->outputs[static_cast<size_t>(r.index)];
      return bg.placeholder(name, m.dtype, m.shape);
    };
    v.s_inputs.clear();
    v.s_out_grads.clear();
    v.s_saved.clear();
    v.saved.clear();
    for (size_t k = 0; k < v.g_inputs.size(); ++k) {
      ValueRef r = g.value_of(v.g_inputs[k]);
      v.s_inputs.push_back(ph_like(str_cat("in", k), r));
      made[r.node] = {v.s_inputs.back()};
    }
    for (size_t k = 0; k < v.g_out_grads.size(); ++k) {
      if (!v.g_out_grads[k].defined()) {
        v.s_out_grads.emplace_back();
        continue;
      }
      ValueRef r = g.value_of(v.g_out_grads[k]);
      v.s_out_grads.push_back(ph_like(str_cat("grad_out", k), r));
      made[r.node] = {v.s_out_grads.back()};
    }
    std::map<std::pair<const Node*, int>, Tensor> saved_ph;
    for (size_t i = 0; i < saved.size(); ++i) {
      v.s_saved.push_back(ph_like(str_cat("saved", i), saved[i]));
      saved_ph[{saved[i].node, saved[i].index}] = v.s_saved.back();
      v.saved.push_back(g.tensor_of(saved[i]));
    }
    auto value = [&](ValueRef r) -> Tensor {
      if (auto it = saved_ph.find({r.node, r.index}); it != saved_ph.end()) return it->second;
      if (r.node->kind == NodeKind::Constant) return bg.constant(r.node->value);
      auto it = made.find(r.node);
      if (it == made.end())
        fail("jit", "internal: the backward reads a forward value that is not saved");
      return it->second[static_cast<size_t>(r.index)];
    };
    for (size_t id = n_fwd; id < nodes.size(); ++id) {
      const Node& n = *nodes[id];
      if (!need[id] || n.kind != NodeKind::Op) continue;
      TensorList ins;
      for (const auto& in : n.inputs) ins.push_back(value(in));
      TensorList o =
          call_node(*n.op, std::span<const Tensor>(ins.data(), ins.size()), n.attrs, n.patches);
      made[&n] = std::vector<Tensor>(o.begin(), o.end());
    }
    v.s_in_grads.clear();
    for (const auto& t : v.g_in_grads)
      v.s_in_grads.push_back(t.defined() ? value(g.value_of(t)) : Tensor());
    v.bwd_graph = bg;
    v.bwd_saved_session = std::make_unique<Session>(bg);
    v.fwd_saved_session = std::make_unique<Session>(g);
    v.bwd_saved_session->set_dead_passthrough(true);
    v.fwd_saved_session->set_dead_passthrough(control);
    v.saved_ok = true;
  }

  // First slot of each node's outputs (node order), growing the version's slot table to fit.
  static std::vector<int> slot_bases(Version& v, const std::vector<std::unique_ptr<Node>>& nodes,
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
  static void assign_arg_slots(Version& v, const std::vector<Tensor>& phs, SlotOf slot_of) {
    v.arg_slots.clear();
    size_t p = 0;
    for (size_t i = 0; i < v.key.size(); ++i) {
      std::vector<int> s;
      size_t n = v.key[i].kind == Arg::kTensor || v.key[i].runtime ? 1 : v.key[i].shapes.size();
      if (v.key[i].kind == Arg::kScalar || v.key[i].kind == Arg::kBool)
        n = v.key[i].runtime ? 1 : 0;
      for (size_t t = 0; t < n; ++t) s.push_back(slot_of(phs[p++]));
      v.arg_slots.push_back(s);
    }
  }

  // A trace without graph breaks gets the full optimizer (const_fold, CSE, DCE) and frees each
  // intermediate after its last use.
  void add_single(Version& v, Graph& g, const std::vector<Tensor>& phs,
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
    // KILN_JIT_SESSION=0 keeps the interpreter loop below (to measure what the Session buys).
    static const bool use_session = [] {
      const char* e = std::getenv("KILN_JIT_SESSION");
      return !(e && std::string(e) == "0");
    }();
    bool plain = use_session;
    for (const auto& n : nodes)
      if (n->kind == NodeKind::Op && (n->op->has(kSideEffect) || n->op->has(kControlFlow)))
        plain = false;
    if (plain) {
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
    std::vector<char> keep(static_cast<size_t>(slots), 0);
    for (int s : tn->out_slots) keep[static_cast<size_t>(s)] = 1;
    for (auto& [s, val] : tn->constants) keep[static_cast<size_t>(s)] = 1;
    for (int s = 0; s < slots; ++s)
      if (!keep[static_cast<size_t>(s)] && last[static_cast<size_t>(s)] >= 0)
        tn->steps[static_cast<size_t>(last[static_cast<size_t>(s)])].free_after.push_back(s);
    v.root = std::move(tn);
    stats.pieces += 1;
    v.traced_graph = g;
    v.traced_phs = phs;
    v.traced_outs = outs;
  }

  void add_path(Version& v, Graph& g, TraceCtx& ctx, const std::vector<Tensor>& phs,
                const std::vector<Tensor>& outs) {
    const auto& nodes = g.nodes();
    int slots = 0;
    std::vector<int> base = slot_bases(v, nodes, &slots);
    auto slot = [&](ValueRef r) { return base[static_cast<size_t>(r.node->id)] + r.index; };
    assign_arg_slots(v, phs, [&](const Tensor& ph) { return slot(g.value_of(ph)); });
    // What the path needs: outputs, guard values and side effects (print).
    std::vector<char> need(nodes.size(), 0);
    for (const auto& o : outs) need[static_cast<size_t>(g.node_of(o)->id)] = 1;
    for (const auto& b : ctx.breaks) need[static_cast<size_t>(b.v.node->id)] = 1;
    for (const auto& n : nodes)
      if (n->kind == NodeKind::Op && n->op->has(kSideEffect)) need[static_cast<size_t>(n->id)] = 1;
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it)
      if (need[static_cast<size_t>((*it)->id)])
        for (const auto& in : (*it)->inputs) need[static_cast<size_t>(in.node->id)] = 1;

    std::vector<int> cuts;
    for (const auto& b : ctx.breaks) cuts.push_back(b.cut);
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
      if (pi < ctx.breaks.size()) {
        tn->guard_slot = slot(ctx.breaks[pi].v);
        tn->guard_what = ctx.breaks[pi].what;
        tn->guard_where = ctx.breaks[pi].where;
      } else {
        tn->leaf = true;
        for (const auto& o : outs) tn->out_slots.push_back(slot(g.value_of(o)));
      }
      pieces.push_back(std::move(tn));
      lo = cuts[pi];
    }
    // Insert into the trace tree, sharing the prefix already there.
    if (!v.root) {
      v.root = std::move(pieces[0]);
      stats.pieces += 1;
    }
    TreeNode* cur = v.root.get();
    for (size_t pi = 0; pi + 1 < pieces.size(); ++pi) {
      const Tensor& val = ctx.breaks[pi].value;
      TreeNode* next = nullptr;
      for (auto& [gv, child] : cur->children)
        if (same_value(gv, val)) next = child.get();
      if (!next) {
        cur->children.push_back({val, std::move(pieces[pi + 1])});
        next = cur->children.back().second.get();
        stats.pieces += 1;
      }
      cur = next;
    }
  }

  // ---- healing: a trace tree of bool breaks joined into one graph with Switch/Merge ----------

  // Every guard a bool read traced both ways, down to the leaves.
  static bool healable(const TreeNode& t) {
    if (t.leaf) return true;
    if (t.children.size() != 2) return false;
    bool seen[2] = {false, false};
    for (const auto& [val, child] : t.children) {
      if (val.dtype() != Bool || val.numel() != 1) return false;
      seen[val.item<bool>() ? 1 : 0] = true;
      if (!healable(*child)) return false;
    }
    return seen[0] && seen[1];
  }

  // The piece's steps recorded into the graph being built (s: slot -> value in it); at a guard,
  // cond() on the predicate, each branch built from its child on a copy of the slots, so a value
  // the branch reads from the prefix is captured through a Switch.
  static std::vector<Tensor> build_healed(Graph& h, const TreeNode& t, std::vector<Tensor> s,
                                          std::vector<std::string>& healed) {
    for (const auto& [slot, val] : t.constants) s[static_cast<size_t>(slot)] = h.constant(val);
    TensorList ins;
    for (const auto& st : t.steps) {
      ins.clear();
      for (int x : st.in) ins.push_back(s[static_cast<size_t>(x)]);
      TensorList o =
          call_node(*st.op, std::span<const Tensor>(ins.data(), ins.size()), st.attrs, st.patches);
      for (size_t k = 0; k < st.out.size() && k < o.size(); ++k)
        s[static_cast<size_t>(st.out[k])] = o[k];
    }
    if (t.leaf) {
      std::vector<Tensor> outs;
      for (int x : t.out_slots) outs.push_back(s[static_cast<size_t>(x)]);
      return outs;
    }
    const TreeNode* branch[2] = {nullptr, nullptr};
    for (const auto& [val, child] : t.children) branch[val.item<bool>() ? 1 : 0] = child.get();
    healed.push_back(str_cat(t.guard_what, "() at ", t.guard_where));
    return cond(
        s[static_cast<size_t>(t.guard_slot)],
        [&] { return build_healed(h, *branch[1], s, healed); },
        [&] { return build_healed(h, *branch[0], s, healed); });
  }

  // Replaces a healable trace tree by one graph (a single piece with Switch/Merge), compiled as a
  // trace without breaks is, with the compiled backward when the version records gradients.
  // Leaves the tree as it is when a guard is not healable or cond refuses the branches (results
  // that differ in dtype or rank).
  void heal(Version& v) {
    if (!v.root || v.root->leaf || !healable(*v.root)) return;
    Graph h;
    std::vector<Tensor> phs;
    std::vector<Tensor> s(static_cast<size_t>(v.num_slots));
    for (size_t i = 0; i < v.key.size(); ++i) {
      const ArgKey& ak = v.key[i];
      size_t n = ak.kind == Arg::kTensor || ak.kind == Arg::kTensorList ? ak.shapes.size() : 0;
      if ((ak.kind == Arg::kScalar || ak.kind == Arg::kBool) && ak.runtime) n = 1;
      for (size_t t = 0; t < n; ++t) {
        Tensor ph = ak.runtime
                        ? h.placeholder(str_cat("arg", phs.size()), Float32, Shape{})
                        : h.placeholder(str_cat("arg", phs.size()), ak.dtypes[t], ak.shapes[t]);
        phs.push_back(ph);
        const int slot = t < v.arg_slots[i].size() ? v.arg_slots[i][t] : -1;
        if (slot >= 0) s[static_cast<size_t>(slot)] = ph;
      }
    }
    std::vector<std::string> healed;
    std::vector<Tensor> outs;
    try {
      outs = build_healed(h, *v.root, s, healed);
      for (auto& o : outs)
        if (!o.is_symbolic()) o = h.constant(o);
    } catch (const Error& e) {
      break_log.push_back(str_cat("not healed (", e.what(), "): the trace tree stays"));
      return;
    }
    if (v.grad_tree) {
      build_grad(v, h, phs, outs);
      v.grad_tree = false;
    }
    v.root.reset();
    stats.pieces += 1;
    add_single(v, h, phs, outs);
    stats.healed += static_cast<int64_t>(healed.size());
    for (auto& w : healed) {
      break_log.push_back(str_cat(w, ": traced both ways -> healed into Switch/Merge"));
      if (log_breaks) std::cerr << "[jit] " << opts.name << ": healed " << w << "\n";
    }
    v.healed = std::move(healed);
  }

  // Whether a call of a version under autograd (a tree kept to heal) follows branches already
  // traced: the pieces up to each guard run compiled, without gradients; leaves do not run.
  bool path_traced(Version& v, const std::vector<Arg>& args) {
    std::vector<Tensor> outs;
    std::string why;
    return replay(v, args, outs, &why, /*donate=*/false, /*probe=*/true);
  }

  // Replays `v`; returns false (and the reason) when a break guard has no traced branch. A probe
  // stops at the leaf without running it.
  bool replay(Version& v, const std::vector<Arg>& args, std::vector<Tensor>& outs, std::string* why,
              bool donate = false, bool probe = false) {
    if (v.fwd_session) {
      donate = donate && !opts.donate.empty();
      if (donate != v.fwd_donating) {
        std::vector<Tensor> phs;
        if (donate) {
          size_t p = 0;
          for (size_t i = 0; i < args.size(); ++i) {
            const bool d = std::find(opts.donate.begin(), opts.donate.end(), static_cast<int>(i)) !=
                           opts.donate.end();
            size_t n = args[i].kind == Arg::kTensor       ? 1
                       : args[i].kind == Arg::kTensorList ? args[i].ts.size()
                       : v.key[i].runtime                 ? 1
                                                          : 0;
            for (size_t t = 0; t < n; ++t, ++p)
              if (d && args[i].kind != Arg::kScalar && args[i].kind != Arg::kBool)
                phs.push_back(v.fwd_feeds[p].first);
          }
        }
        v.fwd_session->set_donated(phs);
        v.fwd_donating = donate;
      }
      size_t p = 0;
      for (size_t i = 0; i < args.size(); ++i) {
        const auto& k = v.key[i];
        if (args[i].kind == Arg::kTensor) {
          v.fwd_feeds[p++].second = args[i].t;
        } else if (args[i].kind == Arg::kTensorList) {
          for (const auto& t : args[i].ts) v.fwd_feeds[p++].second = t;
        } else if (k.runtime) {
          v.fwd_feeds[p++].second = scalar_tensor(args[i].v, Float32);
        }
      }
      // Hold no caller tensor between calls, also when the run raises.
      struct Clear {
        FeedDict& f;
        ~Clear() {
          for (auto& x : f) x.second = Tensor();
        }
      } clear{v.fwd_feeds};
      outs = v.fwd_session->run(v.fwd_outs, v.fwd_feeds);
      return true;
    }
    auto& slots = v.slots;
    for (size_t i = 0; i < args.size(); ++i) {
      const auto& s = v.arg_slots[i];
      if (args[i].kind == Arg::kTensor) {
        if (s[0] >= 0) slots[static_cast<size_t>(s[0])] = args[i].t;
      } else if (args[i].kind == Arg::kTensorList) {
        for (size_t t = 0; t < s.size(); ++t)
          if (s[t] >= 0) slots[static_cast<size_t>(s[t])] = args[i].ts[t];
      } else if (!s.empty() && s[0] >= 0) {
        slots[static_cast<size_t>(s[0])] = scalar_tensor(args[i].v, Float32);
      }
    }
    NoGradGuard ng;
    // Release this call's intermediates, also when a step raises.
    struct Release {
      std::vector<Tensor>& s;
      ~Release() {
        for (auto& x : s) x = Tensor();
      }
    } release{slots};
    if (!v.root) fail("jit", "internal: version without a compiled trace");
    TreeNode* cur = v.root.get();
    TensorList ins;
    bool ok = true;
    while (cur) {
      if (probe && cur->leaf) break;
      for (auto& [s, val] : cur->constants) slots[static_cast<size_t>(s)] = val;
      for (auto& st : cur->steps) {
        interruption_point("jit");
        ins.clear();
        bool dead = false;
        for (int x : st.in) {
          ins.push_back(slots[static_cast<size_t>(x)]);
          dead = dead || !ins.back().defined();
        }
        // Dataflow deadness (cond inside a jitted fn), as in the Session: a step with a dead
        // input is skipped, except merge, which forwards its live input.
        bool merge = st.op->has(kMerge);
        if (dead && !merge) continue;
        std::span<const Tensor> in_span(ins.data(), ins.size());
        TensorList o = merge ? st.op->view(in_span, st.attrs)
                             : run_node_kernel(*st.op, in_span, st.attrs, st.patches);
        for (size_t k = 0; k < st.out.size() && k < o.size(); ++k)
          slots[static_cast<size_t>(st.out[k])] = std::move(o[k]);
        for (int fs : st.free_after) slots[static_cast<size_t>(fs)] = Tensor();
      }
      if (cur->leaf) {
        outs.clear();
        for (int s : cur->out_slots) outs.push_back(slots[static_cast<size_t>(s)]);
        break;
      }
      const Tensor& gv = slots[static_cast<size_t>(cur->guard_slot)];
      TreeNode* next = nullptr;
      for (auto& [val, child] : cur->children)
        if (same_value(val, gv)) next = child.get();
      if (!next) {
        *why = str_cat("graph break at ", cur->guard_where, ": ", cur->guard_what, "() gave ",
                       value_str(gv), ", a branch not traced yet");
        ok = false;
        break;
      }
      cur = next;
    }
    ins.clear();
    return ok;
  }

  void verify_outputs(const std::vector<Arg>& args, const Fn& fn, const std::vector<Tensor>& outs) {
    // The reference runs with the caller's grad mode: fn may call grad() itself (a training
    // step), which a no-grad reference would refuse.
    std::vector<Tensor> ref;
    {
      std::vector<Arg> a = args;
      for (size_t i = 0; i < a.size(); ++i)
        if (std::find(opts.runtime_scalars.begin(), opts.runtime_scalars.end(),
                      static_cast<int>(i)) != opts.runtime_scalars.end()) {
          a[i].kind = Arg::kTensor;
          a[i].t = scalar_tensor(a[i].v, Float32);
        }
      ref = fn(a);
      for (auto& r : ref) r = r.detach();
    }
    for (size_t k = 0; k < outs.size() && k < ref.size(); ++k) {
      auto x = outs[k].to_vector<double>(), y = ref[k].to_vector<double>();
      double worst = x.size() == y.size() ? 0 : INFINITY;
      for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
        double d = std::fabs(x[i] - y[i]);
        if (!(d <= 1e-5 + 1e-4 * std::fabs(y[i]))) worst = std::max(worst, d);
      }
      if (worst > 0) {
        ++stats.verify_mismatches;
        std::cerr << "[jit] " << opts.name << ": KILN_JIT_VERIFY mismatch on output " << k
                  << " (max abs diff " << worst << "); the compiled plan and eager disagree — "
                  << "is fn a pure function of its inputs?\n";
      }
    }
  }

  static bool any_symbolic(const std::vector<Arg>& args) {
    for (const auto& a : args) {
      if (a.kind == Arg::kTensor && a.t.defined() && a.t.is_symbolic()) return true;
      for (const auto& t : a.ts)
        if (t.defined() && t.is_symbolic()) return true;
    }
    return false;
  }

  std::vector<Tensor> call(const std::vector<Arg>& user_args, const Fn& fn) {
    // A call on symbolic tensors only inlines fn (call_ext): it reads no engine state and takes
    // no lock, so traces of functions that call each other cannot deadlock.
    std::unique_lock<std::recursive_mutex> lk(mu, std::defer_lock);
    if (!any_symbolic(user_args)) lk.lock();
    // Traced again with the buffers and captured tensors found as inputs (a trace that finds
    // new ones throws NewStateSlots before anything is kept).
    for (int attempt = 0;; ++attempt) {
      try {
        return call_ext(user_args, fn);
      } catch (const NewStateSlots&) {
        // Tensors the function makes afresh on every call outside Kiln's ops (a module that
        // rebuilds its weights, a swapped parameter set) look like new captured state each
        // time: the function runs eagerly from then on, as when the recompile budget runs out.
        if (attempt >= 3) {
          stats.eager_fallback = true;
          fallback_unstable = true;
          fallback_reason = "captured state keeps changing between traces";
          if (!warned_fallback) {
            warned_fallback = true;
            std::cerr << "[jit] " << opts.name
                      << ": captured state keeps changing between traces, running eagerly from "
                         "now on\n";
          }
          return run_eager(user_args, fn);
        }
      }
    }
  }

  // Writes the new values of module buffers into them and keeps the function's own outputs.
  void finish(const Version& v, std::vector<Tensor>& outs) const {
    if (outs.size() <= v.num_user_outputs) return;
    for (size_t j = 0; j < state_slots.size() && v.num_user_outputs + j < outs.size(); ++j)
      *state_slots[j] = outs[v.num_user_outputs + j].detach();
    // Captured tensors written in place get their new values in place, as eager wrote them.
    const size_t base = v.num_user_outputs + v.num_state_outputs;
    if (!v.capture_writes.empty()) {
      NoGradGuard ng;
      for (size_t j = 0; j < v.capture_writes.size() && base + j < outs.size(); ++j)
        Tensor(captures[v.capture_writes[j]]).copy_(outs[base + j].detach());
    }
    outs.resize(v.num_user_outputs);
  }

  std::vector<Tensor> call_ext(const std::vector<Arg>& user_args, const Fn& fn) {
    const std::vector<Arg>& args0 = user_args;
    for (int d : opts.donate)
      if (d < 0 || d >= static_cast<int>(args0.size()) ||
          (args0[static_cast<size_t>(d)].kind != Arg::kTensor &&
           args0[static_cast<size_t>(d)].kind != Arg::kTensorList))
        fail("jit", opts.name, ": donate position ", d,
             " is not a tensor or tensor-list argument (the function takes ", args0.size(),
             " arguments)");
    // Called on symbolic tensors (inside a graph being built or another trace): inline fn
    // into that graph, as jax does with nested jit.
    if (any_symbolic(args0)) return fn(args0);
    if (stats.eager_fallback) return run_eager(args0, fn);
    // The module buffers fn assigns (found by earlier traces) are fed as trailing arguments.
    user_arity = args0.size();
    std::vector<Arg> ext;
    const bool extended = !state_slots.empty() || !captures.empty();
    if (extended) {
      ext = args0;
      for (Tensor* slot : state_slots) ext.push_back(to_arg(*slot));
      for (const Tensor& c : captures) ext.push_back(to_arg(c));
    }
    const std::vector<Arg>& args = extended ? ext : args0;
    Key k = key_of(args, opts.runtime_scalars);
    Version* hit = nullptr;
    std::string guard_failed;
    for (auto& v : versions)
      if (mismatch(v->key, k).empty()) {
        const std::string g = failed_shape_guard(*v, args);
        if (!g.empty()) {
          if (guard_failed.empty()) guard_failed = g;
          continue;
        }
        hit = v.get();
        break;
      }
    std::string reason;
    if (hit && hit->eager_only) {
      ++stats.hits;
      return run_eager(args, fn);
    }
    if (hit && hit->lazy) {
      LazyResult r = hit->lazy->run(hit->key, args, fn, /*stop_if_no_reads=*/false);
      take_lazy_captures(r);
      ++stats.hits;
      return std::move(r.outs);
    }
    if (hit && hit->grad_tree) return call_grad_tree(*hit, args, fn);
    if (hit) {
      std::vector<Tensor> outs;
      bool replayed = false;
      try {
        if (hit->with_grad) {
          outs = call_with_grad(*hit, args);
          replayed = true;
        } else {
          replayed = replay(*hit, args, outs, &reason, /*donate=*/!verify);
        }
      } catch (const Error& e) {
        return recover(*hit, k, args, fn, e.what());
      }
      if (replayed) {
        ++stats.hits;
        finish(*hit, outs);
        if (verify) verify_outputs(args, fn, outs);
        return outs;
      }
      // A break guard failed: retrace along the new path into the same version.
      if (!budget_ok(reason)) return run_eager(args, fn);
      ++stats.misses;
      log_recompile(reason);
      try {
        trace(*hit, args, fn);
        if (hit->eager_only) return run_eager(args, fn);
        if (!replay(*hit, args, outs, &reason))
          fail("jit", "internal: the new trace does not replay: ", reason);
      } catch (const Error& e) {
        // The version keeps the paths it had; this call runs eagerly (and raises what eager
        // raises).
        log_recompile(str_cat("trace of the new branch failed (", e.what(), ") -> eager call"));
        return run_eager(args, fn);
      }
      finish(*hit, outs);
      return outs;
    }
    // No version matches: a new one (dynamic dims when only dims changed).
    Key nk = k;
    if (versions.empty()) {
      reason = "first call";
    } else {
      reason = guard_failed.empty() ? mismatch(versions.back()->key, k) : guard_failed;
      Key dyn;
      if (opts.dynamic_dims) {
        for (auto& v : versions)
          if (!v->eager_only && !v->lazy && only_dims_differ(v->key, k, &dyn)) {
            nk = dyn;
            reason += " -> recompiling with those dims dynamic";
            break;
          }
      }
    }
    if (!versions.empty() && !budget_ok(reason)) return run_eager(args, fn);
    ++stats.misses;
    if (!versions.empty()) log_recompile(reason);
    return compile_and_run(nk, k, args, fn);
  }

  // The call's tensors in the order trace() made placeholders (a runtime scalar as 0-d).
  static std::vector<Tensor> flat_tensors(const std::vector<Arg>& args, const Key& key) {
    std::vector<Tensor> flat;
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i].kind == Arg::kTensor)
        flat.push_back(args[i].t);
      else if (args[i].kind == Arg::kTensorList)
        flat.insert(flat.end(), args[i].ts.begin(), args[i].ts.end());
      else if (i < key.size() && key[i].runtime)
        flat.push_back(Tensor());
    }
    return flat;
  }

  // The first shape guard of `v` the call fails ("" if none): the recompile's reason.
  static std::string failed_shape_guard(const Version& v, const std::vector<Arg>& args) {
    if (v.shape_guards.empty()) return "";
    const std::vector<Tensor> flat = flat_tensors(args, v.key);
    for (const auto& sg : v.shape_guards)
      if (!shape_guard_holds(sg, flat))
        return str_cat("shape guard ", sg.text, " (", sg.where, ") failed");
    return "";
  }

  static bool has_dynamic_dims(const Key& k) {
    for (const auto& a : k)
      for (const auto& s : a.shapes)
        if (!s.is_static()) return true;
    return false;
  }

  // A lazy recording that met captured state it cannot take (a capture that requires grad, a
  // write into captured state), or a complete trace recorded without running (no host reads)
  // that met captures: the call is traced again with them as inputs. A rerunning version keeps
  // the captures it met as constants of its pieces.
  void take_lazy_captures(const LazyResult& r) {
    if (!r.need_trace && (r.complete || r.captures.empty())) return;
    for (const auto& t : r.captures) {
      bool have = false;
      for (const auto& c : captures) have = have || c.is_same(t);
      if (!have) captures.push_back(t);
    }
    throw NewStateSlots{};
  }

  // Traces a new version for guard key `nk` (the call's own key is `k`) and runs it. A trace or
  // first run that fails is never kept: with dynamic dims the shape is compiled statically
  // instead, and when that fails too the call runs eagerly (raising what eager raises); where
  // eager works, this shape then gets a version that runs eagerly, said in explain().
  static bool any_grad(const Key& k) {
    for (const auto& a : k)
      for (bool g : a.grads)
        if (g) return true;
    return false;
  }

  // The first call of a version whose host code may rerun (JitOptions::host_code): fn runs once
  // with its tensor ops recorded lazily. With host reads the version reruns from now on, for
  // every shape of the same ranks (its pieces are cached by shape); without, kAuto compiles the
  // recording as one piece that replays (today's speed), into `v`, and returns false.
  bool first_lazy_call(Version& v, const Key& k, const std::vector<Arg>& args, const Fn& fn,
                       std::vector<Tensor>& outs) {
    const double t0 = now_ms();
    v.lazy = std::make_unique<LazyCache>();
    const bool autom = opts.host_code == JitOptions::HostCode::kAuto;
    LazyResult r = v.lazy->run(k, args, fn, /*stop_if_no_reads=*/autom);
    take_lazy_captures(r);
    ++stats.compiles;
    stats.graph_breaks += r.host_reads;
    if (r.complete) {
      for (auto& a : v.key)
        for (auto& sh : a.shapes)
          for (size_t d = 0; d < sh.size(); ++d) sh[d] = -1;
      v.compile_ms += now_ms() - t0;
      outs = std::move(r.outs);
      return true;
    }
    v.lazy.reset();
    v.fn = fn;
    v.user_arity = user_arity;
    v.state_slots = state_slots;
    v.num_user_outputs = r.outs.size();
    add_single(v, r.graph, r.placeholders, r.outs);
    v.compile_ms += now_ms() - t0;
    return false;
  }

  std::vector<Tensor> compile_and_run(const Key& nk, const Key& k, const std::vector<Arg>& args,
                                      const Fn& fn) {
    auto v = std::make_unique<Version>();
    v->key = nk;
    std::vector<Tensor> outs;
    std::string reason;
    const bool lazy = opts.host_code != JitOptions::HostCode::kReplay && !verify && !any_grad(nk) &&
                      !has_dynamic_dims(nk) && state_slots.empty() && captures.empty();
    try {
      if (lazy && first_lazy_call(*v, nk, args, fn, outs)) {
        versions.insert(versions.begin(), std::move(v));
        return outs;
      }
      if (!lazy) trace(*v, args, fn);
      if (!v->eager_only && !v->grad_tree) {
        if (v->with_grad) {
          outs = call_with_grad(*v, args);
        } else {
          // A Session-backed version optimizes, fuses, generates code and binds its plan in its
          // first run: that is compile time too (explain() reports it).
          const double t0 = now_ms();
          if (!replay(*v, args, outs, &reason))
            fail("jit", "internal: the new trace does not replay: ", reason);
          if (v->fwd_session) v->compile_ms += now_ms() - t0;
        }
      }
    } catch (const Error& e) {
      std::string why = e.what();
      if (has_dynamic_dims(nk)) {
        log_recompile(str_cat("compiling with dynamic dims failed (", why,
                              ") -> recompiling for the concrete shape"));
        return compile_and_run(k, k, args, fn);
      }
      return eager_instead(k, args, fn, str_cat("trace or compiled run failed: ", why));
    }
    Version& ref = *v;
    versions.insert(versions.begin(), std::move(v));
    if (ref.eager_only || ref.grad_tree) return run_eager(args, fn);
    finish(ref, outs);
    if (verify) verify_outputs(args, fn, outs);
    return outs;
  }

  // A call under autograd of a version whose tree waits to heal: eager, and a call along a
  // branch not traced yet traces it (which heals the tree once every bool break has both).
  // Checking the branch runs the pieces before each guard once more (20% of a step on a small
  // MLP), so after the first 8 calls only every power-of-two-th call checks: a branch that
  // never comes costs nothing in the long run, one that comes heals within twice the calls.
  std::vector<Tensor> call_grad_tree(Version& v, const std::vector<Arg>& args, const Fn& fn) {
    const int64_t n = ++v.grad_tree_calls;
    if (n > 8 && (n & (n - 1)) != 0) {
      ++stats.hits;
      return run_eager(args, fn);
    }
    bool traced = true;
    try {
      traced = path_traced(v, args);
    } catch (const Error&) {
      return run_eager(args, fn);  // raises what eager raises, or gives eager's result
    }
    if (traced || !budget_ok("a branch not traced yet under autograd")) {
      ++stats.hits;
      return run_eager(args, fn);
    }
    ++stats.misses;
    log_recompile("a branch not traced yet under autograd -> tracing it");
    try {
      trace(v, args, fn);
    } catch (const Error& e) {
      log_recompile(str_cat("trace of the new branch failed (", e.what(), ") -> eager call"));
      return run_eager(args, fn);
    }
    if (!v.with_grad) return run_eager(args, fn);
    std::vector<Tensor> outs = call_with_grad(v, args);
    finish(v, outs);
    return outs;
  }

  // A compiled version raised on a call its guards accept. A version with dynamic dims is
  // compiled again for the call's concrete shape; a static one gives the call to eager.
  std::vector<Tensor> recover(Version& v, const Key& k, const std::vector<Arg>& args, const Fn& fn,
                              const std::string& why) {
    if (has_dynamic_dims(v.key) && opts.dynamic_dims) {
      if (!budget_ok(why)) return run_eager(args, fn);
      ++stats.misses;
      log_recompile(str_cat("the version with dynamic dims failed (", why,
                            ") -> recompiling for the concrete shape"));
      return compile_and_run(k, k, args, fn);
    }
    return eager_instead(k, args, fn, str_cat("the compiled version failed: ", why));
  }

  // Runs the call eagerly. If eager raises too, that is the caller's error (nothing is kept);
  // otherwise this exact key gets a version that runs eagerly from now on.
  std::vector<Tensor> eager_instead(const Key& k, const std::vector<Arg>& args, const Fn& fn,
                                    const std::string& why) {
    std::vector<Tensor> outs = run_eager(args, fn);
    auto v = std::make_unique<Version>();
    v->key = k;
    v->eager_only = true;
    v->eager_reason = why;
    versions.insert(versions.begin(), std::move(v));
    log_recompile(str_cat(why, " -> this shape runs eagerly"));
    return outs;
  }

  std::vector<Tensor> call_with_grad(Version& v, const std::vector<Arg>& args) {
    const int64_t id = register_version(v);
    // Inputs in the order of the trace's placeholders: a runtime scalar is one (a 0-d tensor).
    std::vector<Tensor> ins;
    for (size_t i = 0; i < args.size(); ++i) {
      const Arg& a = args[i];
      if (a.kind == Arg::kTensor) ins.push_back(a.t);
      if (a.kind == Arg::kTensorList) ins.insert(ins.end(), a.ts.begin(), a.ts.end());
      if ((a.kind == Arg::kScalar || a.kind == Arg::kBool) && v.key[i].runtime)
        ins.push_back(scalar_tensor(a.v, Float32));
    }
    // With random ops the generator state goes into the node, so that the backward graph's
    // recomputed forward draws what this forward drew.
    std::vector<int64_t> rng;
    if (v.has_random)
      for (uint64_t w : get_rng_state()) rng.push_back(static_cast<int64_t>(w));
    Attrs attrs;
    attrs.push(id);
    attrs.push(std::move(rng));
    TensorList r =
        kiln::detail::call(jit_call_op(), std::span<const Tensor>(ins.data(), ins.size()), attrs);
    // Past the function's outputs come the saved activations, for the backward only.
    const size_t n = std::min(r.size(), v.g_outputs.size());
    return std::vector<Tensor>(r.begin(), r.begin() + static_cast<long>(n));
  }

  bool budget_ok(const std::string& reason) {
    if (stats.compiles < opts.max_recompiles + 1) return true;
    stats.eager_fallback = true;
    fallback_reason = reason;
    if (!warned_fallback) {
      warned_fallback = true;
      std::cerr << "[jit] " << opts.name << ": recompile budget (" << opts.max_recompiles
                << ") exhausted, running eagerly from now on; last reason: " << reason << "\n";
    }
    return false;
  }

  void log_recompile(const std::string& reason) {
    recompile_log.push_back(reason);
    if (log_recompiles) std::cerr << "[jit] " << opts.name << ": recompile: " << reason << "\n";
  }
};

TensorList run_version_plain(Version& v, std::span<const Tensor> tensors) {
  std::vector<Arg> args = args_from_inputs(v, tensors);
  Engine::Impl dummy;  // replay needs no engine state
  std::vector<Tensor> outs;
  std::string why;
  if (!dummy.replay(v, args, outs, &why)) fail("jit", why);
  TensorList r;
  for (auto& o : outs) r.push_back(o);
  return r;
}

Engine::Engine(JitOptions opts) : impl_(std::make_unique<Impl>()) { impl_->opts = std::move(opts); }
Engine::~Engine() = default;

std::vector<Tensor> Engine::call(const std::vector<Arg>& args, const Impl::Fn& fn) {
  return impl_->call(args, fn);
}

Engine::Stats Engine::stats() const {
  std::lock_guard<std::recursive_mutex> lk(impl_->mu);
  Stats s = impl_->stats;
  for (const auto& v : impl_->versions)
    if (v->lazy) {
      const LazyCache::Stats l = v->lazy->stats();
      s.reruns += l.calls;
      s.rerun_pieces += l.pieces_run;
      s.piece_compiles += l.compiles;
      s.max_piece_compiles = std::max(s.max_piece_compiles, v->lazy->max_compiles_per_piece());
    }
  return s;
}
void Engine::check_arg(size_t i, Arg::Kind got, Arg::Kind want) const {
  const bool number = got == Arg::kScalar || got == Arg::kBool;
  const bool wants_number = want == Arg::kScalar || want == Arg::kBool;
  if (got == want || (number && wants_number)) return;
  // A runtime scalar reaches fn as a 0-d tensor.
  const auto& rs = impl_->opts.runtime_scalars;
  if (number && want == Arg::kTensor &&
      std::find(rs.begin(), rs.end(), static_cast<int>(i)) != rs.end())
    return;
  fail("jit", "'", impl_->opts.name, "': argument ", i, " is ", kind_name(got),
       ", but the function's parameter ", i, " takes ", kind_name(want));
}

bool Engine::guards_accept(const std::vector<Arg>& args) const {
  std::lock_guard<std::recursive_mutex> lk(impl_->mu);
  Key k = key_of(args, impl_->opts.runtime_scalars);
  for (const auto& v : impl_->versions)
    if (mismatch(v->key, k).empty()) return true;
  return false;
}

std::string Engine::to_mermaid() const {
  const Impl& m = *impl_;
  std::lock_guard<std::recursive_mutex> lk(m.mu);
  auto q = [](std::string t) {
    for (size_t i = 0; (i = t.find('"', i)) != std::string::npos; i += 6) t.replace(i, 1, "#quot;");
    return t;
  };
  std::ostringstream os;
  os << "flowchart TD\n";
  os << "  call([\"" << q(m.opts.name) << "(...)\"])\n";
  os << "  result([\"result\"])\n";
  int vi = 0;
  for (const auto& v : m.versions) {
    const std::string p = str_cat("v", vi, "_");
    os << "  " << p << "in{{\"version " << vi << "<br/>" << q(key_str(v->key)) << "\"}}\n";
    os << "  call --> " << p << "in\n";
    if (v->eager_only) {
      os << "  " << p << "eager[\"eager: " << q(v->eager_reason) << "\"]\n";
      os << "  " << p << "in --> " << p << "eager --> result\n";
    } else if (v->lazy) {
      os << "  " << p << "in -.- " << p << "note>\"host code reruns on every call\"]\n";
      v->lazy->mermaid(os, p, p + "in", "result");
    } else if (v->root) {
      int n = 0;
      std::function<std::string(const TreeNode*)> walk = [&](const TreeNode* t) {
        const std::string id = str_cat(p, "t", n++);
        os << "  " << id << "[\"" << (v->root.get() == t && t->leaf ? "graph" : "piece") << ": "
           << t->nodes << " nodes\"]\n";
        if (t->leaf) {
          os << "  " << id << " --> result\n";
          return id;
        }
        const std::string gid = id + "g";
        os << "  " << gid << "{\"" << q(t->guard_what) << "() at " << q(t->guard_where) << "\"}\n";
        os << "  " << id << " --> " << gid << "\n";
        for (const auto& [val, child] : t->children) {
          const std::string cid = walk(child.get());
          os << "  " << gid << " -->|\"" << q(value_str(val)) << "\"| " << cid << "\n";
        }
        return id;
      };
      const std::string root = walk(v->root.get());
      os << "  " << p << "in --> " << root << "\n";
      // The healed breaks inside that graph, in trace order: each a Switch on its predicate
      // whose two sides meet again in a Merge.
      std::string prev = root;
      for (size_t h = 0; h < v->healed.size(); ++h) {
        const std::string id = str_cat(p, "h", h);
        os << "  " << id << "s{\"Switch on " << q(v->healed[h]) << "\"}\n";
        os << "  " << id << "m((\"Merge\"))\n";
        os << "  " << prev << " -.- " << id << "s\n";
        os << "  " << id << "s -->|\"true\"| " << id << "m\n";
        os << "  " << id << "s -->|\"false\"| " << id << "m\n";
        prev = id + "m";
      }
    }
    if (v->with_grad)
      os << "  " << p << "in -.- " << p << "bwd[/\"backward graph, "
         << (v->saved_ok ? "fed saved activations" : "recomputing the forward") << "\"/]\n";
    ++vi;
  }
  return os.str();
}

std::string Engine::explain() const {
  const Impl& m = *impl_;
  std::lock_guard<std::recursive_mutex> lk(m.mu);
  std::ostringstream os;
  os << "jit '" << m.opts.name << "': " << (m.stats.hits + m.stats.misses) << " calls, "
     << m.stats.hits << " hits, " << m.stats.misses << " misses, " << m.stats.compiles
     << " compiles, " << m.stats.graph_breaks << " graph breaks traced, " << m.stats.healed
     << " healed\n";
  if (m.stats.eager_fallback && m.fallback_unstable)
    os << "  running eagerly: " << m.fallback_reason << "\n";
  else if (m.stats.eager_fallback)
    os << "  running eagerly: recompile budget (" << m.opts.max_recompiles
       << ") exhausted; last reason: " << m.fallback_reason << "\n";
  os << "versions (newest first):\n";
  int vi = 0;
  for (const auto& v : m.versions) {
    os << "  #" << vi++ << " guards: " << key_str(v->key) << "\n";
    for (const auto& sg : v->shape_guards)
      os << "     shape guard: " << sg.text << "  (" << sg.what << " at " << sg.where << ")\n";
    os << "     compile time " << v->compile_ms << " ms";
    if (v->eager_only) os << "; runs eagerly (" << v->eager_reason << ")";
    if (v->lazy) {
      const LazyCache::Stats l = v->lazy->stats();
      os << "; host code reruns on every call (" << l.calls << " calls, " << l.pieces_run
         << " pieces run compiled, " << l.interpreted << " op by op, " << l.recomputed
         << " ops recomputed)\n";
      v->lazy->explain(os, "     ");
      continue;
    }
    if (v->with_grad)
      os << (v->saved_ok ? "; compiled backward graph fed the saved activations"
                         : "; compiled backward graph (forward recomputed in it)");
    if (v->grad_tree) os << "; runs eagerly under autograd until its breaks heal";
    os << "\n";
    for (const auto& w : v->healed)
      os << "     healed: " << w << " -> Switch/Merge (no host read)\n";
    std::function<void(const TreeNode*, int, const std::string&)> walk =
        [&](const TreeNode* t, int depth, const std::string& via) {
          os << "     " << std::string(static_cast<size_t>(depth) * 2, ' ') << "piece" << via
             << ": " << t->nodes << " nodes";
          if (!t->leaf) os << ", then guard on " << t->guard_what << "() at " << t->guard_where;
          os << "\n";
          for (const auto& [val, child] : t->children)
            walk(child.get(), depth + 1, str_cat(" [if ", value_str(val), "]"));
        };
    if (v->root) walk(v->root.get(), 0, "");
  }
  if (!m.captures.empty()) {
    std::vector<char> written(m.captures.size(), 0);
    for (const auto& v : m.versions)
      for (size_t j : v->capture_writes) written[j] = 1;
    os << "captured state: " << m.captures.size()
       << " tensors fn reads without taking them as arguments, fed after its "
       << m.user_arity + m.state_slots.size() << " arguments by identity (not by value):\n";
    for (size_t j = 0; j < m.captures.size(); ++j) {
      const Tensor& t = m.captures[j];
      os << "  capture " << j << " (arg " << m.user_arity + m.state_slots.size() + j
         << "): " << t.dtype() << t.shape();
      if (t.requires_grad()) os << ", requires grad (gets its gradient)";
      if (written[j]) os << ", written in place by fn (its new value is copied back every call)";
      os << "\n";
    }
  }
  if (!m.break_log.empty()) {
    os << "graph breaks:\n";
    for (const auto& b : m.break_log) os << "  " << b << "\n";
  }
  if (!m.recompile_log.empty()) {
    os << "recompiles:\n";
    for (const auto& r : m.recompile_log) os << "  " << r << "\n";
  }
  if (m.verify) os << "verify: " << m.stats.verify_mismatches << " mismatches\n";
  return os.str();
}

}  // namespace kiln::detail::jit_engine

namespace kiln::detail::jit_engine {

namespace {
// A saved version takes the function's own arguments: the captured tensors it is fed become
// constants again (their values now), its traced graph rebuilt op by op around them.
void inline_captures(const Version& v, const std::vector<Tensor>& captures, TracedVersion& r) {
  size_t n_user = 0;
  for (size_t i = 0; i < v.user_arity && i < v.key.size(); ++i) {
    const ArgKey& ak = v.key[i];
    if (ak.kind == Arg::kTensor || ak.kind == Arg::kTensorList)
      n_user += ak.shapes.size();
    else if (ak.runtime)
      n_user += 1;
  }
  const Graph& tg = v.traced_graph;
  std::unordered_map<const Node*, size_t> ph_index;
  for (size_t p = 0; p < v.traced_phs.size(); ++p) ph_index[tg.node_of(v.traced_phs[p])] = p;
  Graph g;
  std::unordered_map<const Node*, std::vector<Tensor>> made;
  std::vector<Tensor> phs(n_user);
  for (const auto& np : tg.nodes()) {
    const Node& n = *np;
    if (n.kind == NodeKind::Placeholder) {
      auto it = ph_index.find(&n);
      if (it == ph_index.end()) fail("jit", "internal: a placeholder that is no argument");
      const TensorMeta& m = n.outputs[0];
      if (it->second < n_user) {
        phs[it->second] = g.placeholder(n.name, m.dtype, m.shape);
        made[&n] = {phs[it->second]};
      } else {
        // Trailing arguments past the user's: the captures, in order (no state slots here).
        size_t j = it->second - n_user;
        if (j >= captures.size()) fail("jit", "internal: a capture that is not held");
        made[&n] = {g.constant(captures[j])};
      }
    } else if (n.kind == NodeKind::Constant || n.kind == NodeKind::Variable) {
      made[&n] = {g.constant(n.value)};
    } else {
      TensorList ins;
      for (const auto& in : n.inputs)
        ins.push_back(made.at(in.node)[static_cast<size_t>(in.index)]);
      TensorList o =
          call_node(*n.op, std::span<const Tensor>(ins.data(), ins.size()), n.attrs, n.patches);
      made[&n] = std::vector<Tensor>(o.begin(), o.end());
    }
  }
  r.graph = g;
  r.placeholders = phs;
  for (const auto& o : v.traced_outs) {
    ValueRef ref = tg.value_of(o);
    r.outputs.push_back(made.at(ref.node)[static_cast<size_t>(ref.index)]);
  }
  r.key.resize(std::min(r.key.size(), v.user_arity));
}
}  // namespace

// For kiln::onnx::save_jit: a version stands alone only as one traced graph without host code.
TracedVersion Engine::traced_version(const std::vector<Arg>& args) const {
  std::lock_guard<std::recursive_mutex> lk(impl_->mu);
  TracedVersion r;
  r.name = impl_->opts.name;
  std::vector<Arg> ext = args;
  for (Tensor* slot : impl_->state_slots) ext.push_back(to_arg(*slot));
  for (const Tensor& c : impl_->captures) ext.push_back(to_arg(c));
  const Key k = key_of(ext, impl_->opts.runtime_scalars);
  const Version* v = nullptr;
  for (const auto& cand : impl_->versions)
    if (mismatch(cand->key, k).empty()) {
      v = cand.get();
      break;
    }
  if (!v) {
    r.refusal = str_cat("no compiled version accepts these arguments (", key_str(k),
                        "); call the function with them first");
    return r;
  }
  r.key = v->key;
  if (v->eager_only) {
    r.refusal = str_cat("the version runs eagerly (", v->eager_reason, ")");
  } else if (v->lazy) {
    r.refusal = "the version has graph breaks whose host code reruns on every call";
  } else if (!v->root || !v->root->leaf) {
    r.refusal = v->root ? str_cat("the version has a graph break at ", v->root->guard_where, ": ",
                                  v->root->guard_what, "() of a traced value (a trace tree)")
                        : "the version has no compiled trace";
  } else if (!v->state_slots.empty() || v->traced_outs.size() != v->num_user_outputs) {
    r.refusal =
        "the function assigns module buffers (nn::assign_buffer), state a file cannot carry";
  } else if (!v->capture_writes.empty()) {
    r.refusal = "the function writes captured tensors in place, state a file cannot carry";
  } else if (v->traced_outs.empty()) {
    r.refusal = "the version keeps no traced graph";
  } else if (v->key.size() > v->user_arity) {
    inline_captures(*v, impl_->captures, r);
  } else {
    r.graph = v->traced_graph;
    r.placeholders = v->traced_phs;
    r.outputs = v->traced_outs;
  }
  return r;
}

}  // namespace kiln::detail::jit_engine
