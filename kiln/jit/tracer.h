// The tracer: runs a jitted function on placeholders of a fresh graph, with the thread's
// host-read hook (a read is a graph break, or a shape guard when it compares symbolic sizes),
// nn::assign_buffer's hook (module buffers fn assigns) and the capture scope (tensors fn reads
// without taking them as arguments) in place. Internal to the JIT engine.
#pragma once
#include <vector>

#include "kiln/graph/graph.h"
#include "kiln/jit/guard_key.h"
#include "kiln/jit/shape_guard.h"
#include "kiln/jit/trace_tree.h"
#include "kiln/jit/version.h"

namespace kiln::detail::jit_engine {

/// What the engine holds across calls and feeds after the function's own arguments: the module
/// buffers fn assigns (nn::assign_buffer), then the tensors it captures (capture.h), by identity.
struct HeldState {
  std::vector<Tensor*> state_slots;
  std::vector<Tensor> captures;
  size_t user_arity = 0;  // the caller's own arguments, before the held ones
};

/// One trace of the function.
struct Trace {
  Graph graph;
  std::vector<Tensor> placeholders;  // in argument order (per tensor, list element, runtime scalar)
  /// fn's outputs (num_user_outputs), then the new values of the state slots
  /// (num_state_outputs), then those of the captures fn writes in place (capture_writes: their
  /// positions in HeldState::captures).
  std::vector<Tensor> outs;
  size_t num_user_outputs = 0, num_state_outputs = 0;
  std::vector<size_t> capture_writes;
  std::vector<BreakRec> breaks;
  std::vector<ShapeGuard> guards;  // size comparisons host code read
  /// The trace met module buffers or captures that are not inputs yet (now added to `held`):
  /// it must not be kept; the call is traced again with them fed.
  bool new_state = false;
};

/// Traces `fn` on placeholders for `args` shaped as `key` says (dynamic dims keep the call's
/// sizes as hints). The held state's buffers are fed from the trailing arguments and its
/// captures stand for their tensors; new ones are added to `held`. Raises what fn raised; the
/// hooks and every buffer's concrete value are put back whatever happens.
Trace trace_fn(const Key& key, const std::vector<Arg>& args, const TraceFn& fn, HeldState& held);

/// Makes the trace's outputs values of its graph: a concrete one becomes a constant; an
/// undefined one raises.
void outputs_to_graph(Trace& t);

}  // namespace kiln::detail::jit_engine
