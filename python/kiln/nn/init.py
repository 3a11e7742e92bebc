"""kiln.nn.init: torch.nn.init's initializers. Each fills its tensor in place without recording
autograd history and returns it; the distributions, gains and fan computations are torch's."""
import math
import warnings

from .. import _C, no_grad


def _fill(tensor, values):
    with no_grad():
        tensor.detach().copy_(values.to(tensor.dtype) if values.dtype != tensor.dtype else values)
    return tensor


def _shape(tensor):
    return list(tensor.shape)


def _float(tensor):
    return tensor.dtype if tensor.dtype.is_floating_point else _C.float32


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for a nonlinearity (torch's table)."""
    linear_fns = ["linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                  "conv_transpose3d"]
    if nonlinearity in linear_fns or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, (int, float)):
            slope = param
        else:
            raise _C.ValueError(f"[calculate_gain] negative_slope {param} is not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise _C.ValueError(f"[calculate_gain] unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor):
    if tensor.dim() < 2:
        raise _C.ValueError("[init] fan in and fan out can not be computed for a tensor with "
                            f"fewer than 2 dimensions (shape {tuple(tensor.shape)})")
    receptive = 1
    for s in _shape(tensor)[2:]:
        receptive *= s
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _calculate_correct_fan(tensor, mode):
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise _C.ValueError(f"[init] mode {mode} not supported, use 'fan_in' or 'fan_out'")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor, a=0.0, b=1.0):
    if not a <= b:
        raise _C.ValueError(f"[uniform_] expects a <= b, got [{a}, {b})")
    r = _C.rand(*_shape(tensor), dtype=_float(tensor))
    return _fill(tensor, r * (b - a) + a)


def normal_(tensor, mean=0.0, std=1.0):
    if not std >= 0:
        raise _C.ValueError(f"[normal_] std must be >= 0, got {std}")
    r = _C.randn(*_shape(tensor), dtype=_float(tensor))
    return _fill(tensor, r * std + mean)


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0):
    """N(mean, std) truncated to [a, b]: draws outside [a, b] are redrawn until none is left,
    which gives exactly the truncated distribution torch samples by inverse CDF."""
    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. "
                      "The distribution of values may be incorrect.", stacklevel=2)
    shape, dt = _shape(tensor), _float(tensor)
    with no_grad():
        v = _C.randn(*shape, dtype=dt) * std + mean
        for _ in range(1000):
            bad = (v < a) | (v > b)
            if not bool(bad.any()):
                break
            v = _C.where(bad, _C.randn(*shape, dtype=dt) * std + mean, v)
        return _fill(tensor, _C.clamp(v, a, b))


def constant_(tensor, val):
    with no_grad():
        tensor.detach().fill_(val)
    return tensor


def ones_(tensor):
    return constant_(tensor, 1.0)


def zeros_(tensor):
    return constant_(tensor, 0.0)


def eye_(tensor):
    if tensor.dim() != 2:
        raise _C.ValueError(f"[eye_] only 2-D tensors are supported, got shape "
                            f"{tuple(tensor.shape)}")
    return _fill(tensor, _C.eye(tensor.shape[0], tensor.shape[1], dtype=tensor.dtype))


def dirac_(tensor, groups=1):
    """Identity convolution kernels: weight [out, in, k...] with 1 at each kernel's centre."""
    d = tensor.dim()
    if d not in (3, 4, 5):
        raise _C.ValueError("[dirac_] only 3, 4 or 5-D tensors are supported")
    shape = _shape(tensor)
    if shape[0] % groups:
        raise _C.ValueError("[dirac_] dim 0 must be divisible by groups")
    out_per = shape[0] // groups
    min_dim = min(out_per, shape[1])
    w = _C.zeros(*shape, dtype=_float(tensor))
    centre = tuple(s // 2 for s in shape[2:])
    for g in range(groups):
        for i in range(min_dim):
            w[(g * out_per + i, i) + centre] = 1.0
    return _fill(tensor, w)


def xavier_uniform_(tensor, gain=1.0):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    a = gain * math.sqrt(6.0 / float(fan_in + fan_out))
    return uniform_(tensor, -a, a)


def xavier_normal_(tensor, gain=1.0):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std)


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu"):
    if 0 in _shape(tensor):
        warnings.warn("Initializing zero-element tensors is a no-op")
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    # gain * sqrt(3 / fan) (= torch's sqrt(3) * gain / sqrt(fan)), rounded as Kiln's C++ layers
    # compute it, so a Python layer and a C++ one from the same seed hold the same weights.
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / float(fan))
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu"):
    if 0 in _shape(tensor):
        warnings.warn("Initializing zero-element tensors is a no-op")
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return normal_(tensor, 0.0, std)


def orthogonal_(tensor, gain=1):
    """A (semi-)orthogonal matrix from the QR of a normal draw, signs fixed by R's diagonal
    (torch's method); dims after the first are flattened."""
    if tensor.dim() < 2:
        raise _C.ValueError("[orthogonal_] only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = _C.randn(rows, cols, dtype=_C.float64)
    if rows < cols:
        flat = flat.t()
    from .. import linalg
    q, r = linalg.qr(flat)
    q = q * _C.sign(_C.diagonal(r, 0, -2, -1))
    if rows < cols:
        q = q.t()
    return _fill(tensor, (q * gain).reshape(_shape(tensor)))


def sparse_(tensor, sparsity, std=0.01):
    """N(0, std) with a fraction `sparsity` of each column's entries zeroed."""
    if tensor.dim() != 2:
        raise _C.ValueError("[sparse_] only 2-D tensors are supported")
    rows, cols = tensor.shape
    num_zeros = int(math.ceil(sparsity * rows))
    vals = _C.randn(rows, cols, dtype=_C.float64) * std
    if num_zeros:
        order = _C.argsort(_C.rand(rows, cols), 0)
        keep = (order >= num_zeros).to(_C.float64)
        vals = vals * keep
    return _fill(tensor, vals)


def _deprecated(new):
    def old(*args, **kwargs):
        warnings.warn(f"nn.init.{new.__name__[:-1]} is now deprecated in favor of "
                      f"nn.init.{new.__name__}.", stacklevel=2)
        return new(*args, **kwargs)
    old.__name__ = new.__name__[:-1]
    old.__doc__ = f"Deprecated spelling of {new.__name__}."
    return old


uniform = _deprecated(uniform_)
normal = _deprecated(normal_)
constant = _deprecated(constant_)
eye = _deprecated(eye_)
dirac = _deprecated(dirac_)
xavier_uniform = _deprecated(xavier_uniform_)
xavier_normal = _deprecated(xavier_normal_)
kaiming_uniform = _deprecated(kaiming_uniform_)
kaiming_normal = _deprecated(kaiming_normal_)
orthogonal = _deprecated(orthogonal_)
sparse = _deprecated(sparse_)
