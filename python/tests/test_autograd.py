# Autograd from Python: backward, kiln.grad, requires_grad_, no_grad, second derivatives and
# gradients against central finite differences.
import numpy as np
import pytest

import kiln


def numeric_grad(f, x, eps=1e-6):
    x = x.detach().clone()
    g = np.zeros(x.shape)
    flat = x.reshape(-1)
    for i in range(x.numel()):
        old = flat[i].item()
        flat[i] = old + eps
        up = f(x).item()
        flat[i] = old - eps
        down = f(x).item()
        flat[i] = old
        g.reshape(-1)[i] = (up - down) / (2 * eps)
    return g


@pytest.mark.parametrize("name,f", [
    ("tanh_matmul", lambda x: kiln.tanh(x @ x.T).sum()),
    ("softmax", lambda x: (kiln.softmax(x, -1) * kiln.arange(4.0, dtype=kiln.float64)).sum()),
    ("log_softmax_ce", lambda x: kiln.cross_entropy(x, kiln.tensor([1, 3, 0]))),
    ("layer_norm", lambda x: (kiln.layer_norm(x, [4]) ** 2 * x).sum()),
    ("gelu_mean", lambda x: kiln.gelu(x).mean() + kiln.sigmoid(x).var()),
    ("index", lambda x: (x[1:, kiln.tensor([0, 2])] ** 3).sum() + x.max()),
    ("pow_div", lambda x: (x ** 2 / (1.0 + x * x)).sum()),
])
def test_gradients_match_finite_differences(name, f):
    x = kiln.randn(3, 4, dtype=kiln.float64).requires_grad_()
    f(x).backward()
    np.testing.assert_allclose(x.grad.numpy(), numeric_grad(f, x), rtol=1e-5, atol=1e-7,
                               err_msg=name)


def test_grad_and_second_derivative():
    s = kiln.tensor(3.0, dtype=kiln.float64, requires_grad=True)
    (d1,) = kiln.grad(s * s * s, s, create_graph=True)
    assert d1.item() == pytest.approx(27.0)
    (d2,) = kiln.grad(d1, s)
    assert d2.item() == pytest.approx(18.0)
    x = kiln.randn(3, requires_grad=True)
    y = kiln.randn(3, requires_grad=True)
    gx, gy = kiln.grad((x * y).sum(), [x, y])
    np.testing.assert_allclose(gx.numpy(), y.detach().numpy())
    (unused,) = kiln.grad((x * 2).sum(), [y], allow_unused=True)
    assert unused is None


def test_backward_accumulates_and_grad_setter():
    w = kiln.ones(2, requires_grad=True)
    (w * 3).sum().backward()
    (w * 3).sum().backward()
    assert w.grad.tolist() == [6.0, 6.0]
    w.grad = None
    assert w.grad is None
    assert w.is_leaf and not (w * 2).is_leaf
    y = (w * 2)
    y.retain_grad()
    y.sum().backward()
    assert y.grad.tolist() == [1.0, 1.0]
    kiln.backward([(w * w).sum()])
    assert w.grad.tolist() == [4.0, 4.0]


def test_no_grad_context_and_decorator():
    w = kiln.ones(2, requires_grad=True)
    with kiln.no_grad():
        assert not kiln.is_grad_enabled()
        assert not (w * 2).requires_grad
        with kiln.enable_grad():
            assert (w * 2).requires_grad
    assert kiln.is_grad_enabled() and (w * 2).requires_grad

    @kiln.no_grad()
    def f(x):
        return x * 2
    assert not f(w).requires_grad
    with kiln.set_grad_enabled(False):
        assert not kiln.is_grad_enabled()
    assert kiln.is_grad_enabled()


def test_gradcheck_with_python_function():
    ok, msg, err = kiln.gradcheck(lambda a, b: kiln.tanh(a * b), [kiln.randn(3), kiln.randn(3)])
    assert ok, msg


def test_detach_and_errors():
    w = kiln.ones(2, requires_grad=True)
    assert not w.detach().requires_grad
    with pytest.raises(kiln.Error):
        (w * 2).backward()                 # non-scalar without a gradient
    with pytest.raises(kiln.Error):
        w.add_(1.0)                        # in place on a leaf that requires grad
