"""kiln.save / kiln.load: torch.save's job (state dicts, tensors, nested dicts and lists, whole
modules with weights_only=False) in a zip file: `data.pkl` (a pickle in which each tensor is
a persistent reference) and one stored member per tensor with its bytes.

Loading is safe by default (weights_only=True): the pickle goes through an Unpickler that
builds only plain containers, numbers, strings, OrderedDict, kiln devices, NumPy arrays and
Kiln tensors, and refuses every other global, so a file cannot run code. Loading a whole
module (any class) is the explicit opt-in weights_only=False, as torch's weights_only. A file
is hostile until read: every failure (not a zip, a truncated member, a tensor whose bytes do
not match its shape, a refused global) raises kiln.Error naming the file.

torch.save's own files (archive/data.pkl with torch storages) load too, into Kiln tensors, so
PyTorch checkpoints can be read without torch.
"""
import collections
import io
import os
import pickle
import zipfile

from . import _C
from ._device import _backend, device as _device_cls

_T = _C.Tensor
_FORMAT = "kiln.save/1"
_DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8",
           "uint8", "bool")
# NumPy's name for each dtype's bytes (bfloat16 has none: its bytes travel as uint16).
_NP_NAME = {"float32": "float32", "float64": "float64", "float16": "float16",
            "bfloat16": "uint16", "int64": "int64", "int32": "int32", "int16": "int16",
            "int8": "int8", "uint8": "uint8", "bool": "bool"}


def _np():
    import numpy
    return numpy


def _dtype_name(d):
    return str(d).split(".")[-1]


def _tensor_bytes(t):
    np = _np()
    t = t.detach()
    name = _dtype_name(t.dtype)
    if name == "bfloat16":
        # bfloat16 is the top half of a float32: take those 16 bits.
        a = np.ascontiguousarray(t.to(_C.float32).numpy()).view(np.uint32) >> 16
        return a.astype(np.uint16).tobytes()
    return np.ascontiguousarray(t.contiguous().numpy()).tobytes()


def _tensor_from_bytes(raw, name, shape, where):
    np = _np()
    if name not in _NP_NAME:
        raise _C.Error(f"[load] {where}: unknown tensor dtype {name!r}")
    if not isinstance(shape, (tuple, list)) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
        raise _C.Error(f"[load] {where}: invalid tensor shape {shape!r}")
    numel = 1
    for s in shape:
        numel *= s
    itemsize = np.dtype(_NP_NAME[name]).itemsize
    if len(raw) != numel * itemsize:
        raise _C.Error(f"[load] {where}: tensor of shape {tuple(shape)} and dtype {name} needs "
                       f"{numel * itemsize} bytes, the file has {len(raw)}")
    a = np.frombuffer(raw, dtype=_NP_NAME[name]).reshape(tuple(shape))
    if name == "bfloat16":
        f = (a.astype(np.uint32) << 16).view(np.float32)
        return _C.tensor(f).to(_C.bfloat16)
    return _C.tensor(a.copy())


def _is_parameter(t):
    from ._tensor_api import _param_marks
    marks = _param_marks()
    return bool(marks and marks[0](t))


def _open_write(f):
    if isinstance(f, (str, os.PathLike)):
        return open(f, "wb"), True
    return f, False


def save(obj, f, pickle_module=pickle, pickle_protocol=4, _use_new_zipfile_serialization=True):
    """Saves obj (tensors anywhere inside dicts, lists, tuples, or any picklable object such
    as a Module) to a path or a binary file object."""
    tensors = []
    seen = {}

    class _Pickler(pickle_module.Pickler):
        def persistent_id(self, o):
            if isinstance(o, _T):
                if o.is_symbolic:
                    raise _C.Error("[save] a symbolic tensor (in a Graph or a jit trace) has no "
                                   "values to save")
                k = seen.get(id(o))
                if k is None:
                    k = seen[id(o)] = len(tensors)
                    tensors.append(o)
                return ("kiln.tensor", k, _dtype_name(o.dtype), tuple(o.shape),
                        bool(o.requires_grad), _is_parameter(o))
            return None

    buf = io.BytesIO()
    try:
        _Pickler(buf, protocol=max(pickle_protocol, 2)).dump(obj)
    except (pickle.PicklingError, TypeError, AttributeError) as e:
        raise _C.Error(f"[save] cannot pickle {type(obj).__name__}: {e}") from None
    fh, close = _open_write(f)
    try:
        with zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED) as z:
            z.writestr("kiln/format", _FORMAT)
            z.writestr("kiln/data.pkl", buf.getvalue())
            for k, t in enumerate(tensors):
                z.writestr(f"kiln/tensors/{k}", _tensor_bytes(t))
    finally:
        if close:
            fh.close()


