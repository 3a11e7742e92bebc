// Size-class caching allocator: power-of-two classes below 1 MiB, 2 MiB granules above (mmap'd,
// MADV_HUGEPAGE). One mutex; the eager hot path costs a lock and a vector pop.
#include "kiln/core/allocator.h"

#include <sys/mman.h>

#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

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

int small_class(size_t n) {
  size_t c = 64;
  int k = 0;
  while (c < n) {
    c <<= 1;
    ++k;
  }
  return k;
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
  {
    std::lock_guard<std::mutex> lk(P.mu);
    std::vector<void*>* list = nullptr;
    if (cls >= 0 && cap < kLargeThreshold) {
      list = &P.small[cls];
    } else {
      auto it = P.large.find(cap);
      if (it != P.large.end()) list = &it->second;
    }
    P.stats.in_use_bytes += cap;
    if (P.stats.in_use_bytes > P.stats.peak_in_use_bytes)
      P.stats.peak_in_use_bytes = P.stats.in_use_bytes;
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
  } catch (...) {
    std::lock_guard<std::mutex> lk(P.mu);
    P.stats.in_use_bytes -= cap;
    throw;
  }
}

void cached_free(void* p, size_t cap) {
  if (!p) return;
  Pool& P = pool();
  std::lock_guard<std::mutex> lk(P.mu);
  P.stats.in_use_bytes -= cap;
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
  return P.stats;
}

void reset_peak_memory() {
  Pool& P = pool();
  std::lock_guard<std::mutex> lk(P.mu);
  P.stats.peak_in_use_bytes = P.stats.in_use_bytes;
}

void empty_cache() {
  Pool& P = pool();
  std::lock_guard<std::mutex> lk(P.mu);
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
