// The caching allocator: every tensor buffer comes from here. Fresh pages are expensive on the
// target machine (~11 us per 4 KiB first touch) and glibc hands big blocks back to the kernel, so
// freed buffers are kept in size classes and reused; large ones are huge-page backed.
#pragma once
#include <cstddef>
#include <cstdint>

namespace kiln {

struct AllocatorStats {
  size_t in_use_bytes = 0;  ///< bytes handed out and not yet freed (rounded sizes)
  size_t peak_in_use_bytes = 0;
  size_t cached_bytes = 0;  ///< bytes held in free lists
  uint64_t hits = 0;        ///< allocations served from the cache
  uint64_t misses = 0;      ///< allocations that went to the system
};

/// Returns a 64-byte aligned block of at least `nbytes`; `*capacity` gets the rounded size,
/// which must be passed back to cached_free.
void* cached_alloc(size_t nbytes, size_t* capacity);
void cached_free(void* p, size_t capacity);
AllocatorStats allocator_stats();
void reset_peak_memory();
/// Returns every cached block to the system.
void empty_cache();

}  // namespace kiln
