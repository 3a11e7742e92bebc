"""kiln.jit's Python side over the C++ engine (_C.JitFunction): keyword and default arguments,
arguments the engine cannot take (None, strings, other objects: one compiled function per value,
as torch.compile guards on them), and kiln.jit(module), which compiles a module's forward."""
import functools
import inspect

from . import _C

_VAR = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def _traceable(v):
    """Whether the engine takes v as an argument (a tensor, a number, a bool, a list of tensors)."""
    if isinstance(v, (_C.Tensor, bool, int, float)):
        return True
    if isinstance(v, (list, tuple)):
        return len(v) > 0 and all(isinstance(e, _C.Tensor) for e in v)
    return False


def _static_key(v):
    try:
        hash(v)
        return (type(v), v)
    except TypeError:
        return (type(v), id(v))


class JitFunction:
    """A jitted Python function (see kiln.jit): binds keyword and default arguments to the
    function's parameters, then calls the compiled function for the values of the arguments the
    engine cannot take."""

    def __init__(self, fn, name, opts, signature=None, extra_key=None):
        self._fn = fn
        self._name = name
        self._opts = opts  # max_recompiles, dynamic_dims, runtime_scalars, donate
        if signature is None:
            try:
                signature = inspect.signature(fn)
            except (TypeError, ValueError):
                signature = None
        self._sig = signature
        params = list(signature.parameters.values()) if signature is not None else []
        self._names = [p.name for p in params]
        # *args or **kwargs: arguments go to the engine as given, positionally.
        self._plain = signature is None or any(p.kind in _VAR for p in params)
        self._extra_key = extra_key
        self._compiled = {}
        self.__wrapped__ = fn
        functools.update_wrapper(self, fn, updated=())

    def _compiled_for(self, key, dyn_names, static):
        c = self._compiled.get(key)
        if c is not None:
            return c
        fn, sig = self._fn, self._sig
        max_recompiles, dynamic_dims, runtime_scalars, donate = self._opts
        if dyn_names is None:
            callee, rs, dn = fn, list(runtime_scalars), list(donate)
        else:
            static = dict(static)

            def callee(*flat):
                arguments = dict(zip(dyn_names, flat))
                arguments.update(static)
                ordered = {n: arguments[n] for n in self._names if n in arguments}
                ba = inspect.BoundArguments(sig, ordered)
                return fn(*ba.args, **ba.kwargs)

            # Positions given by parameter become positions among the arguments traced.
            where = {self._names.index(n): i for i, n in enumerate(dyn_names)}
            rs = [where[p] for p in runtime_scalars if p in where]
            dn = [where[p] for p in donate if p in where]
        c = _C.JitFunction(callee, self._name, max_recompiles, dynamic_dims, rs, dn)
        self._compiled[key] = c
        return c

    def __call__(self, *args, **kwargs):
        extra = self._extra_key() if self._extra_key is not None else ()
        if self._plain:
            if kwargs:
                raise _C.TypeError(f"[jit] '{self._name}': keyword arguments need a function "
                                   "without *args or **kwargs")
            return self._compiled_for(("plain", extra), None, ())(*args)
        # The common case: every parameter given positionally, each one the engine takes.
        if not kwargs and len(args) == len(self._names) and all(map(_traceable, args)) \
                and all(p.kind != inspect.Parameter.KEYWORD_ONLY
                        for p in self._sig.parameters.values()):
            return self._compiled_for(("pos", extra), None, ())(*args)
        try:
            ba = self._sig.bind(*args, **kwargs)
        except TypeError as e:
            raise _C.TypeError(f"[jit] '{self._name}': {e}") from None
        ba.apply_defaults()
        dyn_names, dyn, static = [], [], []
        for n, v in ba.arguments.items():
            if _traceable(v):
                dyn_names.append(n)
                dyn.append(v)
            else:
                static.append((n, v))
        key = ("bound", tuple(dyn_names), tuple((n, _static_key(v)) for n, v in static), extra)
        return self._compiled_for(key, dyn_names, static)(*dyn)

    def explain(self):
        """Each compiled function's explain() (one per set of values of the arguments the engine
        cannot take, and per train/eval state of a jitted module)."""
        return "\n".join(c.explain() for c in self._compiled.values())

    @property
    def stats(self):
        """hits, misses, compiles, ... summed over the compiled functions."""
        total = {}
        for c in self._compiled.values():
            for k, v in c.stats.items():
                total[k] = (total.get(k, False) or v) if isinstance(v, bool) \
                    else total.get(k, 0) + v
        return total


class JitModule:
    """kiln.jit(module): calls the module through a jitted function of its forward. Parameters
    and buffers are captured state (inputs of the compiled graph, held by identity), so gradients
    reach them, optimizer steps are seen without recompiling and BatchNorm statistics move; the
    module's train/eval state picks the compiled version. Everything else is the module's."""

    def __init__(self, module, name, opts):
        object.__setattr__(self, "_orig_mod", module)
        try:
            sig = inspect.signature(module.forward)
        except (TypeError, ValueError):
            sig = None
        object.__setattr__(self, "_jit", JitFunction(
            module.__call__, name or type(module).__name__, opts, signature=sig,
            extra_key=lambda: tuple(m.training for m in module.modules())))

    def __call__(self, *args, **kwargs):
        return self._jit(*args, **kwargs)

    def explain(self):
        return self._jit.explain()

    @property
    def stats(self):
        return self._jit.stats

    def __getattr__(self, name):
        return getattr(self._orig_mod, name)

    def __setattr__(self, name, value):
        setattr(self._orig_mod, name, value)

    def __repr__(self):
        return f"JitModule({self._orig_mod!r})"
