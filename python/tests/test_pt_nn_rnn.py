"""kiln.nn's RNN, LSTM, GRU and cells against torch 1.13's: torch's state_dict loads by name
(the same keys and shapes), and outputs, final states and gradients match, for stacked,
bidirectional, batch_first, projected, unbatched and packed inputs."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import kiln  # noqa: E402
import kiln.nn as nn  # noqa: E402


def kt(a, grad=False):
    t = kiln.tensor(np.array(a, order="C"))
    return t.requires_grad_() if grad else t


def copy_weights(tm, km):
    sd = tm.state_dict()
    assert list(km.state_dict()) == list(sd)
    for k, v in sd.items():
        assert tuple(km.state_dict()[k].shape) == tuple(v.shape), k
    km.load_state_dict({k: kt(v.detach().numpy()) for k, v in sd.items()})


def close(k, t, tol=1e-5):
    np.testing.assert_allclose(k.detach().numpy(), t.detach().numpy(), rtol=tol, atol=tol)


def run_pair(cls, kwargs, x, state=None):
    torch.manual_seed(0)
    tm = getattr(torch.nn, cls)(**kwargs)
    km = getattr(nn, cls)(**kwargs)
    copy_weights(tm, km)
    tx, kx = torch.tensor(x, requires_grad=True), kt(x, True)
    if state is None:
        to, ts = tm(tx)
        ko, ks = km(kx)
    elif isinstance(state, tuple):
        to, ts = tm(tx, tuple(torch.tensor(s) for s in state))
        ko, ks = km(kx, tuple(kt(s) for s in state))
    else:
        to, ts = tm(tx, torch.tensor(state))
        ko, ks = km(kx, kt(state))
    close(ko, to)
    ts = ts if isinstance(ts, tuple) else (ts,)
    ks = ks if isinstance(ks, tuple) else (ks,)
    loss_t = (to * to).sum() + sum(s.sum() for s in ts)
    loss_k = (ko * ko).sum() + sum(s.sum() for s in ks)
    for a, b in zip(ks, ts):
        close(a, b)
    loss_t.backward()
    loss_k.backward()
    close(kx.grad, tx.grad, 1e-4)
    kp = dict(km.named_parameters())
    for n, p in tm.named_parameters():
        close(kp[n].grad, p.grad, 1e-4)
    return km


rng = np.random.default_rng(1)
X = rng.standard_normal((5, 3, 4)).astype(np.float32)  # [T, B, in]


@pytest.mark.parametrize("cls", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("layers,bidir", [(1, False), (2, True), (3, False)])
def test_stacked_and_bidirectional(cls, layers, bidir):
    run_pair(cls, {"input_size": 4, "hidden_size": 6, "num_layers": layers,
                   "bidirectional": bidir}, X)


def test_batch_first_initial_state_and_relu():
    xb = np.ascontiguousarray(X.transpose(1, 0, 2))
    h0 = rng.standard_normal((4, 3, 6)).astype(np.float32)
    c0 = rng.standard_normal((4, 3, 6)).astype(np.float32)
    run_pair("LSTM", {"input_size": 4, "hidden_size": 6, "num_layers": 2, "batch_first": True,
                      "bidirectional": True}, xb, (h0, c0))
    run_pair("GRU", {"input_size": 4, "hidden_size": 6, "num_layers": 2, "batch_first": True,
                     "bidirectional": True}, xb, h0)
    run_pair("RNN", {"input_size": 4, "hidden_size": 6, "nonlinearity": "relu", "bias": False},
             X, h0[:1])


def test_proj_size_and_unbatched():
    run_pair("LSTM", {"input_size": 4, "hidden_size": 6, "num_layers": 2, "proj_size": 3,
                      "bidirectional": True}, X)
    run_pair("GRU", {"input_size": 4, "hidden_size": 6, "num_layers": 2}, X[:, 0])


def test_dropout_between_layers_only_in_training():
    km = nn.LSTM(4, 6, num_layers=2, dropout=0.5)
    x = kt(X)
    km.eval()
    a, _ = km(x)
    b, _ = km(x)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    km.train()
    kiln.manual_seed(3)
    c, _ = km(x)
    assert not np.allclose(a.numpy(), c.numpy())


@pytest.mark.parametrize("cls", ["LSTMCell", "GRUCell", "RNNCell"])
def test_cells(cls):
    torch.manual_seed(0)
    tm, km = getattr(torch.nn, cls)(4, 5), getattr(nn, cls)(4, 5)
    copy_weights(tm, km)
    x = X[0]
    th, kh = None, None
    tx, kx = torch.tensor(x, requires_grad=True), kt(x, True)
    for _ in range(3):  # the state carried over steps, as a user loop does
        th = tm(tx, th)
        kh = km(kx, kh)
    to = th[0] if isinstance(th, tuple) else th
    ko = kh[0] if isinstance(kh, tuple) else kh
    close(ko, to)
    to.sum().backward()
    ko.sum().backward()
    close(kx.grad, tx.grad, 1e-4)
    one = km(kx[0])  # unbatched
    assert tuple((one[0] if isinstance(one, tuple) else one).shape) == (5,)


def test_packed_sequences_match_torch():
    from torch.nn.utils.rnn import pack_padded_sequence as tpack, pad_packed_sequence as tpad
    from kiln.nn.utils.rnn import pack_padded_sequence as kpack, pad_packed_sequence as kpad
    lengths = [3, 5, 2]
    torch.manual_seed(0)
    tm, km = torch.nn.GRU(4, 6, bidirectional=True), nn.GRU(4, 6, bidirectional=True)
    copy_weights(tm, km)
    tp = tpack(torch.tensor(X), lengths, enforce_sorted=False)
    kp = kpack(kt(X), lengths, enforce_sorted=False)
    np.testing.assert_array_equal(kp.batch_sizes.numpy(), tp.batch_sizes.numpy())
    close(kp.data, tp.data)
    to, th = tm(tp)
    ko, kh = km(kp)
    close(kh, th)
    (tpo, tl), (kpo, kl) = tpad(to), kpad(ko)
    np.testing.assert_array_equal(kl.numpy(), tl.numpy())
    close(kpo, tpo)


def test_state_dict_names_and_repr():
    tm = torch.nn.LSTM(4, 6, num_layers=2, bidirectional=True, batch_first=True, proj_size=2)
    km = nn.LSTM(4, 6, num_layers=2, bidirectional=True, batch_first=True, proj_size=2)
    assert list(km.state_dict()) == list(tm.state_dict())
    assert repr(km) == repr(tm)
    assert repr(nn.GRU(3, 4)) == repr(torch.nn.GRU(3, 4))
    bound = 1 / np.sqrt(6)
    w = km.weight_ih_l0.detach().numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    with pytest.raises(ValueError):
        km(kt(np.zeros((2, 3, 5), np.float32)))  # wrong input_size


def test_dynamic_length_under_jit_runs_the_cpp_loop():
    # jit marks a changing sequence length dynamic; the Python step loop cannot count the
    # steps then, so the module runs Kiln's C++ RNN (a while_loop) on the same parameters.
    lstm = nn.LSTM(4, 6, num_layers=2, batch_first=True)

    @kiln.jit
    def f(x):
        out, (h, c) = lstm(x)
        return out.sum() + h.sum()

    for T in (5, 6, 9):
        x = kt(rng.standard_normal((3, T, 4)).astype(np.float32))
        eager = lstm(x)
        ref = eager[0].sum() + eager[1][0].sum()
        np.testing.assert_allclose(f(x).item(), ref.item(), rtol=1e-4)
    assert "_cpp_rnn" in lstm.__dict__   # the dynamic-length path ran


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh", "rnn_relu"])
def test_rnn_sequence_is_a_torch_layer(mode, reverse, dtype):
    """kiln._C.rnn_sequence after the input projection is one torch layer direction (the reverse
    half of a bidirectional layer when reversed): outputs, final state and gradients of every
    input, at 40 units (vector blocks and a remainder) and batch 7 (a block of 6 rows and one)."""
    cls = {"lstm": "LSTM", "gru": "GRU"}.get(mode, "RNN")
    kw = {"nonlinearity": mode[4:]} if cls == "RNN" else {}
    tdt = getattr(torch, dtype)
    torch.manual_seed(3)
    tm = getattr(torch.nn, cls)(5, 40, bidirectional=reverse, **kw).to(tdt)
    d = 1 if reverse else 0
    sfx = "_l0_reverse" if reverse else "_l0"
    names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    tp = [getattr(tm, n + sfx) for n in names]
    x = torch.randn(6, 7, 5, dtype=tdt, requires_grad=True)
    h0 = torch.randn(d + 1, 7, 40, dtype=tdt, requires_grad=True)
    c0 = torch.randn(d + 1, 7, 40, dtype=tdt, requires_grad=True)
    to, ts = tm(x, (h0, c0) if mode == "lstm" else h0)
    want = to[..., 40:] if reverse else to
    r = torch.randn(want.shape, dtype=tdt)
    ((want * r).sum() + (ts[1][d].sum() if mode == "lstm" else 0)).backward()

    kp = [kt(p.detach().numpy(), True) for p in tp]
    kx, kh, kc = (kt(v.detach().numpy(), True) for v in (x, h0, c0))
    xw = kiln.linear(kx, kp[0], kp[2])
    y, cs = kiln._C.rnn_sequence(xw, kp[1], kp[3], kh[d], kc[d] if mode == "lstm" else None,
                                 mode, reverse)
    tol = 2e-5 if dtype == "float32" else 1e-10
    close(y, want, tol)
    last = 0 if reverse else 5
    close(y[last], ts[0][d] if mode == "lstm" else ts[d], tol)
    if mode == "lstm":
        close(cs[last], ts[1][d], tol)
    else:
        assert cs is None
    ((y * kt(r.numpy())).sum() + (cs[last].sum() if mode == "lstm" else 0)).backward()
    for k, t in zip(kp, tp):
        close(k.grad, t.grad, 10 * tol)
    close(kx.grad, x.grad, 10 * tol)
    close(kh.grad[d], h0.grad[d], 10 * tol)
    if mode == "lstm":
        close(kc.grad[d], c0.grad[d], 10 * tol)


def test_rnn_sequence_refuses_bad_input():
    xw = kt(np.zeros((3, 2, 24), np.float32))
    w = kt(np.zeros((24, 6), np.float32))
    for call, needle in [
            (lambda: kiln._C.rnn_sequence(xw, w, mode="lstm2"), "mode must be"),
            (lambda: kiln._C.rnn_sequence(xw, kt(np.zeros((20, 6), np.float32))), "w_hh [4 H, H]"),
            (lambda: kiln._C.rnn_sequence(xw, kt(np.zeros((20, 5), np.float32))), "w_hh [4 H, H]"),
            (lambda: kiln._C.rnn_sequence(kt(np.zeros((3, 2, 18), np.float32)), w, mode="gru"),
             "expects xw [T, B, 3 H]"),
            (lambda: kiln._C.rnn_sequence(xw, w, c0=kt(np.zeros((2, 6), np.float32)),
                                          mode="rnn_tanh"), "only an LSTM"),
            (lambda: kiln._C.rnn_sequence(xw, kt(np.zeros((24, 6)))), "dtypes differ"),
            (lambda: kiln._C.rnn_sequence(xw, w, h0=kt(np.zeros((3, 6), np.float32))),
             "h0 [B, H]"),
            (lambda: kiln._C.rnn_sequence(kt(np.zeros((0, 2, 24), np.float32)), w),
             "no time steps")]:
        with pytest.raises(kiln.Error, match=r"\[rnn_sequence\]") as e:
            call()
        assert needle in str(e.value), str(e.value)


@pytest.mark.parametrize("cls,batch", [("LSTM", 1), ("GRU", 1), ("LSTM", 9)])
def test_threaded_steps_match_torch(cls, batch):
    """Layers large enough that the kernel splits each step's units across two threads (forward
    and backward): the same outputs and gradients as torch's."""
    prev = kiln.get_num_threads()
    kiln.set_num_threads(2)
    try:
        x = rng.standard_normal((12, batch, 32)).astype(np.float32)
        run_pair(cls, {"input_size": 32, "hidden_size": 160, "num_layers": 2}, x)
    finally:
        kiln.set_num_threads(prev)


