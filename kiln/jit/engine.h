// The engine behind a jitted function: what it holds across calls (versions, held state, stats
// and logs) and its policy, which version serves a call and when to trace, recompile or run
// eagerly (engine.cpp; compiling a version is compile_version.cpp's). The work itself is by
// concept: tracer.h traces, trace_tree.h lays out pieces, replay.h runs them, heal.h joins bool
// breaks, compiled_backward.h differentiates, lazy.h reruns host code; explain.cpp and
// traced_version.cpp say what the engine holds. Internal.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/jit/arg.h"
#include "kiln/jit/guard_key.h"
#include "kiln/jit/jit.h"
#include "kiln/jit/tracer.h"
#include "kiln/jit/version.h"

namespace kiln::detail::jit_engine {

/// A trace (or lazy recording) met module buffers or captures that are not inputs yet: the call
/// is traced again with them fed (their values would otherwise be constants of the trace).
struct NewStateSlots {};

/// Milliseconds on a monotonic clock (compile times).
double now_ms();

/// The engine behind a JitCallable (which holds it as JitCallable::Impl, below).
struct Engine {
  // Calls with concrete arguments, stats() and explain() hold it: the versions, their slot
  // tables and feeds, the stats and logs are shared by every call. Recursive: fn may call its
  // own jitted function (eagerly, on a fallback) on the same thread.
  mutable std::recursive_mutex mu;
  JitOptions opts;
  std::vector<std::unique_ptr<Version>> versions;  // newest first
  JitStats stats;
  std::vector<std::string> recompile_log, break_log;
  // Module buffers fn assigns, fed as arguments after the user's own and written back from the
  // outputs after num_user_outputs; then captured tensors fed as inputs (tracer.h).
  HeldState held;
  bool warned_fallback = false;
  std::string fallback_reason;
  bool fallback_unstable = false;  // eager because captured state changed on every trace
  bool verify = false;             // KILN_JIT_VERIFY
  bool log_recompiles = false, log_breaks = false;  // KILN_JIT_LOG

  explicit Engine(JitOptions o);

  // ---- the call (engine.cpp) ----
  std::vector<Tensor> call(const std::vector<Arg>& user_args, const TraceFn& fn);
  std::vector<Tensor> call_ext(const std::vector<Arg>& user_args, const TraceFn& fn);
  /// The first version whose guards accept the call (its key `k`, then its shape guards), or
  /// null; the first shape guard that failed goes to *guard_failed (the recompile's reason).
  Version* find_version(const Key& k, const std::vector<Arg>& args, std::string* guard_failed);
  std::vector<Tensor> call_hit(Version& v, const Key& k, const std::vector<Arg>& args,
                               const TraceFn& fn);
  std::vector<Tensor> call_miss(const Key& k, const std::string& guard_failed,
                                const std::vector<Arg>& args, const TraceFn& fn);
  std::vector<Tensor> call_grad_tree(Version& v, const std::vector<Arg>& args, const TraceFn& fn);
  std::vector<Tensor> call_with_grad(Version& v, const std::vector<Arg>& args);
  std::vector<Tensor> recover(Version& v, const Key& k, const std::vector<Arg>& args,
                              const TraceFn& fn, const std::string& why);
  std::vector<Tensor> eager_instead(const Key& k, const std::vector<Arg>& args, const TraceFn& fn,
                                    const std::string& why);
  void finish(const Version& v, std::vector<Tensor>& outs) const;
  void take_lazy_captures(const LazyResult& r);
  void verify_outputs(const std::vector<Arg>& args, const TraceFn& fn,
                      const std::vector<Tensor>& outs);
  bool budget_ok(const std::string& reason);
  void log_recompile(const std::string& reason);

  // ---- compiling a version (compile_version.cpp) ----
  std::vector<Tensor> compile_and_run(const Key& nk, const Key& k, const std::vector<Arg>& args,
                                      const TraceFn& fn);
  bool first_lazy_call(Version& v, const Key& k, const std::vector<Arg>& args, const TraceFn& fn,
                       std::vector<Tensor>& outs);
  void trace(Version& v, const std::vector<Arg>& args, const TraceFn& fn);
  void add_trace(Version& v, Trace& tr);
  void heal_tree(Version& v);

  // ---- what it holds, said (explain.cpp, traced_version.cpp) ----
  JitStats stats_now() const;
  std::string explain() const;
  std::string to_mermaid() const;
  TracedVersion traced_version(const std::vector<Arg>& args) const;
};

}  // namespace kiln::detail::jit_engine

namespace kiln {

/// The engine as a JitCallable holds it: the public header names it without reaching into
/// detail (kiln::onnx's save_jit takes it as the Engine it is).
struct JitCallable::Impl final : detail::jit_engine::Engine {
  using Engine::Engine;
};

}  // namespace kiln
