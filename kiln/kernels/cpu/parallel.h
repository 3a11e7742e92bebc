// parallel_for on OpenMP: Debian's oneDNN runs on libgomp, so sharing its threads avoids
// oversubscription. Small ranges run inline (a parallel region costs ~1-2 us).
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

/// Calls f(begin, end) over [0, n) split into contiguous chunks, one per thread, when
/// n * cost_per_item is large enough; inline otherwise.
template <typename F>
KILN_NO_TSAN void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  int nt = omp_get_max_threads();
  if (nt <= 1 || n < grain || omp_in_parallel()) {
    f(int64_t(0), n);
    return;
  }
  int64_t chunks = std::min<int64_t>(nt, (n + grain - 1) / grain);
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

}  // namespace kiln
