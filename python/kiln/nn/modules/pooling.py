"""Pooling, padding, resampling and other one-call modules with torch.nn's arguments: each is a
functional call with the arguments it was built with."""
from ... import _C
from .. import functional as F
from .module import Module


def _ntuple(v, n):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


class _Fn(Module):
    """A module whose forward is one functional call with the arguments it was built with;
    the arguments read as attributes (m.kernel_size), and _repr is torch's extra_repr."""
    _fn = None
    _repr = None

    def __init__(self, **kw):
        super().__init__()
        object.__setattr__(self, "_kw", kw)

    def __getattr__(self, name):
        kw = self.__dict__.get("_kw")
        if kw is not None and name in kw:
            return kw[name]
        return Module.__getattr__(self, name)

    def forward(self, input):
        return type(self)._fn(input, **self._kw)

    def extra_repr(self):
        if self._repr is not None:
            return self._repr.format(**self._kw)
        return ", ".join(f"{k}={v!r}" for k, v in self._kw.items())


def _nd(base, n, fn):
    """The n-D form of a 1-D (or 3-D) module: the same arguments and repr, fn the functional
    it calls (MaxPool2d beside MaxPool1d)."""
    name = base.__name__[:-2] + f"{n}d"
    return type(name, (base,), {"_fn": staticmethod(fn), "_n": n, "__doc__": f"torch.nn.{name}."})


class MaxPool1d(_Fn):
    _fn = staticmethod(_C.max_pool1d)
    _repr = ("kernel_size={kernel_size}, stride={stride}, padding={padding}, "
             "dilation={dilation}, ceil_mode={ceil_mode}")

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        stride = stride if stride is not None else kernel_size
        super().__init__(kernel_size=kernel_size, stride=stride, padding=padding,
                         dilation=dilation, ceil_mode=ceil_mode, return_indices=return_indices)


MaxPool2d = _nd(MaxPool1d, 2, _C.max_pool2d)
MaxPool3d = _nd(MaxPool1d, 3, _C.max_pool3d)


class AvgPool1d(_Fn):
    _fn = staticmethod(_C.avg_pool1d)
    _repr = "kernel_size={kernel_size}, stride={stride}, padding={padding}"

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True):
        kernel_size = _ntuple(kernel_size, 1)  # torch keeps AvgPool1d's sizes as 1-tuples
        stride = _ntuple(stride, 1) if stride is not None else kernel_size
        super().__init__(kernel_size=kernel_size, stride=stride, padding=_ntuple(padding, 1),
                         ceil_mode=ceil_mode, count_include_pad=count_include_pad)


class AvgPool3d(_Fn):
    """torch.nn.AvgPool3d (AvgPool2d is its 2-D form; AvgPool1d keeps torch's 1-tuples)."""
    _fn = staticmethod(_C.avg_pool3d)
    _repr = "kernel_size={kernel_size}, stride={stride}, padding={padding}"

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):
        stride = stride if stride is not None else kernel_size
        super().__init__(kernel_size=kernel_size, stride=stride, padding=padding,
                         ceil_mode=ceil_mode, count_include_pad=count_include_pad,
                         divisor_override=divisor_override)


class MaxUnpool1d(_Fn):
    _fn = staticmethod(_C.max_unpool1d)
    _repr = "kernel_size={kernel_size}, stride={stride}, padding={padding}"
    _n = 1

    def __init__(self, kernel_size, stride=None, padding=0):
        n = self._n
        super().__init__(kernel_size=_ntuple(kernel_size, n),
                         stride=_ntuple(stride if stride is not None else kernel_size, n),
                         padding=_ntuple(padding, n))

    def forward(self, input, indices, output_size=None):
        return type(self)._fn(input, indices, output_size=output_size, **self._kw)


MaxUnpool2d = _nd(MaxUnpool1d, 2, _C.max_unpool2d)
MaxUnpool3d = _nd(MaxUnpool1d, 3, _C.max_unpool3d)


class LPPool1d(_Fn):
    _fn = staticmethod(_C.lp_pool1d)
    _repr = ("norm_type={norm_type}, kernel_size={kernel_size}, stride={stride}, "
             "ceil_mode={ceil_mode}")

    def __init__(self, norm_type, kernel_size, stride=None, ceil_mode=False):
        super().__init__(norm_type=norm_type, kernel_size=kernel_size, stride=stride,
                         ceil_mode=ceil_mode)


LPPool2d = _nd(LPPool1d, 2, _C.lp_pool2d)


class AdaptiveAvgPool1d(_Fn):
    _fn = staticmethod(_C.adaptive_avg_pool1d)
    _repr = "output_size={output_size}"

    def __init__(self, output_size):
        super().__init__(output_size=output_size)


