"""Activation modules with torch.nn's constructor arguments; inplace=True writes the result into
the input and returns it, as torch does."""
from ... import _C
from .. import functional as F
from .module import Module, Parameter


def _inplace_repr(inplace):
    return "inplace=True" if inplace else ""


class ReLU(Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.relu(input, self.inplace)

    def extra_repr(self):
        return _inplace_repr(self.inplace)


class ReLU6(Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.relu6(input, self.inplace)

    def extra_repr(self):
        return _inplace_repr(self.inplace)


class Hardtanh(Module):
    def __init__(self, min_val=-1.0, max_val=1.0, inplace=False, min_value=None, max_value=None):
        super().__init__()
        self.min_val = min_val if min_value is None else min_value
        self.max_val = max_val if max_value is None else max_value
        if self.max_val <= self.min_val:
            raise _C.ValueError(f"[Hardtanh] max_val ({self.max_val}) must be greater than "
                                f"min_val ({self.min_val})")
        self.inplace = inplace

    def forward(self, input):
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self):
        s = f"min_val={self.min_val}, max_val={self.max_val}"
        return s + (", inplace=True" if self.inplace else "")


class _Simple(Module):
    """An activation with only inplace (or nothing) to configure."""
    _fn = None
    _has_inplace = True

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        out = type(self)._fn(input)
        return F._inplace(input, out, self.inplace) if self.inplace else out

    def extra_repr(self):
        return _inplace_repr(self.inplace)


def _simple(name, fn, doc, inplace=True):
    if inplace:
        return type(name, (_Simple,), {"_fn": staticmethod(fn), "__doc__": doc})

    def forward(self, input):
        return fn(input)

    return type(name, (Module,), {"forward": forward, "__doc__": doc})


SiLU = _simple("SiLU", _C.silu, "x * sigmoid(x).")
Mish = _simple("Mish", _C.mish, "x * tanh(softplus(x)).")
SELU = _simple("SELU", _C.selu, "Scaled ELU with torch's constants.")
Hardswish = _simple("Hardswish", _C.hardswish, "x * relu6(x + 3) / 6.")
Hardsigmoid = _simple("Hardsigmoid", _C.hardsigmoid, "relu6(x + 3) / 6.")
Sigmoid = _simple("Sigmoid", _C.sigmoid, "1 / (1 + exp(-x)).", inplace=False)
Tanh = _simple("Tanh", _C.tanh, "tanh(x).", inplace=False)
LogSigmoid = _simple("LogSigmoid", _C.logsigmoid, "log(sigmoid(x)).", inplace=False)
Softsign = _simple("Softsign", F.softsign, "x / (1 + |x|).", inplace=False)
Tanhshrink = _simple("Tanhshrink", F.tanhshrink, "x - tanh(x).", inplace=False)


class ELU(Module):
    def __init__(self, alpha=1.0, inplace=False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input):
        return F.elu(input, self.alpha, self.inplace)

    def extra_repr(self):
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class CELU(ELU):
    def forward(self, input):
        return F.celu(input, self.alpha, self.inplace)


class LeakyReLU(Module):
    def __init__(self, negative_slope=0.01, inplace=False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, input):
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class RReLU(Module):
    def __init__(self, lower=1.0 / 8, upper=1.0 / 3, inplace=False):
        super().__init__()
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, input):
        return F.rrelu(input, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self):
        s = f"lower={self.lower}, upper={self.upper}"
        return s + (", inplace=True" if self.inplace else "")


class Threshold(Module):
    def __init__(self, threshold, value, inplace=False):
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def forward(self, input):
        return F.threshold(input, self.threshold, self.value, self.inplace)

    def extra_repr(self):
        return f"threshold={self.threshold}, value={self.value}" + (
            ", inplace=True" if self.inplace else "")


class GELU(Module):
    def __init__(self, approximate="none"):
        super().__init__()
        if approximate is True:
            approximate = "tanh"
        elif approximate is False:
            approximate = "none"
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, self.approximate)

    def extra_repr(self):
        return f"approximate='{self.approximate}'"


class Softplus(Module):
    def __init__(self, beta=1, threshold=20):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input):
        return _C.softplus(input, self.beta, self.threshold)

    def extra_repr(self):
        return f"beta={self.beta}, threshold={self.threshold}"


class Hardshrink(Module):
    def __init__(self, lambd=0.5):
        super().__init__()
        self.lambd = lambd

    def forward(self, input):
        return F.hardshrink(input, self.lambd)

    def extra_repr(self):
        return f"{self.lambd}"


class Softshrink(Hardshrink):
    def forward(self, input):
        return F.softshrink(input, self.lambd)


class PReLU(Module):
    """max(0, x) + a * min(0, x) with a learned a (1 or num_parameters = channels)."""

    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None):
        super().__init__()
        from .module import _device_str
        _device_str(device, type(self).__name__)
        self.num_parameters = num_parameters
        self.weight = Parameter(_C.full([num_parameters], init, dtype=dtype or _C.float32))

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self):
        return f"num_parameters={self.num_parameters}"


class GLU(Module):
    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return _C.glu(input, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class Softmax(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.softmax(input, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    def forward(self, input):
        return F.log_softmax(input, self.dim)


class Softmin(Softmax):
    def forward(self, input):
        return F.softmax(-input, self.dim)


class Softmax2d(Module):
    """Softmax over the channels of [N, C, H, W] or [C, H, W]."""

    def forward(self, input):
        if input.dim() not in (3, 4):
            raise _C.ValueError(f"[Softmax2d] expects a 3-D or 4-D input, got shape "
                                f"{tuple(input.shape)}")
        return _C.softmax(input, -3)
