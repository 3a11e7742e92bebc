# torch.Tensor's Python surface against torch 1.13: .data, view_as & co., *_like, in-place
# initialisers, __format__, range indexing, FloatTensor & co., Tensor.type, randperm,
# multinomial, normal, bernoulli, randint's overloads and kiln.Generator.
import math

import numpy as np
import pytest

import kiln

torch = pytest.importorskip("torch")


def name_of(dtype):
    return str(dtype).split(".")[-1]


def test_data_is_detached_and_shares_storage():
    w = kiln.ones(3, requires_grad=True)
    d = w.data
    assert not d.requires_grad and d.is_leaf
    d.mul_(2)  # writes reach w, as torch's .data
    assert w.tolist() == [2.0, 2.0, 2.0] and w.requires_grad
    w.data = kiln.zeros(3)
    assert w.tolist() == [0.0, 0.0, 0.0] and w.requires_grad
    # The old optimizer idiom.
    (w * 3).sum().backward()
    w.data.add_(w.grad.data, alpha=-0.5)
    assert w.tolist() == [-1.5, -1.5, -1.5]
    with pytest.raises(kiln.Error):
        w.data = kiln.zeros(4)


def test_view_as_reshape_as_type_as_new():
    a, b = kiln.arange(6.0), kiln.zeros(2, 3, dtype=kiln.int64)
    ta, tb = torch.arange(6.0), torch.zeros(2, 3, dtype=torch.int64)
    assert a.view_as(b).tolist() == ta.view_as(tb).tolist()
    assert a.reshape_as(b).shape == tuple(ta.reshape_as(tb).shape)
    assert name_of(a.type_as(b).dtype) == name_of(ta.type_as(tb).dtype)
    for m, args in [("new_zeros", (2,)), ("new_ones", ((2, 2),)), ("new_full", ((2,), 7)),
                    ("new_empty", (3,)), ("new_tensor", ([1, 2],))]:
        k, t = getattr(b, m)(*args), getattr(tb, m)(*args)
        assert k.shape == tuple(t.shape) and name_of(k.dtype) == name_of(t.dtype), m
    assert a.nelement() == 6 and b.ndimension() == 2
    for args in [(2, 3), ([1, 2],), ()]:
        k, t = b.new(*args), tb.new(*args)
        assert k.shape == tuple(t.shape) and name_of(k.dtype) == name_of(t.dtype)


@pytest.mark.parametrize("name,args", [
    ("zeros_like", ()), ("ones_like", ()), ("full_like", (2.5,)), ("empty_like", ()),
    ("rand_like", ()), ("randn_like", ()), ("randint_like", (5,)), ("randint_like", (2, 5)),
])
def test_like(name, args):
    base_k, base_t = kiln.ones(2, 3, dtype=kiln.float64), torch.ones(2, 3, dtype=torch.float64)
    k, t = getattr(kiln, name)(base_k, *args), getattr(torch, name)(base_t, *args)
    assert k.shape == tuple(t.shape) and name_of(k.dtype) == name_of(t.dtype)
    k = getattr(kiln, name)(base_k, *args, dtype=kiln.float32)
    assert k.dtype == kiln.float32
    if name in ("full_like", "zeros_like", "ones_like"):
        assert k.tolist() == getattr(torch, name)(base_t, *args, dtype=torch.float32).tolist()
    if name == "randint_like":
        lo, hi = (0, args[0]) if len(args) == 1 else args
        v = getattr(kiln, name)(kiln.zeros(1000), *args)
        assert v.min().item() >= lo and v.max().item() < hi


