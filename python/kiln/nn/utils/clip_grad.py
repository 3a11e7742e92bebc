"""clip_grad_norm_ and clip_grad_value_ with torch.nn.utils' arguments and results: gradients
are scaled (or clamped) in place and the total norm is returned as a tensor."""
import math
import warnings

from ... import _C, no_grad


def _grads(parameters):
    if isinstance(parameters, _C.Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def _norm(t, norm_type):
    from ... import linalg
    return linalg.vector_norm(t.reshape(-1), norm_type)


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False):
    """Scales all gradients together so that their joint norm is at most max_norm; returns the
    norm before clipping (norm_type may be inf)."""
    grads = _grads(parameters)
    max_norm, norm_type = float(max_norm), float(norm_type)
    if not grads:
        return _C.tensor(0.0)
    with no_grad():
        if math.isinf(norm_type):
            norms = [g.detach().abs().max() for g in grads]
            total = norms[0] if len(norms) == 1 else _C.stack(norms).max()
        else:
            total = _norm(_C.stack([_norm(g.detach(), norm_type) for g in grads]), norm_type)
        tv = float(total.item())
        if error_if_nonfinite and (math.isnan(tv) or math.isinf(tv)):
            raise _C.Error(f"[clip_grad_norm_] the total norm of order {norm_type} of the "
                           f"gradients is non-finite ({tv}), so it cannot be clipped; "
                           f"error_if_nonfinite=False turns this error off")
        coef = min(max_norm / (tv + 1e-6), 1.0)
        # torch multiplies by the clamped coefficient even when it is 1.
        for g in grads:
            g.detach().copy_(g.detach() * coef)
    return total


def clip_grad_norm(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False):
    warnings.warn("torch.nn.utils.clip_grad_norm is now deprecated in favor of "
                  "torch.nn.utils.clip_grad_norm_.", stacklevel=2)
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite)


def clip_grad_value_(parameters, clip_value):
    """Clamps every gradient element to [-clip_value, clip_value] in place."""
    clip_value = float(clip_value)
    with no_grad():
        for g in _grads(parameters):
            g.detach().copy_(_C.clamp(g.detach(), -clip_value, clip_value))
