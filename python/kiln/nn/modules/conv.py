"""Convolutions (1-D to 3-D, and transposed) with torch.nn's arguments, padding modes and
initialization, over Kiln's conv ops."""
import math

from ... import _C
from .. import init
from .linear import _weight_and_bias
from .module import Module, _device_str


def _ntuple(v, n):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


_CONV = {1: _C.conv1d, 2: _C.conv2d, 3: _C.conv3d}
_CONV_T = {1: _C.conv_transpose1d, 2: _C.conv_transpose2d, 3: _C.conv_transpose3d}


class _ConvNd(Module):
    _n = 2
    _transposed = False

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation,
                 transposed, output_padding, groups, bias, padding_mode, device=None, dtype=None):
        super().__init__()
        name = type(self).__name__
        _device_str(device, type(self).__name__)
        dt = dtype or _C.float32
        n = self._n
        if groups <= 0:
            raise _C.ValueError(f"[{name}] groups must be a positive integer, got {groups}")
        if in_channels % groups or out_channels % groups:
            raise _C.ValueError(f"[{name}] in_channels ({in_channels}) and out_channels "
                                f"({out_channels}) must be divisible by groups ({groups})")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise _C.ValueError(f"[{name}] padding_mode must be 'zeros', 'reflect', 'replicate' "
                                f"or 'circular', got '{padding_mode}'")
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise _C.ValueError(f"[{name}] padding must be 'same', 'valid' or ints, got "
                                    f"'{padding}'")
            if padding == "same" and any(s != 1 for s in _ntuple(stride, n)):
                raise _C.ValueError(f"[{name}] padding='same' is not supported for strided "
                                    f"convolutions")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _ntuple(kernel_size, n)
        self.stride = _ntuple(stride, n)
        self.padding = padding if isinstance(padding, str) else _ntuple(padding, n)
        self.dilation = _ntuple(dilation, n)
        self.transposed, self.output_padding = transposed, _ntuple(output_padding, n)
        self.groups, self.padding_mode = groups, padding_mode
        if transposed:
            shape = (in_channels, out_channels // groups) + self.kernel_size
        else:
            shape = (out_channels, in_channels // groups) + self.kernel_size
        _weight_and_bias(self, shape, bias, out_channels, dt)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def _explicit_pad(self):
        """F.pad's list for a non-zeros padding_mode (last dim first, as F.pad takes it)."""
        if self.padding == "valid":
            return None
        if self.padding == "same":
            pads = []
            for d, k in zip(reversed(self.dilation), reversed(self.kernel_size)):
                total = d * (k - 1)
                pads += [total // 2, total - total // 2]
            return pads
        pads = []
        for p in reversed(self.padding):
            pads += [p, p]
        return pads

    def forward(self, input):
        conv = _CONV[self._n]
        if self.padding_mode != "zeros":
            pads = self._explicit_pad()
            x = input if pads is None else _C.pad(input, pads, self.padding_mode)
            return conv(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)
        pad = self.padding if isinstance(self.padding, str) else list(self.padding)
        return conv(input, self.weight, self.bias, list(self.stride), pad, list(self.dilation),
                    self.groups)

    def extra_repr(self):
        n = self._n
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0,) * n:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * n:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * n:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class _Conv(_ConvNd):
    """Conv1d, Conv2d and Conv3d: torch's signature, differing only in _n."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         False, 0, groups, bias, padding_mode, device, dtype)


class Conv1d(_Conv):
    """1-D convolution over [N, C, L]; weight [out, in/groups, k]."""
    _n = 1


class Conv2d(_Conv):
    """2-D convolution over [N, C, H, W]; weight [out, in/groups, kH, kW]."""
    _n = 2


class Conv3d(_Conv):
    """3-D convolution over [N, C, D, H, W]; weight [out, in/groups, kD, kH, kW]."""
    _n = 3


class _ConvTransposeNd(_ConvNd):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        if padding_mode != "zeros":
            raise _C.ValueError(f"[{type(self).__name__}] only padding_mode 'zeros' is supported "
                                f"(as torch), got '{padding_mode}'")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         True, output_padding, groups, bias, padding_mode, device, dtype)

    def _output_padding(self, input, output_size):
        if output_size is None:
            return list(self.output_padding)
        n = self._n
        size = list(output_size)[-n:]
        out = []
        for d in range(n):
            i = input.shape[input.dim() - n + d]
            base = ((i - 1) * self.stride[d] - 2 * self.padding[d]
                    + self.dilation[d] * (self.kernel_size[d] - 1) + 1)
            extra = size[d] - base
            if not 0 <= extra < max(self.stride[d], self.dilation[d]):
                raise _C.ValueError(f"[{type(self).__name__}] output_size {list(output_size)} "
                                    f"cannot be reached from input shape {tuple(input.shape)}")
            out.append(extra)
        return out

    def forward(self, input, output_size=None):
        op = self._output_padding(input, output_size)
        fn = _CONV_T[self._n]
        if self._n == 1:
            return fn(input, self.weight, self.bias, self.stride[0], self.padding[0], op[0],
                      self.groups, self.dilation[0])
        return fn(input, self.weight, self.bias, list(self.stride), list(self.padding), op,
                  self.groups, list(self.dilation))


class ConvTranspose1d(_ConvTransposeNd):
    """Transposed 1-D convolution; weight [in, out/groups, k]."""
    _n = 1


class ConvTranspose2d(_ConvTransposeNd):
    """Transposed 2-D convolution; weight [in, out/groups, kH, kW]."""
    _n = 2


class ConvTranspose3d(_ConvTransposeNd):
    """Transposed 3-D convolution; weight [in, out/groups, kD, kH, kW]."""
    _n = 3
