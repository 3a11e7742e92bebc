#!/usr/bin/python3
"""PyTorch 1.13 side of Kiln's workload suite (DESIGN section 10), printed in the same JSON-line
format as kiln_bench. Usage: pytorch_workloads.py WORKLOAD THREADS CONFIG
CONFIG is a label for the environment bench/run set up (default | tuned | tuned_ob1)."""
import json
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def emit(workload, name, mode, threads, params, metric, value, config):
    params = dict(params, config=config)
    print(json.dumps({"workload": workload, "name": name, "impl": "pytorch", "mode": mode,
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


def calibrate(f, target=0.05):
    f()
    t0 = time.perf_counter()
    f()
    dt = max(time.perf_counter() - t0, 1e-9)
    return max(1, int(target / dt))


def w1(threads, config):
    for n in (64, 256, 1024, 2048):
        torch.manual_seed(1)
        a, b = torch.randn(n, n), torch.randn(n, n)
        out = torch.empty(n, n)
        f = lambda: torch.matmul(a, b, out=out)
        inner = calibrate(f)
        t = median_time(f, reps=5, inner=inner)
        emit("W1", "matmul", "eager", threads, {"n": n}, "GFLOP/s", 2.0 * n ** 3 / t / 1e9, config)


def w2(threads, config):
    torch.manual_seed(2)
    x, a, b = torch.randn(4096, 1024), torch.randn(1024), torch.randn(1024)
    w, bias = torch.ones(1024), torch.zeros(1024)
    nbytes = 2.0 * x.numel() * 4
    with torch.no_grad():
        tg = median_time(lambda: F.gelu(x * a + b), reps=7, inner=5, warmup=3)
        tl = median_time(lambda: F.layer_norm(x, (1024,), w, bias), reps=7, inner=5, warmup=3)
    p = {"shape": [4096, 1024]}
    emit("W2", "gelu_affine", "eager", threads, p, "GB/s", nbytes / tg / 1e9, config)
    emit("W2", "layer_norm", "eager", threads, p, "GB/s", nbytes / tl / 1e9, config)


def w3(threads, config):
    x0, y = torch.randn(16), torch.randn(16)

    def f():
        x = x0
        for _ in range(1000):
            x = torch.add(x, y)

    @torch.jit.script
    def chain(x0: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x = x0
        for _ in range(1000):
            x = torch.add(x, y)
        return x

    with torch.no_grad():
        t = median_time(f, reps=15, inner=5, warmup=3)
        ts = median_time(lambda: chain(x0, y), reps=15, inner=5, warmup=3)
    p = {"ops": 1000, "numel": 16}
    emit("W3", "dependent_adds", "eager", threads, p, "us/op", t / 1000 * 1e6, config)
    emit("W3", "dependent_adds", "torchscript", threads, p, "us/op", ts / 1000 * 1e6, config)


def w4(threads, config):
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

    t = median_time(step, reps=7, inner=20, warmup=5)
    emit("W4", "mlp_train_step", "eager", threads, {"batch": 128, "layers": [784, 256, 256, 10]},
         "steps/s", 1.0 / t, config)


def w6(threads, config):
    torch.manual_seed(6)
    x, y = torch.randn(32, 32, 64), torch.randint(0, 10, (32,))
    p = {"seq": 32, "batch": 32, "input": 64, "hidden": 256}

    # nn.LSTM
    lstm, head = torch.nn.LSTM(64, 256), torch.nn.Linear(256, 10)
    opt = torch.optim.SGD(list(lstm.parameters()) + list(head.parameters()), lr=0.01)

    def step_lstm():
        out, _ = lstm(x)
        loss = F.cross_entropy(head(out[-1]), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    # The cell as a loop over time steps (what Kiln runs), eager and TorchScript.
    wx = (torch.randn(64, 1024) * 0.05).requires_grad_()
    wh = (torch.randn(256, 1024) * 0.05).requires_grad_()
    b = torch.zeros(1024, requires_grad=True)
    wo = (torch.randn(10, 256) * 0.05).requires_grad_()
    bo = torch.zeros(10, requires_grad=True)
    params = [wx, wh, b, wo, bo]
    opt2 = torch.optim.SGD(params, lr=0.01)

    def cell_loop(x, wx, wh, b, wo, bo):
        h = torch.zeros(x.shape[1], 256)
        c = torch.zeros(x.shape[1], 256)
        for t in range(x.shape[0]):
            gates = x[t] @ wx + h @ wh + b
            i, f, g, o = gates.chunk(4, 1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        return F.linear(h, wo, bo)

    scripted = torch.jit.script(cell_loop)

    def step_cell(fn):
        def step():
            loss = F.cross_entropy(fn(x, *params), y)
            opt2.zero_grad()
            loss.backward()
            opt2.step()
        return step

    emit("W6", "lstm_nn_module_train_step", "eager", threads, p, "steps/s",
         1.0 / median_time(step_lstm, reps=5, inner=3, warmup=2), config)
    emit("W6", "lstm_cell_loop_train_step", "eager", threads, p, "steps/s",
         1.0 / median_time(step_cell(cell_loop), reps=5, inner=3, warmup=2), config)
    emit("W6", "lstm_cell_loop_train_step", "torchscript", threads, p, "steps/s",
         1.0 / median_time(step_cell(scripted), reps=5, inner=3, warmup=3), config)


def main():
    workload, threads, config = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    torch.set_num_threads(threads)
    {"W1": w1, "W2": w2, "W3": w3, "W4": w4, "W6": w6}[workload](threads, config)


if __name__ == "__main__":
    main()
