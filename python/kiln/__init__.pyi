"""Type stubs of the kiln package: the extension's names (kiln/_C.pyi) and the Python ones."""
from typing import Any, Callable, Optional, Sequence, TypeVar

from ._C import *  # noqa: F401,F403
from . import io as io, linalg as linalg, nn as nn, optim as optim

__version__: str
F = TypeVar("F", bound=Callable[..., Any])


class no_grad:
    """Context manager (and decorator) in which eager ops record no autograd history."""
    def __enter__(self) -> "no_grad": ...
    def __exit__(self, *exc: Any) -> bool: ...
    def __call__(self, fn: F) -> F: ...


class enable_grad(no_grad): ...


class set_grad_enabled(no_grad):
    def __init__(self, mode: bool) -> None: ...


class autocast:
    """Mixed precision in a scope, as torch.autocast("cpu", torch.bfloat16)."""
    def __init__(self, device_type: str = "cpu", dtype: Any = None,
                 enabled: bool = True, cache_enabled: Optional[bool] = None) -> None: ...
    def __enter__(self) -> "autocast": ...
    def __exit__(self, *exc: Any) -> bool: ...
    def __call__(self, fn: F) -> F: ...


def is_autocast_cpu_enabled() -> bool: ...
def get_autocast_cpu_dtype() -> Any: ...


class _CpuAmp:
    @staticmethod
    def autocast(enabled: bool = True, dtype: Any = None,
                 cache_enabled: Optional[bool] = None) -> autocast: ...


class _Cpu:
    amp: _CpuAmp


cpu: _Cpu


def jit(fn: Optional[Callable[..., Any]] = None, *, name: Optional[str] = None,
        max_recompiles: int = 8, dynamic_dims: bool = True, runtime_scalars: Sequence[int] = (),
        donate: Sequence[int] = ()) -> Any:
    """Compiles a Python function by tracing: guards on tensors and Python numbers, graph breaks
    on Python control flow over tensor values, explain()."""


def is_tensor(obj: Any) -> bool: ...
def numel(t: Tensor) -> int: ...
