"""Lazy modules (torch.nn.LazyLinear, LazyConv*, LazyBatchNorm*, ...): the input feature or
channel count is taken from the first input; the module then becomes its regular class (as
torch's cls_to_become), parameters created and initialized as that class does."""
from .conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from .linear import Linear
from .module import Module, _device_str
from .normalization import (BatchNorm1d, BatchNorm2d, BatchNorm3d, InstanceNorm1d,
                            InstanceNorm2d, InstanceNorm3d)


class _LazyModule(Module):
    cls_to_become = None
    _feature_dim = 1  # the input dim holding in_features / in_channels

    def __init__(self, *args, **kwargs):
        super().__init__()
        _device_str(kwargs.get("device"), type(self).__name__)
        object.__setattr__(self, "_lazy_args", (args, kwargs))

    def has_uninitialized_params(self):
        return True

    def initialize_parameters(self, input):
        args, kwargs = self._lazy_args
        dim = self._feature_dim if input.dim() > 1 or self._feature_dim == -1 else 0
        real = self.cls_to_become(input.shape[dim], *args, **kwargs)
        hooks = (self._forward_hooks, self._forward_pre_hooks)
        training = self.training
        self.__dict__.clear()
        self.__dict__.update(real.__dict__)
        object.__setattr__(self, "_forward_hooks", hooks[0])
        object.__setattr__(self, "_forward_pre_hooks", hooks[1])
        self.__class__ = self.cls_to_become
        self.train(training)

    def forward(self, input, *args, **kwargs):
        self.initialize_parameters(input)
        return self.forward(input, *args, **kwargs)

    def extra_repr(self):
        args, kwargs = self._lazy_args
        return ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])


def _lazy(name, become, feature_dim, signature_from, defaults=None):
    defaults = defaults or {}

    def __init__(self, *args, **kwargs):
        bound = signature_from.bind(self, *args, **kwargs)
        for k, v in defaults.items():
            bound.arguments.setdefault(k, v)
        _LazyModule.__init__(self, **{k: v for k, v in bound.arguments.items() if k != "self"})
    if defaults:
        signature_from = signature_from.replace(parameters=[
            p.replace(default=defaults.get(p.name, p.default))
            for p in signature_from.parameters.values()])
    __init__.__signature__ = signature_from
    return type(name, (_LazyModule,), {"__init__": __init__, "cls_to_become": become,
                                       "_feature_dim": feature_dim,
                                       "__doc__": f"{become.__name__} whose input size comes from "
                                                  f"the first input."})


def _sig_without_first(cls):
    import inspect
    sig = inspect.signature(cls.__init__)
    params = list(sig.parameters.values())
    return sig.replace(parameters=[params[0]] + params[2:])


LazyLinear = _lazy("LazyLinear", Linear, -1, _sig_without_first(Linear))
LazyConv1d = _lazy("LazyConv1d", Conv1d, 1, _sig_without_first(Conv1d))
LazyConv2d = _lazy("LazyConv2d", Conv2d, 1, _sig_without_first(Conv2d))
LazyConv3d = _lazy("LazyConv3d", Conv3d, 1, _sig_without_first(Conv3d))
LazyConvTranspose1d = _lazy("LazyConvTranspose1d", ConvTranspose1d, 1,
                            _sig_without_first(ConvTranspose1d))
LazyConvTranspose2d = _lazy("LazyConvTranspose2d", ConvTranspose2d, 1,
                            _sig_without_first(ConvTranspose2d))
LazyConvTranspose3d = _lazy("LazyConvTranspose3d", ConvTranspose3d, 1,
                            _sig_without_first(ConvTranspose3d))
LazyBatchNorm1d = _lazy("LazyBatchNorm1d", BatchNorm1d, 1, _sig_without_first(BatchNorm1d))
LazyBatchNorm2d = _lazy("LazyBatchNorm2d", BatchNorm2d, 1, _sig_without_first(BatchNorm2d))
LazyBatchNorm3d = _lazy("LazyBatchNorm3d", BatchNorm3d, 1, _sig_without_first(BatchNorm3d))
# torch's lazy instance norms default to affine and tracked statistics, unlike InstanceNorm.
_NORM_DEFAULTS = {"affine": True, "track_running_stats": True}
LazyInstanceNorm1d = _lazy("LazyInstanceNorm1d", InstanceNorm1d, 1,
                           _sig_without_first(InstanceNorm1d), _NORM_DEFAULTS)
LazyInstanceNorm2d = _lazy("LazyInstanceNorm2d", InstanceNorm2d, 1,
                           _sig_without_first(InstanceNorm2d), _NORM_DEFAULTS)
LazyInstanceNorm3d = _lazy("LazyInstanceNorm3d", InstanceNorm3d, 1,
                           _sig_without_first(InstanceNorm3d), _NORM_DEFAULTS)

__all__ = [n for n in list(globals()) if n.startswith("Lazy")]
