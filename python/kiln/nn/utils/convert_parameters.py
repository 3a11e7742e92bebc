"""parameters_to_vector and vector_to_parameters, as torch.nn.utils'."""
from ... import _C


def parameters_to_vector(parameters):
    """One 1-D tensor of all parameters, flattened in order (differentiable, as torch)."""
    return _C.cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec, parameters):
    """Copies consecutive slices of the 1-D vec into the parameters, in order."""
    if not isinstance(vec, _C.Tensor):
        raise _C.TypeError(f"[vector_to_parameters] expected vec to be a Tensor, got "
                           f"{type(vec).__name__}")
    if vec.dim() != 1:
        raise _C.ValueError(f"[vector_to_parameters] vec must be 1-D, got shape "
                            f"{tuple(vec.shape)}")
    prev = _C.is_grad_enabled()
    _C._set_grad_enabled(False)
    try:
        i = 0
        for p in parameters:
            n = p.numel()
            if i + n > vec.numel():
                raise _C.ValueError(f"[vector_to_parameters] vec has {vec.numel()} elements, "
                                    f"fewer than the parameters")
            p.detach().copy_(vec[i:i + n].reshape(list(p.shape)).to(p.dtype))
            i += n
    finally:
        _C._set_grad_enabled(prev)
