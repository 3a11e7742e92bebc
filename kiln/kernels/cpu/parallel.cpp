// The oversubscription guard of parallel.h: measures whether other processes starve this one's
// threads and, while they do, runs heavy kernels on one thread.
#include "kiln/kernels/cpu/parallel.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace kiln {
namespace {

constexpr int64_t kMs = 1000000;
// A window is judged after this much busy wall time: long enough for the scheduler's fairness
// (slices of a few ms) to show, short enough that a probe on a busy host costs little.
constexpr int64_t kWindow = 20 * kMs;
// A gap this long between two scopes may be the process doing something else (Python, I/O,
// idle between requests), where OpenMP's waiting threads sleep (libgomp spins ~3 ms first), or
// this thread sitting descheduled: the window's wall time leaves it out either way (its CPU
// time, if any, stays in, which only makes the guard slower to engage). Restarting the window
// instead never judged one on a busy host, whose gaps are mostly descheduled time.
constexpr int64_t kMaxGap = 3 * kMs;
// A window that has waited this long is stale: it restarts.
constexpr int64_t kStale = 1000 * kMs;
// A probe at full threads on a busy host costs one window at the cliff's pace (50-250 ms with
// mobilenet_v3_small b32, whose ops take that long there), so the back-off grows fast.
constexpr int64_t kFirstBackoff = 200 * kMs, kMaxBackoff = 5000 * kMs;
// CPU time over (wall x threads) below which the threads count as starved. An idle host gives
// 0.95-1.0 (waiting threads spin); one other busy process on two cores gives ~0.67.
constexpr double kStarved = 0.75;

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t process_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// 0 off, 1 on, 2 on and each judged window printed to stderr. Off unless asked for: a changed
// thread count changes how oneDNN splits a convolution's reductions (the weight gradient's
// over the batch), so with the guard a training run's numbers would depend on the host's load,
// and a jitted step would drift from its eager twin (Adam amplifies the last bits). kiln-run
// and the inference benchmarks turn it on; KILN_LOAD_GUARD=1 does for any program.
int guard_mode() {
  static const int mode = [] {
    const char* g = std::getenv("KILN_LOAD_GUARD");
    if (!g || std::strcmp(g, "0") == 0) return 0;
    if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return 0;
    return std::strcmp(g, "2") == 0 ? 2 : 1;
  }();
  return mode;
}

std::atomic<int64_t> g_active_until{0};  // steady ns; the guard is active before it
std::atomic<int64_t> g_last_exit{0};
std::mutex g_mu;  // the window below
int64_t g_win_wall = -1, g_win_cpu = 0, g_win_gaps = 0, g_backoff = kFirstBackoff;
int g_win_threads = 0;
thread_local int t_depth = 0;

// Called on entry to an outermost scope while the guard is inactive; returns whether the guard
// has just become active.
bool observe(int64_t now) {
  std::unique_lock<std::mutex> lock(g_mu, std::try_to_lock);
  if (!lock.owns_lock()) return false;  // another thread is judging; its verdict will do
  const int nt = omp_get_max_threads();
  const int64_t gap = now - g_last_exit.load(std::memory_order_relaxed);
  if (nt <= 1) {
    g_win_wall = -1;
    return false;
  }
  if (g_win_wall < 0 || gap > kStale || nt != g_win_threads) {
    g_win_wall = now;
    g_win_cpu = process_cpu_ns();
    g_win_gaps = 0;
    g_win_threads = nt;
    return false;
  }
  if (gap > kMaxGap) g_win_gaps += gap;
  const int64_t busy = now - g_win_wall - g_win_gaps;
  if (busy < kWindow) return false;
  const int64_t cpu = process_cpu_ns();
  const double ratio = double(cpu - g_win_cpu) / (double(busy) * nt);
  const bool starved = ratio < kStarved;
  if (guard_mode() == 2)
    std::fprintf(stderr,
                 "[load_guard] window %.1f ms (+%.1f ms of gaps), %d threads, cpu/wall %.2f%s\n",
                 double(busy) / kMs, double(g_win_gaps) / kMs, nt, ratio,
                 starved ? ", starved: one thread" : "");
  if (starved) {
    g_active_until.store(now + g_backoff, std::memory_order_relaxed);
    g_backoff = std::min(g_backoff * 4, kMaxBackoff);
    g_win_wall = -1;  // the next window starts when the back-off ends
    return true;
  }
  g_backoff = kFirstBackoff;
  g_win_wall = now;
  g_win_cpu = cpu;
  g_win_gaps = 0;
  return false;
}

}  // namespace

bool load_guard_enabled() { return guard_mode() != 0; }

bool load_guard_active() {
  if (guard_mode() == 0) return false;
  const int64_t until = g_active_until.load(std::memory_order_relaxed);
  return until != 0 && steady_ns() < until;
}

LoadScope::LoadScope() {
  if (guard_mode() == 0 || omp_in_parallel()) return;
  if (t_depth++ > 0) {
    nested_ = true;
    return;
  }
  counted_ = true;
  const int64_t now = steady_ns();
  const bool active = now < g_active_until.load(std::memory_order_relaxed) || observe(now);
  if (active) {
    const int nt = omp_get_max_threads();
    if (nt > 1) {
      restore_ = nt;
      omp_set_num_threads(1);
    }
  }
}

LoadScope::~LoadScope() {
  if (restore_) omp_set_num_threads(restore_);
  if (nested_) --t_depth;
  if (!counted_) return;
  --t_depth;
  g_last_exit.store(steady_ns(), std::memory_order_relaxed);
}

}  // namespace kiln
