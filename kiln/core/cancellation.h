// Cooperative cancellation of long runs: request_interrupt() (async-signal-safe, so a SIGINT
// handler may call it) makes the next cancellation point of a Session run, a jitted replay or a
// while_loop iteration throw kiln::Interrupted. The cancellation points themselves are internal
// (kiln/core/interrupt.h).
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

namespace kiln {

/// Thrown at a cancellation point once request_interrupt() was called; the message starts with
/// "[where] interrupted". Deliberately not a kiln::Error (as Python's KeyboardInterrupt is not
/// an Exception): code that catches kiln::Error to retry or fall back, such as the JIT's eager
/// fallback, lets it through instead of redoing the interrupted work.
class Interrupted : public std::runtime_error {
 public:
  explicit Interrupted(const std::string& msg) : std::runtime_error(msg) {}
};

/// Asks the Session::run, jitted call or while_loop in progress to stop between two steps. The
/// first cancellation point to see the request takes it (clears it) and throws Interrupted; a
/// request made while nothing runs is taken by the next run's first step. A Session run stops
/// only before its first variable write, so an interrupted run changes no variable; the
/// Session, the jitted function and their caches stay usable. Async-signal-safe.
void request_interrupt() noexcept;
/// Withdraws a request (and a request_interrupt_check) that no cancellation point has taken.
void clear_interrupt() noexcept;
/// Whether a request is pending.
bool interrupt_requested() noexcept;

/// Asks the threads that hold an InterruptCheckScope to run its check at their next
/// cancellation point (other threads ignore it). Async-signal-safe. The Python binding's
/// watcher thread calls it every 50 ms while a call of the main thread runs, whose check then
/// runs Python's signal handlers (Ctrl-C's KeyboardInterrupt).
void request_interrupt_check() noexcept;

/// While one lives, the calling thread's cancellation points leave requests pending (for other
/// threads, or this one's next run) and run no check: for work that must not be cut, such as a
/// Session run past its first variable write. Nests.
class NoInterruptGuard {
 public:
  NoInterruptGuard();
  ~NoInterruptGuard();
  NoInterruptGuard(const NoInterruptGuard&) = delete;
  NoInterruptGuard& operator=(const NoInterruptGuard&) = delete;
};

/// While one lives, the calling thread's cancellation points call `check(ctx, where)` after a
/// request_interrupt_check(); the check throws (Interrupted, so fallbacks let it through) to
/// stop the work or returns to let it go on. The innermost scope of a thread is the one in
/// force.
class InterruptCheckScope {
 public:
  using Check = void (*)(void* ctx, const char* where);
  InterruptCheckScope(Check check, void* ctx);
  ~InterruptCheckScope();
  InterruptCheckScope(const InterruptCheckScope&) = delete;
  InterruptCheckScope& operator=(const InterruptCheckScope&) = delete;

 private:
  Check prev_;
  void* prev_ctx_;
};

}  // namespace kiln
