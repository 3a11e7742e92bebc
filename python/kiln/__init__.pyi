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


# ---- PyTorch's Python-side surface (kiln/_tensor_api.py, _device.py, _generator.py, ...) ----
from . import (autograd as autograd, backends as backends, cuda as cuda, onnx as onnx,  # noqa: E402
               utils as utils)
from ._device import device as device  # noqa: E402
from ._generator import Generator as Generator, default_generator as default_generator  # noqa: E402
from ._torch_misc import (Size as Size, finfo as finfo, iinfo as iinfo,  # noqa: E402
                          allclose as allclose, isclose as isclose, equal as equal,
                          get_default_dtype as get_default_dtype,
                          set_default_dtype as set_default_dtype)
from .autograd import Variable as Variable  # noqa: E402
from .serialization import save as save, load as load  # noqa: E402


class inference_mode(no_grad):
    def __init__(self, mode: bool = True) -> None: ...


def manual_seed(seed: int) -> Generator: ...
def initial_seed() -> int: ...
def seed() -> int: ...
def randperm(n: int, *, generator: Optional[Generator] = None, out: Any = None,
             dtype: Any = None, layout: Any = None, device: Any = None,
             requires_grad: bool = False, pin_memory: bool = False) -> Tensor: ...
def multinomial(input: Tensor, num_samples: int, replacement: bool = False, *,
                generator: Optional[Generator] = None, out: Any = None) -> Tensor: ...
def normal(mean: Any = 0.0, std: Any = 1.0, size: Any = None, *,
           generator: Optional[Generator] = None, out: Any = None, dtype: Any = None,
           layout: Any = None, device: Any = None, pin_memory: bool = False,
           requires_grad: bool = False) -> Tensor: ...
def bernoulli(input: Tensor, p: Optional[float] = None, *,
              generator: Optional[Generator] = None, out: Any = None) -> Tensor: ...
def rand_like(input: Tensor, **kwargs: Any) -> Tensor: ...
def randn_like(input: Tensor, **kwargs: Any) -> Tensor: ...
def randint_like(input: Tensor, *args: Any, **kwargs: Any) -> Tensor: ...
def logspace(start: float, end: float, steps: int, base: float = 10.0,
             **kwargs: Any) -> Tensor: ...


FloatTensor: Any
DoubleTensor: Any
HalfTensor: Any
BFloat16Tensor: Any
LongTensor: Any
IntTensor: Any
ShortTensor: Any
CharTensor: Any
ByteTensor: Any
BoolTensor: Any
