# The GIL is released while big kernels and Session.run compute, so other Python threads run;
# a Python training loop stops at Ctrl-C between ops. No timing assertions: with the switch
# interval set to 100 s a thread that kept the GIL through a call would never let the main
# thread run during it.
import os
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np

import kiln


def runs_alongside(work):
    """Whether the main thread ran while `work` (in another thread) was inside its call."""
    started, state = threading.Event(), {"done": False}

    def body():
        started.set()
        work()
        state["done"] = True

    old = sys.getswitchinterval()
    sys.setswitchinterval(100.0)
    try:
        t = threading.Thread(target=body)
        t.start()
        started.wait()
        overlapped = not state["done"]
        t.join()
    finally:
        sys.setswitchinterval(old)
    return overlapped


def test_big_kernels_release_the_gil():
    a = kiln.randn(1024, 1024)
    assert runs_alongside(lambda: [kiln.matmul(a, a) for _ in range(4)])


def test_session_run_releases_the_gil():
    g = kiln.Graph()
    x = g.placeholder(kiln.float32, [1024, 1024], name="x")
    y = x
    for _ in range(4):
        y = kiln.matmul(y, x) * 1e-3
    sess = kiln.Session(g)
    xs = np.random.rand(1024, 1024).astype(np.float32)
    sess.run(y, {x: xs})
    assert runs_alongside(lambda: sess.run(y, {x: xs}))


def test_ctrl_c_stops_a_training_loop():
    code = textwrap.dedent("""
        import signal, sys, kiln
        # As at a terminal (a test runner or a background job may start us with SIGINT ignored).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        w = kiln.randn(64, 64, requires_grad=True)
        x = kiln.randn(32, 64)
        opt = kiln.optim.SGD([w], lr=1e-3)
        try:
            while True:
                loss = kiln.relu(x @ w).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
                if w.grad is not None and not getattr(sys, "ready", False):
                    sys.ready = True
                    print("ready", flush=True)   # inside the try: the signal may come now
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(3)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ))
    assert p.stdout.readline().strip() == "ready"
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 3 and "interrupted" in out