def test_inplace_initialisers():
    x = kiln.empty(20000)
    assert x.normal_(2.0, 0.5) is x
    assert abs(x.mean().item() - 2.0) < 0.02 and abs(x.std().item() - 0.5) < 0.02
    x.uniform_(-1, 3)
    assert x.min().item() >= -1 and x.max().item() < 3 and abs(x.mean().item() - 1.0) < 0.05
    x.exponential_(2.0)
    assert x.min().item() >= 0 and abs(x.mean().item() - 0.5) < 0.02
    x.bernoulli_(0.3)
    assert set(np.unique(x.numpy()).tolist()) <= {0.0, 1.0} and abs(x.mean().item() - 0.3) < 0.02
    x.random_(0, 5)
    assert set(np.unique(x.numpy()).tolist()) == {0.0, 1.0, 2.0, 3.0, 4.0}
    x.log_normal_(0.0, 0.25)
    assert x.min().item() > 0
    x.geometric_(0.5)
    assert x.min().item() >= 1
    x.cauchy_()
    assert abs(float(np.median(x.numpy()))) < 0.05
    assert x.fill_(3).tolist()[:2] == [3.0, 3.0] and x.zero_().sum().item() == 0
    # A leaf that requires grad refuses in-place writes in grad mode, as torch.
    w = kiln.ones(3, requires_grad=True)
    with pytest.raises(kiln.Error):
        w.normal_()
    with kiln.no_grad():
        w.uniform_(0, 1)
    assert w.requires_grad


@pytest.mark.parametrize("name,args", [
    ("exp_", ()), ("sqrt_", ()), ("log_", ()), ("sigmoid_", ()), ("tanh_", ()), ("abs_", ()),
    ("pow_", (2,)), ("clamp_min_", (0.5,)), ("floor_", ()), ("reciprocal_", ()),
    ("addcmul_", ("o", "o")), ("lerp_", ("o", 0.25)), ("masked_fill_", ("m", 0.0)),
])
def test_inplace_math_matches_torch(name, args):
    base = np.array([0.3, 1.7, 2.2, 0.9], dtype=np.float32)
    k, t = kiln.tensor(base), torch.tensor(base)
    ka = [kiln.tensor(base) if a == "o" else kiln.tensor(base > 1) if a == "m" else a
          for a in args]
    ta = [torch.tensor(base) if a == "o" else torch.tensor(base > 1) if a == "m" else a
          for a in args]
    assert getattr(k, name)(*ka) is k
    getattr(t, name)(*ta)
    np.testing.assert_allclose(k.numpy(), t.numpy(), rtol=1e-6)


def test_inplace_math_keeps_autograd():
    a = kiln.tensor([0.5, 1.0], requires_grad=True)
    ta = torch.tensor([0.5, 1.0], requires_grad=True)
    b, tb = a * 2, ta * 2
    b.exp_()
    tb.exp_()
    b.sum().backward()
    tb.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-6)


def test_add_with_alpha():
    a, ta = kiln.ones(3), torch.ones(3)
    a.add_(kiln.full((3,), 2.0), alpha=-0.5)
    ta.add_(torch.full((3,), 2.0), alpha=-0.5)
    assert a.tolist() == ta.tolist()
    assert kiln.add(kiln.ones(2), kiln.ones(2), alpha=3).tolist() == [4.0, 4.0]
    assert kiln.sub(kiln.ones(2), kiln.ones(2), alpha=3).tolist() == [-2.0, -2.0]


def test_format_of_0d_tensor():
    k, t = kiln.tensor(1.23456), torch.tensor(1.23456)
    assert "{:.2f}".format(k) == "{:.2f}".format(t) == "1.23"
    assert "{}".format(kiln.tensor(63)) == "{}".format(torch.tensor(63)) == "63"
    assert f"{k:>10.3e}" == f"{t:>10.3e}"
    # Not 0-d: format() with no spec is str(), a spec raises.
    assert "{}".format(kiln.ones(2)) == str(kiln.ones(2))
    with pytest.raises(TypeError):
        "{:.2f}".format(kiln.ones(2))


def test_index_with_range():
    k, t = kiln.arange(12).reshape(3, 4), torch.arange(12).reshape(3, 4)
    assert k[range(1, 3)].tolist() == t[range(1, 3)].tolist()
    assert k[:, range(0, 4, 2)].tolist() == t[:, range(0, 4, 2)].tolist()
    k[range(2)] = 0
    t[range(2)] = 0
    assert k.tolist() == t.tolist()


