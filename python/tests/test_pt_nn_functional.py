"""kiln.nn.functional's compositions against torch 1.13: CTC loss, multilabel margin loss,
embedding bags, affine_grid/grid_sample, pdist, channel_shuffle, gumbel_softmax and
multi_head_attention_forward (values and gradients), and the modules over them (CTCLoss,
EmbeddingBag, MultiLabelMarginLoss, CrossMapLRN2d, Lazy*)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
TF = torch.nn.functional

import kiln  # noqa: E402
import kiln.nn as nn  # noqa: E402
import kiln.nn.functional as F  # noqa: E402


def kt(a, grad=False):
    t = kiln.tensor(np.array(a, order="C"))
    return t.requires_grad_() if grad else t


def close(k, t, tol=1e-5):
    np.testing.assert_allclose(k.detach().numpy(), t.detach().numpy(), rtol=tol, atol=tol)


rng = np.random.default_rng(5)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("concat", [False, True])
def test_ctc_loss(reduction, concat):
    T, N, C, S = 12, 3, 5, 4
    lp = np.log(np.exp(rng.standard_normal((T, N, C))) /
                np.exp(rng.standard_normal((T, N, C))).sum(-1, keepdims=True)).astype(np.float32)
    lp = lp - np.log(np.exp(lp).sum(-1, keepdims=True))
    targets = rng.integers(1, C, (N, S)).astype(np.int64)
    targets[1, 1] = targets[1, 0]  # a repeated label needs a blank between them
    in_lens, tg_lens = [12, 9, 7], [4, 2, 3]
    tgt = np.concatenate([targets[i, :n] for i, n in enumerate(tg_lens)]) if concat else targets
    tx, kx = torch.tensor(lp, requires_grad=True), kt(lp, True)
    to = TF.ctc_loss(tx, torch.tensor(tgt), in_lens, tg_lens, reduction=reduction)
    ko = F.ctc_loss(kx, kt(tgt), in_lens, tg_lens, reduction=reduction)
    close(ko, to, 1e-4)
    to.sum().backward()
    ko.sum().backward()
    close(kx.grad, tx.grad, 1e-4)
    assert nn.CTCLoss(reduction=reduction)(kx, kt(tgt), kt(np.array(in_lens)),
                                           kt(np.array(tg_lens))).shape == ko.shape


def test_ctc_impossible_alignment_and_zero_infinity():
    lp = np.log(np.full((2, 1, 3), 1 / 3, np.float32))
    tg = np.array([[1, 1]], np.int64)   # needs 3 steps, has 2
    for zi in (False, True):
        to = TF.ctc_loss(torch.tensor(lp), torch.tensor(tg), [2], [2], reduction="none",
                         zero_infinity=zi)
        ko = F.ctc_loss(kt(lp), kt(tg), [2], [2], reduction="none", zero_infinity=zi)
        np.testing.assert_array_equal(ko.numpy(), to.numpy())


def test_multilabel_margin_loss():
    x = rng.standard_normal((3, 5)).astype(np.float32)
    y = np.array([[3, 0, -1, 1, 2], [1, 2, 4, 0, -1], [-1, 0, 0, 0, 0]], np.int64)
    for red in ("mean", "sum", "none"):
        tx, kx = torch.tensor(x, requires_grad=True), kt(x, True)
        to = torch.nn.MultiLabelMarginLoss(reduction=red)(tx, torch.tensor(y))
        ko = nn.MultiLabelMarginLoss(reduction=red)(kx, kt(y))
        close(ko, to)
        to.sum().backward()
        ko.sum().backward()
        close(kx.grad, tx.grad)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag(mode):
    torch.manual_seed(0)
    tm = torch.nn.EmbeddingBag(10, 3, mode=mode, padding_idx=2)
    km = nn.EmbeddingBag(10, 3, mode=mode, padding_idx=2)
    km.load_state_dict({"weight": kt(tm.weight.detach().numpy())})
    idx = np.array([1, 2, 4, 5, 4, 3, 2, 9, 2], np.int64)
    offs = np.array([0, 4, 4, 8], np.int64)   # an empty bag and a bag of padding only
    to, ko = tm(torch.tensor(idx), torch.tensor(offs)), km(kt(idx), kt(offs))
    close(ko, to)
    to.sum().backward()
    ko.sum().backward()
    close(km.weight.grad, tm.weight.grad)
    two_d = np.array([[1, 3], [4, 4]], np.int64)
    close(km(kt(two_d)), tm(torch.tensor(two_d)))
    if mode == "sum":
        w = rng.random(9).astype(np.float32)
        close(km(kt(idx), kt(offs), kt(w)), tm(torch.tensor(idx), torch.tensor(offs),
                                               torch.tensor(w)))


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("mode,padding_mode", [("bilinear", "zeros"), ("bilinear", "border"),
                                               ("bilinear", "reflection"), ("nearest", "zeros")])
def test_affine_grid_and_grid_sample(align_corners, mode, padding_mode):
    theta = np.array([[[0.9, -0.3, 0.1], [0.2, 1.1, -0.2]],
                      [[1.3, 0.0, 0.4], [0.0, 1.2, 0.0]]], np.float32)
    img = rng.standard_normal((2, 3, 6, 7)).astype(np.float32)
    tg = TF.affine_grid(torch.tensor(theta), [2, 3, 5, 4], align_corners=align_corners)
    kg = F.affine_grid(kt(theta), [2, 3, 5, 4], align_corners=align_corners)
    close(kg, tg)
    ti, ki = torch.tensor(img, requires_grad=True), kt(img, True)
    tgr, kgr = tg.detach().requires_grad_(), kt(tg.detach().numpy(), True)
    to = TF.grid_sample(ti, tgr, mode, padding_mode, align_corners)
    ko = F.grid_sample(ki, kgr, mode, padding_mode, align_corners)
    close(ko, to, 1e-4)
    (to * to).sum().backward()
    (ko * ko).sum().backward()
    close(ki.grad, ti.grad, 1e-4)
    if mode == "bilinear":  # large gradients at the clamped border: relative tolerance
        np.testing.assert_allclose(kgr.grad.numpy(), tgr.grad.numpy(), rtol=1e-3, atol=1e-3)


def test_pdist_channel_shuffle_gumbel_and_mha_forward():
    x = rng.standard_normal((5, 3)).astype(np.float32)
    for p in (2.0, 1.0):
        tx, kx = torch.tensor(x, requires_grad=True), kt(x, True)
        to, ko = TF.pdist(tx, p), F.pdist(kx, p)
        close(ko, to)
        to.sum().backward()
        ko.sum().backward()
        close(kx.grad, tx.grad)
    img = rng.standard_normal((2, 6, 2, 2)).astype(np.float32)
    close(F.channel_shuffle(kt(img), 3), TF.channel_shuffle(torch.tensor(img), 3))
    close(nn.ChannelShuffle(2)(kt(img)), torch.nn.ChannelShuffle(2)(torch.tensor(img)))
    logits = kt(rng.standard_normal((4, 6)).astype(np.float32), True)
    hard = F.gumbel_softmax(logits, tau=0.5, hard=True)
    h = hard.detach().numpy()
    assert np.all(h.sum(1) == 1) and set(np.unique(h)) <= {0.0, 1.0}
    (hard * kt(np.arange(6, dtype=np.float32))).sum().backward()
    assert logits.grad is not None and np.abs(logits.grad.numpy()).sum() > 0
    soft = F.gumbel_softmax(logits, tau=2.0).detach().numpy()
    np.testing.assert_allclose(soft.sum(1), 1, rtol=1e-5)
    # the functional attention forward with torch's argument list
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(8, 2)
    q = rng.standard_normal((4, 2, 8)).astype(np.float32)
    args = [m.in_proj_weight, m.in_proj_bias, None, None, False, 0.0, m.out_proj.weight,
            m.out_proj.bias]
    to, tw = TF.multi_head_attention_forward(*[torch.tensor(q)] * 3, 8, 2, *args)
    kargs = [kt(a.detach().numpy()) if isinstance(a, torch.Tensor) else a for a in args]
    ko, kw = F.multi_head_attention_forward(*[kt(q)] * 3, 8, 2, *kargs)
    close(ko, to)
    close(kw, tw)


def test_lazy_modules_and_cross_map_lrn():
    m = nn.LazyLinear(5)
    assert isinstance(m, nn.LazyLinear)
    y = m(kiln.randn(3, 7))
    assert type(m) is nn.Linear and m.in_features == 7 and tuple(y.shape) == (3, 5)
    c = nn.LazyConv2d(4, 3, padding=1)
    assert tuple(c(kiln.randn(1, 2, 5, 5)).shape) == (1, 4, 5, 5) and c.weight.shape == (4, 2, 3, 3)
    tb, kb = torch.nn.LazyBatchNorm1d(), nn.LazyBatchNorm1d()
    tb(torch.randn(4, 6)), kb(kiln.randn(4, 6))
    assert list(kb.state_dict()) == list(tb.state_dict())
    ti, ki = torch.nn.LazyInstanceNorm2d(), nn.LazyInstanceNorm2d()
    ti(torch.randn(2, 3, 4, 4)), ki(kiln.randn(2, 3, 4, 4))
    assert list(ki.state_dict()) == list(ti.state_dict())
    img = rng.standard_normal((2, 6, 3, 3)).astype(np.float32)
    close(nn.CrossMapLRN2d(3, 1e-2)(kt(img)), torch.nn.CrossMapLRN2d(3, 1e-2)(torch.tensor(img)))


def test_conv_tbc():
    x = rng.standard_normal((7, 2, 3)).astype(np.float32)
    w = rng.standard_normal((3, 3, 4)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    for pad in (0, 1):
        close(F.conv_tbc(kt(x), kt(w), kt(b), pad),
              TF.conv_tbc(torch.tensor(x), torch.tensor(w), torch.tensor(b), pad))


@pytest.mark.parametrize("n", [2, 3])
def test_fractional_max_pool(n):
    shape = (2, 3, 9, 8) if n == 2 else (2, 3, 7, 6, 8)
    x = rng.standard_normal(shape).astype(np.float32)
    samples = rng.random((2, 3, n)).astype(np.float32)
    out = (4,) * n if n == 2 else (3, 3, 4)
    tfn = getattr(TF, f"fractional_max_pool{n}d")
    kfn = getattr(F, f"fractional_max_pool{n}d")
    tx, kx = torch.tensor(x, requires_grad=True), kt(x, True)
    to, ti = tfn(tx, 2, output_size=out, return_indices=True,
                 _random_samples=torch.tensor(samples))
    ko, ki = kfn(kx, 2, output_size=out, return_indices=True, _random_samples=kt(samples))
    close(ko, to)
    np.testing.assert_array_equal(ki.numpy(), ti.numpy())
    to.sum().backward()
    ko.sum().backward()
    close(kx.grad, tx.grad)
    m = getattr(nn, f"FractionalMaxPool{n}d")(3, output_ratio=0.5)
    assert tuple(m(kt(x)).shape) == tuple(getattr(torch.nn, f"FractionalMaxPool{n}d")(
        3, output_ratio=0.5)(torch.tensor(x)).shape)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_channel_dropout_noise_shapes_are_torchs():
    # Which entries share one draw: torch 1.13's rules per rank (dropout2d on [N, F] drops
    # single elements, on [N, C, L] whole rows; dropout3d on [C, D, H, W] whole channels).
    # (function, shape, how many leading dims index one draw)
    cases = [("dropout1d", (3, 40), 1), ("dropout1d", (2, 3, 40), 2), ("dropout2d", (50, 60), 2),
             ("dropout2d", (2, 3, 40), 2), ("dropout2d", (2, 3, 4, 10), 2),
             ("dropout3d", (3, 4, 5, 6), 1), ("dropout3d", (2, 3, 2, 5, 4), 2)]
    for name, shape, lead in cases:
        y = getattr(F, name)(kiln.ones(*shape), p=0.5).numpy()
        t = getattr(TF, name)(torch.ones(*shape), p=0.5).numpy()
        for a in (y, t):   # one value per draw, and the draws differ
            maps = a.reshape(a.shape[:lead] + (-1,))
            assert {len(set(m.ravel())) for m in maps.reshape(-1, maps.shape[-1])} == {1}, \
                (name, shape)
        assert y.shape == t.shape and set(np.unique(y)) <= {0.0, 2.0}


def test_compositions_keep_torchs_dtype_and_shape():
    ki, ti = kiln.tensor([1, 2, 3]), torch.tensor([1, 2, 3])
    k, t = F.threshold(ki, 1.5, -1.0), TF.threshold(ti, 1.5, -1.0)
    assert k.tolist() == t.tolist() and str(k.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
    x = np.array([0.2, -1.0, 0.7], np.float32)
    for name in ("hardshrink", "softshrink"):
        kb = getattr(F, name)(kt(x).to(kiln.bfloat16))
        assert kb.dtype == kiln.bfloat16
    assert tuple(F.prelu(kiln.tensor(-2.0), kiln.tensor([0.25])).shape) == \
        tuple(TF.prelu(torch.tensor(-2.0), torch.tensor([0.25])).shape) == ()
    idx = np.array([0, 3, 1])
    np.testing.assert_array_equal(F.one_hot(kt(idx)).numpy(), TF.one_hot(torch.tensor(idx)).numpy())
    y = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    close(F.softmin(kt(y)), TF.softmin(torch.tensor(y), dim=1))
