"""The torch.Tensor surface that lives in Python: device placement (Tensor.device, to, cpu,
cuda), .data, view_as and friends, in-place forms of elementwise ops, __format__ of 0-d
tensors, indexing with a range, FloatTensor & co. and Tensor.type, deepcopy and pickling, and
the factories with torch's keyword arguments (device=, dtype=, requires_grad=, generator=,
out=) and the *_like family; random sampling (randperm, normal_, ...) is in _random.py.

install(namespace) patches kiln.Tensor and returns the factories for kiln/__init__.py to export.
"""
import builtins
import numbers

from . import _C
from ._device import CPU, _backend, _check_device, device
from ._generator import Generator, _using, manual_seed, initial_seed, seed
from ._random import (randperm, multinomial, normal, bernoulli, _shape, _normal_, _uniform_,
                      _exponential_, _cauchy_, _log_normal_, _geometric_, _bernoulli_, _random_,
                      _bernoulli_method, _multinomial_method)

_T = _C.Tensor
_dtype = type(_C.float32)
_bool, _int, _float = builtins.bool, builtins.int, builtins.float


def _has(name):
    return name in _T.__dict__


# ---- factories ------------------------------------------------------------------------------

def _finish(r, requires_grad, out, op):
    if requires_grad:
        r.requires_grad_(True)
    if out is not None:
        if tuple(out.shape) != tuple(r.shape):
            raise _C.ValueError(
                f"[{op}] out= has shape {tuple(out.shape)} but the result has shape "
                f"{tuple(r.shape)}; Kiln does not resize out= tensors")
        out.copy_(r)
        return out
    return r


def _sizes(size, op):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        return tuple(size[0])
    for s in size:
        if not isinstance(s, numbers.Integral):
            raise _C.TypeError(
                f"[{op}] size must be ints or one tuple of ints, got {type(s).__name__}")
    return tuple(size)


_SymInt = _C.SymInt


def _has_sym(size):
    """Whether a size argument holds a symbolic size (a dynamic dim under kiln.jit)."""
    for s in size:
        if type(s) is _SymInt:
            if s.is_symbolic:
                return True
        elif type(s) in (tuple, list) and _has_sym(s):
            return True
    return False


_FILL = {"zeros": 0.0, "ones": 1.0, "empty": 0.0}


def _sized_factory(name):
    raw = getattr(_C, name)
    fill = _FILL.get(name)

    def factory(*size, out=None, dtype=None, layout=None, device=None, requires_grad=False,
                pin_memory=False, generator=None, memory_format=None, **kw):
        if fill is not None and _has_sym(size):  # zeros(B, T) with T a dynamic size
            shape = size[0] if len(size) == 1 and type(size[0]) in (tuple, list) else size
            r = _C._full_symint(tuple(shape), fill, dtype if dtype is not None else _C.float32)
            return _finish(r, requires_grad, out, name)
        if not kw and device is None and generator is None and out is None:
            return raw(*size, dtype=dtype, requires_grad=requires_grad)  # the common call
        if "size" in kw:
            size = (kw.pop("size"),)
        if kw:
            raise _C.TypeError(f"[{name}] unexpected keyword argument {next(iter(kw))!r}")
        if device is not None:
            _check_device(device, name)
        shape = _sizes(size, name)
        if generator is not None:
            with _using(generator):
                r = raw(shape, dtype=dtype)
        else:
            r = raw(shape, dtype=dtype)
        return _finish(r, requires_grad, out, name)

    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = (f"{name}(*size, out=None, dtype=None, layout=None, device=None, "
                       f"requires_grad=False): as torch.{name}. {raw.__doc__ or ''}")
    return factory


