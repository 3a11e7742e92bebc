#!/usr/bin/python3
"""PyTorch twins of Kiln's character LM examples (examples/char_lstm.cpp, gpt_mini.cpp,
moe_gpt.cpp): same architectures, initialization formulas, hyperparameters, data split, batch
order (the splitmix64 window sampler of kiln/io/text.cpp) and validation windows. Prints the
final validation loss of each, in the examples' "RESULT ..." format.

    /usr/bin/python3 bench/text_models_pytorch.py --steps 300 [--models char_lstm,gpt_mini,moe_gpt]
"""
import argparse
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

MASK64 = (1 << 64) - 1
FORTUNES = "/usr/share/games/fortunes"


# ---- data: kiln/io/text.cpp, byte for byte -------------------------------------------------
def load_fortunes(d=FORTUNES):
    table = [-1] * 256
    table[ord("\n")] = 0
    for c in range(32, 127):
        table[c] = c - 31
    table[ord("\t")] = table[ord(" ")]
    names = sorted(n for n in os.listdir(d)
                   if n and not n.startswith(".") and not n.endswith(".dat")
                   and not n.endswith(".u8") and os.path.isfile(os.path.join(d, n)))
    ids = []
    for n in names:
        with open(os.path.join(d, n), "rb") as f:
            ids.extend(table[b] for b in f.read() if table[b] >= 0)
    n = len(ids)
    n_val = int(math.floor(n * 0.1))
    t = torch.tensor(ids, dtype=torch.int64)
    return t[: n - n_val].clone(), t[n - n_val:].clone()


class SplitMix64:
    def __init__(self, seed):
        self.s = seed & MASK64

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & MASK64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def below(self, n):
        limit = MASK64 - (MASK64 % n)
        while True:
            r = self.next()
            if r < limit:
                return r % n


def windows(ids, starts, seq):
    idx = torch.tensor(starts, dtype=torch.int64)[:, None] + torch.arange(seq + 1)[None, :]
    w = ids[idx]
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()


class LmSampler:
    """kiln::io::LmSampler: each batch uses a fresh SplitMix64 seeded with the stream state."""

    def __init__(self, ids, batch, seq, seed):
        self.ids, self.batch, self.seq, self.state = ids, batch, seq, seed

    def next(self):
        g = SplitMix64(self.state)
        rng = self.ids.numel() - self.seq
        starts = [g.below(rng) for _ in range(self.batch)]
        self.state = g.next()
        return windows(self.ids, starts, self.seq)


def eval_batches(ids, batch, seq, n):
    total = n * batch
    last = ids.numel() - seq - 1
    out = []
    for b in range(n):
        starts = [0 if total == 1 else ((b * batch + i) * last) // (total - 1) for i in range(batch)]
        out.append(windows(ids, starts, seq))
    return out


# ---- models --------------------------------------------------------------------------------
class CharLSTM(nn.Module):
    def __init__(self, vocab, emb=64, hidden=256):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x):
        y, _ = self.lstm(self.emb(x))
        return self.head(y)

    def extra_loss(self):
        return None


