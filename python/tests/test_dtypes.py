"""The reduced dtypes (float16, bfloat16, int8, uint8, int16) against torch 1.13: promotion, casts,
ops on half tensors, integer wrap-around, NumPy and DLPack interop, safetensors, printing,
autograd."""
import json
import struct

import numpy as np
import pytest
import torch
import torch.utils.dlpack

import kiln

NAMES = ["float32", "float64", "int64", "int32", "bool", "float16", "bfloat16", "int8", "uint8",
         "int16"]
REDUCED = ["float16", "bfloat16", "int8", "uint8", "int16"]


def kd(name):
    return getattr(kiln, name)


def td(name):
    return getattr(torch, name)


def to_kiln(t):
    """A kiln tensor holding exactly torch tensor t's values and dtype."""
    name = str(t.dtype).split(".")[1]
    return kiln.tensor(t.double().numpy()).to(kd(name))


def values(k):
    return np.array(k.to(kiln.float64).tolist(), dtype=np.float64)


def test_dtype_objects():
    assert kiln.half is kiln.float16 or kiln.half == kiln.float16
    assert kiln.short == kiln.int16
    for n in NAMES:
        d = kd(n)
        assert str(d).endswith("." + n)
        assert d.itemsize == torch.empty(0, dtype=td(n)).element_size()
        assert d.is_floating_point == td(n).is_floating_point
        assert kiln.zeros(2, dtype=d).dtype == d
        assert kiln.zeros(2, dtype=n).dtype == d  # names work too


@pytest.mark.parametrize("a", NAMES)
def test_promotion_matches_torch(a):
    for b in NAMES:
        want = str(torch.promote_types(td(a), td(b))).split(".")[1]
        assert kiln.promote_types(kd(a), kd(b)) == kd(want), (a, b)
        if a == "bool" or b == "bool":
            continue
        x = kiln.ones(3, dtype=kd(a)) + kiln.ones(3, dtype=kd(b))
        y = torch.ones(3, dtype=td(a)) + torch.ones(3, dtype=td(b))
        assert x.dtype == kd(str(y.dtype).split(".")[1]), (a, b)
        np.testing.assert_array_equal(values(x), y.double().numpy())


@pytest.mark.parametrize("a", NAMES)
def test_cast_every_pair_matches_torch(a):
    src = torch.tensor([0, 1, 2, 3.5, 100, -1, -3.7, 127, 0.1, 1e-3], dtype=torch.float64)
    if a == "uint8":
        src = src.abs()
    t = src.to(td(a))
    k = to_kiln(t)
    np.testing.assert_array_equal(values(k), t.double().numpy())
    for b in NAMES:
        tb = t.to(td(b))
        kb = k.to(kd(b))
        assert kb.dtype == kd(b)
        np.testing.assert_array_equal(values(kb), tb.double().numpy(), err_msg=f"{a}->{b}")


def test_float_to_narrow_int_wraps_as_torch():
    src = torch.tensor([-1.0, -3.7, 300.0, 255.0, 256.5, -129.0])
    k = kiln.tensor(src.numpy())
    for n in ["int8", "uint8", "int16"]:
        np.testing.assert_array_equal(values(k.to(kd(n))), src.to(td(n)).double().numpy(), err_msg=n)


def test_rounding_ties_to_even_and_overflow():
    x = torch.tensor([1 + 2**-11, 1 + 3 * 2**-11, 65519.0, 65520.0, 1e-8, float("nan"), -1e30,
                      1 + 2**-8, 1 + 3 * 2**-8, 3.0e38], dtype=torch.float32)
    k = kiln.tensor(x.numpy())
    for n in ["float16", "bfloat16"]:
        np.testing.assert_array_equal(values(k.to(kd(n))), x.to(td(n)).double().numpy(), err_msg=n)