def tensor(data, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """A tensor holding a copy of `data` (torch.tensor)."""
    _check_device(device, "tensor")
    if isinstance(data, (list, tuple)) and data and any(isinstance(e, _T) for e in data):
        data = [e.tolist() if isinstance(e, _T) else e for e in data]
    return _C.tensor(data, dtype=dtype, requires_grad=requires_grad)


def as_tensor(data, dtype=None, device=None):
    """Shares memory with a tensor or NumPy array when it can (torch.as_tensor)."""
    _check_device(device, "as_tensor")
    return _C.as_tensor(data, dtype=dtype)


def full(size, fill_value, *, out=None, dtype=None, layout=None, device=None,
         requires_grad=False, pin_memory=False):
    """torch.full: the dtype follows fill_value (bool, int64, float32) unless given."""
    _check_device(device, "full")
    if dtype is None:
        if isinstance(fill_value, _bool):
            dtype = _C.bool
        elif isinstance(fill_value, numbers.Integral):
            dtype = _C.int64
    if isinstance(size, (numbers.Integral, _SymInt)):
        size = (size,)
    if _has_sym(size):
        if isinstance(fill_value, _T):
            fill_value = fill_value.item()
        r = _C._full_symint(tuple(size), float(fill_value),
                            dtype if dtype is not None else _C.float32)
        return _finish(r, requires_grad, out, "full")
    return _finish(_C.full(tuple(size), fill_value, dtype=dtype), requires_grad, out, "full")


def arange(start=0, end=None, step=1, *, out=None, dtype=None, layout=None, device=None,
           requires_grad=False):
    _check_device(device, "arange")
    if isinstance(start, _T):
        start = start.item()
    if isinstance(end, _T):
        end = end.item()
    if isinstance(step, _T):
        step = step.item()
    if _has_sym((start, end, step)):  # arange(T) with T a dynamic size: one range per call
        if end is None:
            start, end = 0, start
        r = _C._arange_symint(start, end, step, dtype if dtype is not None else _C.int64)
        return _finish(r, requires_grad, out, "arange")
    return _finish(_C.arange(start, end, step, dtype=dtype), requires_grad, out, "arange")


def linspace(start, end, steps, *, out=None, dtype=None, layout=None, device=None,
             requires_grad=False):
    _check_device(device, "linspace")
    return _finish(_C.linspace(_float(start), _float(end), _int(steps), dtype=dtype),
                   requires_grad, out, "linspace")


def logspace(start, end, steps, base=10.0, *, out=None, dtype=None, layout=None, device=None,
             requires_grad=False):
    """torch.logspace: base ** linspace(start, end, steps)."""
    _check_device(device, "logspace")
    exps = _C.linspace(_float(start), _float(end), _int(steps), dtype=_C.float64)
    r = _C.pow(_C.full(tuple(exps.shape), _float(base), dtype=_C.float64), exps)
    return _finish(r.to(dtype or _C.float32), requires_grad, out, "logspace")


def eye(n, m=None, *, out=None, dtype=None, layout=None, device=None, requires_grad=False):
    _check_device(device, "eye")
    return _finish(_C.eye(n, m, dtype=dtype), requires_grad, out, "eye")


def scalar_tensor(s, *, dtype=None, layout=None, device=None, requires_grad=False,
                  pin_memory=False):
    _check_device(device, "scalar_tensor")
    return _finish(_C.scalar_tensor(s, dtype=dtype), requires_grad, None, "scalar_tensor")


def randint(*args, size=None, generator=None, out=None, dtype=None, layout=None, device=None,
            requires_grad=False, pin_memory=False, low=None, high=None):
    """randint(high, size) or randint(low, high, size), as torch.randint (int64 by default)."""
    pos = list(args)
    if size is None and pos and isinstance(pos[-1], (tuple, list)):
        size = pos.pop()
    if high is None and pos:
        high = pos.pop()
    if low is None:
        low = pos.pop() if pos else 0
    if pos or high is None or size is None:
        raise _C.TypeError(
            "[randint] expected randint(high, size) or randint(low, high, size), got "
            f"{len(args)} positional arguments")
    _check_device(device, "randint")
    if _int(high) <= _int(low):
        raise _C.ValueError(
            f"[randint] random_ expects 'from' to be less than 'to', but got from={low} >= "
            f"to={high}")
    with _using(generator):
        r = _C.randint(_int(low), _int(high), tuple(size), dtype=dtype)
    return _finish(r, requires_grad, out, "randint")


def _as(t, d):
    return t if t.dtype == d else t.to(d)


def _full_like(t, d, v):
    # The fill value in the result's dtype (an int tensor filled with 2.5 holds 2, as torch).
    if t.dtype == d:
        return _C.full_like(t, v)
    return _C.full_like(_C.zeros_like(t).to(d), v)


def _like(name, make):
    def like(input, *args, dtype=None, layout=None, device=None, requires_grad=False,
             memory_format=None, generator=None, **kw):
        _check_device(device, name)
        d = input.dtype if dtype is None else dtype
        with _using(generator):
            r = make(input, d, *args, **kw)
        return _finish(r, requires_grad, None, name)

    like.__name__ = like.__qualname__ = name
    like.__doc__ = f"{name}(input, ...): as torch.{name} (dtype, device, requires_grad)."
    return like


def _randint_like(t, d, low_or_high, high=None):
    low, hi = (0, low_or_high) if high is None else (low_or_high, high)
    return _C.randint(_int(low), _int(hi), tuple(t.shape), dtype=d)


def _float_only(op, d):
    if not d.is_floating_point:
        raise _C.TypeError(f"[{op}] expects a floating point dtype, got {d}")


def _rand_like(t, d):
    _float_only("rand_like", d)
    return _C.rand(tuple(t.shape), dtype=d)


def _randn_like(t, d):
    _float_only("randn_like", d)
    return _C.randn(tuple(t.shape), dtype=d)


# ---- Tensor methods -------------------------------------------------------------------------

_to_dtype = _T.to  # the binding: to(dtype)


def _to(self, *args, **kwargs):
    """to(dtype), to(device, dtype=None), to(other), each with non_blocking= and copy=, as
    torch.Tensor.to. Returns self when nothing changes (unless copy=True)."""
    dev = dtype = None
    pos = list(args)
    if pos:
        a = pos.pop(0)
        if isinstance(a, _dtype):
            dtype = a
        elif isinstance(a, _T):
            dtype, dev = a.dtype, CPU
        elif a is not None:
            dev = a
            if pos and (isinstance(pos[0], _dtype) or pos[0] is None):
                dtype = pos.pop(0)
    non_blocking = kwargs.pop("non_blocking", pos.pop(0) if pos else False)
    copy = kwargs.pop("copy", pos.pop(0) if pos else False)
    kwargs.pop("memory_format", None)
    if "device" in kwargs:
        dev = kwargs.pop("device")
    if "dtype" in kwargs:
        dtype = kwargs.pop("dtype")
    if pos or kwargs:
        raise _C.TypeError(f"[to] unexpected arguments {pos or list(kwargs)}; expected "
                           "to(dtype), to(device, dtype), to(tensor), non_blocking=, copy=")
    del non_blocking  # every transfer is synchronous on the CPU
    r, copied = self, False
    if dtype is not None and dtype != self.dtype:
        r, copied = _to_dtype(self, dtype), True
    if dev is not None:
        r = _backend(dev).transfer(r, copy and not copied)
    elif copy and not copied:
        r = r.clone()
    return r


def _cpu(self, memory_format=None):
    return self


def _cuda(self, device=None, non_blocking=False, memory_format=None):
    _backend("cuda" if device is None or isinstance(device, numbers.Integral) else device)


def _get_device(self):
    return -1


def _data_get(self):
    return self.detach()


def _data_set(self, value):
    if not isinstance(value, _T):
        raise _C.TypeError(f"[data] expected a tensor, got {type(value).__name__}")
    if tuple(value.shape) != tuple(self.shape) or value.dtype != self.dtype:
        raise _C.ValueError(
            f"[data] Kiln replaces .data in place: the new value must have the tensor's shape "
            f"{tuple(self.shape)} and dtype {self.dtype}, got {tuple(value.shape)} "
            f"{value.dtype}")
    prev = _C.is_grad_enabled()
    _C._set_grad_enabled(False)
    try:
        self.copy_(value)
    finally:
        _C._set_grad_enabled(prev)


def _format(self, spec):
    if self.dim() == 0 and not self.is_symbolic:
        return self.item().__format__(spec)
    return object.__format__(self, spec)


def _view_as(self, other):
    return self.view(*other.shape)


def _reshape_as(self, other):
    return self.reshape(*other.shape)


def _type_as(self, other):
    return self.to(other.dtype)


def _new(make, fill=0.0):
    def new(self, *size, dtype=None, device=None, requires_grad=False, layout=None,
            pin_memory=False):
        _check_device(device, make.__name__)
        if _has_sym(size):  # x.new_zeros(B, T) with T a dynamic size under kiln.jit
            shape = size[0] if len(size) == 1 and type(size[0]) in (tuple, list) else size
            r = _C._full_symint(tuple(shape), fill, dtype or self.dtype)
            return _finish(r, requires_grad, None, "new")
        shape = _sizes(size, "new")
        return _finish(make(shape, dtype or self.dtype), requires_grad, None, "new")
    return new


def _new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False,
              layout=None, pin_memory=False):
    _check_device(device, "new_full")
    if _has_sym(size):
        r = _C._full_symint(tuple(size), float(fill_value), dtype or self.dtype)
        return _finish(r, requires_grad, None, "new_full")
    return _finish(_C.full(tuple(size), fill_value, dtype=dtype or self.dtype), requires_grad,
                   None, "new_full")


