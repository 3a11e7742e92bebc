// Internal: runs a callable on kiln::dist's communication thread, the one thread that may call
// MPI (MPI_THREAD_FUNNELED), in queue order with the collectives. For measuring raw MPI beside
// kiln::dist in the same run (bench/kiln_dist_bench.cpp) and for extensions that need another
// MPI call; the callable may use MPI_COMM_WORLD.
#pragma once
#include <functional>

#include "kiln/dist/dist.h"

namespace kiln::detail {

/// Queues fn behind every collective started so far; raises when no launcher started MPI.
dist::Work run_on_comm_thread(std::function<void()> fn);

}  // namespace kiln::detail
