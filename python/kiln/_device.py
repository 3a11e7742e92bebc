"""kiln.device and the one place that maps a device to the backend that serves it.

Every tensor lives on the CPU today. User code written for torch (`torch.device("cuda" if
torch.cuda.is_available() else "cpu")`, `x.to(device)`, `zeros(3, device=device)`) runs
unchanged: the CPU backend serves "cpu", and any other device type names a backend Kiln was
built without, which raises a kiln.Error saying so. A CUDA backend registers itself in
`_BACKENDS` (with `transfer` and `check`) and nothing in user code changes.
"""
from . import _C

# The device types torch 1.13 parses (torch.device("xla") is valid even without XLA).
_KNOWN_TYPES = ("cpu", "cuda", "mps", "meta", "xpu", "mkldnn", "opengl", "opencl", "ideep",
                "hip", "ve", "fpga", "ort", "xla", "lazy", "vulkan", "hpu", "ipu")


class device:
    """device(type, index=None): where a tensor lives, as torch.device. Accepts "cpu",
    "cuda", "cuda:1", device("cuda", 1), another device, or an int (a CUDA ordinal)."""

    __slots__ = ("_type", "_index")

    def __init__(self, type, index=None):  # noqa: A002 (torch's argument name)
        if isinstance(type, device):
            if index is not None:
                raise _C.TypeError("[device] device(device, index) takes no index")
            self._type, self._index = type._type, type._index
            return
        if isinstance(type, int) and not isinstance(type, bool):
            type, index = "cuda", type
        if not isinstance(type, str):
            raise _C.TypeError(
                f"[device] expected a device string, a device or an int, got "
                f"{_builtin_type(type).__name__}")
        name = type
        if ":" in name:
            if index is not None:
                raise _C.ValueError(
                    f"[device] type {name!r} already names an index; do not pass index={index}")
            name, _, idx = name.partition(":")
            if not idx.isdigit():
                raise _C.ValueError(f"[device] invalid device string: {type!r}")
            index = int(idx)
        if name not in _KNOWN_TYPES:
            raise _C.ValueError(
                f"[device] expected one of {', '.join(_KNOWN_TYPES)} device type at start of "
                f"device string: {type!r}")
        if index is not None:
            index = int(index)
            if index < 0:
                raise _C.ValueError(f"[device] device index must be >= 0, got {index}")
        self._type, self._index = name, index

    @property
    def type(self):
        return self._type

    @property
    def index(self):
        return self._index

    def __str__(self):
        return self._type if self._index is None else f"{self._type}:{self._index}"

    def __repr__(self):
        if self._index is None:
            return f"device(type={self._type!r})"
        return f"device(type={self._type!r}, index={self._index})"

    def __eq__(self, other):
        if isinstance(other, str):
            try:
                other = device(other)
            except ValueError:
                return False
        if not isinstance(other, device):
            return NotImplemented
        return self._type == other._type and self._index == other._index

    def __hash__(self):
        return hash((self._type, self._index))

    def __reduce__(self):
        return (device, (self._type, self._index))

    # `with torch.device("cpu"):` is torch 2.0; accepting it costs nothing.
    def __enter__(self):
        _backend(self)
        return self

    def __exit__(self, *exc):
        return False


_builtin_type = type
CPU = device("cpu")


class _CpuBackend:
    """Tensors already live here: a transfer is the tensor itself (a copy when asked)."""

    name = "cpu"

    @staticmethod
    def check(dev):
        if dev.index not in (None, 0):
            raise _C.Error(f"[device] there is one CPU device (index 0), got {dev}")

    @staticmethod
    def transfer(t, copy):
        return t.clone() if copy else t


# device type -> backend. The single point a new backend (CUDA) plugs into.
_BACKENDS = {"cpu": _CpuBackend}


def _backend(dev):
    """The backend serving `dev` (a device, a string or an int); kiln.Error if none does."""
    if not isinstance(dev, device):
        dev = device(dev)
    b = _BACKENDS.get(dev.type)
    if b is None:
        hint = (" (kiln.cuda.is_available() is False; pick the device with "
                "`device = kiln.device('cuda' if kiln.cuda.is_available() else 'cpu')`)"
                if dev.type == "cuda" else "")
        raise _C.Error(
            f"[device] device {str(dev)!r} is not available: this Kiln build has no "
            f"{dev.type} backend; tensors live on the CPU{hint}")
    b.check(dev)
    return b


def _check_device(dev, op):
    """For factories' device= argument: None or a device the build serves."""
    if dev is None:
        return
    try:
        _backend(dev)
    except _C.Error as e:
        raise _C.Error(f"[{op}] {str(e)[len('[device] '):]}") from None