def _new_tensor(self, data, dtype=None, device=None, requires_grad=False, layout=None,
                pin_memory=False):
    _check_device(device, "new_tensor")
    if isinstance(data, _T):
        data = data.detach().clone()
        return _finish(data.to(dtype or data.dtype), requires_grad, None, "new_tensor")
    return tensor(data, dtype=dtype or self.dtype, requires_grad=requires_grad)


def _legacy_new(self, *args, device=None):
    """Tensor.new (torch's legacy constructor): new(*sizes) uninitialised, new(data) a copy,
    new() empty; the dtype is self's."""
    _check_device(device, "new")
    if not args:
        return _C.empty((0,), dtype=self.dtype)
    if all(isinstance(a, numbers.Integral) and not isinstance(a, _bool) for a in args):
        return _C.empty(tuple(args), dtype=self.dtype)
    if len(args) == 1:
        if isinstance(args[0], (tuple, list)) and args[0] and \
                all(isinstance(a, numbers.Integral) for a in args[0]) and \
                type(args[0]).__name__ == "Size":
            return _C.empty(tuple(args[0]), dtype=self.dtype)
        return tensor(args[0], dtype=self.dtype)
    raise _C.TypeError("[new] expected new(*sizes) or new(data)")


_orig_add_, _orig_sub_ = _T.add_, _T.sub_


