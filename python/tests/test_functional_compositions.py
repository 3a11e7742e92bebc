# torch.nn.functional's functions that Kiln writes as compositions of its ops (softsign,
# tanhshrink, hard/softshrink, threshold, softmin, prelu, pairwise_distance, channel dropout,
# upsample aliases, in-place forms): values and gradients against torch 1.13.
import numpy as np
import pytest

import kiln
import kiln.nn as knn

torch = pytest.importorskip("torch")
TF = torch.nn.functional
KF = knn.functional
RNG = np.random.default_rng(7)


def both(*shape, scale=2.0):
    a = RNG.standard_normal(shape) * scale
    return kiln.tensor(a.copy(), requires_grad=True), torch.tensor(a.copy(), requires_grad=True)


def check(kf, tf, *shapes, rtol=1e-10, atol=1e-12):
    pairs = [both(*s) for s in shapes]
    ko, to = kf(*[k for k, _ in pairs]), tf(*[t for _, t in pairs])
    np.testing.assert_allclose(ko.detach().numpy(), to.detach().numpy(), rtol=rtol, atol=atol)
    w = RNG.standard_normal(tuple(to.shape))
    (ko * kiln.tensor(w)).sum().backward()
    (to * torch.tensor(w)).sum().backward()
    for k, t in pairs:
        np.testing.assert_allclose(k.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("name,args", [
    ("softsign", ()), ("tanhshrink", ()), ("hardshrink", ()), ("hardshrink", (1.2,)),
    ("softshrink", ()), ("softshrink", (0.8,)), ("threshold", (0.3, -2.0)),
])
def test_elementwise(name, args):
    check(lambda x: getattr(KF, name)(x, *args), lambda x: getattr(TF, name)(x, *args), (3, 5))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmin(dim):
    check(lambda x: KF.softmin(x, dim), lambda x: TF.softmin(x, dim), (3, 4), rtol=1e-9)


@pytest.mark.parametrize("wshape", [(1,), (3,)])
def test_prelu(wshape):
    check(KF.prelu, TF.prelu, (2, 3, 4), wshape)


def test_pairwise_distance():
    check(KF.pairwise_distance, TF.pairwise_distance, (4, 5), (4, 5), rtol=1e-9)
    check(lambda a, b: KF.pairwise_distance(a, b, 1.0, keepdim=True),
          lambda a, b: TF.pairwise_distance(a, b, 1.0, keepdim=True), (4, 5), (4, 5), rtol=1e-9)


@pytest.mark.parametrize("name,shape", [("dropout1d", (2, 6, 5)), ("dropout2d", (2, 6, 3, 3)),
                                        ("dropout3d", (6, 2, 2, 2))])
def test_channel_dropout_zeroes_whole_channels(name, shape):
    x = kiln.ones(*shape, dtype=kiln.float64)
    y = getattr(KF, name)(x, p=0.5).numpy()
    rank = int(name[-2])
    per_channel = y.reshape(y.shape[:y.ndim - rank] + (-1,))
    for ch in per_channel.reshape(-1, per_channel.shape[-1]):
        assert set(np.unique(ch)) <= {0.0, 2.0} and len(set(ch)) == 1
    assert getattr(KF, name)(x, p=0.5, training=False) is x
    with pytest.raises(kiln.Error, match=rf"^\[{name}\]"):
        getattr(KF, name)(kiln.ones(2, dtype=kiln.float64), p=0.5)


def test_upsample_aliases():
    a = RNG.standard_normal((1, 2, 3, 4))
    k, t = kiln.tensor(a), torch.tensor(a)
    np.testing.assert_allclose(KF.upsample_nearest(k, scale_factor=2).numpy(),
                               TF.upsample_nearest(t, scale_factor=2).numpy())
    np.testing.assert_allclose(KF.upsample_bilinear(k, size=(5, 7)).numpy(),
                               TF.upsample_bilinear(t, size=(5, 7)).numpy(), rtol=1e-10)
    np.testing.assert_allclose(KF.upsample(k, scale_factor=2, mode="bilinear").numpy(),
                               TF.interpolate(t, scale_factor=2, mode="bilinear").numpy(),
                               rtol=1e-10)


@pytest.mark.parametrize("name,args", [("relu_", ()), ("elu_", (0.7,)), ("leaky_relu_", (0.2,)),
                                       ("hardtanh_", (-0.5, 0.5)), ("selu_", ()),
                                       ("celu_", (1.3,)), ("threshold_", (0.1, 9.0))])
def test_in_place_forms_write_their_input(name, args):
    a = RNG.standard_normal((3, 4))
    k, t = kiln.tensor(a.copy()), torch.tensor(a.copy())
    r = getattr(KF, name)(k, *args)
    getattr(TF, name)(t, *args)
    assert r is k
    np.testing.assert_allclose(k.numpy(), t.numpy(), rtol=1e-12)


def test_import_kiln_nn_functional_as_torch_users_write_it():
    import importlib
    import kiln.nn.functional as F
    assert F is knn.functional
    assert importlib.import_module("kiln.nn.functional") is knn.functional
    from kiln.nn.functional import relu
    assert relu is knn.functional.relu
