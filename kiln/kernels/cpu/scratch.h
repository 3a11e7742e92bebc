// Scratch buffers from the caching allocator (core/allocator.h) for kernels whose buffers come
// back every call: a fresh std::vector over glibc's 128 KiB mmap threshold is mapped and faulted
// in each time, and a thread_local one would take libkiln's scarce static TLS.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kiln/core/allocator.h"

namespace kiln::cpu {

/// Floats on loan from the caching allocator for one scope; grow() swaps in a larger block
/// (contents dropped).
struct Scratch {
  float* p = nullptr;
  size_t cap = 0;
  Scratch() = default;
  explicit Scratch(int64_t n) { grow(n); }
  ~Scratch() {
    if (p) cached_free(p, cap);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* grow(int64_t n) {
    const size_t bytes = static_cast<size_t>(n > 0 ? n : 1) * sizeof(float);
    if (p && bytes <= cap) return p;
    if (p) cached_free(p, cap);
    p = static_cast<float*>(cached_alloc(bytes, &cap));
    return p;
  }
};

}  // namespace kiln::cpu