def _with_alpha(orig, name):
    def op(self, other, *args, alpha=1):
        if args:  # the deprecated add_(alpha, other) form
            if len(args) != 1 or not isinstance(other, numbers.Number):
                raise _C.TypeError(f"[{name}] expected {name}(other, alpha=1)")
            alpha, other = other, args[0]
        # torch: a bool alpha only for bool results, a float alpha only for floating ones
        if isinstance(alpha, bool) and self.dtype != _C.bool:
            raise _C.TypeError(f"[{name}] a bool alpha is only for bool tensors, got {self.dtype}")
        if isinstance(alpha, float) and not self.dtype.is_floating_point:
            raise _C.TypeError(f"[{name}] a float alpha needs a floating tensor, got {self.dtype}")
        if alpha is not True and alpha != 1:
            other = other * alpha
        orig(self, other)
        return self
    op.__name__ = name
    return op


def _binary_with_alpha(fn, name):
    def op(input, other, *, alpha=1, out=None):
        r = fn(input, other * alpha if alpha != 1 else other)
        return _finish(r, False, out, name)
    op.__name__ = name
    return op


# Out-of-place ops whose in-place form (name_) torch has, built as self.copy_(op(self, ...)).
_INPLACE_FROM = (
    "abs", "acos", "asin", "atan", "atan2", "ceil", "clamp_min", "clamp_max", "cos", "cosh",
    "erf", "erfinv", "exp", "exp2", "expm1", "floor", "fmod", "frac", "lerp", "log", "log10",
    "log1p", "log2", "logical_not", "masked_fill", "pow", "reciprocal", "remainder", "round",
    "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt", "square", "tan", "tanh", "trunc",
    "addcmul", "addcdiv", "addmm", "baddbmm", "floor_divide", "hardtanh", "leaky_relu", "elu",
    "silu", "gelu", "where", "index_add", "masked_scatter", "nan_to_num", "logit", "deg2rad",
    "rad2deg", "digamma", "lgamma", "sgn", "xlogy", "hypot", "copysign", "maximum", "minimum",
    "tril", "triu", "renorm", "clip", "float_power", "fmax", "fmin",
)


