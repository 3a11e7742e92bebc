"""Symbolic sizes under kiln.jit: a model written the PyTorch way (`B, T = idx.shape`,
`self.bias[:, :, :T, :T]`, `kiln.arange(T)`, `view(B, T, C)`) compiles once for every sequence
length, equal to eager in outputs and gradients; comparisons of sizes are guards, not breaks."""
import math

import numpy as np
import pytest

import kiln
import kiln.nn as nn
import kiln.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd = n_head, n_embd
        self.register_buffer("bias", kiln.tril(kiln.ones(block_size, block_size))
                             .view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(),
                                 nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab=50, block_size=64, n_embd=32, n_head=4, n_layer=2):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head, block_size) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        assert t <= self.block_size, f"Cannot forward sequence of length {t}"
        pos = kiln.arange(0, t, dtype=kiln.long).unsqueeze(0)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def _close(a, b, tol=2e-5):
    a, b = np.asarray(a.tolist()), np.asarray(b.tolist())
    assert a.shape == b.shape
    assert np.allclose(a, b, rtol=tol, atol=tol), float(np.abs(a - b).max())


def test_gpt_the_pytorch_way_compiles_once_for_every_length():
    kiln.manual_seed(0)
    model = GPT()
    f = kiln.jit(model)
    for T in range(5, 65):
        idx = kiln.randint(0, 50, (2, T))
        _close(f(idx), model(idx))
    counts = f.stats
    assert counts["compiles"] <= 2, f.explain()
    assert counts["graph_breaks"] == 0, f.explain()
    ex = f.explain()
    assert "shape guard: arg0.size(1) <= 64 -> True" in ex, ex
    assert "test_jit_symbolic.py" in ex  # the guard names the line of the assert
    assert "running eagerly" not in ex


def test_gpt_training_step_gradients_equal_eager_at_every_length():
    kiln.manual_seed(1)
    jm, em = GPT(), GPT()
    em.load_state_dict(jm.state_dict())

    @kiln.jit
    def step(idx, y):
        return jm(idx, y)

    for T in range(5, 65, 3):
        idx = kiln.randint(0, 50, (2, T))
        y = kiln.randint(0, 50, (2, T))
        lj, le = step(idx, y), em(idx, y)
        _close(lj, le)
        jm.zero_grad()
        em.zero_grad()
        lj.backward()
        le.backward()
        for (n, pj), pe in zip(jm.named_parameters(), em.parameters()):
            _close(pj.grad, pe.grad, 1e-4)
    assert step.stats["compiles"] <= 2, step.explain()


def test_a_size_used_as_a_number_guards_on_its_value():
    @kiln.jit
    def f(x):
        n = int(x.shape[1])        # the value itself is needed: one version per value
        return x * n

    for T in (3, 4, 5, 4):
        x = kiln.ones(2, T)
        assert f(x).tolist() == (x * T).tolist()
    ex = f.explain()
    assert "shape guard: arg0.size(1) -> " in ex or "== " in ex or "compiles" in ex


