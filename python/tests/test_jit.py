# @kiln.jit on Python functions: case 1 (one version per Python constant, guards on tensors),
# case 2 (a Python `if` on a tensor value is a graph break with a guard), explain(), and a jitted
# training step through a Python nn.Module.
import numpy as np
import pytest

import kiln
import kiln.nn as nn


def test_case1_one_version_per_constant():
    calls = []

    @kiln.jit
    def f(x, k):
        calls.append(k)                      # runs while tracing
        return kiln.tanh(x * k)

    x = kiln.tensor([1.0, 2.0])
    np.testing.assert_allclose(f(x, 2).numpy(), np.tanh(np.array([2.0, 4.0])), rtol=1e-6)
    f(kiln.tensor([3.0, 4.0]), 2)            # hit: replayed, not traced
    f(x, 3)                                  # new constant: a new version
    assert calls == [2, 3]
    assert isinstance(calls[0], int)         # a Python int comes back as an int
    s = f.stats
    assert s["hits"] == 1 and s["misses"] == 2 and s["compiles"] == 2
    f(kiln.ones(3), 2)                       # new shape: recompiled
    assert f.stats["misses"] == 3
    assert "arg1 == 3" in f.explain()


def test_case2_python_if_is_a_graph_break():
    @kiln.jit(name="branchy")
    def f(x):
        h = kiln.tanh(x * 2.0)
        if h.sum() > 0:                      # Python control flow on a tensor value
            return h + 1.0
        return h * h

    a = f(kiln.tensor([1.0, 2.0]))
    np.testing.assert_allclose(a.numpy(), np.tanh([2.0, 4.0]) + 1, rtol=1e-6)
    b = f(kiln.tensor([3.0, 4.0]))           # same branch: compiled pieces, no compile
    np.testing.assert_allclose(b.numpy(), np.tanh([6.0, 8.0]) + 1, rtol=1e-6)
    c = f(kiln.tensor([-1.0, -2.0]))         # other branch: one new piece compiled
    np.testing.assert_allclose(c.numpy(), np.tanh([-2.0, -4.0]) ** 2, rtol=1e-6)
    d = f(kiln.tensor([-3.0, -1.0]))         # both branches known now
    np.testing.assert_allclose(d.numpy(), np.tanh([-6.0, -2.0]) ** 2, rtol=1e-6)
    s = f.stats
    # One version whose Python code reruns: a piece before the `if`, one per branch.
    assert s["graph_breaks"] >= 1 and s["hits"] == 3 and s["piece_compiles"] == 3
    text = f.explain()
    assert "jit 'branchy'" in text and "host code reruns on every call" in text


def test_explain_names_the_python_line_of_a_graph_break():
    import inspect

    @kiln.jit(name="lines")
    def f(x):
        h = kiln.tanh(x * 2.0)
        if h.sum() > 0:                      # the break explain() must name
            return h + 1.0
        m = h.max().item()                   # a second break, through item()
        return h * m

    f(kiln.tensor([1.0, 2.0]))
    f(kiln.tensor([-1.0, -2.0]))
    src, first = inspect.getsourcelines(f.__wrapped__)
    if_line = first + next(i for i, l in enumerate(src) if "if h.sum() > 0" in l)
    item_line = first + next(i for i, l in enumerate(src) if ".item()" in l)
    text = f.explain()
    assert f"{__file__}:{if_line}: bool()" in text, text
    assert f"{__file__}:{item_line}: item()" in text, text
    assert "python/src" not in text, text   # no longer the binding's C++ line


def test_item_in_jit_is_a_graph_break():
    @kiln.jit
    def f(x):
        m = x.max().item()                   # a host value computed inside
        return x / m

    np.testing.assert_allclose(f(kiln.tensor([1.0, 4.0])).numpy(), [0.25, 1.0])
    assert f.stats["graph_breaks"] >= 1


def test_tuple_results_lists_and_runtime_scalars():
    @kiln.jit(runtime_scalars=[1])
    def f(xs, s):
        return xs[0] * s, xs[1] + s

    a, b = f([kiln.ones(2), kiln.zeros(2)], 2.0)
    assert a.tolist() == [2.0, 2.0] and b.tolist() == [2.0, 2.0]
    a, b = f([kiln.ones(2), kiln.zeros(2)], 5.0)   # runtime scalar: same version
    assert a.tolist() == [5.0, 5.0] and f.stats["compiles"] == 1


def test_bad_arguments():
    f = kiln.jit(lambda x: x * 2.0)
    with pytest.raises(TypeError):
        f("not a tensor")
    assert f(x=kiln.ones(1)).tolist() == [2.0]    # keywords bind as in a plain call
    with pytest.raises(TypeError):
        f(y=kiln.ones(1))
    g = kiln.jit(lambda x: "not a tensor")
    with pytest.raises(TypeError):
        g(kiln.ones(1))
    h = kiln.jit(lambda x: kiln.matmul(x, x))
    with pytest.raises(kiln.Error):
        h(kiln.ones(2, 3))


def test_jitted_training_step_matches_eager():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(6, 8)
            self.fc2 = nn.Linear(8, 3)

        def forward(self, x):
            return self.fc2(kiln.relu(self.fc1(x)))

    kiln.manual_seed(3)
    model = Net()
    xs, ys = kiln.randn(16, 6), kiln.randint(0, 3, (16,))

    @kiln.jit
    def step(params, x, y):
        ps = [p.detach().requires_grad_() for p in params]
        loss = kiln.cross_entropy(nn.functional_call(model, ps, x), y)
        grads = kiln.grad(loss, ps)
        return [p - 0.1 * g for p, g in zip(params, grads)] + [loss.detach()]

    params = [p.detach().clone() for p in model.parameters()]
    eager = [p.detach().clone() for p in model.parameters()]
    for _ in range(4):
        *params, loss_j = step(params, xs, ys)
        ps = [p.detach().requires_grad_() for p in eager]
        loss_e = kiln.cross_entropy(nn.functional_call(model, ps, xs), ys)
        eager = [p - 0.1 * g for p, g in zip(eager, kiln.grad(loss_e, ps))]
        assert loss_j.item() == pytest.approx(loss_e.item(), rel=1e-5)
    assert step.stats["compiles"] == 1 and step.stats["hits"] == 3


def test_case2_host_code_reruns_and_host_values_are_inputs():
    log = []

    @kiln.jit
    def f(x):
        s = (x * 2.0).sum().item()           # a host value from the first piece
        log.append(s)                        # host code: runs on every call
        return x + s                         # s is fed to the next piece once it changes

    for v in range(1000):
        out = f(kiln.tensor([float(v)]))
        assert out.item() == pytest.approx(3.0 * v)
    assert len(log) == 1000 and log[-1] == pytest.approx(2.0 * 999)
    st = f.stats
    assert st["compiles"] == 1 and st["reruns"] == 1000
    assert st["max_piece_compiles"] <= 2 and st["piece_compiles"] <= 3
    assert "host value fed" in f.explain()


def test_versions_with_different_result_structures():
    @kiln.jit
    def f(x, k):
        if k == 1:
            return x * 2.0
        return [x + 1.0, x - 1.0]

    x = kiln.tensor([1.0])
    assert f(x, 1).tolist() == [2.0]
    a, b = f(x, 2)
    assert a.tolist() == [2.0] and b.tolist() == [0.0]
    assert isinstance(f(x, 2), list)
    assert isinstance(f(x, 1), kiln.Tensor)          # replayed: still a single tensor
