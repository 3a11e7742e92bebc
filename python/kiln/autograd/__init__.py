"""kiln.autograd: torch.autograd's namespace. Function (custom ops with a Python backward),
grad and backward with torch's arguments, Variable (torch's deprecated wrapper: the tensor
itself), the grad-mode switches, gradcheck, and functional (jacobian, hessian, vjp, jvp, ...)."""
from .. import _C
from .function import Function, FunctionCtx, once_differentiable  # noqa: F401
from . import function, functional  # noqa: F401

_T = _C.Tensor


def _as_list(x):
    if x is None:
        return None
    if isinstance(x, _T):
        return [x]
    return list(x)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         only_inputs=True, allow_unused=False, is_grads_batched=False):
    """Gradients of outputs with respect to inputs, a tuple (None where unused and
    allow_unused), as torch.autograd.grad. only_inputs is accepted (torch ignores it too)."""
    if is_grads_batched:
        raise _C.ValueError("[grad] is_grads_batched=True is not supported")
    return _C.grad(_as_list(outputs), _as_list(inputs), _as_list(grad_outputs),
                   retain_graph=retain_graph, create_graph=create_graph,
                   allow_unused=allow_unused)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False,
             grad_variables=None, inputs=None):
    """Accumulates gradients of `tensors` into the .grad of leaves (or only of `inputs`), as
    torch.autograd.backward."""
    if grad_variables is not None:
        grad_tensors = grad_variables
    retain = create_graph if retain_graph is None else retain_graph
    ts = _as_list(tensors)
    gs = _as_list(grad_tensors)
    if inputs is None:
        _C.backward(ts, gs, retain_graph=retain, create_graph=create_graph)
        return
    ins = _as_list(inputs)
    got = _C.grad(ts, ins, gs, retain_graph=retain, create_graph=create_graph,
                  allow_unused=True)
    for x, g in zip(ins, got):
        if g is None:
            continue
        x.grad = g if x.grad is None else x.grad + g


class _VariableMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, _T)

    def __call__(cls, data, requires_grad=False, volatile=False):
        if not isinstance(data, _T):
            raise _C.TypeError(f"[Variable] expected a tensor, got {type(data).__name__}")
        if requires_grad:
            data.requires_grad_(True)
        return data


class Variable(metaclass=_VariableMeta):
    """torch.autograd.Variable (deprecated in torch): Variable(t, requires_grad=...) is the
    tensor itself, with requires_grad set when asked."""


def gradcheck(func, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True,
              check_sparse_nnz=False, nondet_tol=0.0, check_undefined_grad=True,
              check_grad_dtypes=False, check_batched_grad=False,
              check_batched_forward_grad=False, check_forward_ad=False,
              check_backward_ad=True, fast_mode=False):
    """torch.autograd.gradcheck: True when analytic and numerical gradients agree; raises
    (kiln.Error) when they do not and raise_exception."""
    ins = _as_list(inputs)
    ok, msg, _ = _C.gradcheck(func, ins, eps=eps, atol=atol, rtol=rtol)
    if not ok and raise_exception:
        raise _C.Error(f"[gradcheck] {msg}")
    return bool(ok)


class detect_anomaly:
    """Accepted for torch compatibility; Kiln's backward errors already name the op."""

    def __init__(self, check_nan=True):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class set_detect_anomaly(detect_anomaly):
    def __init__(self, mode, check_nan=True):
        pass


def _grad_modes():
    import kiln
    return kiln.no_grad, kiln.enable_grad, kiln.set_grad_enabled, kiln.inference_mode


def __getattr__(name):
    if name in ("no_grad", "enable_grad", "set_grad_enabled", "inference_mode"):
        return dict(zip(("no_grad", "enable_grad", "set_grad_enabled", "inference_mode"),
                        _grad_modes()))[name]
    raise AttributeError(f"module 'kiln.autograd' has no attribute {name!r}")
