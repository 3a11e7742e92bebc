// Session: runs a Graph define-then-run style. Per set of fetches and fed placeholders it prunes,
// optimizes and plans once (a flat list of kernel steps over value slots), then runs that plan
// many times. Variables live in the Session and survive across runs.
//
// Thread safety: every member function may be called from several threads at once. Runs are
// serialized (one mutex per Session): a plan's arena and the Session's variables are shared
// state, so concurrent runs of one Session take turns; for runs in parallel use one Session per
// thread (each has its own variables). The Graph must not be changed while a Session runs it.
#pragma once
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/cancellation.h"  // a run stops at request_interrupt() (Ctrl-C from Python)
#include "kiln/graph/graph.h"

namespace kiln {

/// {placeholder, value} pairs: `sess.run(y, {{x, xb}, {y_, yb}})`.
using FeedDict = std::vector<std::pair<Tensor, Tensor>>;

struct RunStats {
  int64_t nodes_executed = 0;   ///< kernels run in the last run()
  int64_t plan_steps = 0;       ///< steps in the plan used
  std::string passes;           ///< what the optimizer did when the plan was built
  int64_t arena_bytes = 0;      ///< planned arena of the plan in use (0 until it is bound)
  int64_t unplanned_bytes = 0;  ///< what its planned buffers would take without reuse
  int64_t donated_writes = 0;   ///< results written into donated feeds' buffers (set_donated)
  /// Concatenation inputs of the plan in use that their producers write where they land in the
  /// result, so the concatenation copies nothing (batch-1 channel concatenations).
  int64_t pieces_in_place = 0;
  /// Feeds with dynamic dims: times the plan in use was laid out again by symbol for new feed
  /// shapes (arena offsets evaluated, no generic run, no new plan), and whether this run was.
  int64_t relayouts = 0;
  bool relaid_out = false;
};

class Session {
 public:
  /// Verifies the graph and initializes every variable from its initial value.
  explicit Session(const Graph& g);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// Computes the fetches (only the subgraph they need) and returns concrete tensors.
  /// Between steps (and while_loop iterations) it polls request_interrupt(): an interrupted run
  /// throws kiln::Interrupted before its first variable write and leaves the Session usable.
  std::vector<Tensor> run(const std::vector<Tensor>& fetches, const FeedDict& feeds = {});
  /// `run({y}, feeds)` and `run({a, b}, feeds)`: a braced list is a list of fetches, also with
  /// one element (without this overload `{y}` would pick the single-tensor form below).
  std::vector<Tensor> run(std::initializer_list<Tensor> fetches, const FeedDict& feeds = {}) {
    return run(std::vector<Tensor>(fetches), feeds);
  }
  Tensor run(const Tensor& fetch, const FeedDict& feeds = {});

  /// Placeholders whose fed tensors a run may overwrite (JAX's donated buffers; the JIT's
  /// JitOptions::donate): a fetched result that an in-place-capable kernel (elementwise ops,
  /// addmm's accumulation) computes from a donated feed, read there for the last time, is
  /// written into that feed's buffer and returned aliasing it. Only replays of a bound plan do
  /// this, and only with a contiguous feed that shares storage with no other feed and no
  /// variable. The caller must not rely on a donated tensor's contents after a run. An empty
  /// list donates nothing (the default).
  void set_donated(const std::vector<Tensor>& placeholders);
  /// Dead values cross the run's boundary instead of raising: a fetch on the untaken side of a
  /// Switch comes back as a dead tensor (Tensor::is_dead(), with the value's dtype and shape),
  /// and a dead tensor fed to a placeholder makes it dead in the run. The JIT's backward that is
  /// fed saved activations of a forward with Switch/Merge relies on it. Off by default.
  void set_dead_passthrough(bool on) { dead_passthrough_ = on; }
  /// Current value of a variable (a copy).
  Tensor variable(const std::string& name) const;
  /// Overwrites a variable's value (shape and dtype must match).
  void set_variable(const std::string& name, const Tensor& value);
  /// Statistics of the most recent run (of any thread).
  RunStats last_run() const;
  /// Number of distinct plans built so far (one per fetch/feed signature).
  size_t plans_built() const;

  struct Plan;

 private:
  Plan& plan_for(const std::vector<Tensor>& fetches, const FeedDict& feeds);
  Plan& cached_plan(const std::vector<Tensor>& fetches, const FeedDict& feeds);
  bool feeds_match(const Plan& p) const;
  void run_generic(Plan& p);
  void bind(Plan& p);
  bool relayout(Plan& p);
  void run_bound(Plan& p);
  // Held by every public member function: the members below are the state of the run in
  // progress (feed_of_, generic_slots_, the plans' arenas) or shared across runs.
  mutable std::mutex mu_;
  Graph graph_;
  // The last plan used and the tensors that selected it (a repeat run skips the lookup), each
  // by its graph node's identity and output index.
  Plan* last_plan_ = nullptr;
  std::vector<std::pair<const void*, int>> last_fetches_, last_feed_keys_;
  std::vector<const Tensor*> feed_of_;  // per placeholder of the plan in use
  std::vector<Tensor> generic_slots_;
  std::map<std::string, Tensor> vars_;
  std::vector<std::string> donated_;  // placeholder names (set_donated)
  bool dead_passthrough_ = false;
  int64_t donated_gen_ = 0;  // bumped by set_donated; plans recheck their mask
  std::map<std::string, std::unique_ptr<Plan>> plans_;
  RunStats stats_;
};

}  // namespace kiln