def _castable(src, dst):
    """torch.can_cast: no cast to a lower category (float -> integer, integer -> bool)."""
    def cat(d):
        return 2 if d.is_floating_point else (0 if d == _C.bool else 1)
    return cat(src) <= cat(dst)


def _inplace_of(name):
    fn = getattr(_T, name)

    def op(self, *args, **kwargs):
        r = fn(self, *args, **kwargs)
        if r.dtype != self.dtype and not _castable(r.dtype, self.dtype):
            # torch: "result type Float can't be cast to the desired output type Long"
            rd, sd = (str(d).split(".")[-1] for d in (r.dtype, self.dtype))
            raise _C.Error(f"[{name}_] the result type {rd} cannot be written into a {sd} "
                           f"tensor of shape {tuple(self.shape)}; use {name}()")
        if _C.is_grad_enabled() and (self.requires_grad or r.requires_grad) and \
                hasattr(_C, "_write_result"):
            # The node of r saved self: the inplace writer snapshots it before the write.
            if self.requires_grad and self.is_leaf:
                raise _C.Error(
                    f"[{name}_] a leaf tensor that requires grad (shape {tuple(self.shape)}) "
                    f"cannot be modified in place in grad mode; use {name}() or wrap the update "
                    "in kiln.no_grad()")
            _C._write_result(self, r if r.dtype == self.dtype else r.to(self.dtype), name + "_")
        else:
            self.copy_(r)
        return self

    op.__name__ = name + "_"
    op.__doc__ = f"In-place {name}: self.copy_(self.{name}(...))."
    return op


