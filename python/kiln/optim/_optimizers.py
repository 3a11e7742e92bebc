"""The optimizers of kiln.optim with torch.optim's signatures: SGD, Adam, AdamW, RMSprop (on
Kiln's C++ optimizers, see optimizer.py), Adagrad, Adadelta and LBFGS (Python updates written
with tensor ops, as torch 1.13's single-tensor implementations)."""
import math

from .. import _C
from .optimizer import _EngineOptimizer, _PerParameter, _PythonOptimizer, required

_C_optim = _C.optim


def _check(cond, msg):
    if not cond:
        raise _C.ValueError(msg)


_WHAT = {"lr": "learning rate", "eps": "epsilon value"}


def _check_nonneg(name, **values):
    """torch's argument checks, in order: each value >= 0, else "[name] Invalid <what>: v"."""
    for key, v in values.items():
        _check(0.0 <= v, f"[{name}] Invalid {_WHAT.get(key, key + ' value')}: {v}")


def _adam_checks(name, lr, eps, betas, weight_decay):
    _check_nonneg(name, lr=lr, eps=eps)
    _check(0.0 <= betas[0] < 1.0, f"[{name}] Invalid beta parameter at index 0: {betas[0]}")
    _check(0.0 <= betas[1] < 1.0, f"[{name}] Invalid beta parameter at index 1: {betas[1]}")
    _check_nonneg(name, weight_decay=weight_decay)


def _zeros(p):
    return _C.zeros(tuple(p.shape), dtype=p.dtype)


def _decay(grad, p, weight_decay):
    """The gradient with L2 weight decay added (torch's coupled form)."""
    return grad + p * weight_decay if weight_decay != 0 else grad


def _ema_(avg, x, beta):
    """avg <- beta avg + (1 - beta) x, in place: the running moments."""
    avg.mul_(beta).add_(x * (1 - beta))


class SGD(_PerParameter, _EngineOptimizer):
    """SGD(params, lr=required, momentum=0, dampening=0, weight_decay=0, nesterov=False, *,
    maximize=False, foreach=None, differentiable=False)."""
    _GRAPH = "SGD"

    _HYPER = ("momentum", "weight_decay", "nesterov")
    _SLOTS = {"momentum": "momentum_buffer"}

    def __init__(self, params, lr=required, momentum=0, dampening=0, weight_decay=0,
                 nesterov=False, *, maximize=False, foreach=None, differentiable=False):
        if lr is not required:
            _check_nonneg("SGD", lr=lr)
        _check_nonneg("SGD", momentum=momentum, weight_decay=weight_decay)
        _check(not nesterov or (momentum > 0 and dampening == 0),
               "[SGD] Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize, foreach=foreach,
                                      differentiable=differentiable))

    def _python_ok(self, g):
        return g["dampening"] == 0 and not g["maximize"]

    def _make(self, params, g):
        return _C_optim.SGD(params, lr=g["lr"], momentum=g["momentum"],
                            weight_decay=g["weight_decay"], nesterov=g["nesterov"])

    def _python_step(self, g):
        lr, mom, damp, wd = g["lr"], g["momentum"], g["dampening"], g["weight_decay"]
        for p, d in self._param_grads(g):
            d = _decay(d, p, wd)
            if mom != 0:
                st = self.state[p]
                buf = st.get("momentum_buffer")
                if buf is None:
                    buf = st["momentum_buffer"] = d.clone().detach()
                else:
                    buf.mul_(mom).add_(d * (1 - damp))
                d = d + buf * mom if g["nesterov"] else buf
            p.sub_(d * lr)


class Adam(_PerParameter, _EngineOptimizer):
    """Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, *,
    foreach=None, maximize=False, capturable=False, differentiable=False, fused=False)."""
    _GRAPH = "Adam"

    _HYPER = ("betas", "eps", "weight_decay")
    _SLOTS = {"m": "exp_avg", "v": "exp_avg_sq"}
    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False, fused=False):
        _adam_checks(type(self).__name__, lr, eps, betas, weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable, fused=fused))

    def _python_ok(self, g):
        return not g["amsgrad"] and not g["maximize"]

    def _make(self, params, g):
        b = tuple(float(x) for x in g["betas"])
        if self._decoupled:
            return _C_optim.AdamW(params, lr=g["lr"], betas=b, eps=g["eps"],
                                  weight_decay=g["weight_decay"])
        return _C_optim.Adam(params, lr=g["lr"], betas=b, eps=g["eps"],
                             weight_decay=g["weight_decay"])

    def _init_state(self, p, g):
        st = {"exp_avg": _zeros(p), "exp_avg_sq": _zeros(p)}
        if g["amsgrad"]:
            st["max_exp_avg_sq"] = _zeros(p)
        return st

    def _python_step(self, g):
        lr, (b1, b2), eps, wd = g["lr"], g["betas"], g["eps"], g["weight_decay"]
        for p, grad, st, step in self._param_steps(g):
            if not self._decoupled:
                grad = _decay(grad, p, wd)
            elif wd != 0:
                p.mul_(1 - lr * wd)
            m, v = st["exp_avg"], st["exp_avg_sq"]
            _ema_(m, grad, b1)
            _ema_(v, grad * grad, b2)
            bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
            if g["amsgrad"]:
                mx = st["max_exp_avg_sq"]
                mx.copy_(_C.maximum(mx, v))
                v = mx
            denom = v.sqrt() / math.sqrt(bc2) + eps
            p.sub_(m / denom * (lr / bc1))


