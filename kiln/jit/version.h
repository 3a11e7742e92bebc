// A compiled version of a jitted function: its trace tree of pieces and the sessions that replay
// it, shared by the engine (engine.h) and the jit_call op that takes gradients through it
// (jit_call.cpp). Internal.
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kiln/exec/session.h"
#include "kiln/graph/graph.h"
#include "kiln/jit/arg.h"
#include "kiln/jit/guard_key.h"
#include "kiln/jit/lazy.h"
#include "kiln/jit/shape_guard.h"
#include "kiln/registry/op_def.h"

namespace kiln::detail::jit_engine {

struct Step {
  const OpDef* op;
  Attrs attrs;
  std::vector<int> in, out;
  std::vector<int> free_after;     // slots whose last use is this step (single-piece traces)
  std::vector<SizePatch> patches;  // symbolic sizes: the last patches.size() inputs (node.h)
};

struct TreeNode {
  std::vector<Step> steps;
  std::vector<std::pair<int, Tensor>> constants;
  int64_t nodes = 0;
  // Interior: the guard read at the end of this piece.
  int guard_slot = -1;
  std::string guard_what, guard_where;
  std::vector<std::pair<Tensor, std::unique_ptr<TreeNode>>> children;
  // Leaf: the outputs.
  bool leaf = false;
  std::vector<int> out_slots;
};

struct Version {
  Key key;
  // Comparisons of symbolic sizes the host code made (shape_guard.h): checked on every call's
  // argument shapes, after the key.
  std::vector<ShapeGuard> shape_guards;
  int num_slots = 0;
  std::vector<std::vector<int>> arg_slots;  // per arg, per tensor
  std::unique_ptr<TreeNode> root;
  std::vector<Tensor> slots;
  // Autodiff (single-piece traces with inputs requiring grad).
  bool with_grad = false;
  bool has_random = false;  // the backward's recomputed forward must replay the same draws
  Graph graph;
  std::vector<Tensor> g_inputs, g_outputs, g_out_grads, g_in_grads;
  std::unique_ptr<Session> bwd_session;
  // Saved activations (JitOptions::save_activations): the forward also returns the values of
  // its nodes that the backward reads (hidden outputs of jit_call, kept by the autograd node),
  // and the backward is a graph of its own fed with them instead of recomputing the forward.
  bool saved_ok = false;
  std::vector<Tensor> saved;                   // in `graph`: the forward values the backward reads
  std::unique_ptr<Session> fwd_saved_session;  // `graph`: outputs + saved
  Graph bwd_graph;
  std::vector<Tensor> s_inputs, s_out_grads, s_saved, s_in_grads;  // in bwd_graph
  std::unique_ptr<Session> bwd_saved_session;
  // A single-piece trace without side effects or control flow replays through a Session: the
  // same bound plan as static graphs (op outputs at planned offsets in one arena, no per-op
  // allocation in the steady state). fwd_feeds holds one pair per traced placeholder, in the
  // order assign_arg_slots walks the arguments; only the values change between calls.
  std::unique_ptr<Session> fwd_session;
  FeedDict fwd_feeds;
  std::vector<Tensor> fwd_outs;
  bool fwd_donating = false;  // whether fwd_session has the donated placeholders set
  // Outputs past the function's own are the new values of the engine's state slots (module
  // buffers fn assigns), written back after every call.
  size_t num_user_outputs = 0;
  // After the state slots' outputs: the new values of captured tensors fn writes in place
  // (positions in the engine's captures), copied back into them after every call.
  size_t num_state_outputs = 0;
  std::vector<size_t> capture_writes;
  // For a backward the compiled graph cannot run (a size its trace assumed): the function, how
  // many arguments are its own, and the buffers it assigns, to take the gradient eagerly.
  std::function<std::vector<Tensor>(const std::vector<Arg>&)> fn;
  size_t user_arity = 0;
  std::vector<Tensor*> state_slots;
  double compile_ms = 0;
  // Host code reruns on every call (JitOptions::host_code): the compiled pieces by structure.
  std::unique_ptr<LazyCache> lazy;
  bool eager_only = false;  // runs fn eagerly (why: eager_reason)
  // A trace tree recorded under autograd, kept only until it heals (JitOptions::heal_breaks):
  // calls run fn eagerly meanwhile, and a call along an untraced branch traces it.
  bool grad_tree = false;
  int64_t grad_tree_calls = 0;  // calls since, to space out the checks for an untraced branch
  // The breaks joined into Switch/Merge: "what() at where", for explain() and to_mermaid().
  std::vector<std::string> healed;
  std::string eager_reason;
  // The trace of a single-piece version as traced (before optimization), for save_jit.
  Graph traced_graph;
  std::vector<Tensor> traced_phs, traced_outs;
  ~Version();
};

/// A compiled version as kiln::onnx saves it (Engine::traced_version): the traced graph before
/// optimization, its placeholders in argument order (per tensor, per list element, per runtime
/// scalar), the function's outputs, and the guard key; or `refusal`, why it cannot be saved.
struct TracedVersion {
  std::string name;  ///< JitOptions::name
  Graph graph;
  std::vector<Tensor> placeholders, outputs;
  Key key;
  std::string refusal;
};

/// Makes `v` reachable from jit_call nodes; returns its id (the node's "version" attribute).
int64_t register_version(Version& v);
/// The op a call that records gradients runs: its backward runs the version's compiled
/// backward graph (or fn again eagerly where that graph cannot run).
const OpDef& jit_call_op();
/// The call's arguments from jit_call's inputs, in the version's key order (a runtime scalar
/// travels as a 0-d tensor, a constant scalar is the guarded value).
std::vector<Arg> args_from_inputs(const Version& v, std::span<const Tensor> tensors);
/// Replays `v` on jit_call's inputs (defined with the engine).
TensorList run_version_plain(Version& v, std::span<const Tensor> tensors);

}  // namespace kiln::detail::jit_engine
