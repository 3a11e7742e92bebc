"""functional_call: a module run on other parameter tensors (torch.nn.utils.stateless /
torch.func.functional_call), what a jitted training step needs."""
from ... import _C
from ..modules.module import _CppModule


def functional_call(module, params, *args, **kwargs):
    """module(*args) run on `params` (in module.parameters() order, or a dict of names to
    tensors) instead of its own parameters: the parameters become arguments of a compiled
    function rather than constants baked into it."""
    if isinstance(params, dict):
        by_name = params
        params = [by_name[n] if n in by_name else p for n, p in module.named_parameters()]
    params = list(params)
    restore, swaps, i, seen = [], [], 0, {}
    try:
        for _, m in module.named_modules():
            if isinstance(m, _CppModule):
                n = len(m._parameters)
                if n:
                    swaps.append(_C.nn.ParameterSwap(m._cpp, params[i:i + n]))
                    i += n
            else:
                for name, p in list(m._parameters.items()):
                    if p is None:
                        continue
                    restore.append((m, name, p))
                    if id(p) not in seen:  # a tied tensor is one parameter, as listed
                        seen[id(p)] = params[i]
                        i += 1
                    m._parameters[name] = seen[id(p)]
        if i != len(params):
            raise _C.ValueError(f"[functional_call] {len(params)} tensors for {i} parameters")
        return module(*args, **kwargs)
    finally:
        for s in swaps:
            s.close()
        for m, name, p in restore:
            m._parameters[name] = p
