"""kiln.optim.Optimizer: torch.optim.Optimizer's Python layer (parameter groups as dicts the
user may mutate, per-parameter `state`, zero_grad(set_to_none=), state_dict /
load_state_dict, step(closure)).

SGD, Adam, AdamW and RMSprop run each group's update on one of Kiln's C++ optimizers (a fused
kernel per parameter): before every step the group's lr is handed to it, and when another
hyperparameter of the group changed (OneCycleLR cycling momentum, a user edit) the C++
optimizer is rebuilt with its state carried over. Options the C++ optimizers lack (dampening,
maximize, amsgrad) run a Python update instead. Subclasses written by users (torch style:
`defaults` dict, `self.param_groups`, `self.state[p]`) work as in torch.
"""
import copy
from collections import defaultdict

from .. import _C, enable_grad, no_grad

_T = _C.Tensor


class _RequiredParameter:
    def __repr__(self):
        return "<required parameter>"


required = _RequiredParameter()


def _loss_of(closure):
    """step(closure)'s loss: the closure re-evaluates the model, with grad mode on."""
    if closure is None:
        return None
    with enable_grad():
        return closure()


class Optimizer:
    """Base class: Optimizer(params, defaults). `params` is an iterable of tensors or of dicts
    (parameter groups, each with "params" and any of the defaults' keys)."""

    def __init__(self, params, defaults):
        self.defaults = defaults
        self.state = defaultdict(dict)
        self.param_groups = []
        if isinstance(params, _T):
            raise _C.TypeError(
                "[optimizer] params argument given to the optimizer should be an iterable of "
                "Tensors or dicts, but got a Tensor")
        groups = list(params)
        if not groups:
            raise _C.ValueError("[optimizer] optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def __getstate__(self):
        return {"defaults": self.defaults, "state": self.state, "param_groups": self.param_groups}

    def __setstate__(self, state):
        self.__dict__.update(state)

    def __repr__(self):
        s = self.__class__.__name__ + " ("
        for i, group in enumerate(self.param_groups):
            s += f"\nParameter Group {i}"
            for key in sorted(group):
                if key != "params":
                    s += f"\n    {key}: {group[key]}"
        return s + "\n)"

    def add_param_group(self, param_group):
        if not isinstance(param_group, dict):
            raise _C.TypeError(
                f"[optimizer] param group must be a dict, got {type(param_group).__name__}")
        params = param_group["params"]
        if isinstance(params, _T):
            params = [params]
        elif isinstance(params, set):
            raise _C.TypeError(
                "[optimizer] optimizer parameters need to be organized in ordered collections, "
                "but the ordering of tensors in sets will change between runs; use a list")
        else:
            params = list(params)
        for p in params:
            if not isinstance(p, _T):
                raise _C.TypeError(
                    f"[optimizer] optimizer can only optimize Tensors, but one of the params is "
                    f"{type(p).__name__}")
            if not p.is_leaf:
                raise _C.ValueError("[optimizer] can't optimize a non-leaf Tensor")
        param_group["params"] = params
        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise _C.ValueError(
                    f"[optimizer] parameter group didn't specify a value of required "
                    f"optimization parameter {name}")
            param_group.setdefault(name, default)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params) or len({id(p) for p in params}) != len(params):
            raise _C.ValueError(
                "[optimizer] some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)

    def zero_grad(self, set_to_none=False):
        """Drops (set_to_none=True) or zeroes each parameter's .grad, as torch 1.13 (whose
        default is zeroing)."""
        for g in self.param_groups:
            for p in g["params"]:
                grad = p.grad
                if grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    if grad.requires_grad:
                        grad = grad.detach()
                        p.grad = grad
                    grad.zero_()

    @property
    def lr(self):
        """The first group's learning rate (Kiln's C++ optimizers' `lr`); setting it sets every
        group's."""
        return self.param_groups[0]["lr"]

    @lr.setter
    def lr(self, value):
        for g in self.param_groups:
            g["lr"] = value

    def step(self, closure=None):
        raise NotImplementedError(f"[optimizer] {type(self).__name__} must define step()")

    # ---- state dicts: {'state': {index: {...}}, 'param_groups': [{..., 'params': [index]}]}
    def _param_index(self):
        return {id(p): i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}

    def _export_state(self):
        """{param: {name: value}}; engine-backed optimizers override it."""
        return self.state

    def state_dict(self):
        index = self._param_index()
        state = {index[id(p)]: dict(s) for p, s in self._export_state().items()
                 if id(p) in index}
        groups = []
        for g in self.param_groups:
            d = {k: v for k, v in g.items() if k != "params"}
            d["params"] = [index[id(p)] for p in g["params"]]
            groups.append(d)
        return {"state": state, "param_groups": groups}

    def _import_state(self, state):
        self.state = state

    def load_state_dict(self, state_dict):
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise _C.ValueError(
                "[load_state_dict] loaded state dict has a different number of parameter "
                f"groups ({len(groups)} vs {len(self.param_groups)})")
        for mine, theirs in zip(self.param_groups, groups):
            if len(mine["params"]) != len(theirs["params"]):
                raise _C.ValueError(
                    "[load_state_dict] loaded state dict contains a parameter group that "
                    "doesn't match the size of optimizer's group")
        params = [p for g in self.param_groups for p in g["params"]]
        ids = [i for g in groups for i in g["params"]]
        by_index = dict(zip(ids, params))
        state = defaultdict(dict)
        for k, v in state_dict["state"].items():
            p = by_index.get(int(k))
            if p is None:
                raise _C.ValueError(f"[load_state_dict] state for unknown parameter index {k}")
            entry = {}
            for name, val in v.items():
                # Copies, as torch's deepcopy: the loaded dict stays the caller's.
                if isinstance(val, _T):
                    val = val.detach().clone()
                    if name != "step" and val.is_floating_point():
                        val = val.to(p.dtype)
                else:
                    val = copy.deepcopy(val)
                entry[name] = val
            state[p] = entry
        for mine, theirs in zip(self.param_groups, groups):
            for k, v in theirs.items():
                if k != "params":
                    mine[k] = copy.deepcopy(v)
        self._import_state(state)


class _EngineOptimizer(Optimizer):
    """An Optimizer whose groups step on Kiln's C++ optimizers (see the module docstring).
    Subclasses give _HYPER (the group keys the C++ optimizer is built from, lr excluded),
    _SLOTS (C++ slot name -> torch state name), _make(params, group) and, for options the
    C++ side lacks, _python_ok(group) False plus _python_step(group)."""

    _HYPER = ()
    _SLOTS = {}
    _GRAPH = None  # the C++ class: SGD(lr=0.1) without params is the graph form

    def __new__(cls, params=None, *args, **kwargs):
        if params is None and cls._GRAPH is not None:
            # Graph form (TF1 style): SGD(lr=0.5).minimize(loss).
            return getattr(_C.optim, cls._GRAPH)(*args, **kwargs)
        return super().__new__(cls)

    def __init__(self, params, defaults):
        self._engines = {}
        super().__init__(params, defaults)

    def _python_ok(self, group):
        return True

    def _key(self, group):
        # The parameters that require grad are the C++ optimizer's: unfreezing one rebuilds it.
        return tuple(repr(group[k]) for k in self._HYPER) + tuple(
            (id(p), p.requires_grad) for p in group["params"])

    def _engine(self, i, group):
        key = self._key(group)
        cur = self._engines.get(i)
        if cur is not None and cur[0] == key:
            eng = cur[1]
            if eng.lr != group["lr"]:
                eng.lr = group["lr"]
            return eng
        params = [p for p in group["params"] if p.requires_grad]
        if not params:
            return None
        eng = self._make(params, group)
        if cur is not None and cur[1] is not None:
            self._carry_state(cur[1], cur[2], eng, params, group)
        self._engines[i] = (key, eng, params)
        return eng

    @staticmethod
    def _carry_state(old, old_params, eng, params, group):
        """Moves the old C++ optimizer's slots to the new one by parameter; a parameter the
        old one did not optimize starts from zero slots (SGD's first momentum step then
        equals torch's; Adam's shared step counter is the C++ optimizers' own)."""
        sd = dict(old.state_dict())
        slots, names = {}, []
        for n, t in sd.items():
            if n.startswith("state."):
                _, k, slot = n.split(".", 2)
                slots.setdefault(id(old_params[int(k)]), {})[slot] = t
                if slot not in names:
                    names.append(slot)
        if not names:
            return  # no slots yet (before the first step, or momentum was off)
        pairs = [("step", sd["step"]), ("lr", _C.tensor(group["lr"], dtype=_C.float64))]
        for k, p in enumerate(params):
            have = slots.get(id(p), {})
            for slot in names:
                pairs.append((f"state.{k}.{slot}", have.get(
                    slot, _C.zeros(tuple(p.shape), dtype=p.dtype))))
        try:
            eng.load_state_dict(pairs)
        except _C.Error:
            pass  # another slot layout (RMSprop's centered switched): the state starts over

    def step(self, closure=None):
        loss = _loss_of(closure)
        for i, group in enumerate(self.param_groups):
            if not self._python_ok(group):
                with no_grad():
                    self._python_step(group)
                continue
            eng = self._engine(i, group)
            if eng is not None:
                eng.step()
        return loss

    def _export_state(self):
        out = dict(self.state)
        for i, group in enumerate(self.param_groups):
            cur = self._engines.get(i)
            if cur is None or cur[1] is None:
                continue
            params = cur[2]
            sd = dict(cur[1].state_dict())
            step = sd.get("step")
            for n, t in sd.items():
                if not n.startswith("state."):
                    continue
                _, k, slot = n.split(".", 2)
                entry = out.setdefault(params[int(k)], {})
                entry[self._SLOTS.get(slot, slot)] = t
                if step is not None:
                    entry["step"] = step.to(_C.float32)
        return out

    def _import_state(self, state):
        self.state = defaultdict(dict)
        back = {v: k for k, v in self._SLOTS.items()}
        for i, group in enumerate(self.param_groups):
            self._engines.pop(i, None)
            eng = self._engine(i, group) if self._python_ok(group) else None
            if eng is None:
                for p in group["params"]:
                    if p in state:
                        self.state[p] = state[p]
                continue
            params = [p for p in group["params"] if p.requires_grad]
            pairs, step = [], None
            for k, p in enumerate(params):
                for name, t in state.get(p, {}).items():
                    if name == "step":
                        step = t
                    elif name in back:
                        pairs.append((f"state.{k}.{back[name]}", t))
            if not pairs:
                continue
            step = step if isinstance(step, _T) else _C.tensor(float(step or 0))
            eng.load_state_dict([("step", step.to(_C.float64)),
                                 ("lr", _C.tensor(group["lr"], dtype=_C.float64))] + pairs)


class _PerParameter:
    """The loop that the updates written in Python share (torch 1.13's single-tensor ones):
    _init_state gives a parameter's state besides `step`, made on its first step."""
    _TENSOR_STEP = True  # torch counts `step` in a float32 tensor (Rprop and Adadelta: an int)

    def _init_state(self, p, group):
        return {}

    def _param_grads(self, group):
        """(p, grad) for each parameter of the group that has a gradient; grad is negated when
        the optimizer takes `maximize` and the group asks for it."""
        negate = "maximize" in self.defaults and group["maximize"]
        for p in group["params"]:
            if p.grad is not None:
                yield p, (-p.grad if negate else p.grad)

    def _param_steps(self, group):
        """(p, grad, state, step) for each parameter that has a gradient, its `step` counted
        (and returned as a float) before the update."""
        for p, grad in self._param_grads(group):
            st = self.state[p]
            if not st:
                st["step"] = _C.tensor(0.0) if self._TENSOR_STEP else 0
                st.update(self._init_state(p, group))
            st["step"] = st["step"] + 1
            yield p, grad, st, float(st["step"])


class _PythonOptimizer(_PerParameter, Optimizer):
    """An Optimizer whose every group steps in Python: subclasses give _python_step(group)."""

    def step(self, closure=None):
        loss = _loss_of(closure)
        with no_grad():
            for group in self.param_groups:
                self._python_step(group)
        return loss
