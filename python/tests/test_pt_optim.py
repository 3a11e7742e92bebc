# kiln.optim against torch 1.13: the same parameters, data and steps give the same weights
# for every optimizer (parameter groups included), schedules give torch's learning rates
# exactly, and param_groups edits, zero_grad(set_to_none=) and state dicts behave as torch's.
import numpy as np
import pytest

import kiln

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)
W0 = RNG.standard_normal((4, 3)).astype(np.float32)
B0 = RNG.standard_normal(3).astype(np.float32)
X = RNG.standard_normal((8, 4)).astype(np.float32)
Y = RNG.standard_normal((8, 3)).astype(np.float32)


def run(lib, make_opt, steps=6, groups=False, closure=False):
    w = lib.tensor(W0.copy(), requires_grad=True)
    b = lib.tensor(B0.copy(), requires_grad=True)
    x, y = lib.tensor(X), lib.tensor(Y)
    params = [{"params": [w]}, {"params": [b], "lr": 0.05}] if groups else [w, b]
    opt = make_opt(lib, params)

    def loss_fn():
        opt.zero_grad()
        loss = (((x @ w + b) - y) ** 2).mean()
        loss.backward()
        return loss

    for _ in range(steps):
        if closure:
            opt.step(loss_fn)
        else:
            loss_fn()
            opt.step()
    return w.detach().numpy().copy(), b.detach().numpy().copy(), opt


OPTIMIZERS = {
    "sgd": lambda L, p: L.optim.SGD(p, lr=0.1),
    "sgd_momentum_wd": lambda L, p: L.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
    "sgd_nesterov": lambda L, p: L.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
    "sgd_dampening": lambda L, p: L.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.5),
    "sgd_maximize": lambda L, p: L.optim.SGD(p, lr=0.01, maximize=True),
    "adam": lambda L, p: L.optim.Adam(p, lr=0.01),
    "adam_wd_betas": lambda L, p: L.optim.Adam(p, lr=0.01, betas=(0.8, 0.99), weight_decay=0.1),
    "adam_amsgrad": lambda L, p: L.optim.Adam(p, lr=0.01, amsgrad=True),
    "adamw": lambda L, p: L.optim.AdamW(p, lr=0.01, weight_decay=0.1),
    "rmsprop": lambda L, p: L.optim.RMSprop(p, lr=0.01),
    "rmsprop_centered_momentum": lambda L, p: L.optim.RMSprop(p, lr=0.01, momentum=0.5,
                                                             centered=True),
    "adagrad": lambda L, p: L.optim.Adagrad(p, lr=0.1, lr_decay=0.01, weight_decay=0.01),
    "adadelta": lambda L, p: L.optim.Adadelta(p, lr=1.0, rho=0.9, weight_decay=0.01),
    "adamax": lambda L, p: L.optim.Adamax(p, lr=0.01, weight_decay=0.01),
    "nadam": lambda L, p: L.optim.NAdam(p, lr=0.01, weight_decay=0.01),
    "radam": lambda L, p: L.optim.RAdam(p, lr=0.01, weight_decay=0.01),
    "rprop": lambda L, p: L.optim.Rprop(p, lr=0.01),
    "asgd": lambda L, p: L.optim.ASGD(p, lr=0.05, t0=3, weight_decay=0.01),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("groups", [False, True])
