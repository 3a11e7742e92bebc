"""weight_norm and spectral_norm (torch.nn.utils'): a module's weight recomputed before each
forward from new parameters (g and v; or weight_orig with power-iteration buffers u and v),
under torch's state_dict names, and their removal."""
from ... import _C, no_grad
from ..modules.module import Parameter


def _norm_except_dim(v, dim):
    """||v||_2 over every dim but `dim` (dim -1: over all), shaped to broadcast against v."""
    if dim == -1:
        return (v * v).sum().sqrt()
    d = dim % v.dim()
    others = [i for i in range(v.dim()) if i != d]
    n = (v * v).sum(others, True).sqrt() if others else _C.abs(v)
    return n


class WeightNorm:
    def __init__(self, name, dim):
        self.name, self.dim = name, -1 if dim is None else dim

    def compute_weight(self, module):
        g = getattr(module, self.name + "_g")
        v = getattr(module, self.name + "_v")
        return v * (g / _norm_except_dim(v, self.dim))

    @staticmethod
    def apply(module, name, dim):
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, WeightNorm) and hook.name == name:
                raise _C.Error(f"[weight_norm] cannot register two weight_norm hooks on the same "
                               f"parameter {name}")
        fn = WeightNorm(name, dim)
        weight = getattr(module, name)
        if weight is None or not isinstance(weight, _C.Tensor):
            raise _C.ValueError(f"[weight_norm] module has no parameter '{name}'")
        del module._parameters[name]
        w = weight.detach()
        module.register_parameter(name + "_g", Parameter(_norm_except_dim(w, fn.dim)))
        module.register_parameter(name + "_v", Parameter(w))
        object.__setattr__(module, name, fn.compute_weight(module))
        module.register_forward_pre_hook(fn)
        return fn

    def remove(self, module):
        weight = self.compute_weight(module).detach()
        object.__delattr__(module, self.name)
        del module._parameters[self.name + "_g"]
        del module._parameters[self.name + "_v"]
        module.register_parameter(self.name, Parameter(weight))

    def __call__(self, module, inputs):
        object.__setattr__(module, self.name, self.compute_weight(module))


def weight_norm(module, name="weight", dim=0):
    """w = g * v / ||v||: the direction v and the magnitude g become the parameters
    `<name>_g` and `<name>_v`; dim is the dim whose slices get their own norm (None: one)."""
    WeightNorm.apply(module, name, dim)
    return module


def _remove_hook(module, name, kind, what):
    """Undoes weight_norm or spectral_norm: the hook of `kind` on parameter `name` restores
    a plain parameter and is unregistered."""
    for k, hook in list(module._forward_pre_hooks.items()):
        if isinstance(hook, kind) and hook.name == name:
            hook.remove(module)
            del module._forward_pre_hooks[k]
            return module
    raise _C.ValueError(f"[remove_{what}] {what} of '{name}' not found in {module}")


def remove_weight_norm(module, name="weight"):
    return _remove_hook(module, name, WeightNorm, "weight_norm")


def _normalize(v, eps):
    return v / _C.clamp_min((v * v).sum().sqrt(), eps)


class SpectralNorm:
    def __init__(self, name, n_power_iterations, dim, eps):
        if n_power_iterations <= 0:
            raise _C.ValueError(f"[spectral_norm] expected n_power_iterations to be positive, "
                                f"got n_power_iterations={n_power_iterations}")
        self.name, self.n_power_iterations, self.dim, self.eps = (name, n_power_iterations, dim,
                                                                  eps)

    def reshape_weight_to_matrix(self, weight):
        w = weight
        if self.dim != 0:
            perm = [self.dim] + [d for d in range(w.dim()) if d != self.dim]
            w = w.permute(perm)
        return w.reshape(w.shape[0], -1)

    def compute_weight(self, module, do_power_iteration):
        weight = getattr(module, self.name + "_orig")
        u = getattr(module, self.name + "_u")
        v = getattr(module, self.name + "_v")
        mat = self.reshape_weight_to_matrix(weight)
        if do_power_iteration:
            with no_grad():
                m = mat.detach()
                for _ in range(self.n_power_iterations):
                    v.copy_(_normalize(_C.matmul(m.t(), u), self.eps))
                    u.copy_(_normalize(_C.matmul(m, v), self.eps))
            u, v = u.clone(), v.clone()
        sigma = (u * _C.matmul(mat, v)).sum()
        return weight / sigma

    def __call__(self, module, inputs):
        object.__setattr__(module, self.name,
                           self.compute_weight(module, do_power_iteration=module.training))

    def remove(self, module):
        with no_grad():
            weight = self.compute_weight(module, do_power_iteration=False)
        object.__delattr__(module, self.name)
        del module._buffers[self.name + "_u"]
        del module._buffers[self.name + "_v"]
        del module._parameters[self.name + "_orig"]
        module.register_parameter(self.name, Parameter(weight.detach()))

    @staticmethod
    def apply(module, name, n_power_iterations, dim, eps):
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, SpectralNorm) and hook.name == name:
                raise _C.Error(f"[spectral_norm] cannot register two spectral_norm hooks on the "
                               f"same parameter {name}")
        fn = SpectralNorm(name, n_power_iterations, dim, eps)
        weight = module._parameters.get(name)
        if weight is None:
            raise _C.ValueError(f"[spectral_norm] module has no parameter '{name}'")
        with no_grad():
            mat = fn.reshape_weight_to_matrix(weight.detach())
            h, w = mat.shape
            u = _normalize(_C.randn(h, dtype=weight.dtype), eps)
            v = _normalize(_C.randn(w, dtype=weight.dtype), eps)
        del module._parameters[name]
        module.register_parameter(name + "_orig", weight)
        object.__setattr__(module, name, weight.detach())
        module.register_buffer(name + "_u", u)
        module.register_buffer(name + "_v", v)
        module.register_forward_pre_hook(fn)
        return fn


def spectral_norm(module, name="weight", n_power_iterations=1, eps=1e-12, dim=None):
    """weight / sigma, sigma the largest singular value estimated by power iteration (one step
    per training forward); `<name>_orig` is the parameter, `<name>_u`/`_v` the buffers."""
    if dim is None:
        from ..modules.conv import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
        dim = 1 if isinstance(module, (ConvTranspose1d, ConvTranspose2d, ConvTranspose3d)) else 0
    SpectralNorm.apply(module, name, n_power_iterations, dim, eps)
    return module


def remove_spectral_norm(module, name="weight"):
    return _remove_hook(module, name, SpectralNorm, "spectral_norm")
