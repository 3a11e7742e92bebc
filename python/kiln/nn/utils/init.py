"""skip_init (torch.nn.utils.skip_init): a module whose parameter values are unspecified."""
from ... import _C


def skip_init(module_cls, *args, **kwargs):
    """module_cls(*args, **kwargs) for code that initializes the parameters itself. torch
    builds it on the meta device to save the initialization's time; Kiln builds it on the CPU,
    so the values are the default initialization's (any values are allowed here)."""
    import inspect  # (lazily: inspect costs `import kiln` ~14 ms)
    if "device" not in inspect.signature(module_cls).parameters:
        raise _C.ValueError("[skip_init] Expected a module class that accepts a 'device' "
                            "keyword argument")
    return module_cls(*args, **kwargs)
