#!/usr/bin/python3
"""Writes docs/pytorch_coverage.md: for each function, Tensor method, nn module (with its
constructor arguments), initializer, optimizer, scheduler, data utility and device call a PyTorch
program reaches for, Kiln's Python name or "missing". The lists come from the installed torch
1.13 (Debian's python3-torch), not from a hand-kept table, so the page cannot silently leave a
name out, and Kiln's side is looked up in the built package, so it cannot claim a name that
does not exist.
python/tests/test_coverage.py regenerates the page and fails when it differs from the file.

Run after a build: PYTHONPATH=build/release/python python3 python/tools/gen_coverage.py
"""
import inspect
import os
import sys

import torch
import torch.nn.functional as F

import kiln

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "pytorch_coverage.md")

# torch.nn.functional's public names that are not model functions (typing re-exports and
# torch's own dispatch helpers).
NOT_FUNCTIONS = {"Callable", "List", "Optional", "Tuple", "Union", "assert_int_or_pair",
                 "boolean_dispatch", "handle_torch_function", "has_torch_function",
                 "has_torch_function_unary", "has_torch_function_variadic"}

# Where Kiln serves a torch function under another name with the same semantics.
# (torch name -> Kiln attribute path below `kiln`).
ALIASES = {
    "functional": {},
    "torch": {"true_divide": "div", "moveaxis": "movedim", "unsafe_chunk": "chunk",
              "unsafe_split": "split", "unsafe_split_with_sizes": "split_with_sizes"},
    "linalg": {},
}


def nn_functional_names():
    return sorted(n for n in dir(F) if not n.startswith("_") and n not in NOT_FUNCTIONS
                  and callable(getattr(F, n)) and not inspect.isclass(getattr(F, n))
                  and not inspect.ismodule(getattr(F, n)))


def onnx17_torch_names():
    """torch.<op> functions that torch.onnx exports at opset 17: the aten ops with a symbolic
    function registered for opset <= 17 that are also public torch functions."""
    from torch.onnx._internal import registration
    reg = registration.registry
    out = set()
    for qual in reg.all_functions():
        ns, op = qual.split("::")
        if ns != "aten" or op.startswith("_") or op.endswith("_"):
            continue
        if reg.get_function_group(qual).get(17) is None:
            continue
        if callable(getattr(torch, op, None)):
            out.add(op)
    return sorted(out)


def linalg_names():
    return sorted(n for n in dir(torch.linalg) if not n.startswith("_")
                  and callable(getattr(torch.linalg, n))
                  and not inspect.isclass(getattr(torch.linalg, n)))


def _public(space, keep):
    return sorted(n for n in dir(space) if not n.startswith("_") and keep(getattr(space, n)))


def _defined_in(space, module_names):
    """Public classes and functions that `space` defines (not its re-exported helpers)."""
    return _public(space, lambda o: (inspect.isclass(o) or inspect.isfunction(o))
                   and getattr(o, "__module__", "").startswith(module_names))


def tensor_names():
    """Every public attribute of torch.Tensor: methods and properties (.shape, .grad, .device)."""
    return _public(torch.Tensor, lambda o: True)


def nn_module_names():
    return _public(torch.nn, lambda o: inspect.isclass(o) and issubclass(o, torch.nn.Module))


def nn_module_method_names():
    return _public(torch.nn.Module, lambda o: callable(o))


def nn_init_names():
    return _defined_in(torch.nn.init, "torch.nn.init")


def nn_utils_names():
    import torch.nn.utils as U
    return _public(U, lambda o: inspect.isfunction(o))


def optim_names():
    return _public(torch.optim,
                   lambda o: inspect.isclass(o) and issubclass(o, torch.optim.Optimizer))


def lr_scheduler_names():
    import torch.optim.lr_scheduler as L
    return _defined_in(L, "torch.optim.lr_scheduler")