AdaptiveAvgPool2d = _nd(AdaptiveAvgPool1d, 2, _C.adaptive_avg_pool2d)
AdaptiveAvgPool3d = _nd(AdaptiveAvgPool1d, 3, _C.adaptive_avg_pool3d)


class AdaptiveMaxPool1d(_Fn):
    _fn = staticmethod(_C.adaptive_max_pool1d)
    _repr = "output_size={output_size}"

    def __init__(self, output_size, return_indices=False):
        super().__init__(output_size=output_size, return_indices=return_indices)


AdaptiveMaxPool2d = _nd(AdaptiveMaxPool1d, 2, _C.adaptive_max_pool2d)
AdaptiveMaxPool3d = _nd(AdaptiveMaxPool1d, 3, _C.adaptive_max_pool3d)


class PixelShuffle(_Fn):
    _fn = staticmethod(_C.pixel_shuffle)
    _repr = "upscale_factor={upscale_factor}"

    def __init__(self, upscale_factor):
        super().__init__(upscale_factor=upscale_factor)


class PixelUnshuffle(_Fn):
    _fn = staticmethod(_C.pixel_unshuffle)
    _repr = "downscale_factor={downscale_factor}"

    def __init__(self, downscale_factor):
        super().__init__(downscale_factor=downscale_factor)


class Unfold(_Fn):
    _fn = staticmethod(_C._unfold)
    _repr = "kernel_size={kernel_size}, dilation={dilation}, padding={padding}, stride={stride}"

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__(kernel_size=kernel_size, dilation=dilation, padding=padding,
                         stride=stride)


class Fold(_Fn):
    _fn = staticmethod(_C._fold)
    _repr = ("output_size={output_size}, kernel_size={kernel_size}, dilation={dilation}, "
             "padding={padding}, stride={stride}")

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__(output_size=output_size, kernel_size=kernel_size, dilation=dilation,
                         padding=padding, stride=stride)


class Upsample(_Fn):
    _fn = staticmethod(_C.interpolate)

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None):
        if isinstance(scale_factor, (tuple, list)):
            scale_factor = tuple(float(f) for f in scale_factor)
        elif scale_factor:
            scale_factor = float(scale_factor)
        else:
            scale_factor = None
        super().__init__(size=size, scale_factor=scale_factor, mode=mode,
                         align_corners=align_corners,
                         recompute_scale_factor=recompute_scale_factor)

    def extra_repr(self):
        kw = self._kw
        info = (f"scale_factor={kw['scale_factor']!r}" if kw["scale_factor"] is not None
                else f"size={kw['size']!r}")
        return info + f", mode={kw['mode']}"


class LocalResponseNorm(_Fn):
    _fn = staticmethod(_C.local_response_norm)
    _repr = "{size}, alpha={alpha}, beta={beta}, k={k}"

    def __init__(self, size, alpha=1e-4, beta=0.75, k=1.0):
        super().__init__(size=size, alpha=alpha, beta=beta, k=k)


class _Pad(_Fn):
    _fn = staticmethod(_C.pad)
    _mode, _n = "constant", 1

    def __init__(self, padding, value=None):
        pad = _ntuple(padding, 2 * self._n)
        kw = {"pad": list(pad), "mode": self._mode}
        if value is not None:
            kw["value"] = value
        super().__init__(**kw)
        object.__setattr__(self, "padding", pad)
        if value is not None:
            object.__setattr__(self, "value", value)

    def extra_repr(self):
        if "value" in self._kw and type(self).__name__ != "ZeroPad2d":
            return f"padding={self.padding}, value={self.value}"
        return f"{self.padding}"


def _pad_class(name, mode, n, with_value=False):
    if with_value:
        def __init__(self, padding, value):
            _Pad.__init__(self, padding, value)
    else:
        def __init__(self, padding):
            _Pad.__init__(self, padding)
    return type(name, (_Pad,), {"__init__": __init__, "_mode": mode, "_n": n,
                                "__doc__": f"torch.nn.{name}: F.pad mode '{mode}'."})


ReflectionPad1d = _pad_class("ReflectionPad1d", "reflect", 1)
ReflectionPad2d = _pad_class("ReflectionPad2d", "reflect", 2)
ReflectionPad3d = _pad_class("ReflectionPad3d", "reflect", 3)
ReplicationPad1d = _pad_class("ReplicationPad1d", "replicate", 1)
ReplicationPad2d = _pad_class("ReplicationPad2d", "replicate", 2)
ReplicationPad3d = _pad_class("ReplicationPad3d", "replicate", 3)
CircularPad1d = _pad_class("CircularPad1d", "circular", 1)
CircularPad2d = _pad_class("CircularPad2d", "circular", 2)
CircularPad3d = _pad_class("CircularPad3d", "circular", 3)
ZeroPad2d = _pad_class("ZeroPad2d", "constant", 2)
ConstantPad1d = _pad_class("ConstantPad1d", "constant", 1, True)
ConstantPad2d = _pad_class("ConstantPad2d", "constant", 2, True)
ConstantPad3d = _pad_class("ConstantPad3d", "constant", 3, True)


