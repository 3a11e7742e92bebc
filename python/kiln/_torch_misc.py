"""Small torch-level names PyTorch programs use around their tensors: kiln.Size, finfo/iinfo,
inf/nan, default-dtype and determinism switches, allclose/isclose/equal, typename,
kiln.version, the memory-format and layout constants. install(ns) adds them to kiln."""
import math
import types

from . import _C

_T = _C.Tensor


class Size(tuple):
    """kiln.Size([2, 3]): a tuple of sizes with numel(), as torch.Size (tensor shapes are plain
    tuples, which compare equal to it)."""

    def numel(self):
        n = 1
        for s in self:
            n *= s
        return n

    def __repr__(self):
        return f"kiln.Size({list(self)})"


class _Info:
    def __repr__(self):
        fields = ", ".join(f"{k}={v}" for k, v in self.__dict__.items() if k != "dtype")
        return f"{type(self).__name__}({fields}, dtype={self.dtype})"


def _dtype_name(d):
    return str(d).split(".")[-1]


class finfo(_Info):
    """finfo(dtype=float32): bits, eps, max, min, tiny (smallest_normal), resolution of a
    floating dtype, as torch.finfo."""

    _BF16 = dict(bits=16, eps=0.0078125, max=3.3895313892515355e38, min=-3.3895313892515355e38,
                 tiny=1.1754943508222875e-38, resolution=0.01)

    def __init__(self, type=None):  # noqa: A002 (torch's name)
        import numpy as np
        d = _C.float32 if type is None else type
        name = _dtype_name(d)
        if name == "bfloat16":
            vals = self._BF16
        elif name in ("float16", "float32", "float64"):
            f = np.finfo(name)
            vals = dict(bits=f.bits, eps=float(f.eps), max=float(f.max), min=float(f.min),
                        tiny=float(f.tiny), resolution=10.0 ** -int(f.precision))
        else:
            raise _C.TypeError(f"[finfo] expects a floating point dtype, got {d}")
        self.__dict__.update(vals)
        self.smallest_normal = self.tiny
        self.dtype = name


class iinfo(_Info):
    """iinfo(dtype): bits, max, min of an integer dtype, as torch.iinfo."""

    def __init__(self, type):  # noqa: A002
        import numpy as np
        name = _dtype_name(type)
        if name not in ("int8", "int16", "int32", "int64", "uint8"):
            raise _C.TypeError(f"[iinfo] expects an integer dtype, got {type}")
        i = np.iinfo(name)
        self.bits, self.max, self.min, self.dtype = i.bits, int(i.max), int(i.min), name


def get_default_dtype():
    """float32: the dtype of floating factories without dtype= (Kiln's default)."""
    return _C.float32


def set_default_dtype(d):
    """Kiln's floating factories and layers make float32: setting float32 is accepted, any
    other default is refused (pass dtype= to the factories instead)."""
    if d != _C.float32:
        raise _C.ValueError(
            f"[set_default_dtype] Kiln's default floating dtype is float32; {d} as the "
            "default is not supported (pass dtype= to factories, or .double() a module)")


_deterministic = [False]


def use_deterministic_algorithms(mode, *, warn_only=False):
    """Kiln's CPU kernels are deterministic whatever this says; the flag is kept for
    are_deterministic_algorithms_enabled()."""
    _deterministic[0] = bool(mode)


def are_deterministic_algorithms_enabled():
    return _deterministic[0]


def is_floating_point(input):  # noqa: A002
    return input.dtype.is_floating_point


def is_complex(input):  # noqa: A002
    return False


def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|input - other| <= atol + rtol * |other| elementwise (inf equal to itself; NaN equal
    to NaN only with equal_nan), as torch.isclose."""
    a, b = input, other if isinstance(other, _T) else _C.tensor(other, dtype=input.dtype)
    if a.dtype != b.dtype:
        raise _C.TypeError(f"[isclose] {a.dtype} and {b.dtype} tensors; expected one dtype")
    if not a.dtype.is_floating_point:
        return a == b
    a64, b64 = a.to(_C.float64), b.to(_C.float64)
    close = (a64 - b64).abs() <= atol + rtol * b64.abs()
    close = _C.logical_or(close, a64 == b64)  # infinities of one sign
    if equal_nan:
        close = _C.logical_or(close, _C.logical_and(_C.isnan(a64), _C.isnan(b64)))
    return close


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    return bool(isclose(input, other, rtol, atol, equal_nan).all())


def equal(input, other):
    """Same shape and equal elements (torch.equal)."""
    return tuple(input.shape) == tuple(other.shape) and bool((input == other).all())


def typename(obj):
    if isinstance(obj, _T):
        return obj.type()
    return type(obj).__module__ + "." + type(obj).__qualname__


class _Constant:
    def __init__(self, name):
        self._name = name

    def __repr__(self):
        return "kiln." + self._name


version = types.SimpleNamespace(__version__=None, cuda=None, hip=None, debug=False, git_version=None)


def install(ns):
    version.__version__ = ns.get("__version__")
    ns.update(Size=Size, finfo=finfo, iinfo=iinfo, inf=math.inf, nan=math.nan,
              get_default_dtype=get_default_dtype, set_default_dtype=set_default_dtype,
              use_deterministic_algorithms=use_deterministic_algorithms,
              are_deterministic_algorithms_enabled=are_deterministic_algorithms_enabled,
              is_floating_point=is_floating_point, is_complex=is_complex, isclose=isclose,
              allclose=allclose, equal=equal, typename=typename, version=version)
    for name in ("strided", "contiguous_format", "channels_last", "preserve_format"):
        ns[name] = _Constant(name)
    ns["memory_format"] = _Constant
    ns["layout"] = _Constant
    T = _T
    for name, fn in (("allclose", allclose), ("isclose", isclose), ("equal", equal),
                     ("is_complex", is_complex)):
        if name not in T.__dict__:
            setattr(T, name, fn)
    if "ravel" not in T.__dict__:
        T.ravel = lambda self: self.reshape(-1)
    ns.setdefault("ravel", lambda input: input.reshape(-1))
    ns.setdefault("t", lambda input: input.t())