class AdamW(Adam):
    """AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
    amsgrad=False, *, maximize=False, ...): decoupled weight decay."""

    _decoupled = True
    _GRAPH = "AdamW"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, foreach=None, capturable=False,
                 differentiable=False, fused=False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach,
                         maximize=maximize, capturable=capturable,
                         differentiable=differentiable, fused=fused)


class RMSprop(_EngineOptimizer):
    """RMSprop(params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
    centered=False, foreach=None, maximize=False, differentiable=False)."""
    _GRAPH = "RMSprop"

    _HYPER = ("alpha", "eps", "weight_decay", "momentum", "centered")
    _SLOTS = {"square_avg": "square_avg", "momentum_buffer": "momentum_buffer",
              "grad_avg": "grad_avg"}

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
                 centered=False, foreach=None, maximize=False, differentiable=False):
        _check_nonneg("RMSprop", lr=lr, eps=eps, momentum=momentum, weight_decay=weight_decay,
                      alpha=alpha)
        if maximize:
            raise _C.ValueError("[RMSprop] maximize=True is not supported")
        super().__init__(params, dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps,
                                      centered=centered, weight_decay=weight_decay,
                                      foreach=foreach, maximize=maximize,
                                      differentiable=differentiable))

    def _make(self, params, g):
        return _C_optim.RMSprop(params, lr=g["lr"], alpha=g["alpha"], eps=g["eps"],
                                weight_decay=g["weight_decay"], momentum=g["momentum"],
                                centered=g["centered"])


class Adagrad(_PythonOptimizer):
    """Adagrad(params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0,
    eps=1e-10, foreach=None, *, maximize=False, differentiable=False)."""

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0,
                 initial_accumulator_value=0, eps=1e-10, foreach=None, *, maximize=False,
                 differentiable=False):
        _check_nonneg("Adagrad", lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                      initial_accumulator_value=initial_accumulator_value, eps=eps)
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, eps=eps,
                                      weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value,
                                      foreach=foreach, maximize=maximize,
                                      differentiable=differentiable))
        # torch makes Adagrad's state here rather than on the first step.
        for g in self.param_groups:
            for p in g["params"]:
                self.state[p] = {"step": _C.tensor(0.0), **self._init_state(p, g)}

    def _init_state(self, p, g):
        return {"sum": _C.full(tuple(p.shape), float(g["initial_accumulator_value"]),
                               dtype=p.dtype)}

    def _python_step(self, g):
        for p, grad, st, step in self._param_steps(g):
            grad = _decay(grad, p, g["weight_decay"])
            clr = g["lr"] / (1 + (step - 1) * g["lr_decay"])
            st["sum"].add_(grad * grad)
            p.sub_(grad / (st["sum"].sqrt() + g["eps"]) * clr)


class Adadelta(_PythonOptimizer):
    """Adadelta(params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *,
    maximize=False, differentiable=False)."""

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *,
                 maximize=False, differentiable=False):
        _check_nonneg("Adadelta", lr=lr)
        _check(0.0 <= rho <= 1.0, f"[Adadelta] Invalid rho value: {rho}")
        _check_nonneg("Adadelta", eps=eps, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay,
                                      maximize=maximize, foreach=foreach,
                                      differentiable=differentiable))

    _TENSOR_STEP = False

    def _init_state(self, p, g):
        return {"square_avg": _zeros(p), "acc_delta": _zeros(p)}

    def _python_step(self, g):
        lr, rho, eps, wd = g["lr"], g["rho"], g["eps"], g["weight_decay"]
        for p, grad, st, _ in self._param_steps(g):
            grad = _decay(grad, p, wd)
            sq, acc = st["square_avg"], st["acc_delta"]
            _ema_(sq, grad * grad, rho)
            delta = (acc + eps).sqrt() / (sq + eps).sqrt() * grad
            _ema_(acc, delta * delta, rho)
            p.sub_(delta * lr)


from ._lbfgs import LBFGS  # noqa: E402,F401