class _TensorTypeMeta(type):
    """kiln.FloatTensor & co.: isinstance(t, kiln.FloatTensor) checks the dtype, and calling
    one builds a tensor of that dtype from sizes (uninitialised) or data."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, _T) and obj.dtype == cls.dtype

    def __call__(cls, *args, device=None):
        _check_device(device, cls.__name__)
        if not args:
            return _C.empty((0,), dtype=cls.dtype)
        if all(isinstance(a, numbers.Integral) and not isinstance(a, _bool) for a in args):
            return _C.empty(tuple(args), dtype=cls.dtype)
        if len(args) == 1:
            a = args[0]
            if isinstance(a, _T):
                return a.to(cls.dtype)
            return tensor(a, dtype=cls.dtype)
        raise _C.TypeError(f"[{cls.__name__}] expected sizes or one sequence of data")


_TYPES = (("FloatTensor", "float32"), ("DoubleTensor", "float64"), ("HalfTensor", "float16"),
          ("BFloat16Tensor", "bfloat16"), ("LongTensor", "int64"), ("IntTensor", "int32"),
          ("ShortTensor", "int16"), ("CharTensor", "int8"), ("ByteTensor", "uint8"),
          ("BoolTensor", "bool"))
_TENSOR_TYPES = {n: _TensorTypeMeta(n, (), {"dtype": getattr(_C, d), "__module__": "kiln"})
                 for n, d in _TYPES}
_TYPE_OF_DTYPE = {t.dtype: n for n, t in _TENSOR_TYPES.items()}


def _type(self, dtype=None, non_blocking=False, **kwargs):
    """type(): 'kiln.FloatTensor' & co.; type(t) converts to a dtype, a kiln.FloatTensor-like
    class or its name ('torch.LongTensor' is accepted too)."""
    if dtype is None:
        return "kiln." + _TYPE_OF_DTYPE.get(self.dtype, "Tensor")
    if isinstance(dtype, str):
        parts = dtype.split(".")
        if "cuda" in parts:
            _backend("cuda")
        t = _TENSOR_TYPES.get(parts[-1])
        if t is None:
            raise _C.ValueError(f"[type] invalid type: {dtype!r}")
        dtype = t.dtype
    elif isinstance(dtype, type) and hasattr(dtype, "dtype"):
        dtype = dtype.dtype
    elif isinstance(dtype, type):
        _backend("cuda")  # kiln.cuda.FloatTensor & co.
    return self if dtype == self.dtype else _to_dtype(self, dtype)


_orig_getitem, _orig_setitem = _T.__getitem__, _T.__setitem__


def _key(key):
    if type(key) is range:
        return list(key)
    if type(key) is tuple:
        return tuple(list(k) if type(k) is range else k for k in key)
    return key


def _getitem(self, key):
    try:
        return _orig_getitem(self, key)
    except TypeError:
        k = _key(key)
        if k is key:
            raise
        return _orig_getitem(self, k)


def _setitem(self, key, value):
    try:
        return _orig_setitem(self, key, value)
    except TypeError:
        k = _key(key)
        if k is key:
            raise
        return _orig_setitem(self, k, value)


_orig_init = _T.__init__


def _init(self, *args, dtype=None, requires_grad=False, device=None):
    """kiln.Tensor(*sizes) (uninitialised float32), kiln.Tensor(data) (float32 unless dtype=),
    kiln.Tensor() (empty), as torch.Tensor."""
    _check_device(device, "Tensor")
    if not args:
        _orig_init(self, [], dtype=dtype or _C.float32, requires_grad=requires_grad)
    elif all(isinstance(a, numbers.Integral) and not isinstance(a, (_bool, _T)) for a in args):
        _orig_init(self, _C.empty(tuple(args), dtype=dtype or _C.float32),
                   requires_grad=requires_grad)
    elif len(args) == 1:
        data = args[0]
        if isinstance(data, (list, tuple)) and any(isinstance(e, _T) for e in data):
            data = [e.tolist() if isinstance(e, _T) else e for e in data]
        if dtype is None and not isinstance(data, _T):
            dtype = _C.float32
        _orig_init(self, data, dtype=dtype, requires_grad=requires_grad)
    else:
        raise _C.TypeError("[Tensor] expected Tensor(*sizes) or Tensor(data)")


def _param_marks():
    """kiln.nn's (is_marked, mark) for Parameters, or None before kiln.nn is importable."""
    try:
        from .nn.modules.module import _is_marked, _mark_parameter
        return _is_marked, _mark_parameter
    except ImportError:
        return None


def _deepcopy(self, memo):
    """copy.deepcopy(t): a leaf's clone with its own memory, requires_grad and .grad (and
    Parameter-ness) kept, as torch; non-leaf tensors refuse, as torch's do."""
    if id(self) in memo:
        return memo[id(self)]
    if not self.is_leaf:
        raise _C.Error("[deepcopy] only tensors created explicitly by the user (graph leaves) "
                       "support the deepcopy protocol; detach() it first")
    if self.is_symbolic:
        raise _C.Error("[deepcopy] a symbolic tensor (in a Graph or a jit trace) has no values")
    new = self.detach().clone()
    if self.requires_grad:
        new.requires_grad_(True)
    marks = _param_marks()
    if marks and marks[0](self):
        marks[1](new)
    memo[id(self)] = new
    g = self.grad
    if g is not None:
        new.grad = _deepcopy(g, memo)
    return new


def _reduce_ex(self, protocol):
    """Pickling outside kiln.save (multiprocessing, copy.copy): the values as bytes."""
    from .serialization import _dtype_name, _tensor_bytes
    if self.is_symbolic:
        raise _C.Error("[pickle] a symbolic tensor (in a Graph or a jit trace) has no values")
    marks = _param_marks()
    return (_rebuild, (_tensor_bytes(self), _dtype_name(self.dtype), tuple(self.shape),
                       bool(self.requires_grad), bool(marks and marks[0](self))))


def _rebuild(raw, dtype, shape, requires_grad, is_param=False):
    from .serialization import _tensor_from_bytes
    t = _tensor_from_bytes(raw, dtype, list(shape), "pickle")
    if requires_grad:
        t.requires_grad_(True)
    marks = _param_marks()
    if is_param and marks:
        marks[1](t)
    return t


