// The one switch every op call goes through: run now (eager), or hand to the active symbolic
// handler (graph building, JIT tracing). Autograd recording is hooked in by kiln/autograd.
#pragma once
#include <initializer_list>
#include <span>

#include "kiln/dispatch/grad_mode.h"
#include "kiln/registry/op_def.h"

namespace kiln::detail {

/// Receives op calls whose inputs are symbolic, or every call while installed as the capturing
/// handler (tracing). Implemented by kiln/graph and kiln/jit.
class SymbolicHandler {
 public:
  virtual ~SymbolicHandler() = default;
  virtual TensorList handle(const OpDef& op, std::span<const Tensor> inputs,
                            const Attrs& attrs) = 0;
};
/// Handler for calls with a symbolic input (thread-local); returns the previous one.
SymbolicHandler* set_symbolic_handler(SymbolicHandler* h);
SymbolicHandler* symbolic_handler();
/// The process-wide handler for symbolic inputs when no thread-local one is set (kiln/graph
/// installs the graph builder here).
void set_graph_handler(SymbolicHandler* h);
/// When true, every op call goes to the handler even with concrete inputs (tracing).
void set_capture_all(bool on);
/// The op whose output a symbolic tensor is (null for concrete tensors, graph inputs and
/// variables): lets a gradient rule pick the layout a graph's value will have, as it reads
/// strides on concrete tensors. kiln/graph installs the lookup.
const OpDef* producer_op(const Tensor& t);
void set_producer_hook(const OpDef* (*hook)(const Tensor&));

/// The sizes a symbolic tensor had in the trace that built it (a JIT traces with concrete
/// arguments at hand): a dynamic dim's hint. Empty when unknown (a graph built by hand with
/// Dim::any() placeholders). kiln/graph installs the lookup.
Shape hint_shape(const Tensor& t);
void set_hint_hook(Shape (*hook)(const Tensor&));

/// An op call with symbolic size attributes (kiln/ops/sym_int.h): `inputs` ends with one 0-d
/// int64 symbolic tensor per patch, `attrs` holds the traced values. Goes to the symbolic
/// handler, whose graph builder gives the node those patches (take_patches).
TensorList call_patched(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                        std::span<const SizePatch> patches);
/// The patches of the call_patched call in progress for `op` (empty for an ordinary call); the
/// graph builder takes them once.
std::vector<SizePatch> take_patches(const OpDef& op);

/// `attrs` with the values of the size inputs (0-d integer tensors, concrete) of `patches`
/// written in.
Attrs resolve_patches(const Attrs& attrs, std::span<const SizePatch> patches,
                      std::span<const Tensor> sizes);
/// Runs a graph node's op: `ins` are its op inputs followed by one size input per patch.
/// Concrete sizes are written into the attributes; with symbolic ones (the node copied into
/// another graph or trace) the call stays patched.
TensorList call_node(const OpDef& op, std::span<const Tensor> ins, const Attrs& attrs,
                     std::span<const SizePatch> patches);
/// Eager form of call_node for executors (run_kernel with the sizes resolved).
TensorList run_node_kernel(const OpDef& op, std::span<const Tensor> ins, const Attrs& attrs,
                           std::span<const SizePatch> patches);

/// Whether op calls on this thread are being captured (a JIT trace is in progress): code with
/// an eager-only fast path (writing into tensors directly) must take the op path then.
bool capturing();

/// Called after an eager op ran with grad mode on and an input requiring grad.
using AutogradRecorder = void (*)(const OpDef& op, std::span<const Tensor> inputs,
                                  std::span<Tensor> outputs, const Attrs& attrs);
void set_autograd_recorder(AutogradRecorder r);
/// An in-place write with autograd (see op_util::write_in_place): `result` was computed out of
/// place (and recorded when it requires grad); `write` puts its values into `self`. The writer
/// makes the node read snapshots of what it saved from `self`'s storage, runs `write`, and gives
/// `self` (and, for a view, its base) their new histories. Installed by kiln/autograd.
using InplaceWriter = void (*)(const char* name, Tensor& self, const Tensor& result,
                               void (*write)(void* ctx), void* ctx);
void set_inplace_writer(InplaceWriter w);
InplaceWriter inplace_writer();
/// Gives a view whose storage was written since its identity was set a fresh identity from its
/// base (called by the dispatcher before recording an op that reads it). Installed by
/// kiln/autograd.
using ViewRefresher = void (*)(const Tensor& view);
void set_view_refresher(ViewRefresher r);

/// Runs `op` on `inputs`: checks, infers, allocates, runs the kernel, records autograd.
TensorList call(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs = {});
inline TensorList call(const OpDef& op, std::initializer_list<Tensor> inputs,
                       const Attrs& attrs = {}) {
  return call(op, std::span<const Tensor>(inputs.begin(), inputs.size()), attrs);
}
/// Single-output form.
Tensor call1(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs = {});
inline Tensor call1(const OpDef& op, std::initializer_list<Tensor> inputs,
                    const Attrs& attrs = {}) {
  return call1(op, std::span<const Tensor>(inputs.begin(), inputs.size()), attrs);
}
/// Eager execution only (no handler check, no autograd): used by executors and folding.
TensorList run_kernel(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs);
/// Runs op.kernel into outputs allocated from its inferred metas: every kernel call (eager,
/// Session, JIT replay, fusion members, in-place) goes through here. An input or output of a
/// reduced dtype the kernel does not take natively (OpDef::native_dtypes) is computed in
/// compute_dtype: inputs are cast up, the kernel writes wider temporaries, and those are cast
/// into `outputs`.
void invoke_kernel(const OpDef& op, std::span<const Tensor> inputs, std::span<Tensor> outputs,
                   const Attrs& attrs);

/// For composite ops with an autocast policy (cross_entropy and the losses built from primitives
/// with float32 semantics): `t` cast as `policy` says while autocast is on (a recorded cast op),
/// else `t` itself. Primitives get the same from their OpDef::autocast field.
Tensor autocast_arg(AutocastPolicy policy, const Tensor& t);
/// The dtype an input of dtype `d` reaches an op of `policy` with (d when autocast is off): for
/// wrappers that check their arguments' dtypes before dispatching.
DType autocast_input_dtype(AutocastPolicy policy, DType d);
/// Sets this thread's autocast state directly (Python's kiln.autocast saves and restores it
/// around its scope); checks the dtype as AutocastGuard does (kiln/dispatch/autocast.h).
void set_autocast_state(bool enabled, DType dtype);

/// Counts kernel executions on this thread (for tests and profiling).
uint64_t eager_op_count();

}  // namespace kiln::detail
