// Size-class caching allocator: power-of-two classes below 1 MiB, 2 MiB granules above (mmap'd,
// MADV_HUGEPAGE). One mutex behind a per-thread front cache, so the eager hot path takes no lock.
#include "kiln/core/allocator.h"

#include <sys/mman.h>

#include <atomic>
#include <bit>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/tls.h"

namespace kiln {
namespace {

constexpr size_t kLargeThreshold = size_t(1) << 20;
constexpr size_t kHugeGranule = size_t(2) << 20;
constexpr size_t kMaxCachedBytes = size_t(8) << 30;

struct Pool {
  std::mutex mu;
  std::vector<void*> small[21];  // classes 64 B .. 1 MiB (2^6 .. 2^20)
  std::unordered_map<size_t, std::vector<void*>> large;
  AllocatorStats stats;
};

Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: tensors may be freed during static teardown
  return *p;
}

int small_class(size_t n) {  // smallest k with 64 << k >= n
  return n <= 64 ? 0 : std::bit_width(n - 1) - 6;
}

void* system_alloc(size_t cap) {
  if (cap >= kLargeThreshold) {
    void* p = mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    madvise(p, cap, MADV_HUGEPAGE);
#endif
    return p;
  }
  void* p = std::aligned_alloc(64, cap);
  if (!p) throw std::bad_alloc();
  return p;
}

void system_free(void* p, size_t cap) {
  if (cap >= kLargeThreshold)
    munmap(p, cap);
  else
    std::free(p);
}

// Per-thread front cache for small blocks: the eager hot path takes no lock. Blocks freed on
// another thread simply join that thread's cache; overflow goes to the shared pool. The cache is
// plain data (trivially constructed and destroyed), so an access is one %fs-relative load with
// no TLS-init call; a separate thread_local with a destructor, armed the first time the cache
// keeps a block, hands the blocks to the pool when the thread ends.
constexpr size_t kThreadCacheMax = 32;
constexpr size_t kThreadCacheBytes = size_t(256) << 10;
constexpr int kThreadCacheClasses = 13;  // 64 B .. 256 KiB

std::atomic<int64_t> g_in_use{0};
std::atomic<int64_t> g_peak{0};

thread_local bool t_cache_alive KILN_TLS = true;

struct ThreadCache {
  void* small[kThreadCacheClasses][kThreadCacheMax];
  uint32_t n[kThreadCacheClasses];
  uint64_t hits;
  uint64_t bytes;  // held here; counted in allocator_stats() for this thread only
};
// The cache itself lives on the heap, created by the thread's first cached_free: a 3.4 KiB
// initial-exec thread_local made libkiln's static TLS 4.3 KiB, more than glibc keeps spare for
// libraries loaded after start-up, so `import kiln` (which dlopens libkiln through the Python
// extension) failed with "cannot allocate memory in static TLS block". The pointer costs the
// hot path one load and a predictable branch.
thread_local ThreadCache* t_cache KILN_TLS = nullptr;

struct CacheFlusher {
  bool armed = false;
  ~CacheFlusher() {
    t_cache_alive = false;
    ThreadCache* tc = t_cache;
    if (!tc) return;
    t_cache = nullptr;
    Pool& P = pool();
    std::lock_guard<std::mutex> lk(P.mu);
    P.stats.hits += tc->hits;
    for (int k = 0; k < kThreadCacheClasses; ++k) {
      for (uint32_t i = 0; i < tc->n[k]; ++i) {
        P.small[k].push_back(tc->small[k][i]);
        P.stats.cached_bytes += size_t(64) << k;
      }
    }
    std::free(tc);
  }
};
thread_local CacheFlusher t_flusher;

// This thread's cache, created (and its hand-back at thread exit arranged) on first use.
ThreadCache* new_thread_cache() {
  auto* tc = static_cast<ThreadCache*>(std::calloc(1, sizeof(ThreadCache)));
  if (!tc) return nullptr;
  t_flusher.armed = true;
  t_cache = tc;
  return tc;
}

void note_alloc(size_t cap) {
  int64_t now = g_in_use.fetch_add(static_cast<int64_t>(cap), std::memory_order_relaxed) +
                static_cast<int64_t>(cap);
  if (now > g_peak.load(std::memory_order_relaxed)) g_peak.store(now, std::memory_order_relaxed);
}

}  // namespace