class FractionalMaxPool2d(Module):
    """Max pooling over pseudo-random overlapping windows; output_size or output_ratio."""
    _fn = staticmethod(F.fractional_max_pool2d)
    _n = 2

    def __init__(self, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                 _random_samples=None):
        super().__init__()
        if output_size is None and output_ratio is None:
            raise _C.ValueError(f"[{type(self).__name__}] requires specifying either an "
                                f"output size, or a pooling ratio")
        if output_size is not None and output_ratio is not None:
            raise _C.ValueError(f"[{type(self).__name__}] only one of output_size and "
                                f"output_ratio may be specified")
        ratio = _ntuple(output_ratio, self._n) if output_ratio is not None else None
        if ratio is not None and not all(0 < r < 1 for r in ratio):
            raise _C.ValueError(f"[{type(self).__name__}] output_ratio must be between 0 and "
                                f"1 (got {output_ratio})")
        self.kernel_size = _ntuple(kernel_size, self._n)
        self.output_size = _ntuple(output_size, self._n) if output_size is not None else None
        self.output_ratio, self.return_indices = ratio, return_indices
        self.register_buffer("_random_samples", _random_samples)

    def forward(self, input):
        return type(self)._fn(input, self.kernel_size, self.output_size, self.output_ratio,
                              self.return_indices, _random_samples=self._random_samples)


FractionalMaxPool3d = _nd(FractionalMaxPool2d, 3, F.fractional_max_pool3d)


class CrossMapLRN2d(Module):
    """Local response normalization across the channels of a 4-D input, with the channel
    windows of torch's legacy running-sum implementation (near the first channels they are not
    centred as LocalResponseNorm's are)."""

    def __init__(self, size, alpha=1e-4, beta=0.75, k=1):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input):
        if input.dim() != 4:
            raise _C.ValueError(f"[CrossMapLRN2d] expects a 4-D input, got shape "
                                f"{tuple(input.shape)}")
        n, c, h, w = input.shape
        # Which squares each channel's scale sums: torch's recurrence, replayed on index sets.
        pre = int((self.size - 1) / 2 + 1)
        window = set(range(min(pre, c)))
        rows = [sorted(window)]
        for ch in range(1, c):
            if ch < c - pre + 1:
                window.add(ch + pre - 1)
            if ch > pre:
                window.discard(ch - pre)
            rows.append(sorted(window))
        m = [[1.0 if j in r else 0.0 for j in range(c)] for r in rows]
        mat = _C.tensor(m, dtype=input.dtype)                       # [C, C]
        sq = (input * input).reshape(n, c, h * w)
        scale = _C.matmul(mat, sq).reshape(n, c, h, w) * (self.alpha / self.size) + self.k
        return input * scale ** (-self.beta)

    def extra_repr(self):
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


AvgPool2d = _nd(AvgPool3d, 2, _C.avg_pool2d)


class UpsamplingNearest2d(Upsample):
    def __init__(self, size=None, scale_factor=None):
        super().__init__(size=size, scale_factor=scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    def __init__(self, size=None, scale_factor=None):
        super().__init__(size=size, scale_factor=scale_factor, mode="bilinear",
                         align_corners=True)


class ChannelShuffle(Module):
    """Splits the channels of [N, C, ...] into groups and interleaves them."""

    def __init__(self, groups):
        super().__init__()
        self.groups = groups

    def forward(self, input):
        n, c = input.shape[0], input.shape[1]
        rest = list(input.shape[2:])
        g = self.groups
        if c % g:
            raise _C.ValueError(f"[ChannelShuffle] channels {c} must be divisible by groups {g}")
        return input.reshape([n, g, c // g] + rest).transpose(1, 2).reshape([n, c] + rest)

    def extra_repr(self):
        return f"groups={self.groups}"


class CosineSimilarity(Module):
    def __init__(self, dim=1, eps=1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return _C.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    def __init__(self, p=2.0, eps=1e-6, keepdim=False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


__all__ = [n for n, v in list(globals().items()) if isinstance(v, type) and issubclass(v, Module)
           and v.__module__ == __name__ and not n.startswith("_")]