class MoE(nn.Module):
    """kiln/nn/moe.cpp: top-k by repeated argmax, GShard priority (all first choices first),
    fixed capacity ceil(cf * N * k / E), dropped assignments give zero, Switch aux loss."""

    def __init__(self, d, h, e, k, cf):
        super().__init__()
        self.d, self.h, self.e, self.k, self.cf = d, h, e, k, cf
        u = lambda shape, fan: nn.Parameter(torch.empty(shape).uniform_(-1 / math.sqrt(fan), 1 / math.sqrt(fan)))
        self.router = u((e, d), d)
        self.w1, self.b1 = u((e, h, d), d), u((e, h), d)
        self.w2, self.b2 = u((e, d, h), h), u((e, d), h)
        self.aux = None

    def forward(self, x):
        shape = x.shape
        xf = x.reshape(-1, self.d)
        n = xf.shape[0]
        cap = max(1, math.ceil(self.cf * n * self.k / self.e))
        probs = F.softmax(xf @ self.router.t(), -1)
        remaining = probs.detach().clone()
        assigned = torch.zeros(self.e)
        slots, gates = [], []
        slot_token = torch.zeros(self.e * cap + 1, dtype=torch.int64)
        for _ in range(self.k):
            idx = remaining.argmax(1)
            mask = F.one_hot(idx, self.e).to(x.dtype)
            gates.append((probs * mask).sum(1))
            remaining = remaining - 2 * mask
            pos = ((mask.cumsum(0) - 1 + assigned) * mask).sum(1)
            keep = pos < cap
            slot = torch.where(keep, idx * cap + pos.long(), torch.full_like(idx, self.e * cap))
            slots.append(slot)
            slot_token.index_put_((slot,), torch.arange(1, n + 1), accumulate=True)
            assigned = assigned + mask.sum(0)
        ids = slot_token[: self.e * cap]
        x_pad = torch.cat([xf.new_zeros(1, self.d), xf], 0)
        xe = x_pad[ids].view(self.e, cap, self.d)
        hdn = F.gelu(torch.baddbmm(self.b1[:, None, :], xe, self.w1.transpose(1, 2)))
        ye = torch.baddbmm(self.b2[:, None, :], hdn, self.w2.transpose(1, 2))
        ye_pad = torch.cat([ye.reshape(-1, self.d), ye.new_zeros(1, self.d)], 0)
        y = sum(ye_pad[s] * g[:, None] for s, g in zip(slots, gates))
        self.aux = self.e * ((assigned / (n * self.k)) * probs.mean(0)).sum()
        return y.view(shape)


class Block(nn.Module):
    def __init__(self, d, heads, moe):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = MoE(d, 4 * d, *moe) if moe else nn.Sequential(
            nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, seq, d=128, heads=4, layers=2, moe=None, aux_coef=0.01):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads, moe) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        self.aux_coef = aux_coef
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1))

    def forward(self, x):
        t = x.shape[1]
        h = self.tok(x) + self.pos.weight[:t]
        for b in self.blocks:
            h = b(h, self.mask[:t, :t])
        return self.head(self.ln_f(h))

    def extra_loss(self):
        aux = [b.mlp.aux for b in self.blocks if isinstance(b.mlp, MoE)]
        return self.aux_coef * sum(aux) if aux else None


CONFIGS = {  # name: (batch, seq, lr, builder)
    "char_lstm": (32, 32, 3e-3, lambda v, s: CharLSTM(v)),
    "gpt_mini": (16, 64, 3e-3, lambda v, s: GPT(v, s)),
    "moe_gpt": (16, 64, 3e-3, lambda v, s: GPT(v, s, moe=(4, 2, 1.25))),
}


def run(name, steps, seed, train, val, vocab=96):
    batch, seq, lr, build = CONFIGS[name]
    torch.manual_seed(seed)
    model = build(vocab, seq)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sampler = LmSampler(train, batch, seq, seed)
    vb = eval_batches(val, batch, seq, 8)

    def val_loss():
        model.eval()
        with torch.no_grad():
            l = sum(F.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1)).item() for x, y in vb)
        model.train()
        return l / len(vb)

    t_train = 0.0
    for s in range(1, steps + 1):
        x, y = sampler.next()
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))
        extra = model.extra_loss()
        (loss + extra if extra is not None else loss).backward()
        opt.step()
        t_train += time.perf_counter() - t0
        if s % 100 == 0 or s == steps:
            print(f"{name} step {s:5d}  loss {loss.item():.4f}", flush=True)
    v = val_loss()
    counts = torch.bincount(train, minlength=vocab).double()
    p = counts[counts > 0] / counts.sum()
    h = float(-(p * p.log()).sum())
    print(f"{name}: steps/s {steps / t_train:.2f}")
    print(f"RESULT {name} mode=pytorch steps={steps} val_loss={v:.6f} unigram={h:.6f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--models", default="char_lstm,gpt_mini,moe_gpt")
    a = ap.parse_args()
    train, val = load_fortunes()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"{train.numel()} train / {val.numel()} validation characters")
    for name in a.models.split(","):
        run(name, a.steps, a.seed, train, val)


if __name__ == "__main__":
    main()
