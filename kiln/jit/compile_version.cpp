// Compiling a version (engine.h): a new version traced (or recorded lazily, when its host code
// may rerun) and run once before it is kept; a trace added to a version as its one piece, a new
// path of its trace tree or its backward; bool breaks healed.
#include <algorithm>
#include <iostream>

#include "kiln/jit/compiled_backward.h"
#include "kiln/jit/engine.h"
#include "kiln/jit/heal.h"
#include "kiln/jit/replay.h"
#include "kiln/jit/trace_tree.h"

namespace kiln::detail::jit_engine {
namespace {

// The break log's lines for a trace with graph breaks under autograd.
const std::string kBreakUntilHealed =
    "graph break under autograd: eager until its bool breaks are traced both ways and healed";
const std::string kBreakEager = "graph break under autograd: this version runs eagerly";

}  // namespace

// Traces a new version for guard key `nk` (the call's own key is `k`) and runs it. A trace or
// first run that fails is never kept: with dynamic dims the shape is compiled statically
// instead, and when that fails too the call runs eagerly (raising what eager raises); where
// eager works, this shape then gets a version that runs eagerly, said in explain().
std::vector<Tensor> Engine::compile_and_run(const Key& nk, const Key& k,
                                            const std::vector<Arg>& args, const TraceFn& fn) {
  auto v = std::make_unique<Version>();
  v->key = nk;
  std::vector<Tensor> outs;
  std::string reason;
  const bool lazy = opts.host_code != JitOptions::HostCode::kReplay && !verify && !any_grad(nk) &&
                    !has_dynamic_dims(nk) && held.state_slots.empty() && held.captures.empty();
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
  if (ref.eager_only || ref.grad_tree) return fn(args);
  finish(ref, outs);
  if (verify) verify_outputs(args, fn, outs);
  return outs;
}

// The first call of a version whose host code may rerun (JitOptions::host_code): fn runs once
// with its tensor ops recorded lazily. With host reads the version reruns from now on, for
// every shape of the same ranks (its pieces are cached by shape); without, kAuto compiles the
// recording as one piece that replays (today's speed), into `v`, and returns false.
bool Engine::first_lazy_call(Version& v, const Key& k, const std::vector<Arg>& args,
                             const TraceFn& fn, std::vector<Tensor>& outs) {
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
  v.user_arity = held.user_arity;
  v.state_slots = held.state_slots;
  v.num_user_outputs = r.outs.size();
  stats.pieces += add_single(v, r.graph, r.placeholders, r.outs);
  v.compile_ms += now_ms() - t0;
  return false;
}

// Traces fn into `v` (adding a path to its trace tree). Raises what the trace raised; the
// caller decides on the fallback. A function that assigns module buffers makes `v` eager-only.
void Engine::trace(Version& v, const std::vector<Arg>& args, const TraceFn& fn) {
  const double t0 = now_ms();
  Trace tr = trace_fn(v.key, args, fn, held);
  v.num_user_outputs = tr.num_user_outputs;
  v.num_state_outputs = tr.num_state_outputs;
  v.capture_writes = tr.capture_writes;
  if (tr.new_state) throw NewStateSlots{};
  for (auto& sg : tr.guards) v.shape_guards.push_back(std::move(sg));
  v.fn = fn;
  v.user_arity = held.user_arity;
  v.state_slots = held.state_slots;
  outputs_to_graph(tr);
  stats.graph_breaks += static_cast<int64_t>(tr.breaks.size());
  for (const auto& b : tr.breaks) {
    std::string line =
        str_cat(b.where, ": ", b.what, "() of a traced value -> graph break, guard on its value (",
                value_str(b.value), ")");
    if (std::find(break_log.begin(), break_log.end(), line) == break_log.end())
      break_log.push_back(line);
    if (log_breaks) std::cerr << "[jit] " << opts.name << ": " << line << "\n";
  }
  add_trace(v, tr);
  v.compile_ms += now_ms() - t0;
  ++stats.compiles;
}

// What a trace adds to its version: the compiled backward (calls that record gradients), then
// its one piece or a path of the trace tree, healed where it can be.
void Engine::add_trace(Version& v, Trace& tr) {
  if (any_grad(v.key)) {
    if (tr.breaks.empty()) {
      build_backward(v, tr.graph, tr.placeholders, tr.outs, opts.save_activations);
    } else if (opts.heal_breaks) {
      // The tree is kept to be healed; until then calls run eagerly.
      if (!v.grad_tree && !v.root) break_log.push_back(kBreakUntilHealed);
      v.grad_tree = true;
    } else {
      v.eager_only = true;
      v.eager_reason = "graph break under autograd";
      break_log.push_back(kBreakEager);
    }
  }
  if (v.eager_only) return;
  if (tr.breaks.empty() && !v.root) {
    stats.pieces += add_single(v, tr.graph, tr.placeholders, tr.outs);
  } else {
    stats.pieces += add_path(v, tr.graph, tr.breaks, tr.placeholders, tr.outs);
    if (opts.heal_breaks) heal_tree(v);
  }
}

// Heals v's trace tree (heal.h) and logs what it healed, or why not.
void Engine::heal_tree(Version& v) {
  const HealResult r = heal(v, opts.save_activations);
  stats.pieces += r.pieces;
  if (!r.refused.empty())
    break_log.push_back(str_cat("not healed (", r.refused, "): the trace tree stays"));
  if (!r.healed) return;
  stats.healed += static_cast<int64_t>(v.healed.size());
  for (const auto& w : v.healed) {
    break_log.push_back(str_cat(w, ": traced both ways -> healed into Switch/Merge"));
    if (log_breaks) std::cerr << "[jit] " << opts.name << ": healed " << w << "\n";
  }
}

}  // namespace kiln::detail::jit_engine
