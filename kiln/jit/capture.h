// Captured state of a JIT trace (docs/jit.md, "Captured state"): tensors the traced function
// reads that are not its arguments (a closure's parameters, a module's buffers, a global) and
// in-place writes into them. Internal to the JIT engine (tracer.cpp traces, lazy.cpp records).
//
// While a trace runs, every op call on the thread comes here (the capturing handler). A concrete
// input that the trace did not make and that is state (it requires grad, has more than
// kSmallCapture elements, or is written in place) is *captured*: a known capture is replaced by
// its graph input, a new one is noted (the engine traces again with it as an input). An
// in-place write into a concrete tensor (copy_, add_, ...) is recorded instead of done: the
// tensor's value in the rest of the trace is the written one, and for captured state the new
// value becomes an output that the engine copies back into the tensor after every call.
#pragma once
#include <functional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kiln/dispatch/dispatch.h"
#include "kiln/graph/graph.h"

namespace kiln::detail::jit_engine {

/// Captured tensors up to this many elements that neither require grad nor are written stay
/// constants of the trace (a module's scalars): compiled in, folded. Anything larger may be
/// written between calls (BatchNorm's running statistics of 32 channels, a frozen weight), so it
/// is an input.
constexpr int64_t kSmallCapture = 1;

class CaptureScope final : public SymbolicHandler {
 public:
  /// `g`: the graph being traced. `known`: captured tensors already inputs, with their graph
  /// values. `lazy`: a lazy recording (see need_trace).
  CaptureScope(Graph g, const std::vector<std::pair<Tensor, Tensor>>& known, bool lazy);
  ~CaptureScope() override;
  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;

  TensorList handle(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs) override;
  /// The write hook's work (kiln/ops/traced_write.h).
  bool write(Tensor& self, const Tensor& value);

  /// New captures met (not yet inputs), in the order met.
  std::vector<Tensor> found;
  /// A lazy recording met a capture that requires grad (under grad mode) or a write into
  /// captured state: its result must not be kept; the engine traces the call instead.
  bool need_trace = false;
  /// Captured tensors written in place, in the order first written, with their final values.
  std::vector<Tensor> written;
  /// The graph value that stands for a concrete tensor now (its input, or a value written).
  std::unordered_map<const TensorImpl*, Tensor> value;
  /// Drops from `found` the tensors that nothing but the trace holds any more (made during the
  /// trace without an op: Tensor::from_vector, a Python literal): they stay constants.
  void drop_temporaries();
  /// Suspends capturing (a piece compiled and run at a graph break) for its lifetime.
  struct Pause {
    Pause();
    ~Pause();
    CaptureScope* scope;
    SymbolicHandler* handler;
  };

 private:
  bool liftable(const Tensor& t) const;
  void note(const Tensor& t);
  Graph g_;
  bool lazy_;
  std::unordered_set<const TensorImpl*> made_;  // op outputs the trace made eagerly
  std::unordered_set<const TensorImpl*> known_;
  std::vector<Tensor> hold_;  // locals of the trace written in place
  SymbolicHandler* prev_handler_;
  CaptureScope* prev_scope_;
  void* prev_hook_;
};

/// The scope of the trace running on this thread (null when none).
CaptureScope* capture_scope();

}  // namespace kiln::detail::jit_engine
