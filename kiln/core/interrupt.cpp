// The process-wide interrupt state and the per-thread deferral and check behind
// kiln/core/interrupt.h.
#include "kiln/core/interrupt.h"

#include "kiln/core/error.h"

namespace kiln {

namespace detail {
std::atomic<uint8_t> g_interrupt_state{0};
}  // namespace detail

namespace {
thread_local int t_defer_depth = 0;
thread_local InterruptCheckScope::Check t_check = nullptr;
thread_local void* t_check_ctx = nullptr;
}  // namespace

using detail::g_interrupt_state;
using detail::kInterruptCheckRequested;
using detail::kInterruptRequested;

void request_interrupt() noexcept {
  g_interrupt_state.fetch_or(kInterruptRequested, std::memory_order_relaxed);
}

void request_interrupt_check() noexcept {
  g_interrupt_state.fetch_or(kInterruptCheckRequested, std::memory_order_relaxed);
}

void clear_interrupt() noexcept { g_interrupt_state.store(0, std::memory_order_relaxed); }

bool interrupt_requested() noexcept {
  return (g_interrupt_state.load(std::memory_order_relaxed) & kInterruptRequested) != 0;
}

void detail::take_interrupt(const char* where) {
  if (t_defer_depth > 0) return;
  // fetch_and: of several threads polling at once, exactly one takes each request.
  if (t_check && (g_interrupt_state.fetch_and(static_cast<uint8_t>(~kInterruptCheckRequested),
                                              std::memory_order_relaxed) &
                  kInterruptCheckRequested))
    t_check(t_check_ctx, where);
  if ((g_interrupt_state.load(std::memory_order_relaxed) & kInterruptRequested) == 0) return;
  if ((g_interrupt_state.fetch_and(static_cast<uint8_t>(~kInterruptRequested),
                                   std::memory_order_relaxed) &
       kInterruptRequested) == 0)
    return;
  throw Interrupted(str_cat("[", where,
                            "] interrupted (kiln::request_interrupt, or Ctrl-C from Python): "
                            "stopped between steps; what ran it can run again"));
}

NoInterruptGuard::NoInterruptGuard() { ++t_defer_depth; }
NoInterruptGuard::~NoInterruptGuard() { --t_defer_depth; }

InterruptCheckScope::InterruptCheckScope(Check check, void* ctx)
    : prev_(t_check), prev_ctx_(t_check_ctx) {
  t_check = check;
  t_check_ctx = ctx;
}

InterruptCheckScope::~InterruptCheckScope() {
  t_check = prev_;
  t_check_ctx = prev_ctx_;
}

}  // namespace kiln