def test_conversion_every_bit_pattern_matches_torch():
    bits = torch.arange(0, 65536, dtype=torch.int32).to(torch.int16)
    for n in ["float16", "bfloat16"]:
        t = bits.view(td(n))
        f = t.float()
        k = kiln.tensor(f.numpy()).to(kd(n))
        back = values(k)
        np.testing.assert_array_equal(back, f.double().numpy(), err_msg=n)  # NaN == NaN here


TOL = {"float16": dict(rtol=2e-3, atol=1e-3), "bfloat16": dict(rtol=1.6e-2, atol=1e-2)}


def torch_half(fn, *xs):
    """torch's result on half inputs: its own kernel, or where 1.13 has no CPU kernel for the
    dtype, the float32 op rounded once (what its kernels compute)."""
    try:
        return fn(*xs).double()
    except RuntimeError:
        return fn(*[x.float() for x in xs]).to(xs[0].dtype).double()


OPS = {
    "add": (lambda a, b: a + b, lambda a, b: a + b, [(4, 5), (4, 5)]),
    "mul": (lambda a, b: a * b, lambda a, b: a * b, [(4, 5), (5,)]),
    "matmul": (lambda a, b: a @ b, lambda a, b: a @ b, [(6, 8), (8, 3)]),
    "sum": (lambda a: a.sum(), lambda a: a.sum(), [(7, 9)]),
    "sum_dim": (lambda a: a.sum(1), lambda a: a.sum(1), [(7, 9)]),
    "softmax": (lambda a: kiln.softmax(a, -1), lambda a: torch.softmax(a, -1), [(3, 10)]),
    "exp": (lambda a: kiln.exp(a), lambda a: torch.exp(a), [(4, 6)]),
    "relu": (lambda a: kiln.relu(a), lambda a: torch.relu(a), [(4, 6)]),
    "conv2d": (lambda x, w: kiln.nn.functional.conv2d(x, w, padding=1),
               lambda x, w: torch.nn.functional.conv2d(x, w, padding=1), [(2, 3, 6, 6), (4, 3, 3, 3)]),
}


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("op", list(OPS))
def test_half_ops_match_torch(dt, op):
    kf, tf, shapes = OPS[op]
    g = torch.Generator().manual_seed(3)
    ts = [torch.randn(*s, generator=g).to(td(dt)) for s in shapes]
    ks = [to_kiln(t) for t in ts]
    got = kf(*ks)
    want = torch_half(tf, *ts)
    assert got.dtype == kd(dt)
    np.testing.assert_allclose(values(got), want.numpy(), **TOL[dt])


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_half_elementwise_bit_exact(dt):
    # One rounding of the float32 result: what torch's CPU kernels give for these.
    g = torch.Generator().manual_seed(5)
    a = torch.randn(64, generator=g).to(td(dt))
    b = torch.randn(64, generator=g).to(td(dt))
    ka, kb = to_kiln(a), to_kiln(b)
    np.testing.assert_array_equal(values(ka + kb), (a + b).double().numpy())
    np.testing.assert_array_equal(values(ka * kb), (a * b).double().numpy())
    np.testing.assert_array_equal(values(ka - kb), (a - b).double().numpy())
    np.testing.assert_array_equal(values(ka * 0.1), (a * 0.1).double().numpy())
    np.testing.assert_array_equal(values(kiln.relu(ka)), torch_half(torch.relu, a).numpy())
    np.testing.assert_array_equal(values(kiln.exp(ka)), torch_half(torch.exp, a).numpy())