def test_comparisons_choose_the_branch_per_call_without_breaks():
    @kiln.jit
    def f(x):
        T = x.shape[0]
        if T > 8:              # a guard on the relation: two versions for any number of sizes
            return x[: T // 2].sum() + T
        return x.sum() * 2 + T % 3

    for T in (4, 5, 6, 9, 10, 11, 7, 12):
        x = kiln.arange(T, dtype=kiln.float32)
        want = x[: T // 2].sum() + T if T > 8 else x.sum() * 2 + T % 3
        assert f(x).item() == pytest.approx(want.item())
    st = f.stats
    assert st["graph_breaks"] == 0, f.explain()
    assert st["compiles"] <= 3, f.explain()


def test_symint_arithmetic_records_and_reads_as_an_int():
    seen = {}

    @kiln.jit
    def f(x):
        B, T = x.shape
        seen["T"] = T
        z = kiln.zeros(B, T * 2 - 1)
        w = kiln.full((T,), 3.0)
        e = x.unsqueeze(-1).expand(B, T, 4)
        n = x.narrow(1, 0, kiln.sym_max(T - 2, 1))
        return z.sum(1) + w.sum() + e.sum((1, 2)) + n.sum(1) + (T // 2) + (T % 2) + (-T)

    for T in (6, 7, 9):
        x = kiln.randn(3, T)
        want = (3.0 * T + 4 * x.sum(1) + x[:, : max(T - 2, 1)].sum(1)
                + T // 2 + T % 2 - T)
        _close(f(x), want, 1e-4)
    assert isinstance(seen["T"], kiln.SymInt) and seen["T"].is_symbolic
    assert repr(seen["T"]) == "SymInt(7)"  # the dynamic trace ran at T=7; no guard
    assert f.stats["compiles"] <= 2, f.explain()


def test_a_graph_built_by_hand_keeps_none_for_a_dynamic_dim():
    g = kiln.Graph()
    x = g.placeholder(kiln.float32, (None, 3), "x")
    assert x.shape == (None, 3)


# Patterns a PyTorch user writes with a varying leading size: (fn, most compiles over 5 sizes).
# Sizes that decide how many pieces there are (split/chunk by a fixed size, len()) guard on the
# value, one version per size, as torch.compile does; every other pattern compiles twice.
PATTERNS = {
    "reflect_pad": (lambda x: F.pad(x.unsqueeze(0), (2, 2), mode="reflect").sum(), 2),
    "replicate_pad": (lambda x: F.pad(x.unsqueeze(0), (1, 2), mode="replicate").sum(), 2),
    "interpolate_scale": (lambda x: F.interpolate(x.unsqueeze(0), scale_factor=2.0).sum(), 2),
    "interpolate_size": (lambda x: F.interpolate(x.unsqueeze(0), size=x.shape[-1] * 2,
                                                 mode="linear").sum(), 2),
    "tril_of_ones": (lambda x: (kiln.tril(kiln.ones(x.shape[0], x.shape[0])) @ x).sum(), 2),
    "new_zeros": (lambda x: (x.new_zeros(x.shape[0], 3) + x[:, :3]).sum(), 2),
    "new_full": (lambda x: (x.new_full((x.shape[0], 2), 2.0) * x[:, :2]).sum(), 2),
    "repeat": (lambda x: x.repeat(2, 1).sum(1).sum(), 2),
    "flatten": (lambda x: x.view(-1).sum() + x.reshape(x.shape[0] * x.shape[1]).sum(), 2),
    "negative_slice": (lambda x: x[-x.shape[0] // 2:].sum(), 2),
    "arange_float": (lambda x: (kiln.arange(x.shape[0], dtype=kiln.float32) * x[:, 0]).sum(), 2),
    "mean_by_size": (lambda x: x.sum() / x.shape[0], 2),
    "size_times_tensor": (lambda x: x.sum() * x.size(0), 2),
    "transpose_view": (lambda x: x.t().contiguous().view(x.shape[1], x.shape[0]).sum(), 2),
    "split_by_two": (lambda x: sum(p.sum() for p in x.split(2, dim=0)), 5),
    "chunk": (lambda x: sum(c.sum() for c in x.chunk(2, dim=0)), 5),
    "len": (lambda x: x.sum() * len(x), 5),
}


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_pytorch_patterns_over_varying_sizes(name):
    fn, most = PATTERNS[name]
    f = kiln.jit(fn)
    for n in (6, 7, 8, 9, 10):
        x = kiln.randn(n, 8)
        assert f(x).item() == pytest.approx(fn(x).item(), rel=1e-4, abs=1e-4)
    st = f.stats
    assert st["compiles"] <= most and st["graph_breaks"] == 0, f.explain()
    assert not st["eager_fallback"], f.explain()


def _kiln_run():
    import os
    exe = os.path.join(os.path.dirname(kiln.__file__), "..", "..", "tools", "kiln-run")
    return exe if os.path.exists(exe) else None


@pytest.mark.skipif(not hasattr(kiln._C, "_export_onnx") or _kiln_run() is None,
                    reason="built without the ONNX exporter or kiln-run")
def test_onnx_export_keeps_the_length_symbolic_with_named_axes(tmp_path):
    """kiln.onnx.export traces from the example's sizes: x.size() gives SymInts for the
    dynamic_axes, so one exported model serves every batch and length."""
    import subprocess
    onnx = pytest.importorskip("onnx")
    kiln.manual_seed(3)
    model = GPT()
    path = tmp_path / "gpt.onnx"
    kiln.onnx.export(model, (kiln.randint(0, 50, (2, 7)),), str(path), input_names=["idx"],
                     output_names=["logits"], dynamic_axes={"idx": {0: "batch", 1: "T"}})
    m = onnx.load(str(path))
    onnx.checker.check_model(m, full_check=True)
    dims = [d.dim_param or d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", "T"]
    for B, T in ((3, 5), (1, 30), (2, 64)):
        idx = kiln.randint(0, 50, (B, T))
        np.save(tmp_path / "idx.npy", idx.numpy())
        r = subprocess.run([_kiln_run(), str(path), "--input", f"idx={tmp_path / 'idx.npy'}",
                            "--output", str(tmp_path / "out.npz"), "--quiet"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        got = np.load(tmp_path / "out.npz")["logits"]
        _close(kiln.tensor(got), model(idx), 1e-5)


def test_mark_dynamic_and_mark_static_as_torch_dynamo():
    @kiln.jit
    def f(x):
        return x[:, : x.shape[1] - 1].sum(1)

    x = kiln.randn(2, 6)
    kiln._dynamo.mark_dynamic(x, 1)      # dynamic from the first version: one compile in all
    for T in (6, 7, 9, 12):
        y = kiln.randn(2, T) if T != 6 else x
        if T != 6:
            kiln.mark_dynamic(y, 1)
        _close(f(y), y[:, : T - 1].sum(1))
    assert f.stats["compiles"] == 1, f.explain()

    @kiln.jit
    def g(x):
        return x * 2

    for T in (3, 4, 5):
        y = kiln.randn(T)
        kiln.mark_static(y, 0)           # never dynamic: a version per size
        _close(g(y), y * 2)
    assert g.stats["compiles"] == 3, g.explain()
    with pytest.raises(kiln.Error, match=r"\[mark_dynamic\] dim 3 is out of range"):
        kiln.mark_dynamic(kiln.randn(2), 3)
