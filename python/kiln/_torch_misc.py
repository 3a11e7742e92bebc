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


class _GradFn:
    """The opaque autograd node of a non-leaf tensor (Kiln does not expose the tape's nodes):
    enough for `t.grad_fn is None` and printing."""

    __slots__ = ()

    def __repr__(self):
        return "<kiln autograd node>"

    def name(self):
        return "kiln autograd node"


_GRAD_FN = _GradFn()


def _grad_fn(self):
    return None if self.is_leaf or not self.requires_grad else _GRAD_FN


def _sum_to_size(self, *size):
    """Sums broadcast dims away so the result has `size` (which self broadcasts from)."""
    size = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
    shape = tuple(self.shape)
    if len(size) > len(shape):
        raise _C.Error(f"[sum_to_size] size {size} is not expandable to size {shape}")
    lead = len(shape) - len(size)
    r = self.sum(tuple(range(lead))) if lead else self
    dims = tuple(d for d, (a, b) in enumerate(zip(size, shape[lead:])) if a == 1 and b != 1)
    for d, (a, b) in enumerate(zip(size, shape[lead:])):
        if a != b and a != 1:
            raise _C.Error(f"[sum_to_size] size {size} is not expandable to size {shape}")
    return r.sum(dims, keepdim=True) if dims else r


def _unflatten(self, dim, sizes):
    shape = list(self.shape)
    dim = dim % len(shape)
    return self.reshape(*(shape[:dim] + list(sizes) + shape[dim + 1:]))


def _unfold(self, dimension, size, step):
    """Windows of `size` every `step` along `dimension`, as a new last dim (torch's unfold)."""
    dim = dimension % max(self.dim(), 1)
    n = (self.shape[dim] - size) // step + 1
    if size > self.shape[dim] or step <= 0:
        raise _C.Error(f"[unfold] maximum size for tensor at dimension {dim} is "
                       f"{self.shape[dim]} but size is {size} (step {step})")
    pieces = [self.narrow(dim, i * step, size) for i in range(n)]
    return _C.stack(pieces, dim).movedim(dim + 1, -1)


def _diff(self, n=1, dim=-1, prepend=None, append=None):
    x = self
    if prepend is not None or append is not None:
        parts = ([prepend] if prepend is not None else []) + [x] + \
            ([append] if append is not None else [])
        x = _C.cat(parts, dim)
    for _ in range(n):
        length = x.shape[dim]
        a, b = x.narrow(dim, 1, length - 1), x.narrow(dim, 0, length - 1)
        x = (a != b) if x.dtype == _C.bool else a - b
    return x


def _where(self, condition, y):
    return _C.where(condition, self, y)


def _is_signed(self):
    return self.dtype not in (_C.uint8, _C.bool)


def _split_with_sizes(self, split_sizes, dim=0):
    return self.split(list(split_sizes), dim)


def _deg2rad(self):
    return self * (math.pi / 180.0)


def _rad2deg(self):
    return self * (180.0 / math.pi)


def _is_nonzero(self):
    if self.numel() != 1:
        raise _C.Error(f"[is_nonzero] Boolean value of Tensor with {self.numel()} values is "
                       "ambiguous" if self.numel() else "[is_nonzero] Boolean value of Tensor "
                       "with no values is ambiguous")
    return bool(self.item())


# torch's alternative names for methods Kiln has.
_ALIASES = {"multiply": "mul", "subtract": "sub", "divide": "div", "true_divide": "div",
            "greater": "gt", "greater_equal": "ge", "less": "lt", "less_equal": "le",
            "not_equal": "ne", "negative": "neg", "absolute": "abs", "clip": "clamp",
            "sgn": "sign", "fix": "trunc", "arccosh": "acosh", "arcsinh": "asinh",
            "arctanh": "atanh"}


def _install_tensor_methods(T, inplace_of):
    for alias, name in _ALIASES.items():
        if alias not in T.__dict__ and hasattr(T, name):
            setattr(T, alias, getattr(T, name))
    for name, fn in (("grad_fn", property(_grad_fn)), ("sum_to_size", _sum_to_size),
                     ("unflatten", _unflatten), ("unfold", _unfold), ("diff", _diff),
                     ("where", _where), ("is_signed", _is_signed),
                     ("is_same_size", lambda self, other: tuple(self.shape) == tuple(other.shape)),
                     ("split_with_sizes", _split_with_sizes), ("deg2rad", _deg2rad),
                     ("rad2deg", _rad2deg), ("is_nonzero", _is_nonzero),
                     ("positive", _positive), ("is_inference", lambda self: False),
                     ("addmm", lambda self, mat1, mat2, *, beta=1, alpha=1:
                      _C.addmm(self, mat1, mat2, beta=beta, alpha=alpha))):
        if name not in T.__dict__:
            setattr(T, name, fn)
    # In-place forms (name_) of what now exists out of place.
    for name in list(_ALIASES) + ["eq", "ne", "gt", "ge", "lt", "le", "logical_and", "logical_or",
                                  "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
                                  "bitwise_not", "cumsum", "cumprod", "scatter_add", "arccos",
                                  "arcsin", "arctan", "arctan2", "acosh", "asinh", "atanh",
                                  "deg2rad", "rad2deg", "trunc"]:
        if hasattr(T, name) and name + "_" not in T.__dict__:
            setattr(T, name + "_", inplace_of(name))


def _positive(self):
    """torch.positive: the tensor itself; refused for bool, as torch's + operator."""
    return +self


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
    from ._tensor_api import _inplace_of
    _install_tensor_methods(T, _inplace_of)
    for alias, name in _ALIASES.items():
        if alias not in ns and name in ns:
            ns[alias] = ns[name]
    for name, fn in (("deg2rad", _deg2rad), ("rad2deg", _rad2deg), ("diff", _diff),
                     ("unflatten", _unflatten), ("sgn", lambda input: input.sign())):
        ns.setdefault(name, fn)
    if "ravel" not in T.__dict__:
        T.ravel = lambda self: self.reshape(-1)
    ns.setdefault("ravel", lambda input: input.reshape(-1))
    ns.setdefault("t", lambda input: input.t())
