"""Normalization layers with torch.nn's arguments, buffers (running_mean, running_var,
num_batches_tracked) and initialization, over Kiln's norm ops."""
from ... import _C
from .. import init
from .module import Module, Parameter, _device_str


def _affine(m, shape, on, dt):
    """The learned scale and shift: weight ones and bias zeros of `shape`, or both None."""
    if on:
        m.weight = Parameter(_C.ones(*shape, dtype=dt))
        m.bias = Parameter(_C.zeros(*shape, dtype=dt))
    else:
        m.register_parameter("weight", None)
        m.register_parameter("bias", None)


class _NormBase(Module):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, device=None, dtype=None):
        super().__init__()
        _device_str(device, type(self).__name__)
        dt = dtype or _C.float32
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        _affine(self, (num_features,), affine, dt)
        if track_running_stats:
            self.register_buffer("running_mean", _C.zeros(num_features, dtype=dt))
            self.register_buffer("running_var", _C.ones(num_features, dtype=dt))
            self.register_buffer("num_batches_tracked", _C.tensor(0, dtype=_C.int64))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self):
        if self.track_running_stats:
            init.zeros_(self.running_mean)
            init.ones_(self.running_var)
            init.zeros_(self.num_batches_tracked)

    def reset_parameters(self):
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class _BatchNorm(_NormBase):
    _dims = (2, 3)

    def forward(self, input):
        if input.dim() not in self._dims:
            dims = " or ".join(map(str, self._dims))
            raise _C.ValueError(f"[{type(self).__name__}] expected {dims}-D input, got shape "
                                f"{tuple(input.shape)}")
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked.item())
        bn_training = self.training or (self.running_mean is None and self.running_var is None)
        use_stats = not self.training or self.track_running_stats
        return _C.batch_norm(input, self.running_mean if use_stats else None,
                             self.running_var if use_stats else None, self.weight, self.bias,
                             bn_training, factor, self.eps)


class BatchNorm1d(_BatchNorm):
    """Batch normalization over [N, C] or [N, C, L]."""
    _dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalization over [N, C, H, W]."""
    _dims = (4,)


class BatchNorm3d(_BatchNorm):
    """Batch normalization over [N, C, D, H, W]."""
    _dims = (5,)


class SyncBatchNorm(_BatchNorm):
    """One process: the same as BatchNorm over any [N, C, ...] input (process_group ignored)."""
    _dims = (2, 3, 4, 5)

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_group=None, device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)


class LayerNorm(Module):
    """Normalizes over the trailing normalized_shape dims; weight ones, bias zeros."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, device=None,
                 dtype=None):
        super().__init__()
        _device_str(device, type(self).__name__)
        dt = dtype or _C.float32
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        _affine(self, self.normalized_shape, elementwise_affine, dt)

    def forward(self, input):
        return _C.layer_norm(input, list(self.normalized_shape), self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class GroupNorm(Module):
    """Group normalization over [N, C, ...]; weight ones, bias zeros."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None, dtype=None):
        super().__init__()
        _device_str(device, type(self).__name__)
        dt = dtype or _C.float32
        if num_channels % num_groups:
            raise _C.ValueError(f"[GroupNorm] num_channels ({num_channels}) must be divisible by "
                                f"num_groups ({num_groups})")
        self.num_groups, self.num_channels, self.eps, self.affine = (num_groups, num_channels,
                                                                     eps, affine)
        _affine(self, (num_channels,), affine, dt)

    def forward(self, input):
        return _C.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class _InstanceNorm(_NormBase):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False,
                 track_running_stats=False, device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)

    def forward(self, input):
        # torch's instance norm leaves num_batches_tracked as it is (only batch norm counts).
        use_input_stats = self.training or not self.track_running_stats
        return _C.instance_norm(input, self.running_mean, self.running_var, self.weight,
                                self.bias, use_input_stats,
                                0.1 if self.momentum is None else self.momentum, self.eps)


class InstanceNorm1d(_InstanceNorm):
    """Instance normalization over [N, C, L] (each sample's channel normalized by itself)."""


class InstanceNorm2d(_InstanceNorm):
    """Instance normalization over [N, C, H, W]."""


class InstanceNorm3d(_InstanceNorm):
    """Instance normalization over [N, C, D, H, W]."""
