"""kiln.autocast against torch.autocast("cpu", torch.bfloat16) in PyTorch 1.13: the dtype of
each op's result under autocast and its values (to bfloat16's precision), gradients reaching
float32 parameters as float32, nesting, enabled=False, the decorator form, kiln.cpu.amp,
thread-locality, and autocast under kiln.jit."""
import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import kiln

F = kiln.nn.functional


def dt(t):
    """'float32', 'bfloat16', ... for a kiln or torch tensor."""
    return str(t.dtype).split(".")[-1]


def as_np(t):
    if isinstance(t, torch.Tensor):
        return t.detach().float().numpy()
    return t.float().numpy()


def pair(*shape, seed=0, scale=1.0):
    a = (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)
    return kiln.tensor(a), torch.from_numpy(a.copy())


def both(fn_k, fn_t, ks, ts, dtype=True):
    with kiln.autocast("cpu", dtype=kiln.bfloat16):
        rk = fn_k(*ks)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        rt = fn_t(*ts)
    return rk, rt


def close(rk, rt, tol=1.5e-2):
    a, b = as_np(rk), as_np(rt)
    assert a.shape == b.shape
    scale = max(float(np.abs(b).max()), 1e-6)
    assert float(np.abs(a - b).max()) <= tol * scale, (float(np.abs(a - b).max()), scale)


def targets(n, c, seed=1):
    t = np.random.default_rng(seed).integers(0, c, n)
    return kiln.tensor(t), torch.from_numpy(t)