@pytest.mark.parametrize("dt", ["int8", "uint8", "int16"])
def test_integer_ops_wrap_as_torch(dt):
    g = torch.Generator().manual_seed(1)
    lo, hi = (0, 256) if dt == "uint8" else (-128, 128) if dt == "int8" else (-32768, 32768)
    a = torch.randint(lo, hi, (50,), generator=g).to(td(dt))
    b = torch.randint(lo, hi, (50,), generator=g).to(td(dt))
    ka, kb = to_kiln(a), to_kiln(b)
    for name, kf, tf in [
        ("add", lambda x, y: x + y, lambda x, y: x + y),
        ("sub", lambda x, y: x - y, lambda x, y: x - y),
        ("mul", lambda x, y: x * y, lambda x, y: x * y),
        ("neg", lambda x, y: -x, lambda x, y: -x),
        ("scalar_add", lambda x, y: x + 300, lambda x, y: x + 300),
        ("scalar_mul", lambda x, y: x * 3, lambda x, y: x * 3),
        ("lt", lambda x, y: x < y, lambda x, y: x < y),
        ("max", lambda x, y: kiln.maximum(x, y), lambda x, y: torch.maximum(x, y)),
    ]:
        got, want = kf(ka, kb), tf(a, b)
        assert got.dtype == kd(str(want.dtype).split(".")[1]), name
        np.testing.assert_array_equal(values(got), want.double().numpy(), err_msg=name)
    # True division of integers gives float32 (torch); rounding_mode="trunc" keeps the dtype.
    nz = torch.where(b == 0, torch.ones_like(b), b)
    q = ka / to_kiln(nz)
    assert q.dtype == kiln.float32
    np.testing.assert_allclose(values(q), (a / nz).double().numpy(), rtol=1e-6)
    q = kiln.div(ka, to_kiln(nz), rounding_mode="trunc")
    assert q.dtype == kd(dt)
    np.testing.assert_array_equal(values(q), torch.div(a, nz, rounding_mode="trunc").double().numpy())
    assert ka.sum().dtype == kiln.int64
    assert ka.sum().item() == a.sum().item()


def test_uint8_int8_promotes_to_int16():
    a = kiln.tensor([200, 100]).to(kiln.uint8)
    b = kiln.tensor([-100, 100]).to(kiln.int8)
    r = a + b
    assert r.dtype == kiln.int16
    assert r.tolist() == [100, 200]


def test_factories_and_methods():
    for n in REDUCED:
        d = kd(n)
        assert kiln.zeros(2, 3, dtype=d).dtype == d
        assert kiln.ones(2, dtype=d).tolist() == [1, 1]
        assert kiln.full((2,), 3, dtype=d).tolist() == [3, 3]
        assert kiln.arange(5, dtype=d).tolist() == [0, 1, 2, 3, 4]
        assert kiln.tensor([1, 2], dtype=d).dtype == d
    assert kiln.randn(4, dtype=kiln.bfloat16).dtype == kiln.bfloat16
    assert kiln.rand(4, dtype=kiln.float16).dtype == kiln.float16
    x = kiln.tensor([1.5, -2.0, 300.0])
    assert x.half().dtype == kiln.float16
    assert x.bfloat16().dtype == kiln.bfloat16
    assert x.char().dtype == kiln.int8
    assert x.byte().dtype == kiln.uint8
    assert x.short().dtype == kiln.int16
    assert x.to(kiln.half).dtype == kiln.float16
    assert x.short().tolist() == [1, -2, 300]
    assert x.char().tolist() == torch.tensor([1.5, -2.0, 300.0]).char().tolist()
    with pytest.raises(kiln.Error, match=r"\[full\].*int8"):
        kiln.full((1,), 300, dtype=kiln.int8)


def test_item_tolist_and_printing():
    h = kiln.tensor([0.5, 1.0, 0.1], dtype=kiln.float16)
    assert h.tolist() == torch.tensor([0.5, 1.0, 0.1], dtype=torch.float16).tolist()
    assert isinstance(h[0].item(), float)
    assert isinstance(kiln.tensor([3], dtype=kiln.int8)[0].item(), int)
    assert repr(h) == "tensor([0.5000, 1.0000, 0.1000], dtype=float16)"
    assert repr(kiln.tensor([1.0, 2.5]).bfloat16()) == "tensor([1.0000, 2.5000], dtype=bfloat16)"
    assert repr(kiln.tensor([1, -2]).char()) == "tensor([ 1, -2], dtype=int8)"
    assert repr(kiln.tensor([1, 2]).byte()) == "tensor([1, 2], dtype=uint8)"
    assert repr(kiln.tensor([1, 2]).short()) == "tensor([1, 2], dtype=int16)"


