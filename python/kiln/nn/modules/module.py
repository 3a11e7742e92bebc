"""kiln.nn.Module and Parameter: subclassable in Python as torch.nn.Module is (write forward,
assign parameters and submodules as attributes), with torch's traversal order, state_dict key
names, dtype/device moves and hooks; _CppModule puts a Kiln C++ module inside such a tree."""
import weakref
from collections import OrderedDict, namedtuple

from ... import _C

Tensor = _C.Tensor


# The tensors nn.Parameter made, by id, each with a weak reference that drops its entry when
# the tensor goes: Kiln has one tensor type, so this is how a Parameter(requires_grad=False)
# (a frozen weight) is still known as a parameter.
_PARAMETERS = {}


def _mark_parameter(t):
    key = id(t)
    _PARAMETERS[key] = weakref.ref(t, lambda _, key=key: _PARAMETERS.pop(key, None))


def _is_marked(obj):
    ref = _PARAMETERS.get(id(obj))
    return ref is not None and ref() is obj


class _ParameterMeta(type):
    # isinstance(t, nn.Parameter): a tensor nn.Parameter made, or any leaf tensor that
    # requires grad (what torch programs' init loops test).
    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and ((obj.requires_grad and obj.is_leaf) or _is_marked(obj))


class Parameter(metaclass=_ParameterMeta):
    """Parameter(data=None, requires_grad=True): a leaf tensor (sharing data's memory);
    assigned to a Module attribute it is a parameter, even with requires_grad=False."""

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            data = _C.empty(0)
        t = data.detach()
        t.requires_grad_(requires_grad)
        _mark_parameter(t)
        return t


_IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


def _device_str(device, op="Module.to"):
    """Checks that Kiln serves `device` (None, a str, a kiln.device, an int ordinal) and gives
    'cpu'; any other device raises a kiln.Error naming it. kiln.device's backend table decides
    where it exists, so a CUDA backend plugs in there without changes here."""
    if device is None:
        return None
    try:
        from ..._device import _check_device
    except ImportError:  # a build without kiln.device: only the CPU spelled as a string
        _check_device = None
    if _check_device is not None:
        _check_device(device, op)
        return "cpu"
    name = str(device) if not isinstance(device, int) else f"cuda:{device}"
    if name.split(":")[0] != "cpu":
        raise _C.Error(f"[{op}] device '{name}' is not available: Kiln runs on the CPU "
                       f"(kiln.cuda.is_available() is False); use 'cpu'")
    return "cpu"


def _parse_to(args, kwargs):
    """(dtype or None) from Module.to's forms: to(device), to(dtype), to(device, dtype),
    to(tensor), each with non_blocking= and memory_format= as torch accepts them."""
    dtype = kwargs.pop("dtype", None)
    device = kwargs.pop("device", None)
    tensor = kwargs.pop("tensor", None)
    kwargs.pop("non_blocking", None), kwargs.pop("memory_format", None), kwargs.pop("copy", None)
    if kwargs:
        raise _C.TypeError(f"[Module.to] unexpected keyword arguments {sorted(kwargs)}")
    for a in args:
        if isinstance(a, _C.dtype):
            dtype = a
        elif isinstance(a, Tensor):
            tensor = a
        elif isinstance(a, bool):  # non_blocking given positionally
            continue
        else:
            device = a
    if tensor is not None:
        dtype = tensor.dtype
    _device_str(device)
    if dtype is not None and not dtype.is_floating_point:
        raise _C.TypeError(f"[Module.to] nn.Module.to only accepts floating point dtypes, got "
                           f"{dtype}")
    return dtype


