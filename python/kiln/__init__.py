"""Kiln from Python: tensors and ops (eager, with autograd), static graphs (Graph, Session.run
with NumPy feeds) and @kiln.jit with guards and graph breaks on Python control flow.

    import kiln
    x = kiln.randn(4, 3)
    w = kiln.randn(3, 2, requires_grad=True)
    loss = kiln.relu(x @ w).sum()
    loss.backward()
    w.grad            # dloss/dw

Every Kiln failure raises kiln.Error (a RuntimeError) with a message that starts with
[op_name]; kiln.ValueError, kiln.TypeError and kiln.IndexError are kiln.Errors that are also
the Python built-ins of those names.
"""
import functools as _functools
import builtins as _builtins

from . import _C

__version__ = "0.1.0"


class no_grad:
    """Context manager (and decorator) in which eager ops record no autograd history."""

    def __enter__(self):
        self._prev = _C.is_grad_enabled()
        _C._set_grad_enabled(False)
        return self

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._prev)
        return False

    def __call__(self, fn):
        @_functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)
        return wrapper


class inference_mode(no_grad):
    """inference_mode(mode=True): torch.inference_mode; Kiln has no separate inference
    tensors, so it is no_grad (or nothing with mode=False)."""

    def __init__(self, mode=True):
        self._mode = _builtins.bool(mode)

    def __enter__(self):
        self._prev = _C.is_grad_enabled()
        if self._mode:
            _C._set_grad_enabled(False)
        return self

    def __call__(self, fn):
        mode = self._mode

        @_functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with inference_mode(mode):
                return fn(*args, **kwargs)
        return wrapper


class enable_grad(no_grad):
    """Context manager (and decorator) that turns autograd recording back on."""

    def __enter__(self):
        self._prev = _C.is_grad_enabled()
        _C._set_grad_enabled(True)
        return self


class set_grad_enabled(no_grad):
    """set_grad_enabled(mode): a context manager setting grad mode to `mode`."""

    def __init__(self, mode):
        self._mode = mode

    def __enter__(self):
        self._prev = _C.is_grad_enabled()
        _C._set_grad_enabled(self._mode)
        return self

    def __call__(self, fn):
        mode = self._mode

        @_functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)
        return wrapper


class autocast:
    """autocast(device_type="cpu", dtype=kiln.bfloat16, enabled=True): mixed precision in a
    scope, as torch.autocast("cpu", torch.bfloat16) (a context manager and a decorator).

    Inside it, matmul, mm, bmm, addmm, linear, conv and attention cast float32 inputs to
    bfloat16 and run bfloat16 kernels (oneDNN: AVX512-BF16 or AMX where the CPU has them);
    losses (cross_entropy, nll_loss, mse_loss, ...) cast bfloat16 inputs to float32; every
    other op runs in the promoted dtype of its inputs. The casts are recorded by autograd, so
    float32 parameters get float32 gradients; jit and graphs record them too. The state is
    per thread; scopes nest, and enabled=False turns autocast off inside one. Gradients
    (backward, grad) are computed with autocast off. No gradient scaling is needed for
    bfloat16: see docs/mixed_precision.md."""

    def __init__(self, device_type="cpu", dtype=None, enabled=True, cache_enabled=None):
        if device_type != "cpu":
            raise _C.ValueError(
                f"[autocast] device_type must be 'cpu' (Kiln runs on the CPU), got {device_type!r}")
        self._dtype = dtype
        self._enabled = _builtins.bool(enabled)  # kiln.bool is the dtype

    def __enter__(self):
        self._prev = (_C.is_autocast_enabled(), _C.get_autocast_dtype())
        _C._set_autocast(self._enabled,
                         self._dtype if self._dtype is not None else _C.bfloat16)
        return self

    def __exit__(self, *exc):
        _C._set_autocast(*self._prev)
        return False

    def __call__(self, fn):
        dtype, enabled = self._dtype, self._enabled

        @_functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with autocast("cpu", dtype=dtype, enabled=enabled):
                return fn(*args, **kwargs)
        return wrapper


