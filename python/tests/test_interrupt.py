# Ctrl-C (SIGINT) stops a long Session.run or jitted call between steps with KeyboardInterrupt,
# and the Session or jitted function then runs again correctly. The bound on how soon the
# interrupt comes is a hang check (the interrupted runs would take hours), not a timing.
import contextlib
import os
import signal
import threading
import time

import pytest

import kiln

HOURS = 2**40  # iterations of the counting loop: several microseconds each


@contextlib.contextmanager
def sigint_raises():
    """Python's default SIGINT handler, as at a terminal (ctest may start us with it ignored)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def sigint_after(seconds, how):
    main = threading.main_thread().ident
    send = {
        "pthread_kill": lambda: signal.pthread_kill(main, signal.SIGINT),
        "kill": lambda: os.kill(os.getpid(), signal.SIGINT),
    }[how]
    t = threading.Timer(seconds, send)
    t.start()
    return t


def counter():
    g = kiln.Graph()
    n = g.placeholder(kiln.int64, [], name="n")
    (count,) = kiln.while_loop(lambda i: i < n, lambda i: (i + 1,), [kiln.tensor(0)])
    return g, n, count


@pytest.mark.parametrize("how", ["pthread_kill", "kill"])
def test_ctrl_c_stops_a_long_session_run(how):
    g, n, count = counter()
    sess = kiln.Session(g)
    t0 = time.perf_counter()
    assert sess.run(count, {n: 20000}).item() == 20000
    per_iteration = (time.perf_counter() - t0) / 20000
    with sigint_raises():
        timer = sigint_after(0.2, how)
        t0 = time.perf_counter()
        with pytest.raises(KeyboardInterrupt):
            sess.run(count, {n: HOURS})
        took = time.perf_counter() - t0
        timer.join()
    assert 0.15 < took < 10.0, took
    assert per_iteration * HOURS > 1000 * took  # the full run would have taken far longer
    # The same Session (and plan) again, also at a size that runs to its end.
    assert sess.run(count, {n: 7}).item() == 7
    assert sess.run(count, {n: 3000}).item() == 3000
    assert sess.plans_built == 1


def test_interrupted_run_writes_no_variable_and_training_goes_on():
    g = kiln.Graph()
    n = g.placeholder(kiln.int64, [], name="n")
    v = g.variable(kiln.zeros(2), name="v")
    (count,) = kiln.while_loop(lambda i: i < n, lambda i: (i + 1,), [kiln.tensor(0)])
    step = kiln.assign(v, v + count.to(kiln.float32))  # the loop runs before the write
    sess = kiln.Session(g)
    sess.run(step, {n: 2})
    with sigint_raises():
        timer = sigint_after(0.2, "pthread_kill")
        with pytest.raises(KeyboardInterrupt):
            sess.run(step, {n: HOURS})
        timer.join()
    assert sess.variable("v").tolist() == [2.0, 2.0]
    sess.run(step, {n: 3})
    assert sess.variable("v").tolist() == [5.0, 5.0]


def test_ctrl_c_stops_a_long_jitted_call():
    @kiln.jit
    def count_to(start, n):
        (r,) = kiln.while_loop(lambda i: i < n, lambda i: (i + 1,), [start])
        return r * 2

    zero = kiln.tensor(0)
    assert count_to(zero, kiln.tensor(10)).item() == 20
    compiles = count_to.stats["compiles"]
    with sigint_raises():
        timer = sigint_after(0.2, "pthread_kill")
        t0 = time.perf_counter()
        with pytest.raises(KeyboardInterrupt):
            count_to(zero, kiln.tensor(HOURS))
        took = time.perf_counter() - t0
        timer.join()
    assert took < 10.0, took
    # Replayed from the same compiled version: no recompile, no eager fallback.
    assert count_to(zero, kiln.tensor(1000)).item() == 2000
    assert count_to.stats["compiles"] == compiles
    assert count_to.stats["eager_fallback"] is False


def test_a_handler_of_the_users_own_runs_during_the_call():
    # Python's handlers run between steps, as between bytecodes: one that returns lets the call
    # go on to its end; what one raises ends the call and reaches the caller.
    g, n, count = counter()
    sess = kiln.Session(g)
    t0 = time.perf_counter()
    sess.run(count, {n: 20000})
    iterations = int(1.0 / ((time.perf_counter() - t0) / 20000))  # about a second
    calls = []

    def note(signum, frame):
        calls.append(time.perf_counter())

    class Stop(Exception):
        pass

    def stop(signum, frame):
        raise Stop("from the handler")

    old = signal.signal(signal.SIGINT, note)
    try:
        # A loaded machine may run faster than the calibration said: the signal must come
        # while the run is still going, so a run that ended first is tried again, longer.
        for _ in range(4):
            calls.clear()
            timer = sigint_after(0.2, "pthread_kill")
            assert sess.run(count, {n: iterations}).item() == iterations
            ended = time.perf_counter()
            timer.join()
            for _ in range(100):  # a signal after the run: its handler runs here
                if calls:
                    break
                time.sleep(0.01)
            if calls[0] < ended:
                break
            iterations *= 4
        assert len(calls) == 1
        assert calls[0] < ended  # it ran inside the call, not after it
        signal.signal(signal.SIGINT, stop)
        timer = sigint_after(0.2, "pthread_kill")
        with pytest.raises(Stop, match="from the handler"):
            sess.run(count, {n: HOURS})
        timer.join()
    finally:
        signal.signal(signal.SIGINT, old)
    assert sess.run(count, {n: 5}).item() == 5


def test_ctrl_c_while_ignored_changes_nothing():
    g, n, count = counter()
    sess = kiln.Session(g)
    t0 = time.perf_counter()
    sess.run(count, {n: 20000})
    iterations = int(0.5 / ((time.perf_counter() - t0) / 20000))
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        timer = sigint_after(0.1, "pthread_kill")
        assert sess.run(count, {n: iterations}).item() == iterations
        timer.join()
    finally:
        signal.signal(signal.SIGINT, old)


def test_ctrl_c_is_for_the_main_thread_only():
    # A run in another thread is not stopped by the main thread's Ctrl-C.
    g, n, count = counter()
    sess, busy = kiln.Session(g), kiln.Session(g)
    t0 = time.perf_counter()
    sess.run(count, {n: 20000})
    iterations = int(0.8 / ((time.perf_counter() - t0) / 20000))
    result = {}
    worker = threading.Thread(target=lambda: result.update(r=busy.run(count, {n: iterations})))
    with sigint_raises():
        worker.start()
        timer = sigint_after(0.2, "pthread_kill")
        with pytest.raises(KeyboardInterrupt):
            sess.run(count, {n: HOURS})
        timer.join()
        worker.join()
    assert result["r"].item() == iterations
