"""kiln.nn's loss modules against torch 1.13's: the same constructor arguments (legacy
size_average/reduce included) give the same values and input gradients."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import kiln  # noqa: E402
import kiln.nn as nn  # noqa: E402


def kt(a, grad=False):
    t = kiln.tensor(np.array(a, order="C"))
    return t.requires_grad_() if grad else t


def tt(a, grad=False):
    return torch.tensor(np.ascontiguousarray(a), requires_grad=grad)


rng = np.random.default_rng(0)
X = rng.standard_normal((6, 5)).astype(np.float32)
Y = rng.standard_normal((6, 5)).astype(np.float32)
P = (1 / (1 + np.exp(-X))).astype(np.float32)
T01 = (rng.random((6, 5)) > 0.5).astype(np.float32)
CLS = rng.integers(0, 5, 6).astype(np.int64)
SIGN = np.where(rng.random(6) > 0.5, 1.0, -1.0).astype(np.float32)
SIGN2 = np.where(rng.random((6, 5)) > 0.5, 1.0, -1.0).astype(np.float32)
W5 = rng.random(5).astype(np.float32) + 0.5

# (class name, constructor kwargs, inputs as numpy arrays, which inputs get gradients)
CASES = [
    ("MSELoss", {}, [X, Y], [0]),
    ("MSELoss", {"reduction": "sum"}, [X, Y], [0]),
    ("MSELoss", {"size_average": False}, [X, Y], [0]),
    ("L1Loss", {"reduction": "none"}, [X, Y], [0]),
    ("L1Loss", {"reduce": False}, [X, Y], [0]),
    ("SmoothL1Loss", {"beta": 0.5}, [X, Y], [0]),
    ("HuberLoss", {"delta": 0.7}, [X, Y], [0]),
    ("HuberLoss", {"reduction": "sum"}, [X, Y], [0]),
    ("CrossEntropyLoss", {}, [X, CLS], [0]),
    ("CrossEntropyLoss", {"label_smoothing": 0.1}, [X, CLS], [0]),
    ("CrossEntropyLoss", {"ignore_index": 2}, [X, CLS], [0]),
    ("CrossEntropyLoss", {"reduction": "sum"}, [X, CLS], [0]),
    ("CrossEntropyLoss", {}, [X, np.exp(Y) / np.exp(Y).sum(1, keepdims=True)], [0]),
    ("NLLLoss", {}, [np.log(P / P.sum(1, keepdims=True)), CLS], [0]),
    ("NLLLoss", {"reduction": "none", "ignore_index": 1}, [X, CLS], [0]),
    ("BCELoss", {}, [P, T01], [0]),
    ("BCELoss", {"reduction": "sum"}, [P, T01], [0]),
    ("BCEWithLogitsLoss", {}, [X, T01], [0]),
    ("BCEWithLogitsLoss", {"reduction": "none"}, [X, T01], [0]),
    ("KLDivLoss", {"reduction": "batchmean"}, [np.log(P), P[::-1].copy()], [0]),
    ("KLDivLoss", {"reduction": "sum", "log_target": True}, [np.log(P), np.log(P[::-1])], [0]),
    ("MarginRankingLoss", {"margin": 0.2}, [X[:, 0], Y[:, 0], SIGN], [0, 1]),
    ("CosineEmbeddingLoss", {"margin": 0.1}, [X, Y, SIGN], [0, 1]),
    ("TripletMarginLoss", {"margin": 0.5}, [X, Y, X[::-1].copy()], [0, 1, 2]),
    ("TripletMarginLoss", {"p": 1.0, "swap": True}, [X, Y, X[::-1].copy()], [0, 1, 2]),
    ("HingeEmbeddingLoss", {"margin": 0.8}, [np.abs(X), SIGN2], [0]),
    ("SoftMarginLoss", {}, [X, SIGN2], [0]),
    ("MultiLabelSoftMarginLoss", {}, [X, T01], [0]),
    ("MultiMarginLoss", {}, [X, CLS], [0]),
    ("MultiMarginLoss", {"p": 2, "margin": 0.5, "reduction": "sum"}, [X, CLS], [0]),
    ("PoissonNLLLoss", {}, [X, np.abs(Y)], [0]),
    ("PoissonNLLLoss", {"log_input": False, "full": True}, [P, np.abs(Y) + 1], [0]),
    ("GaussianNLLLoss", {}, [X, Y, P], [0, 2]),
    ("GaussianNLLLoss", {"full": True, "reduction": "sum"}, [X, Y, P], [0, 2]),
]


@pytest.mark.parametrize("name,kwargs,inputs,grads", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_loss_module_matches_torch(name, kwargs, inputs, grads):
    tl = getattr(torch.nn, name)(**kwargs)
    kl = getattr(nn, name)(**kwargs)
    assert kl.reduction == tl.reduction
    ti = [tt(a, i in grads) for i, a in enumerate(inputs)]
    ki = [kt(a, i in grads) for i, a in enumerate(inputs)]
    to, ko = tl(*ti), kl(*ki)
    np.testing.assert_allclose(ko.detach().numpy(), to.detach().numpy(), rtol=1e-5, atol=1e-6)
    to.sum().backward()
    ko.sum().backward()
    for i in grads:
        np.testing.assert_allclose(ki[i].grad.numpy(), ti[i].grad.numpy(), rtol=1e-4, atol=1e-6)


def test_weighted_losses_match_torch():
    w = W5
    for name, inputs in [("CrossEntropyLoss", [X, CLS]), ("NLLLoss", [X, CLS]),
                         ("BCELoss", [P, T01]), ("BCEWithLogitsLoss", [X, T01]),
                         ("MultiLabelSoftMarginLoss", [X, T01]), ("MultiMarginLoss", [X, CLS])]:
        tl = getattr(torch.nn, name)(weight=torch.tensor(w))
        kl = getattr(nn, name)(weight=kt(w))
        to = tl(*[tt(a) for a in inputs])
        ko = kl(*[kt(a) for a in inputs])
        np.testing.assert_allclose(ko.numpy(), to.numpy(), rtol=1e-5, err_msg=name)
        assert "weight" in dict(kl.named_buffers())


def test_bce_with_logits_pos_weight():
    pw = W5 * 2
    tl = torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor(pw))
    kl = nn.BCEWithLogitsLoss(pos_weight=kt(pw))
    xi, ki = tt(X, True), kt(X, True)
    to, ko = tl(xi, tt(T01)), kl(ki, kt(T01))
    np.testing.assert_allclose(ko.item(), to.item(), rtol=1e-5)
    to.backward()
    ko.backward()
    np.testing.assert_allclose(ki.grad.numpy(), xi.grad.numpy(), rtol=1e-4, atol=1e-7)


def test_constructor_arguments_are_torchs():
    import inspect
    for name in ["MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "CrossEntropyLoss", "NLLLoss",
                 "BCELoss", "BCEWithLogitsLoss", "KLDivLoss", "MarginRankingLoss",
                 "CosineEmbeddingLoss", "TripletMarginLoss", "HingeEmbeddingLoss",
                 "SoftMarginLoss", "MultiLabelSoftMarginLoss", "PoissonNLLLoss",
                 "GaussianNLLLoss", "MultiMarginLoss"]:
        theirs = inspect.signature(getattr(torch.nn, name).__init__).parameters
        ours = inspect.signature(getattr(nn, name).__init__).parameters
        assert list(ours) == list(theirs), name
        for k in theirs:
            assert ours[k].default == theirs[k].default, (name, k)
    with pytest.raises(ValueError):
        nn.MSELoss(reduction="avg")(kt(X), kt(Y))


def test_adaptive_log_softmax_with_loss():
    torch.manual_seed(0)
    tm = torch.nn.AdaptiveLogSoftmaxWithLoss(8, 20, [5, 12], div_value=2.0, head_bias=True)
    km = nn.AdaptiveLogSoftmaxWithLoss(8, 20, [5, 12], div_value=2.0, head_bias=True)
    assert list(km.state_dict()) == list(tm.state_dict())
    km.load_state_dict({k: kt(v.detach().numpy()) for k, v in tm.state_dict().items()})
    x = rng.standard_normal((7, 8)).astype(np.float32)
    y = np.array([0, 4, 5, 11, 12, 19, 3], np.int64)
    tx, kx = tt(x, True), kt(x, True)
    to, ko = tm(tx, torch.tensor(y)), km(kx, kt(y))
    np.testing.assert_allclose(ko.output.detach().numpy(), to.output.detach().numpy(), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(ko.loss.item(), to.loss.item(), rtol=1e-5)
    to.loss.backward()
    ko.loss.backward()
    np.testing.assert_allclose(kx.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(km.log_prob(kt(x)).detach().numpy(),
                               tm.log_prob(tt(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(km.predict(kt(x)).numpy(), tm.predict(tt(x)).numpy())
