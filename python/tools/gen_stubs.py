#!/usr/bin/python3
"""Writes python/kiln/_C.pyi from the built extension's pybind11 signatures, so editors complete
kiln's functions and methods with their argument names, types and docstrings. Run after a
build: PYTHONPATH=build/release/python python3 python/tools/gen_stubs.py"""
import inspect
import os
import re
import sys

import kiln._C as C

OUT = os.path.join(os.path.dirname(__file__), "..", "kiln", "_C.pyi")
TYPES = [(r"kiln\._C\.", ""), (r"numpy\.ndarray\[[^\]]*\]", "Any"), (r"\bobject\b", "Any"),
         (r"Tensor \| ArrayLike", "TensorLike"), (r"kiln::\w+(::\w+)*", "Any"),
         (r"\bfunction\b", "Callable[..., Any]"), (r"\bbuffer\b", "Any"), (r"\*\*kwargs", "**kwargs: Any"),
         (r"\*args\b(?!:)", "*args: Any"), (r"\bcapsule\b", "Any"), (r"\biterable\b", "Any"),
         (r"\bsequence\b", "Any"), (r"\btuple\b", "tuple"), (r"\bdict\b", "dict")]


def clean(sig):
    for pat, rep in TYPES:
        sig = re.sub(pat, rep, sig)
    # Defaults pybind11 prints as reprs (<kiln.dtype ...>, tensors): keep only simple literals.
    sig = re.sub(r"= (<[^>]*>|[^,()\[\]]*\([^)]*\)|\[[^\]]*\])", "= ...", sig)
    return sig


def signatures(name, doc):
    """(args, ret) per overload from a pybind11 docstring."""
    out = []
    for line in (doc or "").splitlines():
        m = re.match(r"^(?:\d+\. )?" + re.escape(name) + r"\((.*)\) -> (.+)$", line.strip())
        if m:
            out.append((clean(m.group(1)), clean(m.group(2))))
    return out


def text_of(doc):
    lines = [l for l in (doc or "").splitlines() if l.strip() and not re.match(r"^(\d+\. )?\w+\(.*\) ->", l.strip())
             and l.strip() != "Overloaded function."]
    return " ".join(l.strip() for l in lines).replace('"""', "'''").replace("\\", "\\\\")


def emit_func(name, obj, indent, method=False):
    sigs = signatures(name, obj.__doc__)
    if not sigs:
        return [f"{indent}def {name}(self, *args: Any, **kwargs: Any) -> Any: ..." if method else
                f"{indent}def {name}(*args: Any, **kwargs: Any) -> Any: ..."]
    doc = text_of(obj.__doc__)
    lines = []
    for args, ret in sigs:
        if len(sigs) > 1:
            lines.append(f"{indent}@overload")
        if method and (name in ("__init__",) or args.startswith("self")):
            pass
        body = f'\n{indent}    """{doc}"""' if doc and len(sigs) == 1 else " ..."
        lines.append(f"{indent}def {name}({args}) -> {ret}:{body}")
    return lines


def emit_class(name, cls, indent=""):
    bases = [b.__name__ for b in cls.__bases__ if b.__name__ not in ("pybind11_object", "object")]
    lines = [f"{indent}class {name}({', '.join(bases)}):" if bases else f"{indent}class {name}:"]
    doc = text_of(cls.__doc__)
    if doc:
        lines.append(f'{indent}    """{doc}"""')
    for attr, v in sorted(cls.__dict__.items()):
        if attr.startswith("__") and attr not in ("__init__", "__call__", "__getitem__", "__setitem__",
                                                   "__len__", "__iter__", "__add__", "__radd__", "__sub__",
                                                   "__rsub__", "__mul__", "__rmul__", "__truediv__",
                                                   "__rtruediv__", "__matmul__", "__pow__", "__neg__",
                                                   "__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__",
                                                   "__and__", "__or__", "__invert__", "__bool__", "__float__",
                                                   "__int__", "__dlpack__", "__dlpack_device__", "__iadd__",
                                                   "__isub__", "__imul__", "__itruediv__", "__abs__"):
            continue
        if isinstance(v, property):
            lines.append(f"{indent}    @property")
            lines.append(f"{indent}    def {attr}(self) -> Any: ...")
        elif callable(v) and hasattr(v, "__doc__") and not inspect.isclass(v):
            if isinstance(v, staticmethod) or type(v).__name__ == "staticmethod":
                lines.append(f"{indent}    @staticmethod")
                v = v.__func__
            lines.extend(emit_func(attr, v, indent + "    ", method=True))
        elif isinstance(v, cls):
            lines.append(f"{indent}    {attr}: {name}")
    if len(lines) == 1:
        lines.append(f"{indent}    ...")
    return lines


def module_body(mod, indent=""):
    lines = []
    for name, v in sorted(vars(mod).items()):
        if name.startswith("__"):
            continue
        if inspect.isclass(v) and issubclass(v, BaseException):
            lines.append(f"{indent}class {name}({', '.join(b.__name__ for b in v.__bases__)}): ...")
        elif inspect.isclass(v):
            lines.extend(emit_class(name, v, indent))
        elif inspect.ismodule(v):
            continue
        elif callable(v):
            lines.extend(emit_func(name, v, indent))
        elif isinstance(v, C.dtype):
            lines.append(f"{indent}{name}: dtype")
    return lines


def main():
    out = ['"""Type stubs of kiln._C, generated by python/tools/gen_stubs.py from the built extension."""',
           "from typing import Any, Callable, overload", "",
           "TensorLike = Any  # a Tensor, a Python number, nested lists or a NumPy array", ""]
    out += module_body(C)
    for sub in ("nn", "optim", "io"):
        out += ["", f"class {sub}:", f'    """kiln._C.{sub}"""']
        out += module_body(getattr(C, sub), "    ")
    text = "\n".join(out) + "\n"
    with open(OUT, "w") as f:
        f.write(text)
    compile(text, OUT, "exec")  # the stub must at least parse
    print(f"wrote {OUT} ({len(out)} lines)")


if __name__ == "__main__":
    sys.exit(main())
