# kiln.jit and captured state: a jitted training step that closes over a model trains it exactly as
# eager (parameters get gradients, optimizer steps are seen without recompiling, BatchNorm's
# running statistics move), kiln.jit(module), and keyword and default arguments.
import numpy as np
import pytest

import kiln
import kiln.nn as nn
import kiln.nn.functional as F


def make_mlp(seed):
    kiln.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 3))


def make_cnn(seed):
    kiln.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 6 * 6, 3))


def assert_same_state(jm, em, what):
    for (n, a), (_, b) in zip(jm.state_dict().items(), em.state_dict().items()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=f"{what}: {n}")


@pytest.mark.parametrize("make,shape", [(make_mlp, (8, 6)), (make_cnn, (8, 1, 8, 8))])
@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_jitted_step_closing_over_a_model_trains_as_eager(make, shape, opt):
    jm, em = make(7), make(7)

    def optimizer(m):
        if opt == "sgd":
            return kiln.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        return kiln.optim.Adam(m.parameters(), lr=0.01)

    jopt, eopt = optimizer(jm), optimizer(em)

    @kiln.jit
    def step(x, y):
        return F.cross_entropy(jm(x), y)     # the model is captured, not an argument

    kiln.manual_seed(99)
    y = kiln.tensor([0, 1, 2, 1, 0, 2, 2, 1])
    for s in range(20):
        x = kiln.randn(*shape)
        jopt.zero_grad()
        jl = step(x, y)
        assert jl.requires_grad, "the loss of a jitted step must require grad"
        jl.backward()
        jopt.step()
        eopt.zero_grad()
        el = F.cross_entropy(em(x), y)
        el.backward()
        eopt.step()
        assert abs(jl.item() - el.item()) < 1e-5, (s, jl.item(), el.item())
    assert_same_state(jm, em, f"{make.__name__} {opt}")   # BatchNorm statistics included
    assert step.stats["compiles"] == 1, step.explain()
    text = step.explain()
    assert "runs eagerly" not in text, text
    assert "captured state" in text and "requires grad (gets its gradient)" in text, text
    assert "written in place by fn" in text, text       # the running statistics


def test_jit_module_behaves_like_the_module():
    jm, em = make_mlp(3), make_mlp(3)
    cm = kiln.jit(jm)
    x = kiln.randn(8, 6)
    np.testing.assert_allclose(cm(x).detach().numpy(), em(x).detach().numpy(), rtol=1e-5,
                               atol=1e-6)
    assert_same_state(jm, em, "train")
    # A module attribute, its parameters and train/eval go to the module itself.
    assert len(list(cm.parameters())) == len(list(jm.parameters()))
    cm.eval()
    em.eval()
    assert not jm.training
    with kiln.no_grad():
        np.testing.assert_allclose(cm(x).numpy(), em(x).numpy(), rtol=1e-5, atol=1e-6)
    # Gradients reach the parameters through the compiled module.
    cm.train()
    em.train()
    cm(x).sum().backward()
    em(x).sum().backward()
    for a, b in zip(jm.parameters(), em.parameters()):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-6)
    assert cm.stats["compiles"] >= 2            # train and eval are different versions
    assert "captured state" in cm.explain()


def test_eval_function_sees_statistics_and_weights_trained_after_its_first_call():
    m = make_mlp(5)
    f = kiln.jit(lambda x: m(x))
    x = kiln.randn(4, 6)
    m.eval()
    with kiln.no_grad():
        before = f(x).numpy()
    m.train()
    opt = kiln.optim.SGD(m.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        F.cross_entropy(m(kiln.randn(8, 6)), kiln.tensor([0] * 8)).backward()
        opt.step()
    m.eval()
    with kiln.no_grad():
        want = m(x).numpy()
        got = f(x).numpy()
    assert np.abs(before - want).max() > 1e-4
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert f.stats["compiles"] == 1, f.explain()


def test_keyword_and_default_arguments():
    @kiln.jit
    def f(x, scale=2.0, *, bias=None, mode="add"):
        y = x * scale
        if bias is not None:
            y = y + bias if mode == "add" else y - bias
        return y

    x = kiln.tensor([1.0, 2.0])
    b = kiln.tensor([10.0, 20.0])
    assert f(x).tolist() == [2.0, 4.0]
    assert f(x, 3.0).tolist() == [3.0, 6.0]
    assert f(x, scale=3.0).tolist() == [3.0, 6.0]
    assert f(x, bias=b).tolist() == [12.0, 24.0]
    assert f(x, bias=b, mode="sub").tolist() == [-8.0, -16.0]
    assert f(scale=1.0, x=x, bias=b).tolist() == [11.0, 22.0]
    with pytest.raises(TypeError):
        f(x, nope=1)
    # Replayed, not retraced: the same bound call again is a hit.
    hits = f.stats["hits"]
    f(x, bias=b, mode="sub")
    assert f.stats["hits"] == hits + 1