def test_tensor_types():
    assert kiln.FloatTensor(2, 3).shape == (2, 3) and kiln.FloatTensor(2, 3).dtype == kiln.float32
    for kname in ("FloatTensor", "DoubleTensor", "LongTensor", "IntTensor", "ByteTensor",
                  "BoolTensor", "HalfTensor"):
        k, t = getattr(kiln, kname)([1, 0, 1]), getattr(torch, kname)([1, 0, 1])
        assert name_of(k.dtype) == name_of(t.dtype) and k.tolist() == t.tolist()
        assert isinstance(k, getattr(kiln, kname)) and isinstance(k, kiln.Tensor)
    assert not isinstance(kiln.ones(2), kiln.LongTensor)
    assert kiln.ones(2).type() == "kiln.FloatTensor"
    assert kiln.ones(2, dtype=kiln.int64).type() == "kiln.LongTensor"
    for target, tt in [(kiln.LongTensor, torch.LongTensor), ("torch.DoubleTensor",) * 2,
                       (kiln.int32, torch.int32)]:
        assert name_of(kiln.ones(2).type(target).dtype) == name_of(torch.ones(2).type(tt).dtype)
    x = kiln.ones(2)
    assert x.type(kiln.float32) is x
    with pytest.raises(kiln.Error, match="cuda"):
        x.type("torch.cuda.FloatTensor")
    # kiln.Tensor as torch.Tensor: sizes give an uninitialised float tensor, data a float one.
    assert kiln.Tensor(2, 3).shape == tuple(torch.Tensor(2, 3).shape)
    assert kiln.Tensor([1, 2]).dtype == kiln.float32 and kiln.Tensor().shape == (0,)


def test_randint_overloads():
    for args, kw in [((10, (3,)), {}), ((2, 5, (2, 2)), {}), ((3,), {"size": (4,)}),
                     ((), {"low": 1, "high": 4, "size": (5,)})]:
        k, t = kiln.randint(*args, **kw), torch.randint(*args, **kw)
        assert k.shape == tuple(t.shape) and name_of(k.dtype) == name_of(t.dtype)
    v = kiln.randint(2, 5, (2000,))
    assert v.min().item() == 2 and v.max().item() == 4
    assert kiln.randint(0, 3, (2,), dtype=kiln.int32).dtype == kiln.int32
    with pytest.raises(kiln.Error):
        kiln.randint(5, 5, (2,))


def test_randperm():
    p = kiln.randperm(100)
    assert p.dtype == kiln.int64 and sorted(p.tolist()) == list(range(100))
    assert p.tolist() != list(range(100))
    assert kiln.randperm(0).shape == (0,)
    assert kiln.randperm(5, dtype=kiln.float32).dtype == kiln.float32


def test_multinomial():
    w = kiln.tensor([0.0, 1.0, 3.0])
    s = kiln.multinomial(w, 4000, replacement=True)
    t = torch.multinomial(torch.tensor([0.0, 1.0, 3.0]), 4000, replacement=True)
    assert s.shape == tuple(t.shape) and name_of(s.dtype) == name_of(t.dtype)
    counts = np.bincount(s.numpy(), minlength=3)
    assert counts[0] == 0 and abs(counts[2] / 4000 - 0.75) < 0.03
    # Without replacement: distinct, and never a zero-weight category.
    for _ in range(20):
        r = kiln.multinomial(kiln.tensor([1.0, 0.0, 2.0, 5.0]), 3).tolist()
        assert len(set(r)) == 3 and 1 not in r
    rows = kiln.multinomial(kiln.tensor([[1.0, 0.0], [0.0, 1.0]]), 1)
    assert rows.tolist() == [[0], [1]]
    assert w.multinomial(2).shape == (2,)
    with pytest.raises(kiln.Error):
        kiln.multinomial(w, 4)  # more than the categories without replacement
    with pytest.raises(kiln.Error):
        kiln.multinomial(kiln.tensor([1.0, -1.0]), 1)


