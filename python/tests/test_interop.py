# Zero-copy exchange with NumPy (buffer protocol, from_numpy) and PyTorch 1.13 (DLPack): each
# test proves sharing by writing through one side and reading the other.
import gc

import numpy as np
import pytest

import kiln


def test_numpy_views_tensor_memory():
    t = kiln.zeros(2, 3)
    a = np.asarray(t)
    assert a.dtype == np.float32 and a.shape == (2, 3)
    a[1, 2] = 7.0                      # write through NumPy
    assert t[1, 2].item() == 7.0
    t.fill_(3.0)                       # write through Kiln
    assert a[0, 0] == 3.0
    v = t.transpose(0, 1)              # strided views export their strides
    np.testing.assert_array_equal(np.asarray(v), a.T)
    assert np.asarray(kiln.tensor([True, False])).dtype == np.bool_
    assert np.asarray(kiln.arange(3)).dtype == np.int64


def test_buffer_of_tensors_without_memory_raises():
    dead = kiln.switch_(kiln.tensor([1.0]), kiln.tensor(True))[0]
    g = kiln.Graph()
    sym = g.placeholder(kiln.float32, [2], name="x")
    for t in (dead, sym):
        with pytest.raises(ValueError):
            memoryview(t)
    m = memoryview(kiln.arange(6.0).reshape(2, 3))
    assert m.format == "f" and m.shape == (2, 3) and m.strides == (12, 4) and not m.readonly


def test_from_numpy_shares_and_keeps_array_alive():
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    t = kiln.from_numpy(a)
    assert t.dtype == kiln.float64 and t.shape == (2, 3)
    a[0, 1] = 42.0
    assert t[0, 1].item() == 42.0
    t[1, 1] = -1.0
    assert a[1, 1] == -1.0
    s = kiln.from_numpy(a[:, ::2])     # a strided NumPy view
    assert s.tolist() == [[0.0, 2.0], [3.0, 5.0]]
    del a, s
    gc.collect()                       # the tensor keeps the (deleted) array's memory alive
    assert t.tolist() == [[0.0, 42.0, 2.0], [3.0, -1.0, 5.0]]
    for dt, kd in [(np.float32, kiln.float32), (np.int64, kiln.int64), (np.int32, kiln.int32),
                   (np.bool_, kiln.bool)]:
        assert kiln.from_numpy(np.zeros(2, dtype=dt)).dtype == kd


def test_from_numpy_bad_inputs():
    with pytest.raises(TypeError):
        kiln.from_numpy(np.zeros(2, dtype=np.complex64))
    with pytest.raises(TypeError):
        kiln.from_numpy(np.zeros(2, dtype=np.uint16))
    with pytest.raises(ValueError):
        kiln.from_numpy(np.arange(4.0)[::-1])   # negative strides
    with pytest.raises(TypeError):
        kiln.from_numpy([1, 2])


def test_numpy_results_and_ops_against_numpy():
    a = np.random.RandomState(3).randn(5, 4)
    t = kiln.from_numpy(a)
    np.testing.assert_allclose(kiln.softmax(t, -1).numpy(),
                               np.exp(a) / np.exp(a).sum(-1, keepdims=True), rtol=1e-12)


torch = pytest.importorskip("torch")
from torch.utils import dlpack as torch_dlpack  # noqa: E402


def test_dlpack_from_torch_shares_memory():
    tt = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    k = kiln.from_dlpack(tt)                       # via __dlpack__
    assert k.shape == (2, 3) and k.dtype == kiln.float32
    k[0, 0] = 9.0
    assert tt[0, 0].item() == 9.0
    tt[1, 2] = -5.0
    assert k[1, 2].item() == -5.0
    cap = torch_dlpack.to_dlpack(torch.ones(3, dtype=torch.float64))
    k2 = kiln.from_dlpack(cap)                     # an old-style capsule
    assert k2.dtype == kiln.float64 and k2.tolist() == [1.0, 1.0, 1.0]
    kt = kiln.from_dlpack(tt.t())                  # strided
    assert kt.tolist() == tt.t().tolist()
    del tt
    gc.collect()
    assert k[0, 0].item() == 9.0                   # Kiln keeps torch's storage alive


def test_dlpack_to_torch_shares_memory():
    k = kiln.zeros(2, 2, dtype=kiln.int64)
    tt = torch_dlpack.from_dlpack(k)
    assert tt.dtype == torch.int64
    tt[1, 0] = 4
    assert k[1, 0].item() == 4
    k.fill_(2.0)
    assert tt.sum().item() == 8
    kv = kiln.arange(12.0).reshape(3, 4)[:, 1:3]   # a strided view
    tv = torch_dlpack.from_dlpack(kv)
    assert tv.tolist() == kv.tolist()
    assert k.__dlpack_device__() == (1, 0)