def is_autocast_cpu_enabled():
    """Whether autocast is on for this thread (torch.is_autocast_cpu_enabled)."""
    return _C.is_autocast_enabled()


def get_autocast_cpu_dtype():
    """The dtype autocast casts to (torch.get_autocast_cpu_dtype)."""
    return _C.get_autocast_dtype()


def jit(fn=None, *, name=None, max_recompiles=8, dynamic_dims=True, runtime_scalars=(),
        donate=()):
    """Compiles a Python function of tensors (and lists of tensors, numbers and bools) by
    tracing it, as kiln::jit does in C++.

    - Guards: per tensor its dtype, shape and requires_grad; per number or bool its value, so
      each constant gets its own compiled version (the lecture's case 1) unless its position is
      in `runtime_scalars` (then the function receives a 0-d tensor and one version serves all).
    - A Python `if` on a traced tensor (bool(t), t.item(), float(t)) is a graph break: the piece
      so far is compiled and run, and the function goes on with the value (case 2). From then on
      the function reruns on every call (its Python code between pieces runs each time), each
      piece is compiled once per structure, and a host value fed back into ops becomes an input
      of the next piece once it changes (at most two compiles per piece).
    - `f.explain()` lists versions, guards, pieces, graph breaks and recompiles; `f.stats`
      counts hits, misses and compiles.
    - `donate`: positions of tensor arguments whose buffers results may overwrite.

    - Keyword and default arguments bind as in a plain call; an argument that is not a tensor,
      number, bool or list of tensors (None, a string) gets one compiled function per value.
    - Tensors the function reads without taking them (a closure's or a module's parameters and
      buffers, globals) are inputs of the compiled graph held by identity: gradients reach them,
      in-place updates between calls (an optimizer step) are seen without recompiling, and
      in-place writes inside the function (BatchNorm's running statistics) happen on every call.
    - `kiln.jit(module)` compiles a module's forward and behaves like the module.

    Use as @kiln.jit or @kiln.jit(name="step", donate=[0]).
    """
    from . import _jit
    opts = (max_recompiles, dynamic_dims, list(runtime_scalars), list(donate))

    def wrap(f):
        if isinstance(f, nn.Module):  # noqa: F821 (imported below, before any call)
            return _jit.JitModule(f, name, opts)
        return _jit.JitFunction(f, name or getattr(f, "__name__", "fn"), opts)
    return wrap(fn) if fn is not None else wrap


def is_tensor(obj):
    """Whether obj is a kiln.Tensor."""
    return isinstance(obj, _C.Tensor)


def numel(t):
    return t.numel()


# Everything public in the extension becomes kiln.<name>. This shadows the built-ins bool,
# float and int inside this module (kiln.bool is the dtype, as torch.bool), so it comes last.
def _export(g):
    for _name in dir(_C):
        if not _name.startswith("_") and _name not in ("nn", "optim", "io", "linalg"):
            g[_name] = getattr(_C, _name)


_export(globals())
del _export
# kiln.return_types.max & co. pickle by that name, as torch.return_types do.
_sys = __import__("sys")
_sys.modules[__name__ + ".return_types"] = return_types  # noqa: F821 (exported just above)
del _sys

# PyTorch's Python-side surface: devices, factories with device=/generator=, Tensor methods
# (to, data, normal_, ...), Generator (python/kiln/_tensor_api.py).
from . import _tensor_api  # noqa: E402
_tensor_api.install(globals())
from ._generator import default_generator  # noqa: E402
from . import autograd, cuda, backends  # noqa: E402
from .autograd import Variable  # noqa: E402,F401

from . import nn, optim, io, linalg  # noqa: E402  (they use the names above)
from . import utils, onnx, distributions, _dynamo  # noqa: E402
from .serialization import save, load  # noqa: E402,F401

# kiln.cpu.amp.autocast(dtype=..., enabled=...): torch.cpu.amp.autocast's spelling.
_types = __import__("types")


def _cpu_autocast(enabled=True, dtype=None, cache_enabled=None):
    return autocast("cpu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


cpu = _types.SimpleNamespace(amp=_types.SimpleNamespace(autocast=_cpu_autocast))
del _types