def test_normal_overloads():
    for args in [(kiln.zeros(2, 3), kiln.ones(2, 3)), (kiln.zeros(4), 2.0),
                 (1.0, kiln.ones(5)), (0.0, 1.0, (3, 2))]:
        targs = [torch.tensor(a.numpy()) if isinstance(a, kiln.Tensor) else a for a in args]
        k, t = kiln.normal(*args), torch.normal(*targs)
        assert k.shape == tuple(t.shape) and name_of(k.dtype) == name_of(t.dtype)
    big = kiln.normal(3.0, 2.0, (20000,))
    assert abs(big.mean().item() - 3.0) < 0.05 and abs(big.std().item() - 2.0) < 0.05
    m = kiln.normal(kiln.full((20000,), -1.0), 0.5)
    assert abs(m.mean().item() + 1.0) < 0.02
    assert kiln.normal(0.0, 1.0, size=(2,), dtype=kiln.float64).dtype == kiln.float64


def test_bernoulli():
    p = kiln.full((10000,), 0.25, dtype=kiln.float64)
    b = kiln.bernoulli(p)
    assert b.dtype == kiln.float64 and abs(b.mean().item() - 0.25) < 0.02
    assert p.bernoulli().shape == (10000,)


def test_generator_streams():
    g = kiln.Generator().manual_seed(7)
    a = kiln.rand(4, generator=g)
    g.manual_seed(7)
    assert kiln.rand(4, generator=g).tolist() == a.tolist()
    # A generator's draws leave the global stream alone.
    kiln.manual_seed(1)
    x1 = kiln.rand(3)
    kiln.manual_seed(1)
    kiln.randn(5, generator=kiln.Generator().manual_seed(3))
    assert kiln.rand(3).tolist() == x1.tolist()
    assert kiln.manual_seed(5).initial_seed() == 5 and kiln.initial_seed() == 5
    state = g.get_state()
    u = kiln.randperm(10, generator=g)
    g.set_state(state)
    assert kiln.randperm(10, generator=g).tolist() == u.tolist()
    assert math.isfinite(kiln.empty(3).normal_(generator=g).sum().item())


def test_torch_level_names():
    for d in ("float32", "float64", "float16", "bfloat16"):
        k, t = kiln.finfo(getattr(kiln, d)), torch.finfo(getattr(torch, d))
        for f in ("bits", "eps", "max", "min", "tiny", "resolution"):
            assert getattr(k, f) == getattr(t, f), (d, f)
    for d in ("int8", "int16", "int32", "int64", "uint8"):
        k, t = kiln.iinfo(getattr(kiln, d)), torch.iinfo(getattr(torch, d))
        assert (k.bits, k.max, k.min) == (t.bits, t.max, t.min)
    assert kiln.finfo().eps == torch.finfo().eps
    assert kiln.Size([2, 3]) == torch.Size([2, 3]) == (2, 3) and kiln.Size([2, 3]).numel() == 6
    assert kiln.inf == torch.inf and kiln.nan != kiln.nan
    assert kiln.get_default_dtype() == kiln.float32
    kiln.set_default_dtype(kiln.float32)
    with pytest.raises(kiln.Error):
        kiln.set_default_dtype(kiln.float64)
    kiln.use_deterministic_algorithms(True)
    assert kiln.are_deterministic_algorithms_enabled()
    kiln.use_deterministic_algorithms(False)
    vals = [1.0, float("inf"), float("nan"), -2.0]
    other = [1.0 + 1e-6, float("inf"), float("nan"), -2.1]
    for eq_nan in (False, True):
        assert kiln.isclose(kiln.tensor(vals), kiln.tensor(other), equal_nan=eq_nan).tolist() == \
            torch.isclose(torch.tensor(vals), torch.tensor(other), equal_nan=eq_nan).tolist()
    assert kiln.allclose(kiln.ones(2), kiln.ones(2) + 1e-9) and not kiln.equal(kiln.ones(2),
                                                                               kiln.ones(3))
    assert kiln.ones(2).allclose(kiln.ones(2)) and kiln.typename(kiln.ones(1)) == "kiln.FloatTensor"
    assert kiln.is_floating_point(kiln.ones(1)) and not kiln.is_floating_point(kiln.arange(2))
    assert kiln.version.cuda is torch.version.cuda is None
    assert kiln.zeros(2, memory_format=kiln.contiguous_format).shape == (2,)