@pytest.mark.parametrize("n,np_dtype", [("float16", np.float16), ("int8", np.int8),
                                         ("uint8", np.uint8), ("int16", np.int16)])
def test_numpy_round_trip_shares_memory(n, np_dtype):
    a = np.arange(6, dtype=np_dtype).reshape(2, 3)
    k = kiln.from_numpy(a)
    assert k.dtype == kd(n)
    assert k.tolist() == a.tolist()
    a[0, 0] = 5
    assert k[0, 0].item() == 5  # zero-copy
    b = k.numpy()
    assert b.dtype == np_dtype
    b[1, 2] = 7
    assert k[1, 2].item() == 7
    np.testing.assert_array_equal(np.asarray(kiln.tensor(a)), a)


def test_bfloat16_to_numpy_raises_type_error():
    k = kiln.ones(2, dtype=kiln.bfloat16)
    with pytest.raises(TypeError, match="BFloat16"):
        k.numpy()
    with pytest.raises(TypeError, match="BFloat16"):
        torch.ones(2, dtype=torch.bfloat16).numpy()  # torch's own message names it too


@pytest.mark.parametrize("n", REDUCED)
def test_dlpack_both_ways(n):
    t = torch.tensor([1, 2, 3, 100], dtype=td(n))
    k = kiln.from_dlpack(t)
    assert k.dtype == kd(n)
    assert k.tolist() == t.tolist()
    back = torch.utils.dlpack.from_dlpack(kiln.tensor([4, 5, 6], dtype=kd(n)))
    assert back.dtype == td(n)
    assert back.tolist() == [4, 5, 6]


def test_safetensors_round_trip_each_dtype(tmp_path):
    tensors = {n: kiln.tensor([1.5, -2.0, 3.0, 100.0]).to(kd(n)) for n in NAMES if n != "uint8"}
    tensors["uint8"] = kiln.tensor([1, 2, 255]).to(kiln.uint8)
    path = tmp_path / "t.safetensors"
    kiln.io.save_file(tensors, path)
    raw = path.read_bytes()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    codes = {"float16": "F16", "bfloat16": "BF16", "int8": "I8", "uint8": "U8", "int16": "I16"}
    for n, c in codes.items():
        assert header[n]["dtype"] == c
    # The bytes are torch's bytes for the same values.
    b, e = header["bfloat16"]["data_offsets"]
    want = torch.tensor([1.5, -2.0, 3.0, 100.0]).bfloat16().view(torch.int16).numpy().tobytes()
    assert raw[8 + hlen + b:8 + hlen + e] == want
    back = kiln.io.load_file(path)
    for n, t in tensors.items():
        assert back[n].dtype == t.dtype, n
        assert back[n].tolist() == t.tolist(), n


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_half_leaf_gets_gradient_of_its_dtype(dt):
    w = kiln.tensor([0.5, -1.0, 2.0]).to(kd(dt)).requires_grad_()
    (w * w).sum().backward()
    assert w.grad.dtype == kd(dt)
    tw = torch.tensor([0.5, -1.0, 2.0]).to(td(dt)).requires_grad_()
    (tw * tw).sum().backward()
    assert w.grad.tolist() == tw.grad.tolist()
    v = kiln.tensor([0.5, 3.0], requires_grad=True)
    (v.to(kd(dt)) * 2).sum().backward()
    assert v.grad.dtype == kiln.float32  # the cast's gradient casts back
    assert v.grad.tolist() == [2.0, 2.0]
