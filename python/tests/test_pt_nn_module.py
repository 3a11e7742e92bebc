"""kiln.nn.Module's torch API against torch 1.13: containers (ModuleDict, ParameterList,
ParameterDict) and their state_dict keys, apply, dtype and device moves, zero_grad,
non-persistent buffers, load_state_dict(strict=False), repr, hooks, inplace activations,
dropout variants, DataParallel and kiln.nn.utils (clip_grad_norm_, ...)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import kiln  # noqa: E402
import kiln.nn as nn  # noqa: E402
from kiln.nn import functional as F  # noqa: E402
import kiln.nn.functional as F2  # noqa: E402


def kt(a, grad=False):
    t = kiln.tensor(np.array(a, order="C"))
    return t.requires_grad_() if grad else t


def build(lib):
    class Net(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = lib.nn.ModuleDict({"a": lib.nn.Conv2d(1, 2, 3),
                                            "b": lib.nn.Conv1d(2, 2, 1)})
            self.ps = lib.nn.ParameterList([lib.nn.Parameter(lib.ones(2)),
                                            lib.nn.Parameter(lib.zeros(3))])
            self.pd = lib.nn.ParameterDict({"x": lib.nn.Parameter(lib.ones(1))})
            self.seq = lib.nn.Sequential(lib.nn.Linear(4, 3), lib.nn.ReLU(inplace=True),
                                         lib.nn.Dropout(0.2), lib.nn.BatchNorm1d(3))
            self.register_buffer("tmp", lib.zeros(2), persistent=False)
            self.register_buffer("kept", lib.ones(2))

        def forward(self, x):
            return self.seq(x)
    return Net()


def test_keys_order_and_repr_match_torch():
    t, k = build(torch), build(kiln)
    assert list(k.state_dict()) == list(t.state_dict())
    assert [n for n, _ in k.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert [n for n, _ in k.named_buffers()] == [n for n, _ in t.named_buffers()]
    assert [n for n, _ in k.named_modules()] == [n for n, _ in t.named_modules()]
    assert [n for n, _ in k.named_children()] == [n for n, _ in t.named_children()]
    for n, p in t.state_dict().items():
        assert tuple(k.state_dict()[n].shape) == tuple(p.shape), n
    assert repr(k.seq) == repr(t.seq)
    assert repr(k.convs) == repr(t.convs)
    assert "tmp" not in k.state_dict()
    assert isinstance(k.ps[0], nn.Parameter) and len(k.ps) == 2 and "x" in k.pd
    assert isinstance(k.convs["a"], nn.Conv2d) and list(k.convs.keys()) == ["a", "b"]


def test_load_state_dict_from_torch_and_strict_false():
    t, k = build(torch), build(kiln)
    t.eval(), k.eval()
    sd = {n: kt(v.detach().numpy()) for n, v in t.state_dict().items()}
    res = k.load_state_dict(sd)
    assert res.missing_keys == [] and res.unexpected_keys == []
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_allclose(k(kt(x)).numpy(), t(torch.tensor(x)).detach().numpy(), rtol=1e-5,
                               atol=1e-6)
    del sd["kept"]
    sd["extra"] = kiln.zeros(1)
    with pytest.raises(RuntimeError):
        k.load_state_dict(sd)
    tres = t.load_state_dict({n: torch.tensor(v.numpy()) for n, v in sd.items()}, strict=False)
    kres = k.load_state_dict(sd, strict=False)
    assert kres.missing_keys == tres.missing_keys
    assert kres.unexpected_keys == tres.unexpected_keys
    assert not k.state_dict()["seq.0.weight"].requires_grad
    assert k.state_dict(keep_vars=True)["seq.0.weight"].requires_grad


def test_apply_dtype_and_device_moves():
    k = build(kiln)
    seen = []
    k.apply(lambda m: seen.append(type(m).__name__))
    t_seen = []
    build(torch).apply(lambda m: t_seen.append(type(m).__name__))
    assert seen == t_seen
    assert k.double() is k
    assert k.seq[0].weight.dtype == kiln.float64 and k.kept.dtype == kiln.float64
    assert k.seq[3].num_batches_tracked.dtype == kiln.int64   # not floating: kept
    assert k.seq[0].weight.requires_grad and k.seq[0].weight.is_leaf
    k.float()
    assert k.seq[0].weight.dtype == kiln.float32
    k.to(kiln.bfloat16)
    assert k.ps[0].dtype == kiln.bfloat16
    k.to("cpu", dtype=kiln.float32)
    assert k.pd["x"].dtype == kiln.float32
    assert k.to("cpu") is k and k.cpu() is k and k.to(kiln.zeros(1)) is k
    if hasattr(kiln, "device"):
        k.to(kiln.device("cpu"))
    with pytest.raises(RuntimeError, match="cuda"):
        k.to("cuda")
    with pytest.raises(RuntimeError, match="cuda"):
        k.cuda()
    m = nn.Linear(3, 2, dtype=kiln.float64)
    assert m.weight.dtype == kiln.float64
    if hasattr(kiln, "FloatTensor"):   # torch's tensor-type spelling
        assert m.type(kiln.FloatTensor).weight.dtype == kiln.float32
    assert m.type(kiln.float64).bias.dtype == kiln.float64
    with pytest.raises(RuntimeError):
        nn.Linear(3, 2, device="cuda")


def test_zero_grad_requires_grad_and_train_modes():
    k = nn.Sequential(nn.Linear(3, 2), nn.Dropout())
    k(kiln.randn(4, 3)).sum().backward()
    k.zero_grad(set_to_none=False)
    assert all(np.all(p.grad.numpy() == 0) for p in k.parameters())
    k.zero_grad(set_to_none=True)
    assert all(p.grad is None for p in k.parameters())
    k.requires_grad_(False)
    assert not any(p.requires_grad for p in k.parameters())
    assert not k.eval()[1].training and k.train()[1].training


def test_inplace_activations_and_dropout_variants():
    x = kt(np.array([-1.0, 2.0, -3.0], np.float32))
    y = nn.ReLU(inplace=True)(x)
    assert y is x and x.tolist() == [0.0, 2.0, 0.0]
    x = kt(np.array([-1.0, 2.0], np.float32))
    nn.LeakyReLU(0.5, True)(x)
    assert x.tolist() == [-0.5, 2.0]
    # Inside a graph that needs gradients: values and gradients as torch's.
    a = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    ta, ka = torch.tensor(a, requires_grad=True), kt(a, True)
    tl, kl = torch.nn.Linear(3, 3), nn.Linear(3, 3)
    kl.load_state_dict({n: kt(v.detach().numpy()) for n, v in tl.state_dict().items()})
    to = torch.nn.ReLU(inplace=True)(tl(ta)).sum()
    ko = nn.ReLU(inplace=True)(kl(ka)).sum()
    to.backward()
    ko.backward()
    np.testing.assert_allclose(ka.grad.numpy(), ta.grad.numpy(), rtol=1e-5)
    assert repr(nn.ReLU(inplace=True)) == repr(torch.nn.ReLU(inplace=True))
    for cls, shape in [(nn.Dropout1d, (2, 8, 5)), (nn.Dropout2d, (2, 8, 4, 4)),
                       (nn.Dropout3d, (2, 8, 2, 2, 2))]:
        d = cls(0.5)
        out = d(kiln.ones(*shape)).numpy()
        per_channel = out.reshape(2, 8, -1)
        assert np.all(per_channel.min(-1) == per_channel.max(-1))   # whole channels
        assert set(np.unique(out)) <= {0.0, 2.0}
        d.eval()
        assert np.all(d(kiln.ones(*shape)).numpy() == 1)
    ad = nn.AlphaDropout(0.2)
    kiln.manual_seed(0)
    z = ad(kiln.randn(20000)).numpy()
    assert abs(z.mean()) < 0.05 and abs(z.std() - 1) < 0.05
    assert F is F2 and F.relu is nn.functional.relu


def test_hooks_and_data_parallel():
    m = nn.Linear(3, 2)
    calls = []
    h = m.register_forward_hook(lambda mod, inp, out: calls.append(tuple(out.shape)))
    m(kiln.randn(4, 3))
    h.remove()
    m(kiln.randn(4, 3))
    assert calls == [(4, 2)]
    dp = nn.DataParallel(m)
    tdp = torch.nn.DataParallel(torch.nn.Linear(3, 2))
    assert list(dp.state_dict()) == list(tdp.state_dict())
    x = kiln.randn(2, 3)
    np.testing.assert_array_equal(dp(x).detach().numpy(), m(x).detach().numpy())
    assert dp.module is m and nn.parallel.DataParallel is nn.DataParallel


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf"), 3.0])
def test_clip_grad_norm_matches_torch(norm_type):
    rng = np.random.default_rng(0)
    arrs = [rng.standard_normal(s).astype(np.float32) * 3 for s in [(3, 4), (5,), (2, 2, 2)]]
    tps = [torch.tensor(a, requires_grad=True) for a in arrs]
    kps = [kt(a, True) for a in arrs]
    sum((p ** 3).sum() for p in tps).backward()
    sum((p ** 3).sum() for p in kps).backward()
    tn = torch.nn.utils.clip_grad_norm_(tps, 1.5, norm_type)
    kn = nn.utils.clip_grad_norm_(kps, 1.5, norm_type)
    np.testing.assert_allclose(kn.item(), tn.item(), rtol=1e-5)
    for k, t in zip(kps, tps):
        np.testing.assert_allclose(k.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6)
    torch.nn.utils.clip_grad_value_(tps, 0.1)
    nn.utils.clip_grad_value_(kps, 0.1)
    for k, t in zip(kps, tps):
        np.testing.assert_allclose(k.grad.numpy(), t.grad.numpy(), rtol=1e-6)


def test_parameters_to_vector_round_trip():
    m = nn.Linear(3, 2)
    v = nn.utils.parameters_to_vector(m.parameters())
    assert tuple(v.shape) == (8,)
    nn.utils.vector_to_parameters(kiln.arange(8.0), m.parameters())
    assert m.weight.detach().numpy().ravel().tolist() == [0, 1, 2, 3, 4, 5]
    assert m.bias.tolist() == [6.0, 7.0]


def test_default_initialization_is_torchs():
    # Bounds of torch's defaults: Linear/Conv U(+-1/sqrt(fan_in)), Embedding N(0, 1).
    kiln.manual_seed(0)
    lin = nn.Linear(400, 300)
    w = lin.weight.detach().numpy()
    assert np.abs(w).max() <= 1 / 20 and np.abs(w).max() > 0.99 / 20
    assert abs(w.std() - (1 / 20) / np.sqrt(3)) < 1e-3
    conv = nn.Conv2d(16, 32, 3)
    fan_in = 16 * 9
    b = conv.bias.detach().numpy()
    assert np.abs(b).max() <= 1 / np.sqrt(fan_in)
    e = nn.Embedding(1000, 64, padding_idx=0).weight.detach().numpy()
    assert abs(e[1:].std() - 1) < 0.02 and np.all(e[0] == 0)


def test_weight_norm_and_spectral_norm_match_torch():
    torch.manual_seed(0)
    x = np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32)
    for dim in (0, None):
        tm = torch.nn.utils.weight_norm(torch.nn.Linear(5, 3), dim=dim)
        km = nn.utils.weight_norm(nn.Linear(5, 3), dim=dim)
        assert list(km.state_dict()) == list(tm.state_dict())
        km.load_state_dict({n: kt(v.detach().numpy()) for n, v in tm.state_dict().items()})
        to, ko = tm(torch.tensor(x)), km(kt(x))
        np.testing.assert_allclose(ko.detach().numpy(), to.detach().numpy(), rtol=1e-5, atol=1e-6)
        to.sum().backward()
        ko.sum().backward()
        np.testing.assert_allclose(km.weight_g.grad.numpy(), tm.weight_g.grad.numpy(), rtol=1e-4,
                                   atol=1e-6)
        nn.utils.remove_weight_norm(km)
        assert list(km.state_dict()) == ["bias", "weight"]
    tm = torch.nn.utils.spectral_norm(torch.nn.Linear(5, 3))
    km = nn.utils.spectral_norm(nn.Linear(5, 3))
    assert list(km.state_dict()) == list(tm.state_dict())
    km.load_state_dict({n: kt(v.detach().numpy()) for n, v in tm.state_dict().items()})
    for train in (True, True, False):   # power iterations in training, none in eval
        tm.train(train), km.train(train)
        to, ko = tm(torch.tensor(x)), km(kt(x))
        np.testing.assert_allclose(ko.detach().numpy(), to.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(km.weight_u.numpy(), tm.weight_u.numpy(), rtol=1e-4, atol=1e-6)
    nn.utils.remove_spectral_norm(km)
    assert "weight" in km.state_dict()


def test_fuse_conv_bn_and_skip_init():
    torch.manual_seed(0)
    tc, tb = torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)
    tb.running_mean.uniform_(-1, 1), tb.running_var.uniform_(0.5, 2)
    kc, kb = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)
    kc.load_state_dict({n: kt(v.detach().numpy()) for n, v in tc.state_dict().items()})
    kb.load_state_dict({n: kt(v.detach().numpy()) for n, v in tb.state_dict().items()})
    for m in (tc, tb, kc, kb):
        m.eval()
    x = np.random.default_rng(2).standard_normal((2, 3, 6, 6)).astype(np.float32)
    to = torch.nn.utils.fuse_conv_bn_eval(tc, tb)(torch.tensor(x))
    fused = nn.utils.fuse_conv_bn_eval(kc, kb)
    np.testing.assert_allclose(fused(kt(x)).detach().numpy(), to.detach().numpy(), rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(fused(kt(x)).detach().numpy(), kb(kc(kt(x))).detach().numpy(),
                               rtol=1e-4, atol=1e-5)
    m = nn.utils.skip_init(nn.Linear, 3, 2)
    assert isinstance(m, nn.Linear) and tuple(m.weight.shape) == (2, 3)


def test_load_state_dict_post_hook_can_clear_keys():
    m = nn.Sequential(nn.Linear(2, 2))
    seen = []

    def hook(module, keys):
        seen.append(list(keys.unexpected_keys))
        keys.unexpected_keys.clear()     # accepted, as torch lets a hook do
    m.register_load_state_dict_post_hook(hook)
    sd = dict(m.state_dict())
    sd["stale"] = kiln.zeros(1)
    m.load_state_dict(sd)
    assert seen == [["stale"]]


def test_frozen_parameter_stays_a_parameter():
    # The pretrained-embedding pattern: a Parameter that does not require grad.
    emb = nn.Embedding(4, 3)
    emb.weight = nn.Parameter(kiln.ones(4, 3), requires_grad=False)
    assert "weight" in emb.state_dict() and isinstance(emb.weight, nn.Parameter)
    assert not emb.weight.requires_grad
    assert [n for n, _ in emb.named_parameters()] == ["weight"]
    import copy
    twin = copy.deepcopy(emb)
    assert isinstance(twin.weight, nn.Parameter) and twin.weight is not emb.weight
    assert not isinstance(kiln.ones(2), nn.Parameter)


# (class, positional args, keyword args, input shape | "idx" | "pair" | None for two [2, 3])
LAYER_CASES = [
 ("Conv1d", (3, 4, 3), dict(padding=2, padding_mode="reflect"), (2, 3, 9)),
 ("Conv2d", (3, 4, 3), dict(padding="same", dilation=2), (2, 3, 9, 9)),
 ("Conv2d", (4, 4, (3, 2)), dict(stride=2, groups=2, padding_mode="circular", padding=1),
  (2, 4, 9, 9)),
 ("Conv3d", (2, 3, 2), dict(padding=1, padding_mode="replicate"), (1, 2, 5, 5, 5)),
 ("ConvTranspose1d", (3, 2, 3), dict(stride=2, output_padding=1), (2, 3, 7)),
 ("ConvTranspose2d", (3, 2, 3), dict(stride=2, padding=1, dilation=2), (2, 3, 5, 5)),
 ("ConvTranspose3d", (2, 2, 2), dict(stride=2), (1, 2, 3, 3, 3)),
 ("BatchNorm1d", (4,), dict(momentum=None), (6, 4)),
 ("BatchNorm2d", (4,), dict(affine=False), (3, 4, 5, 5)),
 ("BatchNorm3d", (2,), dict(), (3, 2, 3, 3, 3)),
 ("GroupNorm", (2, 4), dict(), (3, 4, 5)),
 ("LayerNorm", ((5, 5),), dict(), (3, 4, 5, 5)),
 ("InstanceNorm2d", (4,), dict(affine=True, track_running_stats=True), (3, 4, 5, 5)),
 ("PReLU", (4,), dict(), (2, 4, 3)),
 ("Softmax2d", (), dict(), (2, 3, 4, 4)),
 ("LogSoftmax", (1,), dict(), (2, 3, 4)),
 ("Softmin", (1,), dict(), (2, 3)),
 ("Bilinear", (3, 3, 5), dict(), None),
 ("Upsample", (), dict(scale_factor=2, mode="bilinear", align_corners=False), (1, 2, 3, 3)),
 ("UpsamplingBilinear2d", (), dict(scale_factor=2), (1, 2, 3, 3)),
 ("MaxPool2d", (3,), dict(stride=2, ceil_mode=True, padding=1), (1, 2, 8, 8)),
 ("AvgPool2d", (3,), dict(stride=2, count_include_pad=False, padding=1), (1, 2, 8, 8)),
 ("AdaptiveAvgPool2d", ((2, 3),), dict(), (1, 2, 7, 8)),
 ("AdaptiveMaxPool1d", (3,), dict(), (1, 2, 7)),
 ("ReflectionPad2d", ((1, 2, 0, 1),), dict(), (1, 2, 4, 4)),
 ("ConstantPad1d", (2, 3.5), dict(), (1, 2, 4)),
 ("ZeroPad2d", (1,), dict(), (1, 2, 3, 3)),
 ("Unfold", (2,), dict(stride=1), (1, 2, 4, 4)),
 ("PixelShuffle", (2,), dict(), (1, 8, 2, 2)),
 ("Hardshrink", (0.3,), dict(), (3, 4)),
 ("Softshrink", (0.3,), dict(), (3, 4)),
 ("Threshold", (0.1, 20.0), dict(), (3, 4)),
 ("RReLU", (), dict(), (3, 4)),
 ("CELU", (0.5,), dict(), (3, 4)),
 ("Softplus", (2, 5), dict(), (3, 4)),
 ("GLU", (), dict(), (3, 4)),
 ("Unflatten", (1, (2, 2)), dict(), (3, 4)),
 ("Flatten", (0,), dict(), (3, 4, 2)),
 ("Embedding", (10, 3), dict(padding_idx=1, max_norm=1.0), "idx"),
 ("LocalResponseNorm", (3,), dict(), (2, 5, 3, 3)),
 ("CosineSimilarity", (), dict(), "pair"),
 ("PairwiseDistance", (), dict(), "pair"),
 ("Identity", (3,), dict(foo=1), (2, 2)),
]


@pytest.mark.parametrize("name,args,kw,shape", LAYER_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(LAYER_CASES)])
def test_layer_matches_torch(name, args, kw, shape):
    """torch's state_dict loads, repr is torch's, and in train and eval mode outputs, input
    and parameter gradients and updated buffers are torch's."""
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    tm, km = getattr(torch.nn, name)(*args, **kw), getattr(nn, name)(*args, **kw)
    assert list(km.state_dict()) == list(tm.state_dict())
    km.load_state_dict({k: kt(v.detach().numpy()) for k, v in tm.state_dict().items()})
    assert repr(km) == repr(tm)
    for mode in ("train", "eval"):
        getattr(tm, mode)(), getattr(km, mode)()
        if name == "RReLU" and mode == "train":
            continue   # random slopes
        if shape == "idx":
            ins = [np.array([[1, 2, 3], [4, 1, 9]])]
        elif shape == "pair":
            ins = [rng.standard_normal((3, 4)).astype(np.float32) for _ in range(2)]
        elif shape is None:
            ins = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2)]
        else:
            ins = [rng.standard_normal(shape).astype(np.float32)]
        tin = [torch.tensor(a, requires_grad=a.dtype == np.float32) for a in ins]
        kin = [kt(a, a.dtype == np.float32) for a in ins]
        to, ko = tm(*tin), km(*kin)
        np.testing.assert_allclose(ko.detach().numpy(), to.detach().numpy(), rtol=1e-4, atol=1e-5)
        (to * to).sum().backward()
        (ko * ko).sum().backward()
        for a, b in zip(kin, tin):
            if b.grad is not None:
                np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-3, atol=1e-4)
        kp = dict(km.named_parameters())
        for n, p in tm.named_parameters():
            np.testing.assert_allclose(kp[n].grad.numpy(), p.grad.numpy(), rtol=1e-3, atol=1e-4,
                                       err_msg=n)
        kb = dict(km.named_buffers())
        for n, b in tm.named_buffers():
            np.testing.assert_allclose(kb[n].numpy(), b.numpy(), rtol=1e-4, atol=1e-5, err_msg=n)


