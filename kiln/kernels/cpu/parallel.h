// parallel_for on OpenMP: Debian's oneDNN runs on libgomp, so sharing its threads avoids
// oversubscription. Small ranges run inline (a parallel region costs ~1-2 us). Also the guard
// that drops to one thread while other processes starve this one (LoadScope).
#pragma once
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>

#include "kiln/core/threads.h"

// libgomp is not built with ThreadSanitizer, so TSan does not see the synchronization at the
// fork and join of an OpenMP region: every value handed into or out of a region would be
// reported as a race. Under TSan, parallel_for states that happens-before edge itself (the
// master releases before the fork and each worker acquires; each worker releases after its
// chunk and the master acquires after the join), and its own accesses are not instrumented
// (the master fills the region's argument block after the release, which no annotation in the
// source can follow). f stays instrumented (GCC does not inline across the attribute), so the
// chunks are still checked against each other and against other threads. No cost in other
// builds.
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define KILN_TSAN_RELEASE(addr) __tsan_release(addr)
#define KILN_TSAN_ACQUIRE(addr) __tsan_acquire(addr)
#define KILN_NO_TSAN __attribute__((no_sanitize("thread")))
#else
#define KILN_TSAN_RELEASE(addr) ((void)(addr))
#define KILN_TSAN_ACQUIRE(addr) ((void)(addr))
#define KILN_NO_TSAN
#endif

namespace kiln {

/// Elements below which elementwise loops stay on one thread.
inline constexpr int64_t kParallelGrain = 32768;

// Oversubscription guard. libgomp's waiting threads spin ~3 ms (GOMP_SPINCOUNT 300000) before
// they sleep, and oneDNN splits its work statically: when another process holds one of the
// cores, a thread that finished its share spins while the one it waits for sits descheduled,
// and every region takes a scheduler slice (mobilenet_v3_small b32 at 2 threads beside two
// busy processes: 800-2000 ms a batch against 45 ms on one thread). Sleeping at once
// (OMP_WAIT_POLICY=passive) cures that but makes batch-1 models 4-5x slower when the host is
// idle, and libgomp reads its spin settings only at start-up. So Kiln measures instead: over
// windows of busy convolution work it compares the process's CPU time with wall time times
// its threads (spinning counts as CPU time, so only descheduling lowers it); under 0.75 the
// heavy kernels run on one thread for a back-off (200 ms, growing 4x to 5 s while the host
// stays busy), then the full count is tried again. On with KILN_LOAD_GUARD=1 (kiln-run and the
// inference benchmarks set it): off by default, because a thread count that follows the host's
// load makes training numbers load-dependent. Off when OMP_WAIT_POLICY or GOMP_SPINCOUNT is set
// (whoever set them chose how threads wait).

/// Whether the guard is on in this process (decided from the environment at its first use).
bool load_guard_enabled();

/// Whether heavy kernels run on one thread now because the host starves this process's
/// threads (one relaxed load and a steady-clock read).
bool load_guard_active();

/// Scope of one heavy kernel call (a convolution): feeds the guard's measurement and, while
/// the guard is active, runs OpenMP regions and oneDNN in the scope on one thread (the
/// caller's thread count is restored on exit, so get_num_threads does not see it). Nested
/// scopes and scopes inside a parallel region do nothing.
class LoadScope {
 public:
  LoadScope();
  ~LoadScope();
  LoadScope(const LoadScope&) = delete;
  LoadScope& operator=(const LoadScope&) = delete;

 private:
  int restore_ = 0;  // thread count to restore, 0 when unchanged
  bool counted_ = false, nested_ = false;
};

/// Calls f(begin, end) over [0, n) split into contiguous chunks, one per thread, when
/// n * cost_per_item is large enough; inline otherwise.
template <typename F>
KILN_NO_TSAN void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  int nt = omp_get_max_threads();
  if (nt <= 1 || n < grain || omp_in_parallel() || load_guard_active()) {
    f(int64_t(0), n);
    return;
  }
  int64_t chunks = std::min<int64_t>(nt, (n + grain - 1) / grain);
  // One chunk runs inline: a one-thread region is an inactive level, so an OpenMP region inside
  // f (oneDNN's sgemm under a batch-1 convolution's per-sample loop) became a nested team,
  // which libgomp starts afresh each time: 3.8 ms a call against 0.25 on one thread.
  if (chunks <= 1) {
    f(int64_t(0), n);
    return;
  }
  // An exception may not leave an OpenMP region (std::terminate): the first one thrown by any
  // chunk is kept and rethrown after the region, so a kernel's kiln::Error (an index out of
  // range) or a failed allocation reaches the caller as it does on one thread.
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  char fork = 0, join = 0;  // TSan sync addresses (see above)
  KILN_TSAN_RELEASE(&fork);
#pragma omp parallel num_threads(static_cast <int>(chunks))
  {
    KILN_TSAN_ACQUIRE(&fork);
    int64_t t = omp_get_thread_num();
    int64_t per = (n + chunks - 1) / chunks;
    int64_t b = t * per, e = std::min(n, b + per);
    if (b < e) {
      try {
        f(b, e);
      } catch (...) {
        if (!failed.exchange(true)) error = std::current_exception();
      }
    }
    KILN_TSAN_RELEASE(&join);
  }
  KILN_TSAN_ACQUIRE(&join);
  if (error) std::rethrow_exception(error);
}

/// Runs f(thread, threads, barrier) on up to `threads` OpenMP threads at once (the team may be
/// smaller: f partitions by the `threads` it is given); barrier() waits for the whole team (an
/// OpenMP barrier whose happens-before edge TSan sees, as parallel_for's fork and join). For
/// loops whose steps depend on each other (a recurrent layer's time steps): one region for all
/// of them instead of one per step. f must not throw (an exception cannot leave the region).
template <typename F>
KILN_NO_TSAN void parallel_team(int threads, F&& f) {
  char fork = 0, sync = 0, join = 0;  // TSan sync addresses
  auto barrier = [&sync] {
    KILN_TSAN_RELEASE(&sync);
#pragma omp barrier
    KILN_TSAN_ACQUIRE(&sync);
  };
  if (threads <= 1 || omp_in_parallel()) {
    f(0, 1, [] {});
    return;
  }
  KILN_TSAN_RELEASE(&fork);
#pragma omp parallel num_threads(threads)
  {
    KILN_TSAN_ACQUIRE(&fork);
    f(omp_get_thread_num(), omp_get_num_threads(), barrier);
    KILN_TSAN_RELEASE(&join);
  }
  KILN_TSAN_ACQUIRE(&join);
}

}  // namespace kiln