def utils_data_names():
    import torch.utils.data as D
    # The datapipes (torchdata's experimental API) are left out: programs use the classes below.
    return [n for n in _public(D, lambda o: inspect.isclass(o) or inspect.isfunction(o))
            if "DataPipe" not in n and n not in ("DataChunk", "DataLoader2", "functional_datapipe",
                                                 "guaranteed_datapipes_determinism",
                                                 "non_deterministic", "runtime_validation",
                                                 "runtime_validation_disabled",
                                                 "argument_validation")]


# Where a program chooses and moves to a device: torch has no one namespace for it, so the list
# is the calls the programs made (each checked to exist in torch below).
DEVICE_API = ["device", "cuda.is_available", "cuda.device_count", "cuda.current_device",
              "cuda.manual_seed", "cuda.manual_seed_all", "cuda.synchronize", "cuda.empty_cache",
              "cuda.get_device_name", "backends.cudnn.is_available", "backends.mps.is_available",
              "Tensor.to", "Tensor.cpu", "Tensor.cuda", "Tensor.device", "Tensor.is_cuda",
              "nn.Module.to", "nn.Module.cpu", "nn.Module.cuda", "get_default_dtype",
              "set_default_dtype", "manual_seed"]


def device_names():
    def exists(path):
        obj = torch
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                return False
        return True
    return [n for n in DEVICE_API if exists(n)]


def _resolve(root, path):
    obj = root
    for part in path.split("."):
        try:
            obj = getattr(obj, part)
        except Exception:  # a missing name, or a property that fails on the class
            return None
    return obj


def kiln_name(section, name):
    """Kiln's dotted name for a torch name, or None."""
    prefix = {"functional": "nn.functional", "torch": "", "linalg": "linalg",
              "tensor": "Tensor", "nn": "nn", "module": "nn.Module", "init": "nn.init",
              "nn_utils": "nn.utils", "optim": "optim", "lr_scheduler": "optim.lr_scheduler",
              "data": "utils.data", "device": ""}[section]
    target = ALIASES.get(section, {}).get(name, name)
    path = (prefix + "." if prefix else "") + target
    obj = _resolve(kiln, path)
    if obj is None:
        return None
    # A Tensor property (shape, grad, device) is an attribute, not a callable.
    if not callable(obj) and not isinstance(obj, property):
        return None
    return "kiln." + path


def _params(cls):
    """Constructor argument names of a class (without self), or None when it takes *args."""
    try:
        sig = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return None
    names = [p.name for p in sig.parameters.values()
             if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)][1:]
    return names


def nn_args(name):
    """(torch's constructor arguments, those Kiln's class lacks) for torch.nn.<name>."""
    theirs = _params(getattr(torch.nn, name)) or []
    cls = getattr(kiln.nn, name, None)
    ours = _params(cls) if cls is not None else []
    return theirs, [a for a in theirs if a not in (ours or [])]


SECTIONS = [
    ("functional", "torch.nn.functional", nn_functional_names,
     "Every public function of `torch.nn.functional` (torch 1.13)."),
    ("torch", "torch ops that ONNX opset 17 exports", onnx17_torch_names,
     "The `torch.<op>` functions for which torch 1.13's ONNX exporter has a symbolic function "
     "at opset 17 or below: the math a model that deploys through ONNX may use."),
    ("linalg", "torch.linalg", linalg_names,
     "Every public function of `torch.linalg` (torch 1.13)."),
    ("tensor", "torch.Tensor methods and attributes", tensor_names,
     "Every public attribute of `torch.Tensor` (torch 1.13): methods and properties."),
    ("nn", "torch.nn modules", nn_module_names,
     "Every `torch.nn.Module` subclass that `torch.nn` exports (torch 1.13), with the constructor "
     "arguments of torch's that Kiln's class does not take."),
    ("module", "torch.nn.Module methods", nn_module_method_names,
     "Every public method of `torch.nn.Module` (torch 1.13)."),
    ("init", "torch.nn.init", nn_init_names,
     "Every function of `torch.nn.init` (torch 1.13), the deprecated spellings without `_` "
     "included."),
    ("nn_utils", "torch.nn.utils", nn_utils_names,
     "Every public function of `torch.nn.utils` (torch 1.13)."),
    ("optim", "torch.optim optimizers", optim_names,
     "Every optimizer class of `torch.optim` (torch 1.13)."),
    ("lr_scheduler", "torch.optim.lr_scheduler", lr_scheduler_names,
     "Every class of `torch.optim.lr_scheduler` (torch 1.13)."),
    ("data", "torch.utils.data", utils_data_names,
     "The public classes and functions of `torch.utils.data` (torch 1.13), its experimental "
     "DataPipes left out."),
    ("device", "device API", device_names,
     "The calls with which a program picks a device and moves tensors and modules to it."),
]

