"""kiln.optim.LBFGS: torch.optim.LBFGS (limited-memory BFGS over the flattened parameters,
step(closure) re-evaluating the loss), following torch 1.13's algorithm step for step with a
fixed step size (line_search_fn=None)."""
from .. import _C
from .optimizer import Optimizer


class LBFGS(Optimizer):
    """LBFGS(params, lr=1, max_iter=20, max_eval=None, tolerance_grad=1e-7,
    tolerance_change=1e-9, history_size=100, line_search_fn=None)."""

    def __init__(self, params, lr=1, max_iter=20, max_eval=None, tolerance_grad=1e-7,
                 tolerance_change=1e-9, history_size=100, line_search_fn=None):
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        if line_search_fn not in (None,):
            raise _C.ValueError(
                f"[LBFGS] line_search_fn={line_search_fn!r} is not supported; Kiln's LBFGS "
                "takes fixed steps (line_search_fn=None)")
        super().__init__(params, dict(lr=lr, max_iter=max_iter, max_eval=max_eval,
                                      tolerance_grad=tolerance_grad,
                                      tolerance_change=tolerance_change,
                                      history_size=history_size, line_search_fn=line_search_fn))
        if len(self.param_groups) != 1:
            raise _C.ValueError("[LBFGS] LBFGS doesn't support per-parameter options "
                                "(parameter groups)")
        self._params = self.param_groups[0]["params"]

    def _gather_flat_grad(self):
        views = []
        for p in self._params:
            g = p.grad
            views.append(_C.zeros((p.numel(),), dtype=p.dtype) if g is None else g.reshape(-1))
        return _C.cat(views, 0)

    def _add_grad(self, step_size, update):
        offset = 0
        for p in self._params:
            n = p.numel()
            p.add_(update[offset:offset + n].reshape(*p.shape) * step_size)
            offset += n

    def step(self, closure):
        if closure is None:
            raise _C.ValueError("[LBFGS] step() needs a closure that reevaluates the model "
                                "and returns the loss")

        def evaluate():
            prev = _C.is_grad_enabled()
            _C._set_grad_enabled(True)
            try:
                return closure()
            finally:
                _C._set_grad_enabled(prev)

        prev_mode = _C.is_grad_enabled()
        _C._set_grad_enabled(False)
        try:
            return self._step(evaluate)
        finally:
            _C._set_grad_enabled(prev_mode)

    def _step(self, closure):
        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        history_size = group["history_size"]

        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)

        orig_loss = closure()
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1

        flat_grad = self._gather_flat_grad()
        opt_cond = float(flat_grad.abs().max()) <= tolerance_grad
        if opt_cond:
            return orig_loss

        d, t = state.get("d"), state.get("t")
        old_dirs, old_stps, ro = state.get("old_dirs"), state.get("old_stps"), state.get("ro")
        H_diag = state.get("H_diag")
        prev_flat_grad, prev_loss = state.get("prev_flat_grad"), state.get("prev_loss")

        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:
                d = -flat_grad
                old_dirs, old_stps, ro = [], [], []
                H_diag = 1
            else:
                y = flat_grad - prev_flat_grad
                s = d * t
                ys = (y * s).sum()
                if float(ys) > 1e-10:
                    if len(old_dirs) == history_size:
                        old_dirs.pop(0)
                        old_stps.pop(0)
                        ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    H_diag = ys / (y * y).sum()
                num_old = len(old_dirs)
                if "al" not in state:
                    state["al"] = [None] * history_size
                al = state["al"]
                q = -flat_grad
                for i in range(num_old - 1, -1, -1):
                    al[i] = (old_stps[i] * q).sum() * ro[i]
                    q = q - old_dirs[i] * al[i]
                d = r = q * H_diag
                for i in range(num_old):
                    be_i = (old_dirs[i] * r).sum() * ro[i]
                    r = r + old_stps[i] * (al[i] - be_i)
                d = r

            prev_flat_grad = flat_grad.clone()
            prev_loss = loss
            if state["n_iter"] == 1:  # a 0-d tensor, as torch computes it
                t = min(1.0, 1.0 / flat_grad.abs().sum()) * lr
            else:
                t = lr

            gtd = float((flat_grad * d).sum())
            if gtd > -tolerance_change:
                break

            ls_func_evals = 0
            self._add_grad(t, d)
            if n_iter != max_iter:
                loss = float(closure())
                flat_grad = self._gather_flat_grad()
                opt_cond = float(flat_grad.abs().max()) <= tolerance_grad
                ls_func_evals = 1
            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals

            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if float((d * t).abs().max()) <= tolerance_change:
                break
            if abs(loss - prev_loss) < tolerance_change:
                break

        state.update(d=d, t=t, old_dirs=old_dirs, old_stps=old_stps, ro=ro, H_diag=H_diag,
                     prev_flat_grad=prev_flat_grad, prev_loss=prev_loss)
        return orig_loss