# ---- loading --------------------------------------------------------------------------------

_SAFE_GLOBALS = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("builtins", "dict"): dict, ("builtins", "list"): list, ("builtins", "tuple"): tuple,
    ("builtins", "set"): set, ("builtins", "frozenset"): frozenset, ("builtins", "int"): int,
    ("builtins", "float"): float, ("builtins", "complex"): complex, ("builtins", "bool"): bool,
    ("builtins", "str"): str, ("builtins", "bytes"): bytes, ("builtins", "slice"): slice,
    ("builtins", "bytearray"): bytearray, ("kiln._device", "device"): _device_cls,
    ("torch", "device"): _device_cls,
    # Protocol 2 pickles bytes as _codecs.encode(str, "latin1"): a pure conversion.
    ("_codecs", "encode"): __import__("codecs").encode,
}


def _numpy_globals():
    np = _np()
    g = {("numpy", "dtype"): np.dtype, ("numpy", "ndarray"): np.ndarray}
    for mod in ("numpy.core.multiarray", "numpy._core.multiarray"):
        g[(mod, "_reconstruct")] = np.core.multiarray._reconstruct
        g[(mod, "scalar")] = np.core.multiarray.scalar
    return g


class _TorchStorage:
    """A torch.FloatStorage & co. named by a torch file's pickle: only its dtype matters."""

    def __init__(self, dtype):
        self.dtype = dtype


_TORCH_STORAGE = {"FloatStorage": "float32", "DoubleStorage": "float64",
                  "HalfStorage": "float16", "BFloat16Storage": "bfloat16",
                  "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16",
                  "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool"}


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False,
                       backward_hooks=None, metadata=None):
    if not isinstance(storage, _T) or storage.dim() != 1:
        raise _C.Error("[load] torch file: _rebuild_tensor_v2 without a storage")
    size, stride = tuple(size), tuple(stride)
    n = storage.shape[0]
    if any(not isinstance(v, int) or v < 0 for v in size + stride + (storage_offset,)):
        raise _C.Error(f"[load] torch file: invalid tensor size {size} / stride {stride}")
    last = storage_offset + sum((s - 1) * st for s, st in zip(size, stride)) if all(size) else 0
    if all(size) and last >= n:
        raise _C.Error(f"[load] torch file: tensor of size {size} and stride {stride} at "
                       f"offset {storage_offset} overruns its storage of {n} elements")
    if not all(size):
        t = _C.zeros(size, dtype=storage.dtype)
    else:
        t = _C.as_strided(storage, size, stride, storage_offset).clone() \
            if hasattr(_C, "as_strided") else _gather_strided(storage, size, stride,
                                                              storage_offset)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _gather_strided(storage, size, stride, offset):
    np = _np()
    idx = np.full(size, offset, dtype=np.int64)
    for d, (s, st) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = s
        idx = idx + (np.arange(s, dtype=np.int64) * st).reshape(shape)
    return storage[_C.tensor(idx.reshape(-1))].reshape(*size) if size else storage[offset]


def _rebuild_parameter(data, requires_grad, backward_hooks=None, *rest):
    from .nn import Parameter
    return Parameter(data, requires_grad)


