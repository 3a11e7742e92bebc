"""Containers as torch.nn's: Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict
(children and parameters named by position or key, so state_dict keys match torch's)."""
from collections import OrderedDict

from ... import _C
from .module import Module, Parameter

Tensor = _C.Tensor


def _index(i, n, who):
    if not -n <= i < n:
        raise _C.IndexError(f"[{who}] index {i} is out of range for {n} entries")
    return i % n


class Container(Module):
    """torch's deprecated container: Container(name=module, ...)."""

    def __init__(self, **kwargs):
        super().__init__()
        import warnings
        warnings.warn("nn.Container is deprecated. All of it's functionality is now implemented "
                      "in nn.Module. Subclass that instead.", stacklevel=2)
        for key, value in kwargs.items():
            self.add_module(key, value)


class _ModuleSequence(Module):
    """What Sequential and ModuleList share: children named '0', '1', ... in order, renumbered
    after an insert or a deletion, as torch's."""
    _who = None  # the name errors start with

    def _at(self, i):
        return list(self._modules.values())[_index(i, len(self), self._who)]

    def _renumber(self, modules):
        self._modules.clear()
        for j, m in enumerate(modules):
            self._modules[str(j)] = m

    def __delitem__(self, i):
        keys = list(self._modules)
        for k in (keys[i] if isinstance(i, slice) else [keys[_index(i, len(keys), self._who)]]):
            del self._modules[k]
        self._renumber(list(self._modules.values()))

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def insert(self, index, module):
        items = list(self._modules.values())
        items.insert(index, module)
        self._renumber(items)


class Sequential(_ModuleSequence):
    """Modules applied in order: Sequential(m0, m1, ...) or Sequential(OrderedDict(name=m))."""
    _who = "Sequential"

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], (OrderedDict, dict)):
            for k, m in modules[0].items():
                self.add_module(k, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def forward(self, input):
        for m in self._modules.values():
            input = m(input)
        return input

    def __getitem__(self, i):
        if isinstance(i, slice):
            return Sequential(OrderedDict(list(self._modules.items())[i]))
        return self._at(i)

    def __setitem__(self, i, module):
        key = list(self._modules)[_index(i, len(self), self._who)]
        self.add_module(key, module)

    def insert(self, index, module):
        super().insert(index, module)
        return self


class ModuleList(_ModuleSequence):
    """A list of modules registered as children '0', '1', ..."""
    _who = "ModuleList"

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return ModuleList(list(self._modules.values())[i])
        return self._at(i)

    def __setitem__(self, i, module):
        self.add_module(str(_index(i, len(self), self._who)), module)

    def __iadd__(self, modules):
        return self.extend(modules)

    def __add__(self, other):
        return ModuleList(list(self) + list(other))


class ModuleDict(Module):
    """Modules by string key, in insertion order (children named by their keys)."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __delitem__(self, key):
        del self._modules[key]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key):
        return key in self._modules

    def clear(self):
        self._modules.clear()

    def pop(self, key):
        v = self[key]
        del self[key]
        return v

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()

    def update(self, modules):
        items = modules.items() if hasattr(modules, "items") else modules
        for k, m in items:
            self[k] = m


def _set_param(module, key, value):
    """A tensor (made a Parameter unless it is a leaf that requires grad) or None registered
    as a parameter; anything else becomes a plain attribute, as torch's containers allow."""
    if isinstance(value, Tensor) and not (value.requires_grad and value.is_leaf):
        value = Parameter(value)
    if isinstance(value, Tensor) or value is None:
        module.register_parameter(key, value)
    else:
        object.__setattr__(module, key, value)


def _param_lines(pairs):
    return "\n".join(f"({k}): Parameter containing: [{p.dtype} of size {tuple(p.shape)}]"
                     for k, p in pairs if isinstance(p, Tensor))


class ParameterList(Module):
    """A list of parameters registered as '0', '1', ... (plain tensors become Parameters)."""

    def __init__(self, values=None):
        super().__init__()
        object.__setattr__(self, "_size", 0)
        if values is not None:
            self.extend(values)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return ParameterList([self[j] for j in range(len(self))[i]])
        return getattr(self, str(_index(i, len(self), "ParameterList")))

    def __setitem__(self, i, value):
        _set_param(self, str(_index(i, len(self), "ParameterList")), value)

    def __len__(self):
        return self._size

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __iadd__(self, values):
        return self.extend(values)

    def append(self, value):
        n = self._size
        object.__setattr__(self, "_size", n + 1)
        _set_param(self, str(n), value)
        return self

    def extend(self, values):
        for v in values:
            self.append(v)
        return self

    def extra_repr(self):
        return _param_lines(enumerate(self))


class ParameterDict(Module):
    """Parameters by string key, in insertion order."""

    def __init__(self, parameters=None):
        super().__init__()
        object.__setattr__(self, "_keys", [])
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key):
        return getattr(self, key)

    def __setitem__(self, key, value):
        if key not in self._keys:
            self._keys.append(key)
        _set_param(self, key, value)

    def __delitem__(self, key):
        self._keys.remove(key)
        delattr(self, key)

    def __len__(self):
        return len(self._keys)

    def __iter__(self):
        return iter(list(self._keys))

    def __contains__(self, key):
        return key in self._keys

    def keys(self):
        return list(self._keys)

    def values(self):
        return [self[k] for k in self._keys]

    def items(self):
        return [(k, self[k]) for k in self._keys]

    def get(self, key, default=None):
        return self[key] if key in self else default

    def pop(self, key):
        v = self[key]
        del self[key]
        return v

    def clear(self):
        for k in list(self._keys):
            del self[k]

    def update(self, parameters):
        items = parameters.items() if hasattr(parameters, "items") else parameters
        for k, v in items:
            self[k] = v

    def extra_repr(self):
        return _param_lines(self.items())