def test_full_backward_hook_matches_torch():
    if not hasattr(kiln._C, "_function_record"):
        pytest.skip("this kiln._C cannot record Python autograd Functions")
    got = {}

    def build(lib, key):
        m = lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.Tanh(), lib.nn.Linear(4, 2))

        def hook(mod, grad_input, grad_output):
            got[key] = ([None if g is None else g.detach().numpy().copy() for g in grad_input],
                        [g.detach().numpy().copy() for g in grad_output])
            return tuple(None if g is None else g * 2 for g in grad_input)
        m[2].register_full_backward_hook(hook)
        return m
    tm, km = build(torch, "torch"), build(kiln, "kiln")
    km.load_state_dict({n: kt(v.detach().numpy()) for n, v in tm.state_dict().items()})
    x = np.random.default_rng(3).standard_normal((5, 3)).astype(np.float32)
    tx, kx = torch.tensor(x, requires_grad=True), kt(x, True)
    (tm(tx) ** 2).sum().backward()
    (km(kx) ** 2).sum().backward()
    for a, b in zip(got["kiln"][0] + got["kiln"][1], got["torch"][0] + got["torch"][1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # the doubled grad_input flows on to the earlier layers and the input
    np.testing.assert_allclose(kx.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(km[0].weight.grad.numpy(), tm[0].weight.grad.numpy(), rtol=1e-5,
                               atol=1e-6)
    # no input needs a gradient: the hook still runs, with grad_input (None,)
    calls = []
    lin = nn.Linear(3, 2)
    lin.register_full_backward_hook(lambda m, gi, go: calls.append((gi, len(go))))
    lin(kiln.randn(4, 3)).sum().backward()
    assert calls == [((None,), 1)]
