// Ctrl-C during a long call that runs with the GIL released (Session.run, a jitted call).
// Python's SIGINT handler only trips a flag that the interpreter checks between bytecodes, so a
// long C++ call used to run to its end before KeyboardInterrupt came. Here a watcher thread
// asks Kiln, every 50 ms while a call of the main thread runs, to have that thread's next
// cancellation point run Python's signal handlers (PyErr_CheckSignals, with the GIL taken for
// it): whatever handler Python has runs between two steps, as it would between two bytecodes,
// and an exception it raises (KeyboardInterrupt) ends the call. No signal handler is replaced
// and a short call costs two atomic stores: a sigaction per call cost 1.5 us on the dev VM,
// most of a small Session.run.
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "common.h"

namespace kiln::python {
namespace {

// Main-thread state, changed with the GIL held.
int g_depth = 0;  // interruptible calls in progress on the main thread
unsigned long g_main_ident = 0;
bool g_have_main = false;
// What a Python signal handler raised inside a check, raised again once the call has unwound.
PyObject *g_exc_type = nullptr, *g_exc_value = nullptr, *g_exc_tb = nullptr;

// Shared with the watcher thread.
std::atomic<bool> g_in_call{false};     // an interruptible call of the main thread is running
std::atomic<uint64_t> g_call_seq{0};    // bumped by each such call
std::atomic<bool> g_watcher_on{false};  // a watcher thread is alive

constexpr auto kTick = std::chrono::milliseconds(50);
constexpr int kIdleTicksBeforeExit = 100;  // 5 s without a call: the thread ends

void watch() {
  uint64_t seen = 0;
  int idle = 0;
  for (;;) {
    std::this_thread::sleep_for(kTick);
    if (g_in_call.load()) {
      idle = 0;
      const uint64_t s = g_call_seq.load();
      if (s == seen) request_interrupt_check();  // the same call a whole tick later
      seen = s;
      continue;
    }
    if (++idle < kIdleTicksBeforeExit) continue;
    g_watcher_on.store(false);
    // A call that started meanwhile may have seen this thread still on and started none.
    if (g_in_call.load() && !g_watcher_on.exchange(true)) {
      idle = 0;
      continue;
    }
    return;
  }
}

void ensure_watcher() {
  if (g_watcher_on.load() || g_watcher_on.exchange(true)) return;
  static const bool at_fork = [] {
    // A forked child has no watcher thread: let its first call start one.
    pthread_atfork(nullptr, nullptr, [] { g_watcher_on.store(false); });
    return true;
  }();
  (void)at_fork;
  std::thread(watch).detach();
}

// The check a main-thread call's cancellation points run on the watcher's request: Python's
// signal handlers, as between bytecodes.
void check_signals(void*, const char* where) {
  PyGILState_STATE st = PyGILState_Ensure();
  const bool raised = PyErr_CheckSignals() != 0;
  if (raised) {
    Py_XDECREF(g_exc_type);
    Py_XDECREF(g_exc_value);
    Py_XDECREF(g_exc_tb);
    PyErr_Fetch(&g_exc_type, &g_exc_value, &g_exc_tb);
  }
  PyGILState_Release(st);
  if (raised)
    throw Interrupted(str_cat("[", where, "] interrupted: a Python signal handler raised"));
}

bool on_main_thread() {
  if (!g_have_main) {
    g_main_ident =
        py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
    g_have_main = true;
  }
  return PyThread_get_thread_ident() == g_main_ident;
}

}  // namespace

InterruptibleCall::InterruptibleCall() {
  // Other threads: Python runs signal handlers on the main thread only.
  if (!on_main_thread()) return;
  counted_ = true;
  if (g_depth++ > 0) return;  // nested (a Session.run in a function being traced)
  // What an earlier check fetched but no translator raised (the call swallowed it) is stale.
  Py_CLEAR(g_exc_type);
  Py_CLEAR(g_exc_value);
  Py_CLEAR(g_exc_tb);
  check_.emplace(&check_signals, nullptr);
  g_call_seq.fetch_add(1);
  g_in_call.store(true);
  ensure_watcher();
}

InterruptibleCall::~InterruptibleCall() {
  if (!counted_) return;
  if (check_) {
    g_in_call.store(false);
    check_.reset();
  }
  --g_depth;
}

void init_interrupt(py::module_&) {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Interrupted& e) {
      if (g_exc_type) {  // what the Python handler raised (KeyboardInterrupt at Ctrl-C)
        PyErr_Restore(g_exc_type, g_exc_value, g_exc_tb);
        g_exc_type = g_exc_value = g_exc_tb = nullptr;
        return;
      }
      // A C++ caller's request_interrupt(), or a signal no check has seen yet.
      if (PyErr_CheckSignals() != 0) return;
      PyErr_SetString(PyExc_KeyboardInterrupt, e.what());
    }
  });
}

}  // namespace kiln::python
