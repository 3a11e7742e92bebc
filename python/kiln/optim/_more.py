"""More of torch.optim in Python, following torch 1.13's single-tensor updates: Adamax, NAdam,
RAdam, Rprop and ASGD."""
import math

from .. import _C
from ._optimizers import _adam_checks, _check, _check_nonneg, _decay, _ema_, _zeros
from .optimizer import _PythonOptimizer


class Adamax(_PythonOptimizer):
    """Adamax(params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, foreach=None, *,
    maximize=False, differentiable=False): Adam with an infinity-norm second moment."""

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 foreach=None, *, maximize=False, differentiable=False):
        _adam_checks("Adamax", lr, eps, betas, weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable))

    def _init_state(self, p, g):
        return {"exp_avg": _zeros(p), "exp_inf": _zeros(p)}

    def _python_step(self, g):
        (b1, b2), eps, wd, lr = g["betas"], g["eps"], g["weight_decay"], g["lr"]
        for p, grad, st, step in self._param_steps(g):
            grad = _decay(grad, p, wd)
            _ema_(st["exp_avg"], grad, b1)
            st["exp_inf"].copy_(_C.maximum(st["exp_inf"] * b2, grad.abs() + eps))
            clr = lr / (1 - b1 ** step)
            p.sub_(st["exp_avg"] / st["exp_inf"] * clr)


class NAdam(_PythonOptimizer):
    """NAdam(params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
    momentum_decay=4e-3, foreach=None, *, differentiable=False): Adam with Nesterov momentum."""

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 momentum_decay=4e-3, foreach=None, *, differentiable=False):
        _adam_checks("NAdam", lr, eps, betas, weight_decay)
        _check_nonneg("NAdam", momentum_decay=momentum_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, momentum_decay=momentum_decay,
                                      foreach=foreach, differentiable=differentiable))

    def _init_state(self, p, g):
        return {"mu_product": _C.tensor(1.0), "exp_avg": _zeros(p), "exp_avg_sq": _zeros(p)}

    def _python_step(self, g):
        (b1, b2), eps, wd, lr, md = (g["betas"], g["eps"], g["weight_decay"], g["lr"],
                                     g["momentum_decay"])
        for p, grad, st, step in self._param_steps(g):
            bc2 = 1 - b2 ** step
            grad = _decay(grad, p, wd)
            mu = b1 * (1.0 - 0.5 * (0.96 ** (step * md)))
            mu_next = b1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * md)))
            # torch 1.13 keeps mu_product as a float32 tensor (products rounded to float32) and
            # takes mu_product_next as mu_product * mu * mu_next (mu twice); as it does.
            import numpy as np  # (lazily: numpy costs `import kiln` ~40 ms)
            f32 = np.float32
            mu_product = f32(float(st["mu_product"])) * f32(mu)
            st["mu_product"] = _C.tensor(float(mu_product))
            mu_product_next = float(mu_product * f32(mu) * f32(mu_next))
            mu_product = float(mu_product)
            _ema_(st["exp_avg"], grad, b1)
            _ema_(st["exp_avg_sq"], grad * grad, b2)
            denom = (st["exp_avg_sq"] / bc2).sqrt() + eps
            p.add_(grad / denom * (-lr * (1.0 - mu) / (1.0 - mu_product)))
            p.add_(st["exp_avg"] / denom * ((-lr * mu_next) / (1.0 - mu_product_next)))


class RAdam(_PythonOptimizer):
    """RAdam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, foreach=None, *,
    differentiable=False): Adam with the variance rectification term."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 foreach=None, *, differentiable=False):
        _adam_checks("RAdam", lr, eps, betas, weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, foreach=foreach,
                                      differentiable=differentiable))

    def _init_state(self, p, g):
        return {"exp_avg": _zeros(p), "exp_avg_sq": _zeros(p)}

    def _python_step(self, g):
        (b1, b2), eps, wd, lr = g["betas"], g["eps"], g["weight_decay"], g["lr"]
        rho_inf = 2 / (1 - b2) - 1
        for p, grad, st, step in self._param_steps(g):
            grad = _decay(grad, p, wd)
            _ema_(st["exp_avg"], grad, b1)
            _ema_(st["exp_avg_sq"], grad * grad, b2)
            bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
            corrected = st["exp_avg"] / bc1
            rho_t = rho_inf - 2 * step * (b2 ** step) / bc2
            if rho_t > 5.0:
                rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf /
                                 ((rho_inf - 4) * (rho_inf - 2) * rho_t))
                adaptive = math.sqrt(bc2) / (st["exp_avg_sq"].sqrt() + eps)
                p.sub_(corrected * lr * adaptive * rect)
            else:
                p.sub_(corrected * lr)


class Rprop(_PythonOptimizer):
    """Rprop(params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), foreach=None, *,
    maximize=False, differentiable=False): per-element steps grown or shrunk by the sign of
    successive gradients."""

    def __init__(self, params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), foreach=None,
                 *, maximize=False, differentiable=False):
        _check_nonneg("Rprop", lr=lr)
        _check(0.0 < etas[0] < 1.0 < etas[1], f"[Rprop] Invalid eta values: {etas[0]}, "
                                               f"{etas[1]}")
        super().__init__(params, dict(lr=lr, etas=tuple(etas), step_sizes=tuple(step_sizes),
                                      foreach=foreach, maximize=maximize,
                                      differentiable=differentiable))

    _TENSOR_STEP = False

    def _init_state(self, p, g):
        return {"prev": _zeros(p),
                "step_size": _C.full(tuple(p.shape), float(g["lr"]), dtype=p.dtype)}

    def _python_step(self, g):
        (eta_minus, eta_plus), (smin, smax) = g["etas"], g["step_sizes"]
        for p, grad, st, _ in self._param_steps(g):
            prod = (grad * st["prev"]).sign()
            one = _C.ones(tuple(p.shape), dtype=p.dtype)
            factor = _C.where(prod > 0, one * eta_plus, _C.where(prod < 0, one * eta_minus, one))
            st["step_size"].copy_((st["step_size"] * factor).clamp(smin, smax))
            grad = _C.where(prod < 0, _zeros(p), grad)
            p.sub_(grad.sign() * st["step_size"])
            st["prev"].copy_(grad)


class ASGD(_PythonOptimizer):
    """ASGD(params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0, foreach=None,
    maximize=False): SGD with a decaying step and the running average `ax` of the iterates."""

    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0,
                 foreach=None, maximize=False):
        _check_nonneg("ASGD", lr=lr, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0,
                                      weight_decay=weight_decay, foreach=foreach,
                                      maximize=maximize))

    def _init_state(self, p, g):
        return {"eta": _C.tensor(float(g["lr"])), "mu": _C.tensor(1.0), "ax": _zeros(p)}

    def _python_step(self, g):
        import numpy as np  # (lazily, as above)
        f32 = np.float32  # torch keeps eta and mu as float32 tensors
        lr, lambd, alpha, t0, wd = g["lr"], g["lambd"], g["alpha"], g["t0"], g["weight_decay"]
        for p, grad, st, step in self._param_steps(g):
            grad = _decay(grad, p, wd)
            eta, mu = float(st["eta"]), float(st["mu"])
            p.mul_(1 - lambd * eta)
            p.sub_(grad * eta)
            if mu != 1:
                st["ax"].add_((p - st["ax"]) * mu)
            else:
                st["ax"].copy_(p)
            st["eta"] = _C.tensor(float(f32(lr / math.pow((1 + lambd * lr * step), alpha))))
            st["mu"] = _C.tensor(float(f32(1 / max(1, step - t0))))