@pytest.mark.parametrize("cls,kwargs", [
    ("LSTM", {"num_layers": 2}), ("GRU", {"bidirectional": True}),
    ("RNN", {"nonlinearity": "tanh"}), ("RNN", {"nonlinearity": "relu", "batch_first": True})])
def test_gradients_of_gradients_match_torch(cls, kwargs):
    """A gradient taken with create_graph (a gradient penalty) is differentiable through the
    fused layer as through torch's: the second backward gives torch's input and parameter
    gradients (float64, 18 units: a partial block of the packed weight)."""
    torch.manual_seed(0)
    kw = {"input_size": 3, "hidden_size": 18, **kwargs}
    tm = getattr(torch.nn, cls)(**kw).double()
    km = getattr(nn, cls)(**kw).double()
    copy_weights(tm, km)
    x = rng.standard_normal((4, 2, 3))
    w = rng.standard_normal((4, 2, 18 * (2 if kw.get("bidirectional") else 1)))
    grads = []
    for lib, m in ((torch, tm), (kiln, km)):
        xt = lib.tensor(x, requires_grad=True)
        y, _ = m(xt)
        g, = lib.autograd.grad((y * lib.tensor(w)).sum(), xt, create_graph=True)
        (g * g).sum().backward()
        grads.append([xt.grad] + [p.grad for p in m.parameters()])
    for k, t in zip(grads[1], grads[0]):
        assert k is not None
        close(k, t, 1e-9)
