// Per-thread free lists of small fixed-size blocks, for the shared_ptr control blocks that every
// eager op allocates (a TensorImpl and a Storage per output). glibc's malloc/free pair costs
// ~300 instructions per op on the W3 loop; a pop and a push cost a few. Blocks freed on another
// thread join that thread's lists; each list is capped and the rest goes back to the system, and
// a thread's lists are released when it ends. Under AddressSanitizer the pool is bypassed so
// that use-after-free stays detectable.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

namespace kiln::block_pool {

constexpr size_t kGranule = 16;
constexpr size_t kClasses = 24;  // blocks up to 384 bytes
constexpr uint32_t kMaxPerClass = 4096;

void* alloc(size_t bytes);            ///< bytes <= kGranule * kClasses
void release(void* p, size_t bytes);  ///< the same size as allocated

/// A std allocator over the pool, for std::allocate_shared.
template <typename T>
struct Allocator {
  using value_type = T;
  Allocator() = default;
  template <typename U>
  Allocator(const Allocator<U>&) noexcept {}
  T* allocate(size_t n) {
    if (n != 1 || sizeof(T) > kGranule * kClasses || alignof(T) > kGranule)
      return static_cast<T*>(::operator new(n * sizeof(T)));
    return static_cast<T*>(alloc(sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept {
    if (n != 1 || sizeof(T) > kGranule * kClasses || alignof(T) > kGranule)
      ::operator delete(p);
    else
      release(p, sizeof(T));
  }
  template <typename U>
  bool operator==(const Allocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace kiln::block_pool