# (name, kiln fn, torch fn, input shapes); every input float32 unless the fn casts it.
BF = (lambda x: x.to(kiln.bfloat16), lambda x: x.bfloat16())
CASES = [
    ("matmul", lambda a, b: kiln.matmul(a, b), lambda a, b: torch.matmul(a, b), [(6, 8), (8, 5)]),
    ("matmul_batched", kiln.matmul, torch.matmul, [(3, 6, 8), (3, 8, 5)]),
    ("matmul_broadcast", kiln.matmul, torch.matmul, [(2, 3, 6, 8), (8, 5)]),
    ("matmul_vec", kiln.matmul, torch.matmul, [(6, 8), (8,)]),
    ("mm", kiln.mm, torch.mm, [(6, 8), (8, 5)]),
    ("matmul_mixed", lambda a, b: kiln.matmul(BF[0](a), b),
     lambda a, b: torch.matmul(BF[1](a), b), [(6, 8), (8, 5)]),
    ("linear", F.linear, TF.linear, [(4, 6, 8), (5, 8), (5,)]),
    ("linear_1d", F.linear, TF.linear, [(8,), (5, 8), (5,)]),
    ("addmm", kiln.addmm, torch.addmm, [(5,), (6, 8), (8, 5)]),
    ("baddbmm", kiln.baddbmm, torch.baddbmm, [(3, 6, 5), (3, 6, 8), (3, 8, 5)]),
    ("addbmm", kiln.addbmm, torch.addbmm, [(6, 5), (3, 6, 8), (3, 8, 5)]),
    ("bmm", kiln.bmm, torch.bmm, [(3, 6, 8), (3, 8, 5)]),
    ("mv", kiln.mv, torch.mv, [(6, 8), (8,)]),
    ("addmv", kiln.addmv, torch.addmv, [(6,), (6, 8), (8,)]),
    ("dot", kiln.dot, torch.dot, [(8,), (8,)]),
    ("conv3d", F.conv3d, TF.conv3d, [(1, 2, 5, 5, 5), (3, 2, 2, 2, 2)]),
    ("tensordot", lambda a, b: kiln.tensordot(a, b, 1), lambda a, b: torch.tensordot(a, b, 1),
     [(6, 8), (8, 5)]),
    ("conv2d", F.conv2d, TF.conv2d, [(2, 3, 9, 9), (4, 3, 3, 3), (4,)]),
    ("conv1d", F.conv1d, TF.conv1d, [(2, 3, 9), (4, 3, 3), (4,)]),
    ("cross_entropy", lambda x: F.cross_entropy(BF[0](x), targets(6, 5)[0]),
     lambda x: TF.cross_entropy(BF[1](x), targets(6, 5)[1]), [(6, 5)]),
    ("cross_entropy_f32", lambda x: F.cross_entropy(x, targets(6, 5)[0]),
     lambda x: TF.cross_entropy(x, targets(6, 5)[1]), [(6, 5)]),
    ("nll_loss", lambda x: F.nll_loss(F.log_softmax(BF[0](x), 1), targets(6, 5)[0]),
     lambda x: TF.nll_loss(TF.log_softmax(BF[1](x), 1), targets(6, 5)[1]), [(6, 5)]),
    ("mse_loss", lambda a, b: F.mse_loss(BF[0](a), BF[0](b)),
     lambda a, b: TF.mse_loss(BF[1](a), BF[1](b)), [(6, 5), (6, 5)]),
    ("smooth_l1_loss", lambda a, b: F.smooth_l1_loss(BF[0](a), BF[0](b)),
     lambda a, b: TF.smooth_l1_loss(BF[1](a), BF[1](b)), [(6, 5), (6, 5)]),
    ("bce_with_logits", lambda a, b: F.binary_cross_entropy_with_logits(BF[0](a), BF[0](b)),
     lambda a, b: TF.binary_cross_entropy_with_logits(BF[1](a), BF[1](b)), [(6, 5), (6, 5)]),
    # torch 1.13 runs these in their input's dtype on CPU (promotion for mixed inputs)
    ("sum_bf16", lambda x: BF[0](x).sum(), lambda x: BF[1](x).sum(), [(6, 5)]),
    ("sum_f32", lambda x: x.sum(), lambda x: x.sum(), [(6, 5)]),
    ("mean_bf16", lambda x: BF[0](x).mean(), lambda x: BF[1](x).mean(), [(6, 5)]),
    ("softmax_bf16", lambda x: F.softmax(BF[0](x), -1), lambda x: TF.softmax(BF[1](x), -1),
     [(6, 5)]),
    ("layer_norm_bf16", lambda x: F.layer_norm(BF[0](x), (5,)),
     lambda x: TF.layer_norm(BF[1](x), (5,)), [(6, 5)]),
    ("relu_bf16", lambda x: F.relu(BF[0](x)), lambda x: TF.relu(BF[1](x)), [(6, 5)]),
    ("gelu_bf16", lambda x: F.gelu(BF[0](x)), lambda x: TF.gelu(BF[1](x)), [(6, 5)]),
    ("add_mixed", lambda a, b: a + BF[0](b), lambda a, b: a + BF[1](b), [(6, 5), (6, 5)]),
    ("linear_then_add", lambda x, w, r: r + F.linear(x, w), lambda x, w, r: r + TF.linear(x, w),
     [(6, 8), (5, 8), (6, 5)]),
    ("matmul_f64", lambda a, b: kiln.matmul(a.double(), b.double()),
     lambda a, b: torch.matmul(a.double(), b.double()), [(6, 8), (8, 5)]),
]


@pytest.mark.parametrize("name,fk,ft,shapes", CASES, ids=[c[0] for c in CASES])
def test_op_matches_torch_autocast(name, fk, ft, shapes):
    ins = [pair(*s, seed=i + 3) for i, s in enumerate(shapes)]
    rk, rt = both(fk, ft, [k for k, _ in ins], [t for _, t in ins])
    assert dt(rk) == dt(rt), f"{name}: kiln {dt(rk)}, torch {dt(rt)}"
    close(rk, rt)


def test_gradients_of_float32_params_are_float32():
    x, tx = pair(16, 12, seed=1)
    w, tw = pair(5, 12, seed=2, scale=0.3)
    b, tb = pair(5, seed=3)
    tgt, ttgt = targets(16, 5)
    for t in (w, b):
        t.requires_grad_()
    for t in (tw, tb):
        t.requires_grad_()
    with kiln.autocast("cpu", dtype=kiln.bfloat16):
        logits = F.linear(x, w, b)
        loss = F.cross_entropy(logits, tgt)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        tlogits = TF.linear(tx, tw, tb)
        tloss = TF.cross_entropy(tlogits, ttgt)
    assert dt(logits) == dt(tlogits) == "bfloat16"
    assert dt(loss) == dt(tloss) == "float32"
    loss.backward()
    tloss.backward()
    for k, t in ((w, tw), (b, tb)):
        assert dt(k.grad) == dt(t.grad) == "float32"
        close(k.grad, t.grad, tol=3e-2)


