// Per-thread free lists behind block_pool::Allocator (see block_pool.h for why).
#include "kiln/core/block_pool.h"

#include <cstdlib>

#include "kiln/core/tls.h"

namespace kiln::block_pool {
namespace {

struct Lists {  // plain data: an access is a %fs-relative load, no TLS-init call
  void* head[kClasses];
  uint32_t n[kClasses];
  bool armed;
  bool dead;  // set once the thread's lists were released at its exit
};
thread_local Lists t_lists KILN_TLS;

struct Releaser {
  bool armed = false;
  ~Releaser() {
    for (size_t k = 0; k < kClasses; ++k) {
      void* p = t_lists.head[k];
      while (p) {
        void* next = *static_cast<void**>(p);
        ::operator delete(p);
        p = next;
      }
      t_lists.head[k] = nullptr;
      t_lists.n[k] = 0;
    }
    t_lists.dead = true;
  }
};
thread_local Releaser t_releaser;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kBypass = true;
#else
constexpr bool kBypass = false;
#endif

size_t cls(size_t bytes) { return (bytes + kGranule - 1) / kGranule - 1; }

}  // namespace

void* alloc(size_t bytes) {
  if (!kBypass) {
    Lists& l = t_lists;
    const size_t k = cls(bytes);
    if (void* p = l.head[k]) {
      l.head[k] = *static_cast<void**>(p);
      --l.n[k];
      return p;
    }
    return ::operator new((k + 1) * kGranule);
  }
  return ::operator new(bytes);
}

void release(void* p, size_t bytes) {
  if (!kBypass) {
    Lists& l = t_lists;
    const size_t k = cls(bytes);
    if (l.n[k] < kMaxPerClass && !l.dead) {
      if (!l.armed) {
        l.armed = true;
        t_releaser.armed = true;
      }
      *static_cast<void**>(p) = l.head[k];
      l.head[k] = p;
      ++l.n[k];
      return;
    }
  }
  ::operator delete(p);
}

}  // namespace kiln::block_pool
