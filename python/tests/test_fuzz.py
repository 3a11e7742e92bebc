# No bad argument from Python crashes the interpreter: every public function of kiln._C is called
# with one and two arguments drawn from a pool of wrong types, odd shapes and dtypes, NaN and
# out-of-range integers. Each call must return or raise an Exception; the calls run in a child
# process, so a crash fails this test with the call that caused it.
import os
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import inspect, itertools, sys
    import kiln, kiln._C as C
    kiln.manual_seed(0)
    trace = len(sys.argv) > 1
    pool = [None, "x", kiln.randn(2, 3), kiln.tensor([3, -1, 7]), kiln.zeros(0),
            kiln.tensor(1.5), kiln.tensor([True, False]), -1, 2, 10 ** 20, float("nan"), [1, 2],
            kiln.randn(2, 3, dtype=kiln.float64).requires_grad_()]
    skip = {"set_num_threads", "print", "manual_seed", "set_rng_state"}
    names = sorted(n for n, v in vars(C).items()
                   if not n.startswith("_") and callable(v) and not inspect.isclass(v) and n not in skip)
    calls = 0
    for n in names:
        f = getattr(C, n)
        for k in (1, 2):
            for args in itertools.product(pool, repeat=k):
                if trace:
                    sys.stderr.write(f"{n}{args!r}"[:200] + "\\n")
                    sys.stderr.flush()
                try:
                    f(*args)
                except Exception:
                    pass
                calls += 1
    small = [None, pool[2], pool[3], -1, float("nan")]
    for n in names:
        f = getattr(C, n)
        for args in itertools.product(small, repeat=3):
            if trace:
                sys.stderr.write(f"{n}{args!r}"[:200] + "\\n")
                sys.stderr.flush()
            try:
                f(*args)
            except Exception:
                pass
            calls += 1
    t = kiln.randn(2, 3)
    for m in ["reshape", "view", "permute", "expand", "transpose", "select", "narrow", "squeeze",
              "unsqueeze", "flatten", "sum", "mean", "max", "softmax", "split", "chunk", "gather",
              "__getitem__", "__setitem__", "to", "item", "tolist", "backward", "add_", "copy_",
              "fill_", "clamp_", "index_select", "topk", "sort", "repeat", "pad", "roll", "flip"]:
        f = getattr(t, m)
        for k in (1, 2):
            for args in itertools.product(pool, repeat=k):
                try:
                    f(*args)
                except Exception:
                    pass
                calls += 1
    # Constructors of the classes (modules, optimizers, schedules, loaders, graphs) and the
    # graph and session methods.
    classes = [getattr(m, n) for m in (C, C.nn, C.optim, C.io) for n in dir(m)
               if inspect.isclass(getattr(m, n)) and not issubclass(getattr(m, n), BaseException)
               and n not in ("Tensor", "dtype")]
    for cls in classes:
        for k in (0, 1, 2):
            for args in itertools.product(pool, repeat=k):
                try:
                    cls(*args)
                except Exception:
                    pass
                calls += 1
    g = C.Graph()
    x = g.placeholder(kiln.float32, [None, 3], "x")
    sess = C.Session(g)
    for meth in (g.placeholder, g.variable, g.constant, sess.run, sess.variable, sess.set_variable):
        for k in (1, 2, 3):
            for args in itertools.product(pool[:8], repeat=k):
                try:
                    meth(*args)
                except Exception:
                    pass
                calls += 1
    # The buffer protocol and DLPack on tensors without memory (dead, symbolic) raise or give
    # NumPy's object fallback, never abort.
    import numpy as np
    dead = kiln.switch_(kiln.tensor([1.0]), kiln.tensor(True))[0]
    for t in pool + [dead, x, kiln.randn(3, 4).T]:
        for conv in (np.asarray, memoryview, lambda v: v.__dlpack__(), kiln.from_numpy,
                     kiln.from_dlpack):
            try:
                conv(t)
            except Exception:
                pass
    for feed in pool:
        try:
            sess.run(x * 2.0, {x: feed})
        except Exception:
            pass
    print("calls", calls)
""")


def test_bad_arguments_never_crash():
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-c", CHILD, "trace"], capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, f"child died with {r.returncode}:\n{r.stderr[-3000:]}"
    assert int(r.stdout.split()[-1]) > 10000