void* cached_alloc(size_t nbytes, size_t* capacity) {
  if (nbytes == 0) nbytes = 1;
  Pool& P = pool();
  size_t cap;
  int cls = -1;
  if (nbytes < kLargeThreshold) {
    cls = small_class(nbytes);
    cap = size_t(64) << cls;
  } else {
    cap = (nbytes + kHugeGranule - 1) / kHugeGranule * kHugeGranule;
  }
  *capacity = cap;
  note_alloc(cap);
  if (cls >= 0 && cap <= kThreadCacheBytes) {
    ThreadCache* tc = t_cache;
    if (tc && tc->n[cls] > 0) {
      ++tc->hits;
      tc->bytes -= cap;
      return tc->small[cls][--tc->n[cls]];
    }
  }
  {
    std::lock_guard<std::mutex> lk(P.mu);
    std::vector<void*>* list = nullptr;
    if (cap < kLargeThreshold) {  // must match the class cached_free files the block under
      list = &P.small[cls];
    } else {
      auto it = P.large.find(cap);
      if (it != P.large.end()) list = &it->second;
    }
    if (list && !list->empty()) {
      void* p = list->back();
      list->pop_back();
      P.stats.cached_bytes -= cap;
      ++P.stats.hits;
      return p;
    }
    ++P.stats.misses;
  }
  try {
    return system_alloc(cap);
  } catch (const std::bad_alloc&) {
  }
  // The blocks kept for reuse may be what the system is short of: hand them back, try once more.
  empty_cache();
  try {
    return system_alloc(cap);
  } catch (const std::bad_alloc&) {
    const int64_t held = g_in_use.fetch_sub(static_cast<int64_t>(cap), std::memory_order_relaxed) -
                         static_cast<int64_t>(cap);
    fail("alloc", "out of memory: cannot allocate ", nbytes, " bytes (tensors hold ", held,
         " bytes)");
  }
}

void cached_free(void* p, size_t cap) {
  if (!p) return;
  g_in_use.fetch_sub(static_cast<int64_t>(cap), std::memory_order_relaxed);
  if (cap <= kThreadCacheBytes && t_cache_alive) {
    ThreadCache* tc = t_cache;
    if (!tc) [[unlikely]]
      tc = new_thread_cache();
    const int cls = small_class(cap);
    if (tc && tc->n[cls] < kThreadCacheMax) {
      tc->small[cls][tc->n[cls]++] = p;
      tc->bytes += cap;
      return;
    }
  }
  Pool& P = pool();
  std::lock_guard<std::mutex> lk(P.mu);
  if (P.stats.cached_bytes + cap > kMaxCachedBytes) {
    system_free(p, cap);
    return;
  }
  P.stats.cached_bytes += cap;
  if (cap < kLargeThreshold)
    P.small[small_class(cap)].push_back(p);
  else
    P.large[cap].push_back(p);
}

AllocatorStats allocator_stats() {
  Pool& P = pool();
  std::lock_guard<std::mutex> lk(P.mu);
  AllocatorStats s = P.stats;
  s.in_use_bytes = static_cast<size_t>(g_in_use.load(std::memory_order_relaxed));
  s.peak_in_use_bytes = static_cast<size_t>(g_peak.load(std::memory_order_relaxed));
  // This thread's front cache; other threads' hits and blocks are added when they exit.
  if (const ThreadCache* tc = t_cache) {
    s.cached_bytes += tc->bytes;
    s.hits += tc->hits;
  }
  return s;
}

void reset_peak_memory() { g_peak.store(g_in_use.load(std::memory_order_relaxed)); }

void empty_cache() {
  Pool& P = pool();
  std::lock_guard<std::mutex> lk(P.mu);
  if (ThreadCache* tc = t_cache) {
    for (int k = 0; k < kThreadCacheClasses; ++k) {
      for (uint32_t i = 0; i < tc->n[k]; ++i) system_free(tc->small[k][i], size_t(64) << k);
      tc->n[k] = 0;
    }
    tc->bytes = 0;
  }
  for (int k = 0; k < 21; ++k) {
    for (void* p : P.small[k]) system_free(p, size_t(64) << k);
    P.small[k].clear();
  }
  for (auto& [cap, v] : P.large)
    for (void* p : v) system_free(p, cap);
  P.large.clear();
  P.stats.cached_bytes = 0;
}

}  // namespace kiln
