#!/usr/bin/python3
"""PyTorch 1.13 side of Kiln's workload suite (docs/design.md section 10), printed in the same JSON-line
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


def w1_bf16(threads, config):
    """torch.matmul on bfloat16 tensors beside float32, interleaved (TFLOP/s)."""
    for n in (256, 1024, 2048):
        torch.manual_seed(1)
        a, b = torch.randn(n, n), torch.randn(n, n)
        ab, bb = a.bfloat16(), b.bfloat16()
        fb = lambda: torch.matmul(ab, bb)
        ff = lambda: torch.matmul(a, b)
        inner = calibrate(fb)
        tb, tf = [], []
        for r in range(5):
            tb.append(median_time(fb, reps=1, inner=inner, warmup=2 if r == 0 else 0))
            tf.append(median_time(ff, reps=1, inner=max(1, inner // 2), warmup=2 if r == 0 else 0))
        flop = 2.0 * n ** 3
        emit("W1_BF16", "matmul", "bf16", threads, {"n": n}, "TFLOP/s",
             flop / statistics.median(tb) / 1e12, config)
        emit("W1_BF16", "matmul", "fp32", threads, {"n": n}, "TFLOP/s",
             flop / statistics.median(tf) / 1e12, config)


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


def train_step(model, opt, loss_fn):
    def step():
        loss = loss_fn(model)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def try_script(module):
    """torch.jit.script of the module, or (None, reason) when TorchScript cannot express it."""
    try:
        return torch.jit.script(module), None
    except Exception as e:  # report, never fake
        return None, f"torch.jit.script failed: {type(e).__name__}: {str(e).splitlines()[0]}"


def emit_modes(workload, name, threads, p, config, make_step, reps, inner, warmup):
    """Times eager and TorchScript training steps (make_step(scripted: bool) -> (step, note))."""
    for mode, scripted in (("eager", False), ("torchscript", True)):
        step, note = make_step(scripted)
        pp = dict(p, note=note) if note else p
        if step is None:
            print(json.dumps({"workload": workload, "name": name, "impl": "pytorch", "mode": mode,
                              "threads": threads, "params": dict(pp, config=config),
                              "metric": "steps/s", "value": None,
                              "peak_rss_mib": round(peak_rss_mib(), 1)}), flush=True)
            continue
        t = median_time(step, reps=reps, inner=inner, warmup=warmup)
        emit(workload, name, mode, threads, pp, "steps/s", 1.0 / t, config)


def w5(threads, config):
    p = {"batch": 64, "input": [1, 28, 28], "opt": "sgd"}

    def make_step(scripted):
        torch.manual_seed(5)
        x, y = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))
        nn = torch.nn
        model = nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                              nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                              nn.Linear(84, 10))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        note = None
        if scripted:
            model, note = try_script(model)
            if model is None:
                return None, note
            note = "torch.jit.script forward; backward by autograd"
        return train_step(model, opt, lambda m: F.cross_entropy(m(x), y)), note

    emit_modes("W5", "lenet5_train_step", threads, p, config, make_step, 7, 10, 5)


class GPTBlock(torch.nn.Module):
    def __init__(self, d: int, heads: int, seq: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
        mask = torch.full((seq, seq), float("-inf")).triu(1)
        self.register_buffer("mask", mask)

    def forward(self, h):
        b, t, d = h.shape
        hd = d // self.heads
        q, k, v = self.qkv(self.ln1(h)).chunk(3, 2)
        q = q.reshape(b, t, self.heads, hd).transpose(1, 2)
        k = k.reshape(b, t, self.heads, hd).transpose(1, 2)
        v = v.reshape(b, t, self.heads, hd).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(2, 3) * (1.0 / hd ** 0.5) + self.mask, -1)
        o = (att @ v).transpose(1, 2).reshape(b, t, d)
        h = h + self.proj(o)
        return h + self.fc2(F.gelu(self.fc1(self.ln2(h))))


class GPTMini(torch.nn.Module):
    def __init__(self, vocab=96, seq=64, d=128, heads=4, layers=2):
        super().__init__()
        self.tok = torch.nn.Parameter(torch.randn(vocab, d) * 0.02)
        self.pos = torch.nn.Parameter(torch.randn(seq, d) * 0.02)
        self.blocks = torch.nn.ModuleList([GPTBlock(d, heads, seq) for _ in range(layers)])
        self.lnf, self.head = torch.nn.LayerNorm(d), torch.nn.Linear(d, vocab)

    def forward(self, idx, tgt):
        h = F.embedding(idx, self.tok) + self.pos
        for blk in self.blocks:
            h = blk(h)
        logits = self.head(self.lnf(h))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))


def w7(threads, config):
    p = {"blocks": 2, "d": 128, "heads": 4, "seq": 64, "batch": 16, "vocab": 96, "opt": "adamw"}

    def make_step(scripted):
        torch.manual_seed(7)
        idx, tgt = torch.randint(0, 96, (16, 64)), torch.randint(0, 96, (16, 64))
        model = GPTMini()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        note = None
        if scripted:
            model, note = try_script(model)
            if model is None:
                return None, note
            note = "torch.jit.script forward; backward by autograd"
        return train_step(model, opt, lambda m: m(idx, tgt)), note

    emit_modes("W7", "gpt_mini_train_step", threads, p, config, make_step, 7, 3, 3)


# W7_BF16: the same synthetic language as kiln_models_bench (bit for bit): a 64-bit LCG; each
# next token is (7 * previous + 3) mod 96 with probability 4/5, else uniform.
def token_stream(seed, n, vocab=96):
    s, mask = seed, (1 << 64) - 1

    def nxt():
        nonlocal s
        s = (s * 6364136223846793005 + 1442695040888963407) & mask
        return s >> 33
    t = [nxt() % vocab]
    for _ in range(n - 1):
        t.append((7 * t[-1] + 3) % vocab if nxt() % 5 != 0 else nxt() % vocab)
    return torch.tensor(t, dtype=torch.int64)


def lm_batch(stream, b, batch=16, seq=64):
    w = stream[b * batch * (seq + 1):(b + 1) * batch * (seq + 1)].reshape(batch, seq + 1)
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()


def w7_bf16(threads, config):
    """GPT-mini's AdamW step in float32 and under torch.autocast("cpu", torch.bfloat16),
    interleaved (steps/s); then 300 steps of each from the same initial parameters on the same
    batches and the validation loss (evaluated as trained)."""
    p = {"blocks": 2, "d": 128, "heads": 4, "seq": 64, "batch": 16, "vocab": 96, "opt": "adamw"}

    def make():
        torch.manual_seed(7)
        model = GPTMini()
        return model, torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)

    def step(model, opt, amp, idx, tgt):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss = model(idx, tgt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    torch.manual_seed(7)
    idx, tgt = torch.randint(0, 96, (16, 64)), torch.randint(0, 96, (16, 64))
    runs = {False: make(), True: make()}
    fs = {amp: (lambda amp=amp: step(*runs[amp], amp, idx, tgt)) for amp in (False, True)}
    inner = {amp: calibrate(f, 0.15) for amp, f in fs.items()}
    ts = {False: [], True: []}
    for r in range(7):
        for amp in (False, True):
            ts[amp].append(median_time(fs[amp], reps=1, inner=inner[amp], warmup=1 if r == 0 else 0))
    for amp, mode in ((False, "eager_fp32"), (True, "eager_autocast_bf16")):
        emit("W7_BF16", "gpt_mini_train_step", mode, threads, p, "steps/s",
             1.0 / statistics.median(ts[amp]), config)
    train = token_stream(1, 300 * 16 * 65)
    val = token_stream(2, 8 * 16 * 65)
    final = {}
    for amp, mode in ((False, "fp32"), (True, "autocast_bf16")):
        model, opt = make()
        t0 = time.perf_counter()
        for s in range(300):
            last = step(model, opt, amp, *lm_batch(train, s))
        secs = time.perf_counter() - t0
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            final[amp] = sum(model(*lm_batch(val, b)).item() for b in range(8)) / 8
        emit("W7_BF16", "gpt_mini_300_steps", mode, threads, p, "val_loss", final[amp], config)
        emit("W7_BF16", "gpt_mini_300_steps", mode, threads, p, "train_loss_last", last.item(),
             config)
        emit("W7_BF16", "gpt_mini_300_steps", mode, threads, p, "s", secs, config)
    emit("W7_BF16", "gpt_mini_300_steps", "autocast_vs_fp32", threads, p, "val_loss_rel_diff_pct",
         100.0 * abs(final[True] - final[False]) / final[False], config)


class MoE(torch.nn.Module):
    """Top-2 of 8 experts; each expert runs only its tokens (nonzero, index, index_add_)."""

    def __init__(self, d=256, hidden=512, experts=8):
        super().__init__()
        self.router = torch.nn.Linear(d, experts, bias=False)
        self.experts = torch.nn.ModuleList([
            torch.nn.Sequential(torch.nn.Linear(d, hidden), torch.nn.GELU(),
                                torch.nn.Linear(hidden, d)) for _ in range(experts)])

    def forward(self, x):
        probs = torch.softmax(self.router(x), -1)
        top_p, top_i = probs.topk(2, dim=1)
        gates = top_p / top_p.sum(1, keepdim=True)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            where = (top_i == e).nonzero()
            tok, slot = where[:, 0], where[:, 1]
            out.index_add_(0, tok, expert(x[tok]) * gates[tok, slot].unsqueeze(1))
        return out


def w8(threads, config):
    p = {"experts": 8, "d": 256, "hidden": 512, "top_k": 2, "tokens": 1024}

    def make_step(scripted):
        torch.manual_seed(8)
        x, target = torch.randn(1024, 256), torch.randn(1024, 256)
        model = MoE()
        note = None
        if scripted:
            model, note = try_script(model)
            if model is None:
                return None, note
            note = "torch.jit.script forward; backward by autograd"

        def step():
            for prm in model.parameters():
                prm.grad = None
            F.mse_loss(model(x), target).backward()
        return step, note

    emit_modes("W8", "moe_top2_fwd_bwd", threads, p, config, make_step, 7, 3, 3)


def main():
    workload, threads, config = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    torch.set_num_threads(threads)
    {"W1": w1, "W1_BF16": w1_bf16, "W2": w2, "W3": w3, "W4": w4, "W5": w5, "W6": w6, "W7": w7,
     "W7_BF16": w7_bf16, "W8": w8}[workload](threads, config)


if __name__ == "__main__":
    main()
