# Tensors from Python: creation, metadata, host reads, repr, operators, indexing with autograd,
# and the exceptions bad inputs raise.
import math

import numpy as np
import pytest

import kiln


def test_creation_and_metadata():
    t = kiln.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert t.shape == (2, 2) and t.dtype == kiln.float32 and t.ndim == 2 and t.numel() == 4
    assert kiln.tensor([1, 2]).dtype == kiln.int64
    assert kiln.tensor([True, False]).dtype == kiln.bool
    assert kiln.tensor(2.5).shape == () and kiln.tensor(7).item() == 7
    assert kiln.zeros(2, 3).shape == (2, 3) and kiln.zeros((2, 3)).tolist() == [[0.0] * 3] * 2
    assert kiln.ones(3, dtype=kiln.float64).dtype == kiln.float64
    assert kiln.full((2,), 1.5).tolist() == [1.5, 1.5]
    assert kiln.arange(4).tolist() == [0, 1, 2, 3] and kiln.arange(4).dtype == kiln.int64
    assert kiln.arange(0.0, 1.0, 0.25).tolist() == [0.0, 0.25, 0.5, 0.75]
    assert kiln.linspace(0, 1, 3).tolist() == [0.0, 0.5, 1.0]
    assert kiln.eye(2).tolist() == [[1.0, 0.0], [0.0, 1.0]]
    r = kiln.randint(0, 5, (100,))
    assert r.dtype == kiln.int64 and 0 <= r.min().item() and r.max().item() < 5
    assert kiln.randn(3, 4).shape == (3, 4) and kiln.rand(2).shape == (2,)
    assert kiln.tensor(np.array([1, 2], dtype=np.int32)).dtype == kiln.int32
    assert kiln.zeros_like(t).tolist() == [[0.0, 0.0], [0.0, 0.0]]


def test_item_tolist_repr_match_cpp():
    t = kiln.tensor([[1.0, 2.0], [3.0, 4.5]])
    assert t.tolist() == [[1.0, 2.0], [3.0, 4.5]]
    assert t.sum().item() == 10.5 and isinstance(t.sum().item(), float)
    assert repr(t) == "tensor([[1.0000, 2.0000],\n        [3.0000, 4.5000]])"
    assert repr(kiln.tensor([1, 2])) == "tensor([1, 2])"
    assert "requires_grad=True" in repr(kiln.ones(2, requires_grad=True))
    assert float(kiln.tensor(2.5)) == 2.5 and int(kiln.tensor(3)) == 3
    assert bool(kiln.tensor(1.0)) is True


