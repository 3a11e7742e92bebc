#!/usr/bin/python3
"""How much of PyTorch 1.13's own training step is GEMM, per workload (the floor behind "2x").

Runs bench/pytorch_workloads.py's W4/W5/W7/W8 eager steps at the given thread count, times 20
steps, then profiles 20 more with torch.profiler and sums the self time of the GEMM ops
(aten::mm, addmm, bmm, baddbmm). Run it in the environment you compare against, e.g. tuned as
docs/design.md section 10 prescribes:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \
        GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296 \
        OMP_NUM_THREADS=1 bench/profile_pytorch.py --threads 1 W4 W7 W8

The profiler adds a little per-op overhead, so the GEMM share is read against the profiled
step time, and the unprofiled step time is printed beside it.
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_workloads as pw  # noqa: E402

GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def w4_step():
    """bench/pytorch_workloads.py's W4 step (that script times it inline)."""
    torch.manual_seed(4)
    x, y = torch.rand(128, 784), torch.randint(0, 10, (128,))
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def eager_step(workload, threads):
    """The eager step a workload function hands to emit_modes (captured, not timed there)."""
    if workload == "W4":
        return w4_step()
    captured = {}

    def capture(wl, name, thr, p, config, make_step, reps, inner, warmup):
        captured[wl] = make_step(False)[0]
    saved, pw.emit_modes = pw.emit_modes, capture
    try:
        getattr(pw, workload.lower())(threads, "tuned")
    finally:
        pw.emit_modes = saved
    return captured[workload]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("workloads", nargs="*", default=["W4", "W7", "W8"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    for w in a.workloads:
        if w not in ("W4", "W5", "W7", "W8"):
            sys.exit(f"profile_pytorch: workload {w} is not one of W4 W5 W7 W8")
        step = eager_step(w, a.threads)
        for _ in range(5):
            step()
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        dt = (time.perf_counter() - t0) / a.steps
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            t1 = time.perf_counter()
            for _ in range(a.steps):
                step()
            dtp = (time.perf_counter() - t1) / a.steps
        gemm = sum(e.self_cpu_time_total for e in prof.key_averages() if e.key in GEMM_OPS)
        gemm_ms = gemm / a.steps / 1e3
        print(f"{w} {a.threads}T: step {dt * 1e3:.2f} ms ({1 / dt:.1f} steps/s), profiled "
              f"{dtp * 1e3:.2f} ms, GEMMs {gemm_ms:.2f} ms ({gemm_ms / (dtp * 1e3) * 100:.0f}% "
              f"of the profiled step); 2x its speed allows {dt * 1e3 / 2:.2f} ms per step")


if __name__ == "__main__":
    main()
