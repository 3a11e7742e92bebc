// The tracer (tracer.h): placeholders for the call's arguments, the hooks a trace installs on
// its thread (host reads, buffer writes), and what the trace leaves: outputs, breaks, guards,
// the state it met.
#include "kiln/jit/tracer.h"

#include <algorithm>

#include "kiln/dispatch/dispatch.h"
#include "kiln/exec/session.h"
#include "kiln/graph/node.h"
#include "kiln/jit/capture.h"
#include "kiln/nn/module.h"

namespace kiln::detail::jit_engine {
namespace {

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

// fn's arguments as the trace sees them: a placeholder per tensor (per list element, per runtime
// scalar, which fn takes as a 0-d tensor), recorded in ctx with the call's value as its feed.
std::vector<Arg> symbolic_args(const Key& key, const std::vector<Arg>& args, TraceCtx& ctx) {
  Graph& g = *ctx.g;
  std::vector<Arg> sym = args;
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
    ctx.placeholders.push_back(p);
    return p;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const ArgKey& ak = key[i];
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
  return sym;
}

// After fn returned: the state the trace met that is not held yet (added to `held`), and the
// outputs past fn's own, the state slots' and written captures' new values.
void collect_state(Trace& tr, const CaptureScope& scope, const TraceCtx& ctx, HeldState& held) {
  for (const auto& t : scope.found) {
    held.captures.push_back(t);
    tr.new_state = true;
  }
  for (auto& [slot, old] : ctx.state_writes)
    if (std::find(held.state_slots.begin(), held.state_slots.end(), slot) ==
        held.state_slots.end()) {
      held.state_slots.push_back(slot);
      tr.new_state = true;
    }
  tr.num_user_outputs = tr.outs.size();
  for (Tensor* slot : held.state_slots) tr.outs.push_back(*slot);
  tr.num_state_outputs = held.state_slots.size();
  for (const auto& w : scope.written)
    for (size_t j = 0; j < held.captures.size(); ++j)
      if (held.captures[j].is_same(w)) {
        tr.capture_writes.push_back(j);
        tr.outs.push_back(scope.value.at(w.impl()));
      }
}

}  // namespace

Trace trace_fn(const Key& key, const std::vector<Arg>& args, const TraceFn& fn, HeldState& held) {
  Trace tr;
  TraceCtx ctx{&tr.graph, {}, {}};
  std::vector<Arg> sym = symbolic_args(key, args, ctx);
  // Module buffers fed as inputs: the trailing arguments past the function's own.
  const size_t arity = held.user_arity;
  for (size_t j = 0; j < held.state_slots.size() && arity + j < args.size(); ++j) {
    Tensor* slot = held.state_slots[j];
    ctx.state_writes.push_back({slot, *slot});
    *slot = sym[arity + j].t;
  }
  const size_t cap_base = arity + held.state_slots.size();
  std::vector<std::pair<Tensor, Tensor>> known;
  for (size_t j = 0; j < held.captures.size() && cap_base + j < args.size(); ++j)
    known.push_back({held.captures[j], sym[cap_base + j].t});
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
    CaptureScope scope(tr.graph, known, /*lazy=*/false);
    tr.outs = fn(sym);
    scope.drop_temporaries();
    collect_state(tr, scope, ctx, held);
  }
  tr.placeholders = std::move(ctx.placeholders);
  tr.breaks = std::move(ctx.breaks);
  tr.guards = std::move(ctx.guards);
  return tr;
}

void outputs_to_graph(Trace& t) {
  for (auto& o : t.outs) {
    if (!o.defined()) fail("jit", "fn returned an undefined tensor");
    if (!o.is_symbolic()) o = t.graph.constant(o);
  }
}

}  // namespace kiln::detail::jit_engine
