"""kiln.nn.init against torch 1.13's: the same gains and fans, and draws from the same
distributions (bounds, means, standard deviations), in place and without autograd history."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import kiln  # noqa: E402
import kiln.nn as nn  # noqa: E402
from kiln.nn import init  # noqa: E402


def test_calculate_gain_and_fans():
    for nl, p in [("linear", None), ("conv2d", None), ("sigmoid", None), ("tanh", None),
                  ("relu", None), ("leaky_relu", None), ("leaky_relu", 0.2), ("selu", None)]:
        assert init.calculate_gain(nl, p) == pytest.approx(torch.nn.init.calculate_gain(nl, p))
    with pytest.raises(ValueError):
        init.calculate_gain("swish")
    for shape in [(3, 4), (8, 2, 3, 3), (5, 6, 2)]:
        assert init._calculate_fan_in_and_fan_out(kiln.empty(*shape)) == \
            torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(*shape))
    with pytest.raises(ValueError):
        init._calculate_fan_in_and_fan_out(kiln.empty(3))


def stats(t):
    a = t.detach().numpy().astype(np.float64)
    return a.min(), a.max(), a.mean(), a.std()


@pytest.mark.parametrize("name,args,kwargs", [
    ("uniform_", (-2.0, 3.0), {}),
    ("normal_", (1.0, 0.5), {}),
    ("xavier_uniform_", (), {"gain": 2.0}),
    ("xavier_normal_", (), {}),
    ("kaiming_uniform_", (), {"a": math.sqrt(5)}),
    ("kaiming_uniform_", (), {"mode": "fan_out", "nonlinearity": "relu"}),
    ("kaiming_normal_", (), {"a": 0.1, "nonlinearity": "leaky_relu"}),
    ("kaiming_normal_", (), {"mode": "fan_out"}),
    ("trunc_normal_", (), {"mean": 0.5, "std": 1.0, "a": -1.0, "b": 1.5}),
])
def test_distributions_match_torch(name, args, kwargs):
    shape = (256, 128, 3)
    kiln.manual_seed(0)
    torch.manual_seed(0)
    k = kiln.empty(*shape, requires_grad=True)
    t = torch.empty(*shape)
    out = getattr(init, name)(k, *args, **kwargs)
    getattr(torch.nn.init, name)(t, *args, **kwargs)
    assert out is k and k.is_leaf and k.requires_grad
    kmin, kmax, kmean, kstd = stats(k)
    tmin, tmax, tmean, tstd = stats(t)
    assert kstd == pytest.approx(tstd, rel=0.02)
    assert kmean == pytest.approx(tmean, abs=0.02 * tstd + 1e-3)
    if "uniform" in name or name == "trunc_normal_":
        assert kmin == pytest.approx(tmin, abs=0.01 * tstd)
        assert kmax == pytest.approx(tmax, abs=0.01 * tstd)


def test_constant_eye_dirac_orthogonal_sparse():
    t = kiln.empty(3, 4)
    assert np.all(init.constant_(t, 0.3).numpy() == np.float32(0.3))
    assert np.all(init.ones_(t).numpy() == 1) and np.all(init.zeros_(t).numpy() == 0)
    np.testing.assert_array_equal(init.eye_(kiln.empty(3, 4)).numpy(), np.eye(3, 4))
    kw, tw = kiln.empty(4, 2, 3, 3), torch.empty(4, 2, 3, 3)
    init.dirac_(kw, groups=2)
    torch.nn.init.dirac_(tw, groups=2)
    np.testing.assert_array_equal(kw.numpy(), tw.numpy())
    for shape in [(6, 4), (4, 6), (5, 2, 3)]:
        q = init.orthogonal_(kiln.empty(*shape), gain=2.0).numpy().reshape(shape[0], -1)
        small = q @ q.T if shape[0] <= q.shape[1] else q.T @ q
        np.testing.assert_allclose(small, 4 * np.eye(small.shape[0]), atol=1e-5)
    s = init.sparse_(kiln.empty(10, 5), 0.3).numpy()
    assert np.all((s == 0).sum(0) >= 3)
    with pytest.warns(UserWarning):
        init.uniform(kiln.empty(2))   # the deprecated spelling still works


def test_module_init_loop_as_torch_programs_write_it():
    # The DCGAN-style weights_init: isinstance tests and nn.init on parameters.
    def weights_init(m):
        if isinstance(m, nn.Conv2d):
            nn.init.normal_(m.weight, 0.0, 0.02)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.normal_(m.weight, 1.0, 0.02)
            nn.init.constant_(m.bias, 0)
        elif isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            m.bias.data.fill_(0.01) if hasattr(m.bias, "data") else nn.init.constant_(m.bias, 0.01)
    net = nn.Sequential(nn.Conv2d(3, 64, 4), nn.BatchNorm2d(64), nn.Flatten(), nn.Linear(10, 10))
    net.apply(weights_init)
    assert abs(net[0].weight.detach().numpy().std() - 0.02) < 0.002
    assert np.all(net[1].bias.detach().numpy() == 0)
    assert isinstance(net[0].weight, nn.Parameter) and not isinstance(kiln.ones(2), nn.Parameter)