def test_deepcopy_and_pickle():
    import copy
    import pickle
    t, tt = kiln.randn(2, 3, requires_grad=True), torch.randn(2, 3, requires_grad=True)
    (t * 2).sum().backward()
    (tt * 2).sum().backward()
    for src in (t, tt):
        c = copy.deepcopy(src)
        assert c.requires_grad and c.is_leaf and c.data_ptr() != src.data_ptr()
        assert c.grad.tolist() == src.grad.tolist() and c.tolist() == src.tolist()
    with pytest.raises(RuntimeError):
        copy.deepcopy(tt * 2)
    with pytest.raises(kiln.Error):
        copy.deepcopy(t * 2)
    shared = {"a": t, "b": t}
    c = copy.deepcopy(shared)
    assert c["a"] is c["b"]
    sd = copy.deepcopy(kiln.nn.Linear(2, 2).state_dict())
    assert set(sd) == {"weight", "bias"}
    assert isinstance(copy.deepcopy(kiln.nn.Parameter(kiln.ones(2))), kiln.nn.Parameter)
    for x in (t, kiln.arange(5)[1::2], kiln.ones(2, dtype=kiln.bfloat16), kiln.tensor(True)):
        y = pickle.loads(pickle.dumps(x))
        assert y.dtype == x.dtype and y.shape == x.shape and y.tolist() == x.tolist()
        assert y.requires_grad == x.requires_grad


def test_more_tensor_methods():
    a = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    k, t = kiln.tensor(a), torch.tensor(a)
    for name, args in [("unfold", (1, 2, 1)), ("unfold", (0, 2, 1)), ("diff", ()),
                       ("sum_to_size", ((1, 4),)), ("sum_to_size", (4,)), ("unflatten", (1, (2, 2))),
                       ("multiply", (2,)), ("subtract", (1,)), ("divide", (2,)), ("clip", (-1, 3)),
                       ("negative", ()), ("absolute", ()), ("greater", (0,)), ("less_equal", (1,)),
                       ("deg2rad", ()), ("rad2deg", ()), ("sgn", ())]:
        kr, tr = getattr(k, name)(*args), getattr(t, name)(*args)
        np.testing.assert_allclose(kr.numpy(), tr.numpy(), rtol=1e-6, err_msg=name)
    np.testing.assert_allclose(k.diff(n=2, dim=0, prepend=k[:1]).numpy(),
                               t.diff(n=2, dim=0, prepend=t[:1]).numpy())
    for name, args in [("clip_", (0, 3)), ("gt_", (4,)), ("cumsum_", (1,)), ("multiply_", (3,)),
                       ("eq_", (2,)), ("trunc_", ())]:
        kc, tc = k.clone(), t.clone()
        assert getattr(kc, name)(*args) is kc
        getattr(tc, name)(*args)
        np.testing.assert_allclose(kc.numpy(), tc.numpy(), err_msg=name)
    assert k.where(k > 0, kiln.zeros(3, 4)).tolist() == t.where(t > 0, torch.zeros(3, 4)).tolist()
    assert k.split_with_sizes([1, 3], 1)[1].shape == (3, 3) and k.is_signed()
    assert not kiln.ones(1, dtype=kiln.uint8).is_signed() and k.is_same_size(k * 2)
    x = kiln.ones(2, requires_grad=True)
    assert x.grad_fn is None and (x * 2).grad_fn is not None and kiln.ones(1).grad_fn is None
    assert kiln.tensor([2.0]).is_nonzero() and not kiln.tensor([0]).is_nonzero()
    np.testing.assert_allclose(kiln.ones(1).addmm(kiln.ones(1, 2), kiln.ones(2, 1), beta=0.5,
                                                  alpha=2).numpy(),
                               torch.ones(1).addmm(torch.ones(1, 2), torch.ones(2, 1), beta=0.5,
                                                   alpha=2).numpy())
    assert kiln.diff(k).shape == (3, 3) and kiln.subtract(k, k).abs().sum().item() == 0
