# kiln.autograd against torch 1.13: Function with ctx (save_for_backward, needs_input_grad,
# mark_non_differentiable, set_materialize_grads) and a Python backward, grad/backward with
# torch's arguments, Variable, inference_mode, gradcheck.
import numpy as np
import pytest

import kiln

torch = pytest.importorskip("torch")


def both(data, requires_grad=True):
    a = np.asarray(data, dtype=np.float32)
    return kiln.tensor(a, requires_grad=requires_grad), torch.tensor(a, requires_grad=requires_grad)


def make_functions(lib):
    class Exp(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, scale):
            y = x.exp() * scale
            ctx.save_for_backward(y)
            ctx.scale = scale
            return y

        @staticmethod
        def backward(ctx, g):
            y, = ctx.saved_tensors
            return g * y, None

    class Round(lib.autograd.Function):  # a straight-through estimator
        @staticmethod
        def forward(ctx, x):
            return x.round()

        @staticmethod
        def backward(ctx, g):
            return g

    class MulAdd(lib.autograd.Function):  # two inputs, two outputs, one non-differentiable
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            idx = (a > 0).long()
            ctx.mark_non_differentiable(idx)
            return a * b, a + b, idx

        @staticmethod
        def backward(ctx, g_mul, g_add, g_idx):
            a, b = ctx.saved_tensors
            ga = g_mul * b + g_add if ctx.needs_input_grad[0] else None
            gb = g_mul * a + g_add if ctx.needs_input_grad[1] else None
            return ga, gb

    return Exp, Round, MulAdd


def test_function_matches_torch():
    KExp, KRound, KMulAdd = make_functions(kiln)
    TExp, TRound, TMulAdd = make_functions(torch)
    kx, tx = both([0.1, -0.7, 1.2])
    ky, ty = KExp.apply(kx, 2.0), TExp.apply(tx, 2.0)
    assert ky.requires_grad and not ky.is_leaf
    np.testing.assert_allclose(ky.detach().numpy(), ty.detach().numpy(), rtol=1e-6)
    (ky * ky).sum().backward()
    (ty * ty).sum().backward()
    np.testing.assert_allclose(kx.grad.numpy(), tx.grad.numpy(), rtol=1e-5)

    kx, tx = both([0.4, 1.6, -2.2])
    (KRound.apply(kx) * 3).sum().backward()
    (TRound.apply(tx) * 3).sum().backward()
    assert kx.grad.tolist() == tx.grad.tolist() == [3.0, 3.0, 3.0]

    ka, ta = both([1.0, -2.0])
    kb, tb = both([3.0, 4.0], requires_grad=False)
    km, kad, kidx = KMulAdd.apply(ka, kb)
    tm, tad, tidx = TMulAdd.apply(ta, tb)
    assert not kidx.requires_grad and kidx.tolist() == tidx.tolist()
    (km.sum() + 2 * kad.sum()).backward()
    (tm.sum() + 2 * tad.sum()).backward()
    np.testing.assert_allclose(ka.grad.numpy(), ta.grad.numpy())


def test_function_without_grad_and_inside_no_grad():
    KExp, _, _ = make_functions(kiln)
    y = KExp.apply(kiln.ones(2), 1.0)
    assert not y.requires_grad
    x = kiln.ones(2, requires_grad=True)
    with kiln.no_grad():
        assert not KExp.apply(x, 1.0).requires_grad


def test_function_frees_its_context_and_supports_retain_graph():
    import weakref
    KExp, _, _ = make_functions(kiln)
    x = kiln.ones(3, requires_grad=True)
    y = KExp.apply(x, 1.0).sum()
    live = kiln.autograd.function._live
    assert len(live) >= 1
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.e * np.ones(3), rtol=1e-6)
    del y
    assert len(live) == 0
    # A graph dropped without backward frees the ctx too.
    z = KExp.apply(x, 1.0)
    ref = weakref.ref(live[max(live.keys())])
    del z
    assert ref() is None