def install(ns):
    """Patches kiln.Tensor and puts the factories into the namespace `ns` (kiln's globals)."""
    T = _T
    T.device = property(lambda self: CPU, doc="Where the tensor lives (always cpu today).")
    T.is_cuda = property(lambda self: False)
    T.is_cpu = property(lambda self: True)
    T.is_mps = property(lambda self: False)
    T.is_meta = property(lambda self: False)
    T.is_sparse = property(lambda self: False)
    T.is_quantized = property(lambda self: False)
    T.layout = property(lambda self: "strided")
    T.data = property(_data_get, _data_set, doc="The tensor's values, detached from autograd.")
    T.to = _to
    T.cpu = _cpu
    T.cuda = _cuda
    T.get_device = _get_device
    T.pin_memory = lambda self, device=None: self
    T.is_pinned = lambda self, device=None: False
    T.share_memory_ = lambda self: self
    T.is_shared = lambda self: False
    T.__format__ = _format
    T.__deepcopy__ = _deepcopy
    T.__reduce_ex__ = _reduce_ex
    T.__getitem__ = _getitem
    T.__setitem__ = _setitem
    T.__init__ = _init
    T.type = _type
    T.normal_ = _normal_
    T.uniform_ = _uniform_
    T.exponential_ = _exponential_
    T.cauchy_ = _cauchy_
    T.log_normal_ = _log_normal_
    T.geometric_ = _geometric_
    T.bernoulli_ = _bernoulli_
    T.random_ = _random_
    T.add_ = _with_alpha(_orig_add_, "add_")
    T.sub_ = _with_alpha(_orig_sub_, "sub_")
    for name, fn in (("view_as", _view_as), ("reshape_as", _reshape_as),
                     ("type_as", _type_as), ("bernoulli", _bernoulli_method),
                     ("multinomial", _multinomial_method),
                     ("new_zeros", _new(lambda s, d: _C.zeros(s, dtype=d))),
                     ("new_ones", _new(lambda s, d: _C.ones(s, dtype=d), 1.0)),
                     ("new_empty", _new(lambda s, d: _C.empty(s, dtype=d))),
                     ("new_full", _new_full), ("new_tensor", _new_tensor),
                     ("nelement", lambda self: self.numel()), ("new", _legacy_new),
                     ("ndimension", lambda self: self.dim())):
        if not _has(name):
            setattr(T, name, fn)
    for name in _INPLACE_FROM:
        if hasattr(T, name) and not _has(name + "_"):
            setattr(T, name + "_", _inplace_of(name))

    for name in ("zeros", "ones", "empty", "rand", "randn"):
        ns[name] = _sized_factory(name)
    for fn in (tensor, as_tensor, full, arange, linspace, logspace, eye, scalar_tensor, randint,
               randperm, multinomial, normal, bernoulli):
        ns[fn.__name__] = fn
    # Through the ops, not from t's shape: in a graph or a jitted function t is symbolic, and its
    # dynamic dims must stay dynamic (a factory from t.shape would bake one size in).
    ns["zeros_like"] = _like("zeros_like", lambda t, d: _as(_C.zeros_like(t), d))
    ns["ones_like"] = _like("ones_like", lambda t, d: _as(_C.ones_like(t), d))
    ns["empty_like"] = _like("empty_like", lambda t, d: _as(_C.zeros_like(t), d))
    ns["full_like"] = _like("full_like", lambda t, d, v: _full_like(t, d, v))
    ns["rand_like"] = _like("rand_like", _rand_like)
    ns["randn_like"] = _like("randn_like", _randn_like)
    ns["randint_like"] = _like("randint_like", _randint_like)
    # (kiln.add/sub take alpha= and out= in the binding itself, so the two-argument call keeps
    # its C fast path: a Python wrapper here cost W3 0.13 us per add)
    ns["subtract"] = ns.get("sub")
    ns.update(_TENSOR_TYPES)
    ns["device"] = device
    ns["Generator"] = Generator
    ns["manual_seed"] = manual_seed
    ns["initial_seed"] = initial_seed
    ns["seed"] = seed
    from . import _torch_misc
    _torch_misc.install(ns)
