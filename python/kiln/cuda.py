"""kiln.cuda: what torch.cuda answers on a machine without a GPU. Kiln has no CUDA backend
yet: is_available() is False, device_count() 0, seeding is harmless (the CPU generator is
seeded by kiln.manual_seed), amp.autocast and amp.GradScaler disable themselves as torch's do
there, and anything that needs a GPU raises a kiln.Error that says so."""
from . import _C
from ._device import _backend


def is_available():
    return False


def device_count():
    return 0


def is_initialized():
    return False


def init():
    _backend("cuda")


def current_device():
    _backend("cuda")


def set_device(device):
    _backend(device)


def get_device_name(device=None):
    _backend("cuda" if device is None else device)


def synchronize(device=None):
    """Nothing runs asynchronously on a GPU here; torch's synchronize on CPU-only code raises,
    but programs call it only after checking is_available()."""
    _backend("cuda" if device is None else device)


def manual_seed(seed):
    """Harmless without a GPU, as torch.cuda.manual_seed is when CUDA is absent."""
    int(seed)


def manual_seed_all(seed):
    int(seed)


def seed():
    pass


def seed_all():
    pass


def empty_cache():
    pass


def memory_allocated(device=None):
    return 0


def max_memory_allocated(device=None):
    return 0


def memory_reserved(device=None):
    return 0


def is_bf16_supported():
    return False


class _GpuTensorType(type):
    """kiln.cuda.FloatTensor & co.: isinstance() is False (no tensor is on a GPU) and building
    one raises the device error."""

    def __instancecheck__(cls, obj):
        return False

    def __call__(cls, *args, **kwargs):
        _backend("cuda")


def _gpu_type(name):
    return _GpuTensorType(name, (), {"__module__": __name__})


FloatTensor = _gpu_type("FloatTensor")
DoubleTensor = _gpu_type("DoubleTensor")
HalfTensor = _gpu_type("HalfTensor")
BFloat16Tensor = _gpu_type("BFloat16Tensor")
LongTensor = _gpu_type("LongTensor")
IntTensor = _gpu_type("IntTensor")
ShortTensor = _gpu_type("ShortTensor")
CharTensor = _gpu_type("CharTensor")
ByteTensor = _gpu_type("ByteTensor")
BoolTensor = _gpu_type("BoolTensor")


class amp:
    """torch.cuda.amp's names: autocast(enabled=False) is a no-op scope; enabled raises."""

    class autocast:
        """torch.cuda.amp.autocast: without CUDA torch warns and disables it; so does Kiln."""

        def __init__(self, enabled=True, dtype=None, cache_enabled=None):
            if enabled:
                import warnings
                warnings.warn("kiln.cuda.amp.autocast: CUDA is not available; autocast is "
                              "disabled (kiln.autocast('cpu') is the CPU form)", stacklevel=2)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def __call__(self, fn):
            return fn

    class GradScaler:
        """torch.cuda.amp.GradScaler(enabled=False) passes losses and steps through, as
        torch's does when disabled (and warns when CUDA is absent)."""

        def __init__(self, init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5,
                     growth_interval=2000, enabled=True):
            self._enabled = False

        def scale(self, outputs):
            return outputs

        def unscale_(self, optimizer):
            pass

        def step(self, optimizer, *args, **kwargs):
            return optimizer.step(*args, **kwargs)

        def update(self, new_scale=None):
            pass

        def is_enabled(self):
            return self._enabled

        def get_scale(self):
            return 1.0

        def state_dict(self):
            return {}

        def load_state_dict(self, state_dict):
            pass


del _C
