"""kiln.autograd.functional: torch.autograd.functional's jacobian, hessian, vjp, jvp, hvp and
vhp, built on kiln.autograd.grad (reverse mode: one backward pass per output element for
jacobian; jvp and hvp by the double-backward trick, as torch does without forward AD)."""
from .. import _C

_T = _C.Tensor


def _as_tuple(x):
    return (x, False) if isinstance(x, tuple) else ((x,), True)


def _prepare(inputs, create_graph):
    """Fresh differentiable views of the inputs: detached unless the caller's graph is kept."""
    out = []
    for x in inputs:
        if not isinstance(x, _T):
            raise _C.TypeError(f"[autograd.functional] inputs must be tensors, got "
                               f"{type(x).__name__}")
        if create_graph and x.requires_grad:
            out.append(x.view(*x.shape) if x.dim() else x * 1)
        else:
            out.append(x.detach().requires_grad_(True))
    return tuple(out)


class _enable_grad:
    def __enter__(self):
        self.prev = _C.is_grad_enabled()
        _C._set_grad_enabled(True)

    def __exit__(self, *exc):
        _C._set_grad_enabled(self.prev)
        return False


def _grads(outputs, inputs, grad_outputs, create_graph, strict, what):
    gs = _C.grad(list(outputs), list(inputs), grad_outputs, retain_graph=True,
                 create_graph=create_graph, allow_unused=True)
    res = []
    for g, x in zip(gs, inputs):
        if g is None:
            if strict:
                raise _C.Error(f"[autograd.functional.{what}] the output is independent of an "
                               "input (strict=True)")
            g = _C.zeros(tuple(x.shape), dtype=x.dtype)
        res.append(g if create_graph else g.detach())
    return tuple(res)


def _untuple(res, single):
    return res[0] if single else res


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False,
             strategy="reverse-mode"):
    """d func(inputs) / d inputs: for one input and one output a tensor of shape
    output.shape + input.shape; tuples of them (outputs outer, inputs inner) otherwise."""
    if strategy != "reverse-mode":
        raise _C.ValueError("[autograd.functional.jacobian] only strategy='reverse-mode' is "
                            "supported")
    ins, single_in = _as_tuple(inputs)
    with _enable_grad():
        xs = _prepare(ins, create_graph)
        outs, single_out = _as_tuple(func(*xs))
        result = []
        for out in outs:
            if not isinstance(out, _T):
                raise _C.TypeError("[autograd.functional.jacobian] func must return tensors")
            flat = out.reshape(-1)
            rows = [[] for _ in xs]
            for j in range(flat.numel()):
                if flat.requires_grad:
                    gs = _grads([flat[j]], xs, None, create_graph, strict, "jacobian")
                else:
                    if strict:
                        raise _C.Error("[autograd.functional.jacobian] an output does not "
                                       "require grad (strict=True)")
                    gs = tuple(_C.zeros(tuple(x.shape), dtype=x.dtype) for x in xs)
                for k, g in enumerate(gs):
                    rows[k].append(g)
            per_in = []
            for k, x in enumerate(xs):
                shape = tuple(out.shape) + tuple(x.shape)
                per_in.append(_C.stack(rows[k], 0).reshape(*shape) if rows[k] else
                              _C.zeros(shape, dtype=x.dtype))
            result.append(_untuple(tuple(per_in), single_in))
    return _untuple(tuple(result), single_out)


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False,
            outer_jacobian_strategy="reverse-mode"):
    """The Hessian of a scalar function: shape input.shape + input.shape (tuples of tuples for
    several inputs)."""
    ins, single_in = _as_tuple(inputs)

    def scalar(*xs):
        out = func(*xs)
        if not isinstance(out, _T) or out.numel() != 1:
            raise _C.ValueError("[autograd.functional.hessian] the function given to hessian "
                                "should return a single Tensor with one element")
        return out.reshape(())

    def grad_fn(*xs):
        return jacobian(scalar, xs, create_graph=True, strict=strict)

    res = jacobian(grad_fn, ins, create_graph=create_graph, strict=strict)
    if single_in:
        return res[0][0] if isinstance(res[0], tuple) else res[0]
    return res


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), v^T J)."""
    ins, single_in = _as_tuple(inputs)
    with _enable_grad():
        xs = _prepare(ins, create_graph)
        outs, single_out = _as_tuple(func(*xs))
        if v is None:
            if len(outs) != 1 or outs[0].numel() != 1:
                raise _C.ValueError("[autograd.functional.vjp] v can only be None if the output "
                                    "is a single tensor with one element")
            vs = None
        else:
            vs = list(_as_tuple(v)[0])
        res = _grads(outs, xs, vs, create_graph, strict, "vjp")
    outs = tuple(o if create_graph else o.detach() for o in outs)
    return _untuple(outs, single_out), _untuple(res, single_in)


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), J v), by differentiating v^T J with respect to a dummy v."""
    ins, single_in = _as_tuple(inputs)
    with _enable_grad():
        xs = _prepare(ins, create_graph)
        outs, single_out = _as_tuple(func(*xs))
        if v is None:
            if len(xs) != 1 or xs[0].numel() != 1:
                raise _C.ValueError("[autograd.functional.jvp] v can only be None if the input "
                                    "is a single tensor with one element")
            vs = [_C.ones(tuple(xs[0].shape), dtype=xs[0].dtype)]
        else:
            vs = list(_as_tuple(v)[0])
        dummies = [_C.zeros(tuple(o.shape), dtype=o.dtype).requires_grad_(True) for o in outs]
        g = _grads(outs, xs, dummies, True, strict, "jvp")
        res = _grads(g, dummies, vs, create_graph, strict, "jvp")
    outs = tuple(o if create_graph else o.detach() for o in outs)
    return _untuple(outs, single_out), _untuple(res, single_out)


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), v^T H) of a scalar function."""
    ins, single_in = _as_tuple(inputs)
    with _enable_grad():
        xs = _prepare(ins, create_graph)
        out = func(*xs)
        if not isinstance(out, _T) or out.numel() != 1:
            raise _C.ValueError("[autograd.functional.vhp] the function should return a single "
                                "Tensor with one element")
        g = _grads([out], xs, None, True, strict, "vhp")
        vs = list(_as_tuple(v)[0]) if v is not None else None
        res = _grads(g, xs, vs, create_graph, strict, "vhp")
    return (out if create_graph else out.detach()), _untuple(res, single_in)


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), H v): the Hessian is symmetric, so H v = v^T H."""
    return vhp(func, inputs, v, create_graph, strict)