_TORCH_GLOBALS = {("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
                  ("torch._utils", "_rebuild_parameter"): _rebuild_parameter}


class _Unpickler(pickle.Unpickler):
    def __init__(self, fh, records, where, weights_only, map_location):
        super().__init__(fh)
        self._records = records
        self._where = where
        self._weights_only = weights_only
        self._map_location = map_location
        self._cache = {}
        self._safe = dict(_SAFE_GLOBALS)
        self._safe.update(_numpy_globals())
        self._safe.update(_TORCH_GLOBALS)
        for n in _TORCH_STORAGE:
            self._safe[("torch", n)] = _TorchStorage(_TORCH_STORAGE[n])

    def find_class(self, module, name):
        g = self._safe.get((module, name))
        if g is not None:
            return g
        if self._weights_only:
            raise _C.Error(
                f"[load] {self._where}: weights_only load refuses the global {module}.{name}; "
                "files with whole modules or other objects load with weights_only=False, which "
                "runs the file's pickle code: only for files you trust")
        return super().find_class(module, name)

    def persistent_load(self, pid):
        if not isinstance(pid, tuple) or not pid:
            raise _C.Error(f"[load] {self._where}: invalid persistent id {pid!r}")
        if pid[0] == "kiln.tensor" and len(pid) == 6:
            _, k, dtype, shape, requires_grad, is_param = pid
            if k not in self._cache:
                t = self._records(f"kiln/tensors/{k}", dtype, shape)
                t = _map(t, self._map_location)
                if is_param:
                    from .nn import Parameter
                    t = Parameter(t, bool(requires_grad))
                elif requires_grad:
                    t.requires_grad_(True)
                self._cache[k] = t
            return self._cache[k]
        if pid[0] == "storage" and len(pid) == 5:  # torch.save's format
            _, storage_type, key, location, numel = pid
            if not isinstance(storage_type, _TorchStorage):
                raise _C.Error(f"[load] {self._where}: unknown torch storage type")
            if key not in self._cache:
                t = self._records(f"data/{key}", storage_type.dtype, [int(numel)])
                self._cache[key] = _map(t, self._map_location, str(location))
            return self._cache[key]
        raise _C.Error(f"[load] {self._where}: unknown persistent id {pid[0]!r}")


def _map(t, map_location, location="cpu"):
    if map_location is None:
        if location.startswith("cuda"):
            return t  # torch would need a GPU; Kiln keeps its tensors on the CPU
        return t
    if callable(map_location) and not isinstance(map_location, (str, _device_cls)):
        r = map_location(t, location)
        return t if r is None else r
    target = map_location.get(location, location) if isinstance(map_location, dict) \
        else map_location
    _backend(target)
    return t


def load(f, map_location=None, pickle_module=None, *, weights_only=True, **pickle_load_args):
    """Loads what save wrote (or a torch.save file). weights_only=True (the default) builds only
    tensors and plain data; weights_only=False unpickles any object (whole modules): only for
    trusted files."""
    if isinstance(f, (str, os.PathLike)):
        where = str(f)
        try:
            fh = open(f, "rb")
        except OSError as e:
            raise _C.Error(f"[load] cannot open {where}: {e.strerror}") from None
        close = True
    else:
        where, fh, close = getattr(f, "name", "<file object>"), f, False
    try:
        return _load(fh, where, map_location, weights_only)
    except _C.Error:
        raise
    except Exception as e:  # noqa: BLE001 (whatever a hostile file provokes is a kiln.Error)
        raise _C.Error(f"[load] {where} is not a valid Kiln or PyTorch file: "
                       f"{type(e).__name__}: {e}") from None
    finally:
        if close:
            fh.close()


def _load(fh, where, map_location, weights_only):
    with zipfile.ZipFile(fh) as z:
        infos = {i.filename: i for i in z.infolist()}
        if "kiln/data.pkl" in infos:
            prefix, pkl = "", "kiln/data.pkl"
        else:  # torch: <archive>/data.pkl
            pkls = [n for n in infos if n.endswith("/data.pkl") and n.count("/") == 1]
            if len(pkls) != 1:
                raise _C.Error(f"[load] {where}: no data.pkl record (not a kiln.save or "
                               "torch.save file)")
            prefix, pkl = pkls[0][:-len("data.pkl")], pkls[0]

        def records(name, dtype, shape):
            info = infos.get(prefix + name)
            if info is None:
                raise _C.Error(f"[load] {where}: missing tensor record {name}")
            if not isinstance(dtype, str) or dtype not in _NP_NAME:
                raise _C.Error(f"[load] {where}: unknown tensor dtype {dtype!r}")
            numel = 1
            for s in shape:
                if not isinstance(s, int) or s < 0:
                    raise _C.Error(f"[load] {where}: invalid tensor shape {shape!r}")
                numel *= s
            if prefix == "" and info.file_size != numel * _np().dtype(_NP_NAME[dtype]).itemsize:
                raise _C.Error(f"[load] {where}: record {name} holds {info.file_size} bytes, "
                               f"its tensor of shape {tuple(shape)} ({dtype}) needs "
                               f"{numel * _np().dtype(_NP_NAME[dtype]).itemsize}")
            if prefix and info.file_size < numel * _np().dtype(_NP_NAME[dtype]).itemsize:
                raise _C.Error(f"[load] {where}: storage {name} is shorter than its "
                               f"{numel} elements")
            raw = z.read(info)
            if prefix:
                raw = raw[:numel * _np().dtype(_NP_NAME[dtype]).itemsize]
            return _tensor_from_bytes(raw, dtype, list(shape), where)

        data = z.read(pkl)
        return _Unpickler(io.BytesIO(data), records, where, weights_only, map_location).load()
