// Cancellation points, the library's side of kiln/core/cancellation.h: the Session, jitted
// replays and while_loop poll them between steps. A poll is one relaxed atomic load, inline.
// Internal: kiln.h does not reach it.
#pragma once
#include <atomic>
#include <cstdint>

#include "kiln/core/cancellation.h"

namespace kiln {

namespace detail {
enum : uint8_t { kInterruptRequested = 1, kInterruptCheckRequested = 2 };
extern std::atomic<uint8_t> g_interrupt_state;
static_assert(std::atomic<uint8_t>::is_always_lock_free, "request_interrupt must be signal-safe");
/// The slow path of interruption_point.
void take_interrupt(const char* where);
}  // namespace detail

/// A cancellation point: throws Interrupted("[where] interrupted ...") when a request is
/// pending, or runs this thread's check (InterruptCheckScope) when one was asked for; neither
/// while this thread defers interrupts (NoInterruptGuard).
inline void interruption_point(const char* where) {
  if (detail::g_interrupt_state.load(std::memory_order_relaxed) != 0) [[unlikely]]
    detail::take_interrupt(where);
}

}  // namespace kiln