def test_operators_against_numpy():
    a_np = np.random.RandomState(0).randn(3, 4).astype(np.float32)
    b_np = np.random.RandomState(1).rand(4).astype(np.float32) + 0.5
    a, b = kiln.tensor(a_np), kiln.tensor(b_np)
    np.testing.assert_allclose((a + b).numpy(), a_np + b_np, rtol=1e-6)
    np.testing.assert_allclose((a - b).numpy(), a_np - b_np, rtol=1e-6)
    np.testing.assert_allclose((a * b).numpy(), a_np * b_np, rtol=1e-6)
    np.testing.assert_allclose((a / b).numpy(), a_np / b_np, rtol=1e-6)
    np.testing.assert_allclose((2.0 - a).numpy(), 2.0 - a_np, rtol=1e-6)
    np.testing.assert_allclose((1.0 / b).numpy(), 1.0 / b_np, rtol=1e-6)
    np.testing.assert_allclose((b ** 2).numpy(), b_np ** 2, rtol=1e-6)
    np.testing.assert_allclose((a @ a.T).numpy(), a_np @ a_np.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal((a > 0).numpy(), a_np > 0)
    np.testing.assert_array_equal((a == a).numpy(), np.ones_like(a_np, dtype=bool))
    np.testing.assert_array_equal(((a > 0) & (a < 1)).numpy(), (a_np > 0) & (a_np < 1))
    np.testing.assert_allclose((-a).numpy(), -a_np)
    np.testing.assert_allclose(abs(a).numpy(), np.abs(a_np))
    c = a.clone()
    c += 1.0
    c *= b
    np.testing.assert_allclose(c.numpy(), (a_np + 1) * b_np, rtol=1e-6)


def test_views_and_methods():
    t = kiln.arange(24).reshape(2, 3, 4)
    assert t.permute(2, 0, 1).shape == (4, 2, 3)
    assert t.transpose(0, 2).shape == (4, 3, 2)
    assert t.view(6, 4).shape == (6, 4) and t.flatten().shape == (24,)
    assert t.unsqueeze(0).shape == (1, 2, 3, 4) and t.unsqueeze(0).squeeze(0).shape == (2, 3, 4)
    assert kiln.ones(3, 1).expand(3, 5).shape == (3, 5)
    assert t.float().dtype == kiln.float32 and t.to(kiln.float64).dtype == kiln.float64
    parts = t.split(1, 0)
    assert len(parts) == 2 and parts[0].shape == (1, 3, 4)
    assert kiln.cat([t, t], 1).shape == (2, 6, 4) and kiln.stack([t, t]).shape == (2, 2, 3, 4)


def test_indexing_basic_and_advanced():
    a_np = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    a = kiln.tensor(a_np)
    for key in [1, -1, (1, 2), slice(1, 3), (slice(None), 2), (Ellipsis, 1), (None, 0),
                (slice(0, 3, 2), slice(None), slice(1, None, 2)), (1, Ellipsis, None)]:
        np.testing.assert_array_equal(a[key].numpy(), a_np[key], err_msg=str(key))
    idx = [2, 0, 2]
    np.testing.assert_array_equal(a[idx].numpy(), a_np[idx])
    np.testing.assert_array_equal(a[:, kiln.tensor([3, 1])].numpy(), a_np[:, [3, 1]])
    np.testing.assert_array_equal(a[kiln.tensor([0, 2]), kiln.tensor([1, 3])].numpy(),
                                  a_np[[0, 2], [1, 3]])
    np.testing.assert_array_equal(a[kiln.tensor([[0], [2]])].numpy(), a_np[np.array([[0], [2]])])
    mask = a > 30
    np.testing.assert_array_equal(a[mask].numpy(), a_np[a_np > 30])
    np.testing.assert_array_equal(a[kiln.tensor([-1])].numpy(), a_np[[-1]])


def test_indexing_gradients():
    x = kiln.arange(12.0).reshape(3, 4).requires_grad_()
    y = x[1:, ::2].sum() + (x[kiln.tensor([0, 0])] * 2).sum() + x[x > 9].sum()
    y.backward()
    expect = np.zeros((3, 4))
    expect[1:, ::2] += 1
    expect[0] += 4
    expect[x.detach().numpy() > 9] += 1
    np.testing.assert_array_equal(x.grad.numpy(), expect)


def test_setitem():
    t = kiln.zeros(3, 4)
    t[1] = 5.0
    t[:, 0] = kiln.tensor([1.0, 2.0, 3.0])
    t[t > 4] = -1.0
    assert t.tolist() == [[1, 0, 0, 0], [2, -1, -1, -1], [3, 0, 0, 0]]


def test_setitem_through_integer_tensor_indices():
    t = kiln.zeros(4, 3)
    t[kiln.tensor([0, 2])] = 5.0                       # rows, a number broadcast
    t[[3, -1], 1] = kiln.tensor([7.0, 8.0])            # a list, negative index, repeated: last wins
    t[kiln.tensor([1]), kiln.tensor([2])] = kiln.tensor([9.0])
    want = np.zeros((4, 3))
    want[[0, 2]] = 5.0
    want[[3, -1], 1] = [7.0, 8.0]
    want[[1], [2]] = [9.0]
    np.testing.assert_array_equal(t.numpy(), want)
    assert t[3, 1].item() == 8.0
    r = kiln.zeros(2, 3)
    r[:, kiln.tensor([0, 2])] = kiln.tensor([[1.0], [2.0]])  # broadcast along the indexed dim
    assert r.tolist() == [[1, 0, 1], [2, 0, 2]]
    i = kiln.zeros(5, dtype=kiln.int64)
    i[kiln.tensor([4, 1])] = 2**62 + 1                  # integers stay exact
    assert i.tolist() == [0, 2**62 + 1, 0, 0, 2**62 + 1]
    b = kiln.zeros(3, dtype=kiln.bool)
    b[[0, 2]] = True
    assert b.tolist() == [True, False, True]
    m = kiln.zeros(3, 2)
    m[kiln.tensor([True, False, True])] = kiln.tensor([1.0, 2.0])  # a mask over dim 0
    assert m.tolist() == [[1, 2], [0, 0], [1, 2]]
    v = kiln.zeros(4, 4)[1:3]                            # through a view: the base sees it
    v[[1]] = 3.0
    assert v.tolist() == [[0] * 4, [3] * 4]
    with pytest.raises(IndexError):
        t[kiln.tensor([0, 4])] = 1.0
    with pytest.raises(IndexError):
        t[[-5]] = 1.0
    with pytest.raises(ValueError):
        t[kiln.tensor([0, 1])] = kiln.ones(3, 3)        # (3, 3) into (2, 3)
    np.testing.assert_array_equal(t.numpy(), want)      # a refused write changes nothing
    # Gradients flow to the written value and to what was not overwritten.
    x = kiln.ones(3, requires_grad=True)
    w = kiln.tensor(2.0, requires_grad=True)
    y = x * 1.0
    y[[0, 2]] = w
    (y * kiln.tensor([1.0, 10.0, 100.0])).sum().backward()
    assert x.grad.tolist() == [0.0, 10.0, 0.0] and w.grad.item() == 101.0


def test_uninitialized_tensor_objects_raise_instead_of_crashing():
    t = kiln.Tensor.__new__(kiln.Tensor)
    for call in (lambda: kiln.relu(t), lambda: kiln.add(t, t), lambda: t.shape, lambda: repr(t),
                 lambda: t.sum(), lambda: t[0], lambda: t.item(), lambda: memoryview(t), lambda: t.numpy(),
                 lambda: kiln.max(t, 0), lambda: kiln.ones(2) + t, lambda: t + 1,
                 lambda: kiln.Session(kiln.Graph()).run(t), lambda: kiln.tensor([t]),
                 lambda: kiln.from_dlpack(t)):
        with pytest.raises(TypeError):
            call()
    kiln.Tensor.__init__(t, [1.0, 2.0])                 # initialized late, it works
    assert (t * 2).tolist() == [2.0, 4.0]


def test_iteration_and_len():
    t = kiln.tensor([[1, 2], [3, 4]])
    assert len(t) == 2
    assert [r.tolist() for r in t] == [[1, 2], [3, 4]]


def test_bad_inputs_raise_python_exceptions():
    t = kiln.ones(2, 3)
    with pytest.raises(IndexError):
        t[2]
    with pytest.raises(IndexError):
        t[0, 0, 0]
    with pytest.raises(IndexError):
        t[kiln.tensor([0, 5])]
    with pytest.raises(kiln.Error):
        t @ t                                # shapes
    with pytest.raises(kiln.Error) as e:
        kiln.add(t, kiln.ones(4))
    assert str(e.value).startswith("[")
    with pytest.raises(TypeError):
        kiln.tensor("abc")
    with pytest.raises(TypeError):
        kiln.zeros(2, dtype="complex64")
    with pytest.raises(TypeError):
        kiln.relu("x")
    with pytest.raises(TypeError):
        t[1.5]
    with pytest.raises(ValueError):
        kiln.tensor([[1, 2], [3]])           # ragged
    with pytest.raises(ValueError):
        bool(t)                              # ambiguous truth value
    with pytest.raises(kiln.Error):
        kiln.tensor([1, 2]).requires_grad_()  # integers cannot require grad
    with pytest.raises(ValueError):
        kiln.zeros(-1)
    with pytest.raises(kiln.Error):
        kiln.ones(2, 2).item()
    assert issubclass(kiln.Error, RuntimeError)
    assert issubclass(kiln.IndexError, kiln.Error) and issubclass(kiln.IndexError, IndexError)


def test_nan_passes_through_ops():
    t = kiln.tensor([float("nan"), 1.0])
    assert math.isnan(kiln.exp(t)[0].item())


def test_stubs_cover_the_extension():
    # python/kiln/_C.pyi (python/tools/gen_stubs.py) names every public function and class.
    import inspect
    import os
    import kiln._C as C
    stub = open(os.path.join(os.path.dirname(kiln.__file__), "_C.pyi")).read()
    compile(stub, "_C.pyi", "exec")
    for n, v in vars(C).items():
        if not n.startswith("_") and (inspect.isclass(v) or callable(v)):
            assert f"def {n}(" in stub or f"class {n}" in stub, n
    assert "torch.matmul" in kiln.matmul.__doc__


def test_operator_fast_paths_and_fallbacks():
    t = kiln.tensor([1.0, 2.0])
    assert (t + 1).tolist() == [2.0, 3.0] and (3 - t).tolist() == [2.0, 1.0]
    assert (2 * t).tolist() == [2.0, 4.0] and (2 / t).tolist() == [2.0, 1.0]
    assert (t * np.float32(3)).tolist() == [3.0, 6.0]          # through the pybind11 overloads
    r = np.float64(2.0) * t                                      # NumPy defers to Tensor
    assert isinstance(r, kiln.Tensor) and r.tolist() == [2.0, 4.0]
    assert kiln.add(t, 1).tolist() == [2.0, 3.0] and kiln.add(1.0, t).tolist() == [2.0, 3.0]
    assert kiln.add(input=t, other=t).tolist() == [2.0, 4.0]     # keywords: the slow path
    assert kiln.sub(t, [1.0, 1.0]).tolist() == [0.0, 1.0]        # a list: converted
    with pytest.raises(kiln.Error):
        t + kiln.ones(3)
    with pytest.raises(TypeError):
        t + "x"
    i = kiln.tensor([1, 2])
    assert (i + 1).dtype == kiln.int64 and (i + 0.5).dtype == kiln.float32