def test_optimizer_matches_torch(name, groups):
    kw, kb, _ = run(kiln, OPTIMIZERS[name], groups=groups)
    tw, tb, _ = run(torch, OPTIMIZERS[name], groups=groups)
    np.testing.assert_allclose(kw, tw, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(kb, tb, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("line_search", [None, "strong_wolfe"])
def test_lbfgs_matches_torch(line_search):
    make = lambda L, p: L.optim.LBFGS(p, lr=0.5, max_iter=5, history_size=4,  # noqa: E731
                                      line_search_fn=line_search)
    kw, kb, kopt = run(kiln, make, steps=3, closure=True)
    tw, tb, topt = run(torch, make, steps=3, closure=True)
    # One step agrees to float32 rounding (2e-7); the curvature pairs amplify those roundings
    # over the later steps.
    np.testing.assert_allclose(kw, tw, rtol=2e-3, atol=2e-4)
    np.testing.assert_allclose(kb, tb, rtol=2e-3, atol=2e-4)
    k0 = kopt.state[kopt.param_groups[0]["params"][0]]
    t0 = topt.state[topt.param_groups[0]["params"][0]]
    assert (k0["n_iter"], k0["func_evals"]) == (t0["n_iter"], t0["func_evals"])
    with pytest.raises(kiln.Error):
        kiln.optim.LBFGS([{"params": [kiln.ones(1, requires_grad=True)]},
                          {"params": [kiln.ones(1, requires_grad=True)]}])


def test_param_group_edits_take_effect():
    def make(L, p):
        opt = L.optim.SGD(p, lr=0.1, momentum=0.9)
        return opt

    def edit_run(lib):
        w = lib.tensor(W0.copy(), requires_grad=True)
        opt = make(lib, [w])
        for step in range(6):
            opt.zero_grad()
            (w * w).sum().backward()
            opt.step()
            for g in opt.param_groups:
                g["lr"] = g["lr"] * 0.5
                if step == 2:
                    g["momentum"] = 0.5
        return w.detach().numpy()

    np.testing.assert_allclose(edit_run(kiln), edit_run(torch), rtol=2e-5, atol=1e-6)


def test_add_param_group_and_checks():
    w, b = kiln.ones(2, requires_grad=True), kiln.ones(1, requires_grad=True)
    opt = kiln.optim.Adam([w], lr=0.1)
    opt.add_param_group({"params": b, "lr": 0.5})
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]
    assert opt.param_groups[1]["betas"] == (0.9, 0.999)
    with pytest.raises(kiln.Error, match="more than one"):
        opt.add_param_group({"params": [w]})
    with pytest.raises(kiln.Error, match="empty"):
        kiln.optim.SGD([], lr=0.1)
    with pytest.raises(kiln.Error, match="lr"):
        kiln.optim.SGD([{"params": [w]}])  # lr is required
    with pytest.raises(kiln.Error, match="Invalid learning rate"):
        kiln.optim.Adam([w], lr=-1.0)
    with pytest.raises(kiln.Error, match="Nesterov"):
        kiln.optim.SGD([w], lr=0.1, nesterov=True)
    with pytest.raises(TypeError):
        kiln.optim.SGD(w, lr=0.1)
    with pytest.raises(kiln.Error, match="non-leaf"):
        kiln.optim.SGD([w * 2], lr=0.1)


def test_zero_grad_set_to_none():
    w = kiln.ones(2, requires_grad=True)
    opt = kiln.optim.SGD([w], lr=0.1)
    (w * 3).sum().backward()
    opt.zero_grad()  # torch 1.13's default: zeros, kept
    assert w.grad is not None and w.grad.tolist() == [0.0, 0.0]
    (w * 3).sum().backward()
    opt.zero_grad(set_to_none=True)
    assert w.grad is None
    opt.step()  # no gradient: nothing moves
    assert w.tolist() == [1.0, 1.0]


def test_state_dict_round_trip_resumes_identically():
    def steps(opt, w, n):
        for _ in range(n):
            opt.zero_grad()
            (w * w * w).sum().backward()
            opt.step()

    for make in (lambda p: kiln.optim.Adam(p, lr=0.05), lambda p: kiln.optim.SGD(
            p, lr=0.05, momentum=0.9), lambda p: kiln.optim.Adadelta(p)):
        w1 = kiln.tensor([1.0, 0.5], requires_grad=True)
        o1 = make([w1])
        steps(o1, w1, 3)
        sd = o1.state_dict()
        assert set(sd) == {"state", "param_groups"} and sd["param_groups"][0]["params"] == [0]
        w2 = kiln.tensor(w1.tolist(), requires_grad=True)
        o2 = make([w2])
        o2.load_state_dict(sd)
        steps(o1, w1, 2)
        steps(o2, w2, 2)
        np.testing.assert_allclose(w1.detach().numpy(), w2.detach().numpy(), rtol=1e-6)
    # Torch's state_dict has the same layout (and the same state names for Adam).
    t = torch.optim.Adam([torch.ones(2, requires_grad=True)], lr=0.1)
    k = kiln.optim.Adam([kiln.ones(2, requires_grad=True)], lr=0.1)
    assert sorted(t.state_dict()["param_groups"][0]) == sorted(k.state_dict()["param_groups"][0])
    with pytest.raises(kiln.Error):
        k.load_state_dict({"state": {}, "param_groups": []})


def test_graph_form_still_works():
    g = kiln.Graph()
    x = g.placeholder(kiln.float32, [None], name="x")
    w = g.variable(kiln.zeros(1), name="w")
    loss = kiln.mean((x * w - x * 2.0) ** 2)
    step = kiln.optim.SGD(lr=0.1).minimize(loss)
    sess = kiln.Session(g)
    for _ in range(50):
        sess.run(step, {x: np.ones(4, np.float32)})
    assert abs(sess.variable("w").item() - 2.0) < 1e-3


SCHEDULES = {
    "step": lambda L, o: L.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5),
    "multistep": lambda L, o: L.optim.lr_scheduler.MultiStepLR(o, milestones=[2, 5, 5], gamma=0.1),
    "exponential": lambda L, o: L.optim.lr_scheduler.ExponentialLR(o, gamma=0.9),
    "cosine": lambda L, o: L.optim.lr_scheduler.CosineAnnealingLR(o, T_max=4, eta_min=0.01),
    "lambda": lambda L, o: L.optim.lr_scheduler.LambdaLR(o, lambda e: 1.0 / (e + 1)),
    "multiplicative": lambda L, o: L.optim.lr_scheduler.MultiplicativeLR(o, lambda e: 0.95),
    "linear": lambda L, o: L.optim.lr_scheduler.LinearLR(o, start_factor=0.25, total_iters=4),
    "constant": lambda L, o: L.optim.lr_scheduler.ConstantLR(o, factor=0.5, total_iters=3),
    "onecycle": lambda L, o: L.optim.lr_scheduler.OneCycleLR(o, max_lr=1.0, total_steps=12),
    "onecycle_linear_3phase": lambda L, o: L.optim.lr_scheduler.OneCycleLR(
        o, max_lr=[1.0, 0.5], epochs=2, steps_per_epoch=6, anneal_strategy="linear",
        three_phase=True),
    "warm_restarts": lambda L, o: L.optim.lr_scheduler.CosineAnnealingWarmRestarts(
        o, T_0=3, T_mult=2, eta_min=0.001),
    "polynomial": lambda L, o: L.optim.lr_scheduler.PolynomialLR(o, total_iters=6, power=2.0),
    "chained": lambda L, o: L.optim.lr_scheduler.ChainedScheduler([
        L.optim.lr_scheduler.ConstantLR(o, factor=0.5, total_iters=2),
        L.optim.lr_scheduler.ExponentialLR(o, gamma=0.9)]),
}

