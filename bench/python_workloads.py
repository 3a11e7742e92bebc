#!/usr/bin/python3
"""Kiln from Python (the kiln package) on workloads W3 and W4, and import time, in the JSON-line
format of kiln_bench, so that bench/run prints them beside PyTorch 1.13 from Python measured in
the same run. Usage: python_workloads.py W3|W4|IMPORT THREADS
Needs PYTHONPATH to reach the built package (bench/run sets build/release/python)."""
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import kiln
import kiln.nn as nn


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def emit(workload, name, mode, threads, params, metric, value, impl="kiln-python"):
    print(json.dumps({"workload": workload, "name": name, "impl": impl, "mode": mode,
                      "threads": threads, "params": params, "metric": metric,
                      "value": round(value, 6), "peak_rss_mib": round(peak_rss_mib(), 1)}),
          flush=True)


def median_time(f, reps=7, inner=1, warmup=2):
    for _ in range(warmup):
        f()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            f()
        ts.append((time.perf_counter() - t0) / inner)
    return statistics.median(ts)


def w3(threads):
    # 1000 dependent adds on 16 floats, written in Python: eager (each add a Python call into
    # Kiln) and under @kiln.jit (one call replays the compiled graph).
    x0, y = kiln.randn(16), kiln.randn(16)

    def f():
        x = x0
        for _ in range(1000):
            x = kiln.add(x, y)
        return x

    chain = kiln.jit(_chain)
    with kiln.no_grad():
        t = median_time(f, reps=15, inner=5, warmup=3)
        tj = median_time(lambda: chain(x0, y), reps=15, inner=50, warmup=3)
    p = {"ops": 1000, "numel": 16}
    emit("W3", "dependent_adds", "eager", threads, p, "us/op", t / 1000 * 1e6)
    emit("W3", "dependent_adds", "jit", threads, p, "us/op", tj / 1000 * 1e6)


def _chain(x, y):
    for _ in range(1000):
        x = kiln.add(x, y)
    return x


class MLP(nn.Module):
    """W4's model as a user writes it in Python."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc3 = nn.Linear(256, 10)

    def forward(self, x):
        return self.fc3(kiln.relu(self.fc2(kiln.relu(self.fc1(x)))))


def w4(threads):
    kiln.manual_seed(4)
    x, y = kiln.rand(128, 784), kiln.randint(0, 10, (128,))
    p = {"batch": 128, "layers": [784, 256, 256, 10]}
    model = MLP()
    opt = kiln.optim.SGD(model.parameters(), lr=0.01)

    def step():
        loss = kiln.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    te = median_time(step, reps=7, inner=20, warmup=5)
    emit("W4", "mlp_train_step", "eager", threads, p, "steps/s", 1.0 / te)

    # jit: the step as a function of (params, batch) -> new params, the parameters donated so
    # that the update reuses their buffers (as PyTorch's in-place optimizer step does).
    @kiln.jit(donate=[0], name="w4_step")
    def jstep(params, xb, yb):
        ps = [q.detach().requires_grad_() for q in params]
        loss = kiln.cross_entropy(nn.functional_call(model, ps, xb), yb)
        grads = kiln.grad(loss, ps)
        return [q - 0.01 * g for q, g in zip(params, grads)] + [loss.detach()]

    params = [q.detach().clone() for q in model.parameters()]

    def jit_step():
        nonlocal params
        out = jstep(params, x, y)
        params = out[:-1]

    tj = median_time(jit_step, reps=7, inner=20, warmup=5)
    emit("W4", "mlp_train_step", "jit", threads, p, "steps/s", 1.0 / tj)


def import_time(threads):
    # Wall time of a fresh `python3 -c "import X"`, best of 5 (the first may read from disk).
    def best(mod):
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", f"import {mod}"], check=True)
            ts.append(time.perf_counter() - t0)
        return min(ts)

    emit("IMPORT", "import", "python", threads, {}, "s", best("kiln"))
    try:
        emit("IMPORT", "import", "python", threads, {"config": "default"}, "s", best("torch"),
             impl="pytorch")
    except subprocess.CalledProcessError:
        pass


if __name__ == "__main__":
    w, threads = sys.argv[1], int(sys.argv[2])
    kiln.set_num_threads(threads)
    if w != "IMPORT":
        # As kiln_bench does: the first ~0.5 s of a process runs multi-threaded work far slower
        # on the 2-vCPU VM; keep every thread busy for a second before timing.
        a, b = kiln.randn(512, 512), kiln.randn(512, 512)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 1.0:
            kiln.matmul(a, b)
    {"W3": w3, "W4": w4, "IMPORT": import_time}[w](threads)
