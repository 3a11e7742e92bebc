"""kiln.autograd.Function: a differentiable op written in Python, as torch.autograd.Function.

    class Exp(kiln.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            y, = ctx.saved_tensors
            return g * y

    y = Exp.apply(x)

forward runs with autograd off; when an input requires grad, the outputs are recorded on the
tape as one op (`py_function`, python/src/torch_compat.cpp) whose gradient rule calls the
Function's backward. The op's first input is a token tensor whose storage keeps the ctx alive
exactly as long as the tape node, so saved tensors are freed with the graph (backward without
retain_graph releases them). Under jit tracing or in a Graph, forward is traced through instead
(its own ops give the gradient).
"""
import functools
import itertools
import weakref

from .. import _C

_T = _C.Tensor
_ids = itertools.count(1)
_live = weakref.WeakValueDictionary()  # ctx_id -> ctx, while the tape node holds the ctx


class _Holder(bytearray):
    """A one-byte buffer whose Python object carries the ctx: kiln.from_numpy of it is the token
    tensor, whose storage (and so the ctx) lives as long as the node that saved it."""

    __slots__ = ("ctx",)


class FunctionCtx:
    """The `ctx` of forward and backward: save_for_backward / saved_tensors,
    needs_input_grad, mark_non_differentiable, mark_dirty, set_materialize_grads; any other
    attribute may be set freely."""

    def __init__(self):
        self._saved = ()
        self._non_diff = ()
        self.materialize_grads = True
        self.needs_input_grad = ()

    def save_for_backward(self, *tensors):
        for t in tensors:
            if t is not None and not isinstance(t, _T):
                raise _C.TypeError(
                    f"[autograd.Function] save_for_backward can only save tensors or None, got "
                    f"{type(t).__name__}")
        self._saved = tensors

    @property
    def saved_tensors(self):
        return self._saved

    saved_variables = saved_tensors

    def mark_non_differentiable(self, *tensors):
        self._non_diff = self._non_diff + tuple(tensors)

    def mark_dirty(self, *tensors):
        """Accepted; Kiln records the outputs as new tensors either way."""

    def set_materialize_grads(self, value):
        self.materialize_grads = bool(value)


def _differentiable(t, ctx):
    return t.dtype.is_floating_point and not any(t is n for n in ctx._non_diff)


class Function:
    """Subclass with static forward(ctx, *args) and backward(ctx, *grad_outputs); call
    `apply`. backward returns one gradient (or None) per forward argument."""

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("[autograd.Function] subclasses must define forward")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("[autograd.Function] subclasses must define backward to be "
                                  "differentiated")

    vjp = backward

    @classmethod
    def apply(cls, *args, **kwargs):
        ctx = FunctionCtx()
        ctx.needs_input_grad = tuple(isinstance(a, _T) and a.requires_grad for a in args)
        tensors = [(i, a) for i, a in enumerate(args) if isinstance(a, _T)]
        symbolic = any(a.is_symbolic for _, a in tensors) or _capturing()
        if symbolic or not _HAS_RECORD:  # traced through: forward's own ops give the gradient
            return cls.forward(ctx, *args, **kwargs)
        prev = _C.is_grad_enabled()
        _C._set_grad_enabled(False)
        try:
            out = cls.forward(ctx, *args, **kwargs)
        finally:
            _C._set_grad_enabled(prev)
        if not (prev and any(ctx.needs_input_grad)):
            return out
        single = not isinstance(out, tuple)
        outs = (out,) if single else out
        diff = [k for k, o in enumerate(outs) if isinstance(o, _T) and _differentiable(o, ctx)]
        if not diff:
            return out
        ctx._cls = cls
        ctx._nargs = len(args)
        ctx._tensor_pos = [i for i, _ in tensors]
        ctx._outs = [(o.dtype, tuple(o.shape)) if isinstance(o, _T) else None for o in outs]
        ctx._diff = diff
        cid = next(_ids)
        holder = _Holder(1)
        holder.ctx = ctx
        _live[cid] = ctx
        token = _C.from_numpy(holder)
        recorded = _C._function_record(token, [outs[k] for k in diff], [a for _, a in tensors],
                                       cid)
        result = list(outs)
        for k, r in zip(diff, recorded):
            result[k] = r
        return result[0] if single else tuple(result)


def _run_backward(ctx_id, grads, needs):
    """Called by the tape (torch_compat.cpp) with the gradients of the recorded outputs."""
    ctx = _live.get(ctx_id)
    if ctx is None:
        raise _C.Error("[autograd.Function] backward called after its graph was freed; "
                       "pass retain_graph=True to backward twice")
    full = []
    for k, meta in enumerate(ctx._outs):
        if k in ctx._diff:
            g = grads[ctx._diff.index(k)]
        else:
            g = None
        if g is None and meta is not None and ctx.materialize_grads:
            g = _C.zeros(meta[1], dtype=meta[0])
        full.append(g)
    res = ctx._cls.backward(ctx, *full)
    if not isinstance(res, tuple):
        res = (res,)
    if len(res) < ctx._nargs or any(r is not None for r in res[ctx._nargs:]):
        raise _C.Error(
            f"[autograd.Function] function {ctx._cls.__name__}.backward returned an incorrect "
            f"number of gradients (expected {ctx._nargs}, got {len(res)})")
    out = []
    for k, pos in enumerate(ctx._tensor_pos):
        g = res[pos]
        if g is not None and not isinstance(g, _T):
            raise _C.TypeError(
                f"[autograd.Function] {ctx._cls.__name__}.backward returned a "
                f"{type(g).__name__} as the gradient of argument {pos}; expected a tensor or None")
        out.append(g if needs[k] else None)
    return out


# Until the extension registers torch_compat.cpp, Functions are traced through.
_HAS_RECORD = hasattr(_C, "_function_record")
_capturing = getattr(_C, "_capturing", lambda: False)
if _HAS_RECORD:
    _C._set_function_backward(_run_backward)


def once_differentiable(fn):
    """torch.autograd.function.once_differentiable: backward runs without recording."""
    @functools.wraps(fn)
    def wrapper(ctx, *args):
        prev = _C.is_grad_enabled()
        _C._set_grad_enabled(False)
        try:
            return fn(ctx, *args)
        finally:
            _C._set_grad_enabled(prev)
    return wrapper


class InplaceFunction(Function):
    def __init__(self, inplace=False):
        self.inplace = inplace