CYCLIC = {
    "triangular": dict(base_lr=0.01, max_lr=0.1, step_size_up=3),
    "triangular2": dict(base_lr=0.01, max_lr=0.1, step_size_up=2, step_size_down=3,
                        mode="triangular2"),
    "exp_range": dict(base_lr=[0.01, 0.02], max_lr=0.1, step_size_up=2, mode="exp_range",
                      gamma=0.9),
}


@pytest.mark.parametrize("name", sorted(CYCLIC))
def test_cyclic_lr_matches_torch(name):
    def lrs(lib):
        w, b = lib.ones(2, requires_grad=True), lib.ones(1, requires_grad=True)
        opt = lib.optim.SGD([{"params": [w]}, {"params": [b]}], lr=0.1, momentum=0.9)
        sched = lib.optim.lr_scheduler.CyclicLR(opt, **CYCLIC[name])
        out = []
        for _ in range(12):
            opt.step()
            sched.step()
            out.append(sched.get_last_lr() + [g["momentum"] for g in opt.param_groups])
        return out

    assert lrs(kiln) == lrs(torch)


@pytest.mark.parametrize("name", sorted(SCHEDULES))
@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
def test_schedule_matches_torch(name, opt_name):
    def lrs(lib):
        w, b = lib.ones(2, requires_grad=True), lib.ones(1, requires_grad=True)
        groups = [{"params": [w]}, {"params": [b], "lr": 0.2}]
        opt = lib.optim.SGD(groups, lr=0.1, momentum=0.9) if opt_name == "sgd" else \
            lib.optim.Adam(groups, lr=0.1)
        sched = SCHEDULES[name](lib, opt)
        out = [sched.get_last_lr()]
        for _ in range(11):
            opt.step()
            sched.step()
            out.append(sched.get_last_lr())
            out.append([g.get("momentum", g.get("betas", (None,))[0]) for g in opt.param_groups])
        return out

    assert lrs(kiln) == lrs(torch)


