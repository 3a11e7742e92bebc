"""Module backward hooks (register_full_backward_hook), as torch's BackwardHook: identity
kiln.autograd.Functions around a module's tensor inputs and outputs; the outputs' one sees
grad_output, the inputs' one sees grad_input and calls the hooks (whose result may replace
grad_input)."""
from ... import _C


def _function_class():
    # Imported late: kiln.autograd imports after kiln.nn in kiln/__init__.py.
    from ...autograd import Function

    class _HookFunction(Function):
        @staticmethod
        def forward(ctx, on_grads, *tensors):
            ctx.on_grads = on_grads
            return tuple(t.detach() for t in tensors)

        @staticmethod
        def backward(ctx, *grads):
            return (None,) + tuple(ctx.on_grads(grads))

    return _HookFunction


_FN = []


def _apply(on_grads, tensors):
    if not _FN:
        _FN.append(_function_class())
    return _FN[0].apply(on_grads, *tensors)


def available():
    """Whether this build records Python autograd Functions (python/src/torch_compat.cpp)."""
    return hasattr(_C, "_function_record")


class BackwardHook:
    """One forward call's hook state."""

    def __init__(self, module, hooks, n_inputs):
        self.module, self.hooks, self.n_inputs = module, hooks, n_inputs
        self.input_index = None
        self.grad_outputs = None
        self.n_outputs = 0

    @staticmethod
    def _pack(index, values, n):
        out = [None] * n
        for i, v in zip(index, values):
            out[i] = v
        return tuple(out)

    def _call_hooks(self, grad_inputs, may_replace):
        for hook in self.hooks:
            res = hook(self.module, grad_inputs, self.grad_outputs)
            if res is None:
                continue
            if not may_replace:
                if not (isinstance(res, tuple) and all(r is None for r in res)):
                    raise _C.Error("[backward hook] Backward hook for Modules where no input "
                                   "requires gradient should always return None or None for "
                                   "all gradients.")
                continue
            if not isinstance(res, tuple) or len(res) != len(grad_inputs):
                raise _C.Error(f"[backward hook] hook returned {type(res).__name__} of length "
                               f"{len(res) if isinstance(res, tuple) else '-'}; expected a "
                               f"tuple of {len(grad_inputs)} (one per input)")
            grad_inputs = res
        return grad_inputs

    def setup_inputs(self, args):
        idx = [i for i, a in enumerate(args) if isinstance(a, _C.Tensor)]
        tensors = [args[i] for i in idx]
        if not (_C.is_grad_enabled() and any(t.requires_grad for t in tensors)):
            return args

        def on_grads(grads):
            packed = self._pack(self.input_index, grads, self.n_inputs)
            packed = self._call_hooks(packed, True)
            return [packed[i] for i in self.input_index]

        self.input_index = idx
        new = _apply(on_grads, tensors)
        out = list(args)
        for i, t in zip(idx, new):
            out[i] = t
        return tuple(out)

    def setup_outputs(self, result):
        single = isinstance(result, _C.Tensor)
        items = [result] if single else list(result) if isinstance(result, (tuple, list)) else []
        idx = [i for i, a in enumerate(items) if isinstance(a, _C.Tensor)]
        tensors = [items[i] for i in idx]
        if not (_C.is_grad_enabled() and any(t.requires_grad for t in tensors)):
            return result
        self.n_outputs = len(items)

        def on_grads(grads):
            self.grad_outputs = self._pack(idx, grads, self.n_outputs)
            if self.input_index is None:  # no input needs a gradient: call the hooks here
                self._call_hooks(self._pack([], [], self.n_inputs), False)
            return grads

        new = _apply(on_grads, tensors)
        for i, t in zip(idx, new):
            items[i] = t
        if single:
            return items[0]
        if hasattr(result, "_fields"):  # a namedtuple
            return type(result)(*items)
        return type(result)(items) if isinstance(result, tuple) else items