TORCH_PREFIX = {"functional": "torch.nn.functional.", "torch": "torch.", "linalg": "torch.linalg.",
                "tensor": "torch.Tensor.", "nn": "torch.nn.", "module": "torch.nn.Module.",
                "init": "torch.nn.init.", "nn_utils": "torch.nn.utils.", "optim": "torch.optim.",
                "lr_scheduler": "torch.optim.lr_scheduler.", "data": "torch.utils.data.",
                "device": "torch."}


def render():
    parts = []
    summary = []
    for key, title, names_of, what in SECTIONS:
        names = names_of()
        rows = [(n, kiln_name(key, n)) for n in names]
        have = sum(1 for _, k in rows if k)
        summary.append(f"| {title} | {len(names)} | {have} | {len(names) - have} |")
        tname = TORCH_PREFIX[key]
        body = [f"## {title}", "", what, "", f"Covered {have} of {len(names)}.", ""]
        if key == "nn":
            args = {n: nn_args(n) for n in names}
            n_all = sum(len(a[0]) for a in args.values())
            n_have = sum(len(a[0]) - len(a[1]) for n, a in args.items() if dict(rows)[n])
            summary.append(f"| torch.nn constructor arguments | {n_all} | {n_have} | "
                           f"{n_all - n_have} |")
            body[-1:] = [f"Constructor arguments: Kiln takes {n_have} of torch's {n_all}.", ""]
            body += ["| torch | Kiln | torch's arguments Kiln lacks |", "|---|---|---|"]
            for n, k in rows:
                lacks = ", ".join(args[n][1]) if k else ""
                body.append(f"| `{tname}{n}` | {'`' + k + '`' if k else 'missing'} | {lacks} |")
        else:
            body += ["| torch | Kiln |", "|---|---|"]
            body += [f"| `{tname}{n}` | {'`' + k + '`' if k else 'missing'} |" for n, k in rows]
        parts.append("\n".join(body))
    head = [
        "# PyTorch coverage",
        "",
        "Which PyTorch names (functions, Tensor methods, nn modules and their constructor",
        "arguments, initializers, optimizers, schedulers, data utilities, device calls) a port",
        "finds in Kiln's Python package, and under which name.",
        "Generated by `python/tools/gen_coverage.py` from the installed torch 1.13 and the built",
        "`kiln` package; `python/tests/test_coverage.py` regenerates it and fails when this file",
        "differs, so every listed Kiln name exists and no function is left out. The C++ API",
        "(`kiln/ops/ops.h`) uses the same names with `kiln::` in place of `kiln.`, except where",
        "a header comment says otherwise.",
        "",
        "| list | torch has | in Kiln | missing |",
        "|---|---|---|---|",
    ] + summary
    return "\n".join(head) + "\n\n" + "\n\n".join(parts) + "\n"


if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv:
        with open(OUT) as f:
            sys.exit(0 if f.read() == text else 1)
    with open(OUT, "w") as f:
        f.write(text)
    print("\n".join(l for l in text.splitlines()[:30] if l.startswith("| ") and "`" not in l))
