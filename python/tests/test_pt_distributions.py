# kiln.distributions against torch 1.13: log_prob, entropy, moments and KL on the same
# parameters, sample shapes and statistics, rsample's gradient.
import numpy as np
import pytest

import kiln
from kiln import distributions as kdist

torch = pytest.importorskip("torch")
tdist = torch.distributions

P = np.array([[0.2, 0.5, 0.3], [0.7, 0.1, 0.2]], dtype=np.float32)
L = np.array([[1.0, -0.5, 0.2], [0.0, 2.0, -1.0]], dtype=np.float32)


def close(k, t, rtol=1e-5):
    np.testing.assert_allclose(k.detach().numpy(), t.detach().numpy(), rtol=rtol, atol=1e-6)


@pytest.mark.parametrize("param", ["probs", "logits"])
def test_categorical(param):
    src = P if param == "probs" else L
    k = kdist.Categorical(**{param: kiln.tensor(src)})
    t = tdist.Categorical(**{param: torch.tensor(src)})
    close(k.probs, t.probs)
    close(k.logits, t.logits)
    v = np.array([2, 0])
    close(k.log_prob(kiln.tensor(v)), t.log_prob(torch.tensor(v)))
    close(k.log_prob(kiln.tensor([[0], [1]])), t.log_prob(torch.tensor([[0], [1]])))
    close(k.entropy(), t.entropy())
    assert k.batch_shape == tuple(t.batch_shape) and k.mode.tolist() == t.mode.tolist()
    s = k.sample((4000,))
    assert s.shape == tuple(t.sample((4000,)).shape) and s.dtype == kiln.int64
    freq = np.stack([np.bincount(s.numpy()[:, r], minlength=3) / 4000 for r in range(2)])
    np.testing.assert_allclose(freq, t.probs.numpy(), atol=0.03)
    assert k.sample().shape == (2,)


def test_normal():
    loc, scale = np.array([0.5, -1.0], np.float32), np.array([1.5, 0.2], np.float32)
    k = kdist.Normal(kiln.tensor(loc), kiln.tensor(scale))
    t = tdist.Normal(torch.tensor(loc), torch.tensor(scale))
    v = np.array([0.1, -0.9], np.float32)
    close(k.log_prob(kiln.tensor(v)), t.log_prob(torch.tensor(v)))
    close(k.entropy(), t.entropy())
    close(k.cdf(kiln.tensor(v)), t.cdf(torch.tensor(v)))
    close(k.variance, t.variance)
    s = k.sample((20000,))
    assert s.shape == (20000, 2) and not s.requires_grad
    np.testing.assert_allclose(s.numpy().mean(0), loc, atol=0.03)
    np.testing.assert_allclose(s.numpy().std(0), scale, rtol=0.03)
    mu = kiln.tensor([0.0], requires_grad=True)
    kdist.Normal(mu, 1.0).rsample((100,)).sum().backward()
    assert mu.grad.tolist() == [100.0]
    assert kdist.Normal(0.0, 1.0).log_prob(kiln.tensor(0.0)).item() == pytest.approx(
        tdist.Normal(0.0, 1.0).log_prob(torch.tensor(0.0)).item())


@pytest.mark.parametrize("param", ["probs", "logits"])
def test_bernoulli(param):
    src = np.array([0.3, 0.9], np.float32) if param == "probs" else np.array([-1.0, 2.0],
                                                                               np.float32)
    k = kdist.Bernoulli(**{param: kiln.tensor(src)})
    t = tdist.Bernoulli(**{param: torch.tensor(src)})
    v = np.array([1.0, 0.0], np.float32)
    close(k.log_prob(kiln.tensor(v)), t.log_prob(torch.tensor(v)))
    close(k.entropy(), t.entropy())
    s = k.sample((10000,))
    np.testing.assert_allclose(s.numpy().mean(0), t.probs.numpy(), atol=0.02)


def test_uniform_and_kl():
    k, t = kdist.Uniform(kiln.tensor([0.0, 1.0]), kiln.tensor([2.0, 4.0])), \
        tdist.Uniform(torch.tensor([0.0, 1.0]), torch.tensor([2.0, 4.0]))
    v = np.array([1.0, 1.5], np.float32)
    close(k.log_prob(kiln.tensor(v)), t.log_prob(torch.tensor(v)))
    close(k.entropy(), t.entropy())
    # Outside the support: -inf (torch's validate_args raises instead).
    assert k.log_prob(kiln.tensor([3.0, 0.5])).tolist() == [-np.inf, -np.inf]
    s = k.sample((1000,)).numpy()
    assert (s[:, 0] >= 0).all() and (s[:, 1] < 4).all()
    kp, kq = kdist.Normal(kiln.tensor([0.0]), kiln.tensor([1.0])), \
        kdist.Normal(kiln.tensor([1.0]), kiln.tensor([2.0]))
    tp, tq = tdist.Normal(torch.tensor([0.0]), torch.tensor([1.0])), \
        tdist.Normal(torch.tensor([1.0]), torch.tensor([2.0]))
    close(kdist.kl_divergence(kp, kq), tdist.kl_divergence(tp, tq))
    close(kdist.kl_divergence(kdist.Categorical(kiln.tensor(P)), kdist.Categorical(
        logits=kiln.tensor(L))), tdist.kl_divergence(tdist.Categorical(torch.tensor(P)),
                                                      tdist.Categorical(logits=torch.tensor(L))))
    with pytest.raises(kiln.Error):
        kdist.kl_divergence(kp, kdist.Uniform(0.0, 1.0))
