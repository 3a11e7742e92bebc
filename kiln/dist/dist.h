// kiln::dist: collectives on tensors across processes over MPI (launched with mpirun), as
// torch.distributed: init from the launcher's environment, all_reduce, broadcast, all_gather,
// barrier, each with an asynchronous form returning a Work handle. One process without a
// launcher is a world of size 1 where every collective is a no-op. Built as libkiln_dist
// (links MPI); see docs/distributed.md.
#pragma once
#include <memory>
#include <string>

#include "kiln/core/tensor.h"

namespace kiln::dist {

enum class ReduceOp { Sum, Mean };

/// Starts the process group from the launcher's environment (OpenMPI's OMPI_COMM_WORLD_*, or
/// PMI_* for MPICH-style launchers); without one the world is this process alone. Idempotent.
/// Under a launcher it starts a communication thread (every MPI call runs there, so collectives
/// overlap the caller's work), a watchdog that ends the process with a message when one
/// collective takes longer than KILN_DIST_TIMEOUT seconds (default 300: a peer died or stopped
/// calling collectives), and a terminate handler that names the rank before aborting, so that
/// mpirun ends the other ranks instead of leaving them waiting.
void init();
/// Whether init() ran and found a launcher (world size may still be 1 under mpirun -np 1).
bool launched();
int rank();
int world_size();
/// Rank among the processes on this machine (for choosing a device or a core set).
int local_rank();
int local_world_size();
/// rank() == 0: the process that logs, shows progress and saves checkpoints.
inline bool is_main() { return rank() == 0; }
/// Seconds a collective may take before the watchdog ends the process (KILN_DIST_TIMEOUT).
double timeout_s();

/// A pending collective. wait() blocks until it completed (raising kiln::Error if it failed);
/// handles may be waited in any order, and a handle never waited is still completed in order.
class Work {
 public:
  Work() = default;
  void wait() const;
  bool completed() const;
  struct State;
  explicit Work(std::shared_ptr<State> s) : s_(std::move(s)) {}

 private:
  std::shared_ptr<State> s_;
};

/// In place: t becomes the sum (or mean) of t over every rank. t must be concrete, contiguous
/// and of the same shape and dtype on every rank; mean needs a floating dtype. On a symbolic
/// tensor (a graph being built, a jit trace) t is rebound to a collective node (kSideEffect),
/// so one training-step function runs eagerly, as a graph and under jit.
void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum);
/// Starts the reduction and returns at once; t must stay untouched until the handle completes.
Work all_reduce_async(Tensor& t, ReduceOp op = ReduceOp::Sum);
/// In place: t takes root's values on every rank.
void broadcast(Tensor& t, int root = 0);
Work broadcast_async(Tensor& t, int root = 0);
/// Every rank's t stacked along a new dim 0: [world_size, t.shape...]. The shapes and dtypes
/// must agree (checked: every rank raises naming the ranks that differ).
Tensor all_gather(const Tensor& t);
/// `out` must be a contiguous [world_size, t.shape...] tensor of t's dtype.
Work all_gather_async(const Tensor& t, Tensor& out);
void barrier();
Work barrier_async();

/// Calls MPI_Finalize (also done at exit). Collectives after it raise.
void finalize();

}  // namespace kiln::dist