def test_reduce_lr_on_plateau_matches_torch():
    def lrs(lib, mode, metrics):
        opt = lib.optim.SGD([lib.ones(1, requires_grad=True)], lr=1.0)
        s = lib.optim.lr_scheduler.ReduceLROnPlateau(opt, mode=mode, factor=0.5, patience=1,
                                                     cooldown=1, min_lr=0.1)
        out = []
        for m in metrics:
            s.step(m)
            out.append(opt.param_groups[0]["lr"])
        return out

    metrics = [1.0, 0.9, 0.95, 0.97, 0.99, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1]
    for mode in ("min", "max"):
        assert lrs(kiln, mode, metrics) == lrs(torch, mode, metrics)


def test_scheduler_state_dict_and_chaining():
    def run_sched(lib):
        opt = lib.optim.SGD([lib.ones(1, requires_grad=True)], lr=1.0)
        s1 = lib.optim.lr_scheduler.StepLR(opt, 2, 0.5)
        for _ in range(3):
            opt.step()
            s1.step()
        sd = s1.state_dict()
        opt2 = lib.optim.SGD([lib.ones(1, requires_grad=True)], lr=1.0)
        s2 = lib.optim.lr_scheduler.StepLR(opt2, 2, 0.5)
        s2.load_state_dict(sd)
        return sd["last_epoch"], s2.last_epoch, s2.get_last_lr()

    assert run_sched(kiln) == run_sched(torch)


def test_frozen_then_unfrozen_parameters():
    def run_freeze(lib):
        w = lib.tensor([1.0, 2.0], requires_grad=True)
        b = lib.tensor([0.5], requires_grad=False)
        opt = lib.optim.SGD([w, b], lr=0.1, momentum=0.9)
        for step in range(4):
            if step == 2:
                b.requires_grad_(True)
            opt.zero_grad()
            ((w * w).sum() + (b * w).sum() if step < 2 else (w * w).sum() + (b * b * w).sum()
             ).backward()
            opt.step()
        return w.detach().numpy().tolist(), b.detach().numpy().tolist()

    kw, kb = run_freeze(kiln)
    tw, tb = run_freeze(torch)
    np.testing.assert_allclose(kw, tw, rtol=1e-6)
    np.testing.assert_allclose(kb, tb, rtol=1e-6)


def test_asgd_average_matches_torch():
    make = OPTIMIZERS["asgd"]
    _, _, kopt = run(kiln, make, steps=8)
    _, _, topt = run(torch, make, steps=8)
    for kp, tp in zip(kopt.param_groups[0]["params"], topt.param_groups[0]["params"]):
        np.testing.assert_allclose(kopt.state[kp]["ax"].numpy(), topt.state[tp]["ax"].numpy(),
                                   rtol=2e-5, atol=2e-6)
        assert float(kopt.state[kp]["eta"]) == float(topt.state[tp]["eta"])