class Module:
    """Base of every module. A tensor that requires grad assigned as an attribute is a parameter,
    a Module a submodule; register_buffer adds state saved in state_dict."""

    dump_patches = False

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent_buffers_set", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_forward_hooks", OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks", OrderedDict())
        object.__setattr__(self, "training", True)

    # ---- attribute registration ----
    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign before Module.__init__() call")
        params, bufs, mods = self._parameters, self._buffers, self._modules
        if isinstance(value, Tensor) and ((value.requires_grad and value.is_leaf)
                                          or _is_marked(value)):
            bufs.pop(name, None), mods.pop(name, None), self.__dict__.pop(name, None)
            params[name] = value
        elif isinstance(value, Module):
            params.pop(name, None), bufs.pop(name, None), self.__dict__.pop(name, None)
            mods[name] = value
        elif name in bufs and (value is None or isinstance(value, Tensor)):
            bufs[name] = value
        elif name in params and value is None:
            params[name] = None
        elif name in mods and value is None:
            mods[name] = None
        else:
            params.pop(name, None), bufs.pop(name, None), mods.pop(name, None)
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            if store in d and name in d[store]:
                return d[store][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for store in (self._parameters, self._buffers, self._modules):
            if name in store:
                del store[name]
                return
        object.__delattr__(self, name)

    def __dir__(self):
        return sorted(set(object.__dir__(self)) | set(self._parameters) | set(self._buffers)
                      | set(self._modules))

    def _check_name(self, what, name):
        if not isinstance(name, str):
            raise _C.TypeError(f"[Module.{what}] name must be a str, got {type(name).__name__}")
        if "." in name or name == "":
            raise KeyError(f"[Module.{what}] name must be non-empty without '.', got '{name}'")
        if hasattr(self, name) and name not in self._parameters and name not in self._buffers \
                and name not in self._modules:
            raise KeyError(f"[Module.{what}] attribute '{name}' already exists")

    def register_parameter(self, name, param):
        self._check_name("register_parameter", name)
        if param is not None:
            if not isinstance(param, Tensor):
                raise _C.TypeError(f"[Module.register_parameter] '{name}': expected a tensor "
                                   f"(nn.Parameter) or None, got {type(param).__name__}")
            if not param.requires_grad and not _is_marked(param):
                param.requires_grad_(True)  # a plain tensor becomes a trainable parameter
        self._buffers.pop(name, None), self._modules.pop(name, None)
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        self._check_name("register_buffer", name)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise _C.TypeError(f"[Module.register_buffer] '{name}': expected a tensor or None, "
                               f"got {type(tensor).__name__}")
        self._parameters.pop(name, None), self._modules.pop(name, None)
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name, module):
        if module is not None and not isinstance(module, Module):
            raise _C.TypeError(f"[Module.add_module] '{name}': {type(module).__name__} is not a "
                               f"Module subclass")
        self._check_name("add_module", name)
        self._parameters.pop(name, None), self._buffers.pop(name, None)
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target):
        mod = self
        for item in target.split(".") if target else []:
            if item not in mod._modules:
                raise AttributeError(f"[Module.get_submodule] {type(mod).__name__} has no "
                                     f"submodule '{item}' (target '{target}')")
            mod = mod._modules[item]
        return mod

    def get_parameter(self, target):
        path, _, name = target.rpartition(".")
        mod = self.get_submodule(path)
        if name not in mod._parameters:
            raise AttributeError(f"[Module.get_parameter] no parameter '{target}'")
        return mod._parameters[name]

    def get_buffer(self, target):
        path, _, name = target.rpartition(".")
        mod = self.get_submodule(path)
        if name not in dict(mod._local_buffers()):
            raise AttributeError(f"[Module.get_buffer] no buffer '{target}'")
        return dict(mod._local_buffers())[name]

    def get_extra_state(self):
        raise RuntimeError("[Module.get_extra_state] not implemented by this module")

    def set_extra_state(self, state):
        raise RuntimeError("[Module.set_extra_state] not implemented by this module")

    # ---- calling and hooks ----
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args, **kwargs):
        backward_hooks = self.__dict__.get("_backward_hooks")
        if not self._forward_hooks and not self._forward_pre_hooks and not backward_hooks:
            return self.forward(*args, **kwargs)
        for hook in list(self._forward_pre_hooks.values()):
            r = hook(self, args)
            if r is not None:
                args = r if isinstance(r, tuple) else (r,)
        bw = None
        if backward_hooks:
            from ._hooks import BackwardHook
            bw = BackwardHook(self, list(backward_hooks.values()), len(args))
            args = bw.setup_inputs(args)
        out = self.forward(*args, **kwargs)
        for hook in list(self._forward_hooks.values()):
            r = hook(self, args, out)
            if r is not None:
                out = r
        if bw is not None:
            out = bw.setup_outputs(out)
        return out

    _call_impl = __call__

    def _add_hook(self, store, hook):
        key = object()
        store[key] = hook
        return _RemovableHandle(store, key)

    def register_forward_hook(self, hook):
        """hook(module, input_tuple, output) after forward; a non-None result replaces output."""
        return self._add_hook(self._forward_hooks, hook)

    def register_forward_pre_hook(self, hook):
        """hook(module, input_tuple) before forward; a non-None result replaces the input."""
        return self._add_hook(self._forward_pre_hooks, hook)

    def register_full_backward_hook(self, hook):
        """hook(module, grad_input, grad_output) when the gradients of the module's inputs are
        computed; grad_input and grad_output are tuples (None where an input or output is not a
        tensor or needs no gradient), and a tuple it returns replaces grad_input (torch's)."""
        from . import _hooks
        if not _hooks.available():
            raise _C.Error("[register_full_backward_hook] this build of kiln._C cannot record "
                           "Python autograd Functions (torch_compat.cpp), which module backward "
                           "hooks run on")
        if "_backward_hooks" not in self.__dict__:
            object.__setattr__(self, "_backward_hooks", OrderedDict())
        return self._add_hook(self._backward_hooks, hook)

    def register_load_state_dict_post_hook(self, hook):
        """hook(module, incompatible_keys) after load_state_dict; it may edit the key lists
        (which strict checking then sees), as torch's."""
        if "_load_state_dict_post_hooks" not in self.__dict__:
            object.__setattr__(self, "_load_state_dict_post_hooks", OrderedDict())
        return self._add_hook(self._load_state_dict_post_hooks, hook)

    # ---- traversal (torch's order: a module's own entries, then each child's) ----
    def _local_parameters(self):
        return self._parameters.items()

    def _local_buffers(self):
        return self._buffers.items()

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        if remove_duplicate:
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(memo, prefix + ("." if prefix else "") + name,
                                           remove_duplicate)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        seen = set()
        for n, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield n, m

    def children(self):
        for _, m in self.named_children():
            yield m

    def _named_members(self, local, prefix, recurse, remove_duplicate=True):
        seen = set()
        mods = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mp, m in mods:
            for n, t in local(m):
                if t is None or (remove_duplicate and id(t) in seen):
                    continue
                seen.add(id(t))
                yield (mp + "." if mp else "") + n, t

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        """(dotted name, tensor) of every parameter; a tensor held twice is listed once."""
        return self._named_members(lambda m: m._local_parameters(), prefix, recurse,
                                   remove_duplicate)

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_members(lambda m: m._local_buffers(), prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def num_parameters(self):
        return sum(p.numel() for p in self.parameters())

    def apply(self, fn):
        """fn(m) on every submodule (children first, as torch), then on self; returns self."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ---- modes ----
    def train(self, mode=True):
        if not isinstance(mode, bool):
            raise _C.ValueError(f"[Module.train] mode must be a bool, got {mode!r}")
        object.__setattr__(self, "training", mode)
        for m in self.children():
            m.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=False):
        """Clears every parameter's gradient: None (set_to_none=True), else zeros in place
        (torch 1.13's default)."""
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                g = p.grad
                g.detach().copy_(_C.zeros_like(g))

    def share_memory(self):
        return self

    # ---- dtype and device ----
    def _apply_tensors(self, fn):
        """Replaces each parameter and buffer t of this module (not its children) by fn(t) when
        fn gives a tensor of another dtype; parameters stay leaves that require grad. The
        tensors change identity (Kiln cannot retype a tensor in place): build optimizers
        after moving a model, as torch programs do."""
        for n, p in list(self._parameters.items()):
            if p is None:
                continue
            q = fn(p)
            if q.dtype == p.dtype:
                continue
            newp = q.detach()
            newp.requires_grad_(p.requires_grad)
            _mark_parameter(newp)
            if p.grad is not None:
                newp.grad = fn(p.grad).detach()
            self._parameters[n] = newp
        for n, b in list(self._buffers.items()):
            if b is not None:
                self._buffers[n] = fn(b)

    def _apply(self, fn):
        for m in self.children():
            m._apply(fn)
        self._apply_tensors(fn)
        return self

    def _cast_floating(self, dtype):
        return self._apply(lambda t: t.to(dtype) if t.dtype.is_floating_point else t)

    def to(self, *args, **kwargs):
        """to(device), to(dtype), to(device, dtype), to(tensor): the CPU is the only device
        (others raise); a dtype converts floating-point parameters and buffers."""
        dtype = _parse_to(args, dict(kwargs))
        return self if dtype is None else self._cast_floating(dtype)

    def cpu(self):
        return self

    def cuda(self, device=None):
        _device_str("cuda" if device is None else device, "Module.cuda")
        return self

    def xpu(self, device=None):
        _device_str("xpu", "Module.xpu")

    def ipu(self, device=None):
        _device_str("ipu", "Module.ipu")

    def to_empty(self, *, device):
        _device_str(device, "Module.to_empty")
        return self._apply(lambda t: _C.empty_like(t))

    def double(self):
        return self._cast_floating(_C.float64)

    def float(self):
        return self._cast_floating(_C.float32)

    def half(self):
        return self._cast_floating(_C.float16)

    def bfloat16(self):
        return self._cast_floating(_C.bfloat16)

    def type(self, dst_type):
        """Every parameter and buffer to dst_type, a dtype or a tensor type such as
        kiln.DoubleTensor (integer ones too, as torch)."""
        if isinstance(dst_type, _C.dtype):
            return self._apply(lambda t: t.to(dst_type))
        return self._apply(lambda t: t.type(dst_type))

    # ---- state ----
    def _state_entries(self, keep_vars):
        for n, p in self._local_parameters():
            if p is not None:
                yield n, p if keep_vars else p.detach()
        for n, b in self._local_buffers():
            if b is not None and n not in self._non_persistent_buffers_set:
                yield n, b if keep_vars else b.detach()

    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        """OrderedDict of dotted names to tensors: each module's parameters and persistent
        buffers, then its children's; detached views sharing memory (keep_vars=True: the
        tensors themselves), as torch."""
        if args:  # torch's deprecated positional (destination, prefix, keep_vars)
            destination = args[0]
            prefix = args[1] if len(args) > 1 else prefix
            keep_vars = args[2] if len(args) > 2 else keep_vars
        sd = OrderedDict() if destination is None else destination
        for mp, m in self.named_modules(prefix=prefix.rstrip(".") if prefix else ""):
            pre = mp + "." if mp else ""
            for n, t in m._state_entries(keep_vars):
                sd[pre + n] = t
        return sd

    def load_state_dict(self, state_dict, strict=True):
        """Copies values in place by name (converting dtype, as copy_ does). Checks every name
        and shape first and changes nothing when one is wrong (strict: the names must match
        exactly). Returns (missing_keys, unexpected_keys)."""
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        result = _IncompatibleKeys(missing, unexpected)
        for m in self.modules():
            for hook in list(m.__dict__.get("_load_state_dict_post_hooks", {}).values()):
                hook(m, result)
        if strict and (missing or unexpected):
            raise _C.Error(f"[load_state_dict] Error(s) in loading state_dict for "
                           f"{type(self).__name__}: missing keys {missing}, unexpected keys "
                           f"{unexpected}")
        vals = {}
        for k, v in state_dict.items():
            if k in own:
                v = v if isinstance(v, Tensor) else _C.tensor(v)
                if tuple(own[k].shape) != tuple(v.shape):
                    raise _C.ValueError(f"[load_state_dict] size mismatch for '{k}': copying a "
                                        f"param with shape {tuple(v.shape)}, the shape in the "
                                        f"current model is {tuple(own[k].shape)}")
                vals[k] = v
        for k, v in vals.items():
            dst = own[k].detach()
            dst.copy_(v if v.dtype == dst.dtype else v.to(dst.dtype))
        return result

    # ---- copying ----
    def __deepcopy__(self, memo):
        """A copy with its own parameters and buffers (clones, same requires_grad), as
        copy.deepcopy of a torch module; a tensor shared inside the module stays shared."""
        import copy
        if id(self) in memo:
            return memo[id(self)]
        for m in self.modules():
            for store in (m._parameters, m._buffers):
                for t in store.values():
                    if isinstance(t, Tensor) and id(t) not in memo:
                        c = t.detach().clone()
                        if t.requires_grad:
                            c.requires_grad_(True)
                        if store is m._parameters:
                            _mark_parameter(c)
                        memo[id(t)] = c
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            object.__setattr__(new, k, copy.deepcopy(v, memo) if not isinstance(v, Tensor)
                               else memo.get(id(v), v))
        return new

    # ---- printing (torch's format) ----
    def extra_repr(self):
        return ""

    def _get_name(self):
        return type(self).__name__

    def __repr__(self):
        extra = self.extra_repr()
        lines = extra.split("\n") if extra else []
        for n, m in self._modules.items():
            sub = repr(m).replace("\n", "\n  ")
            lines.append(f"({n}): {sub}")
        head = self._get_name() + "("
        if not lines:
            return head + ")"
        if len(lines) == 1 and not self._modules:
            return head + lines[0] + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"


class _RemovableHandle:
    def __init__(self, store, key):
        self._store, self._key = store, key

    def remove(self):
        self._store.pop(self._key, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


class _CppModule(Module):
    """A Kiln C++ module inside a Python module tree: its parameters are the C++ module's own
    tensors (the same memory, so optimizers and load_state_dict update both sides); buffers
    are read from the C++ module each time, as its forward may give them new tensors."""

    def __init__(self, cpp, extra=""):
        super().__init__()
        object.__setattr__(self, "_cpp", cpp)
        object.__setattr__(self, "_extra", extra)
        self._sync_parameters()

    def _sync_parameters(self):
        self._parameters.clear()
        for n, p in self._cpp.named_parameters():
            self._parameters[n] = p

    def _local_buffers(self):
        return self._cpp.named_buffers()

    def _state_entries(self, keep_vars):
        for n, t in list(self._parameters.items()) + list(self._cpp.named_buffers()):
            if t is not None:
                yield n, t if keep_vars else t.detach()

    def __getattr__(self, name):
        if name in ("_cpp", "_extra"):
            raise AttributeError(name)
        try:
            return Module.__getattr__(self, name)
        except AttributeError:
            for n, b in self._cpp.named_buffers():
                if n == name:
                    return b
            raise

    def __setattr__(self, name, value):
        if "_cpp" in self.__dict__ and name in self._parameters:
            raise _C.Error(f"[{type(self).__name__}] cannot replace parameter '{name}' of a C++ "
                           f"module; copy into it (load_state_dict or {name}.copy_) instead")
        Module.__setattr__(self, name, value)

    def forward(self, x):
        return self._cpp(x)

    def train(self, mode=True):
        self._cpp.train(bool(mode))
        return Module.train(self, mode)

    def _apply_tensors(self, fn):
        # The C++ module retypes its own tensors; then the Python side points at the new ones.
        probe = next(iter(self._parameters.values()), None)
        if probe is not None:
            dt = fn(probe).dtype
            if dt != probe.dtype:
                self._cpp.to(dt)
                self._sync_parameters()

    def extra_repr(self):
        return self._extra