def test_function_second_order_and_errors():
    class Square(kiln.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 2 * x * g

    x = kiln.tensor([3.0], requires_grad=True)
    g, = kiln.autograd.grad(Square.apply(x).sum(), x, create_graph=True)
    assert g.tolist() == [6.0]

    class Bad(kiln.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            raise ValueError("boom")

    with pytest.raises(kiln.Error, match="ValueError: boom"):
        Bad.apply(x).sum().backward()

    class Wrong(kiln.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a * b

        @staticmethod
        def backward(ctx, g):
            return g

    with pytest.raises(kiln.Error, match="incorrect number of gradients"):
        Wrong.apply(x, x).sum().backward()


def test_function_traced_under_jit():
    KExp, _, _ = make_functions(kiln)

    @kiln.jit
    def f(x):
        return KExp.apply(x, 2.0).sum()

    x = kiln.tensor([0.5, 1.0])
    np.testing.assert_allclose(f(x).item(), 2 * np.exp([0.5, 1.0]).sum(), rtol=1e-6)


def test_grad_with_torch_arguments():
    ka, ta = both([1.0, 2.0, 3.0])
    kl, tl = (ka * ka).sum(), (ta * ta).sum()
    kg = kiln.autograd.grad(kl, ka, only_inputs=True, retain_graph=True)
    tg = torch.autograd.grad(tl, ta, only_inputs=True, retain_graph=True)
    assert isinstance(kg, tuple) and kg[0].tolist() == tg[0].tolist()
    kg = kiln.autograd.grad([kl], [ka], grad_outputs=[kiln.tensor(2.0)])
    tg = torch.autograd.grad([tl], [ta], grad_outputs=[torch.tensor(2.0)])
    assert kg[0].tolist() == tg[0].tolist()
    kb = kiln.ones(2, requires_grad=True)
    assert kiln.autograd.grad((ka * 2).sum(), [ka, kb], allow_unused=True)[1] is None
    with pytest.raises(kiln.Error):
        kiln.autograd.grad((ka * 2).sum(), [ka, kb])
    # Second order through create_graph.
    g, = kiln.autograd.grad((ka ** 3).sum(), ka, create_graph=True)
    gg, = kiln.autograd.grad(g.sum(), ka)
    assert gg.tolist() == [6.0, 12.0, 18.0]


def test_backward_with_inputs_and_grad_tensors():
    ka, ta = both([1.0, 2.0])
    kb, tb = both([3.0, 4.0])
    kiln.autograd.backward([(ka * kb).sum()], inputs=[ka])
    torch.autograd.backward([(ta * tb).sum()], inputs=[ta])
    assert ka.grad.tolist() == ta.grad.tolist() and kb.grad is None and tb.grad is None
    kiln.autograd.backward(ka * 2, grad_tensors=kiln.tensor([1.0, 0.5]))
    torch.autograd.backward(ta * 2, grad_tensors=torch.tensor([1.0, 0.5]))
    assert ka.grad.tolist() == ta.grad.tolist()


def test_variable_and_inference_mode():
    t = kiln.ones(2)
    v = kiln.autograd.Variable(t, requires_grad=True)
    assert v is t and v.requires_grad and isinstance(v, kiln.autograd.Variable)
    assert kiln.Variable is kiln.autograd.Variable
    w = kiln.ones(2, requires_grad=True)
    with kiln.inference_mode():
        assert not (w * 2).requires_grad and not kiln.is_grad_enabled()
    with kiln.inference_mode(False):
        assert (w * 2).requires_grad

    @kiln.inference_mode()
    def f(x):
        return x * 2
    assert not f(w).requires_grad and kiln.is_grad_enabled()
    assert kiln.autograd.no_grad is kiln.no_grad


def test_gradcheck():
    x = kiln.tensor([0.3, 0.9], dtype=kiln.float64, requires_grad=True)
    assert kiln.autograd.gradcheck(lambda t: (t.sin() * t).sum(), (x,))

    class BadGrad(kiln.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t * t

        @staticmethod
        def backward(ctx, g):
            return g  # wrong: should be 2 t g

    with pytest.raises(kiln.Error):
        kiln.autograd.gradcheck(BadGrad.apply, (x,))
    assert kiln.autograd.gradcheck(BadGrad.apply, (x,), raise_exception=False) is False


def test_functional_jacobian_hessian_vjp_jvp():
    def f(lib):
        return lambda x, y: (x.sin() * y.unsqueeze(1)).sum(1) + (y ** 3)

    def g(x):
        return (x ** 3).sum() + (x[0] * x[1])

    xs = np.array([[0.1, 0.2], [0.3, -0.4], [1.0, 2.0]], np.float32)
    ys = np.array([0.5, -1.5, 2.0], np.float32)
    kx, ky, tx, ty = kiln.tensor(xs), kiln.tensor(ys), torch.tensor(xs), torch.tensor(ys)
    kj = kiln.autograd.functional.jacobian(f(kiln), (kx, ky))
    tj = torch.autograd.functional.jacobian(f(torch), (tx, ty))
    assert len(kj) == len(tj) == 2
    for a, b in zip(kj, tj):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    kj1 = kiln.autograd.functional.jacobian(lambda x: x.exp(), kiln.tensor(ys))
    assert kj1.shape == (3, 3)
    v = np.array([1.0, -2.0, 0.5], np.float32)
    for name, args in [("hessian", ()), ("vhp", (v,)), ("hvp", (v,))]:
        kr = getattr(kiln.autograd.functional, name)(g, kiln.tensor(ys),
                                                    *[kiln.tensor(a) for a in args])
        tr = getattr(torch.autograd.functional, name)(g, torch.tensor(ys),
                                                     *[torch.tensor(a) for a in args])
        kr, tr = (kr[1], tr[1]) if isinstance(tr, tuple) else (kr, tr)
        np.testing.assert_allclose(kr.numpy(), tr.numpy(), rtol=1e-5, atol=1e-6)
    vv = np.ones((3,), np.float32)
    ko, kv = kiln.autograd.functional.vjp(f(kiln), (kx, ky), kiln.tensor(vv))
    to, tv = torch.autograd.functional.vjp(f(torch), (tx, ty), torch.tensor(vv))
    np.testing.assert_allclose(ko.numpy(), to.numpy(), rtol=1e-6)
    for a, b in zip(kv, tv):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    ko, kv = kiln.autograd.functional.jvp(lambda y: y ** 2, kiln.tensor(ys), kiln.tensor(v))
    to, tv = torch.autograd.functional.jvp(lambda y: y ** 2, torch.tensor(ys), torch.tensor(v))
    np.testing.assert_allclose(kv.numpy(), tv.numpy(), rtol=1e-6)