def test_nesting_disabled_decorator_and_cpu_amp():
    a = kiln.randn(4, 4)
    assert not kiln.is_autocast_cpu_enabled()
    with kiln.autocast("cpu"):
        assert kiln.is_autocast_cpu_enabled()
        assert kiln.get_autocast_cpu_dtype() == kiln.bfloat16
        assert dt(a @ a) == "bfloat16"
        with kiln.autocast("cpu", enabled=False):
            assert dt(a @ a) == "float32"
            with kiln.cpu.amp.autocast():
                assert dt(a @ a) == "bfloat16"
            assert dt(a @ a) == "float32"
        assert dt(a @ a) == "bfloat16"
    assert not kiln.is_autocast_cpu_enabled()
    assert dt(a @ a) == "float32"

    @kiln.autocast("cpu", dtype=kiln.bfloat16)
    def f(x):
        return x @ x

    assert dt(f(a)) == "bfloat16"
    assert dt(a @ a) == "float32"
    # an exception inside the scope still restores the state
    with pytest.raises(ZeroDivisionError):
        with kiln.autocast("cpu"):
            1 / 0
    assert not kiln.is_autocast_cpu_enabled()
    with pytest.raises(kiln.ValueError, match=r"^\[autocast\]"):
        kiln.autocast("cuda")
    with pytest.raises(kiln.Error, match=r"^\[autocast\].*bfloat16 or float16"):
        with kiln.autocast("cpu", dtype=kiln.int32):
            pass
    assert not kiln.is_autocast_cpu_enabled()


def test_autocast_is_thread_local():
    a = kiln.randn(4, 4)
    seen = {}

    def other():
        seen["enabled"] = kiln.is_autocast_cpu_enabled()
        seen["dtype"] = dt(a @ a)

    with kiln.autocast("cpu"):
        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert dt(a @ a) == "bfloat16"
    assert seen == {"enabled": False, "dtype": "float32"}


def test_jit_under_autocast():
    x, _ = pair(8, 16, seed=4)
    w, _ = pair(4, 16, seed=5)

    @kiln.jit
    def f(x, w):
        return F.linear(x, w)

    with kiln.autocast("cpu"):
        r1 = f(x, w)
        ref = F.linear(x, w)
    r2 = f(x, w)
    assert dt(r1) == "bfloat16" and dt(r2) == "float32"
    np.testing.assert_array_equal(as_np(r1), as_np(ref))
    assert "autocast" in f.explain()


def test_training_under_autocast_converges_like_float32():
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((128, 10)).astype(np.float32)
    ys = np.argmax(xs @ rng.standard_normal((10, 4)), 1)
    w1i = (rng.standard_normal((64, 10)) * 0.3).astype(np.float32)
    w2i = (rng.standard_normal((4, 64)) * 0.1).astype(np.float32)
    x, y = kiln.tensor(xs), kiln.tensor(ys)
    first, final = [], []
    for amp in (False, True):
        w1 = kiln.tensor(w1i, requires_grad=True)
        w2 = kiln.tensor(w2i, requires_grad=True)
        opt = kiln.optim.AdamW([w1, w2], lr=1e-2)
        for step in range(150):
            with kiln.autocast("cpu", enabled=amp):
                loss = F.cross_entropy(F.linear(F.relu(F.linear(x, w1)), w2), y)
            if step == 0:
                first.append(loss.item())
            opt.zero_grad()
            loss.backward()
            opt.step()
        assert dt(w1) == "float32" and dt(w1.grad) == "float32"
        final.append(loss.item())
    assert abs(first[1] - first[0]) < 0.02 * first[0], first
    assert final[0] < 0.25 * first[0] and final[1] < 0.25 * first[0], (first, final)
    assert abs(final[1] - final[0]) < 0.05 * first[0], (first, final)
