"""Differential suite against torch 1.13 in the traced modes: the elementwise, reduction and
product calls of the dtype matrix run through kiln.jit and as a Graph of placeholders run by a
Session, compared against torch like the eager calls; the graph's inferred dtype and shape must
also be what running it gives (the one promotion table serving every mode); and the nn,
reduction and linear-algebra calls under autocast in both. Engine:
torch_diff_util; deliberate differences: docs/torch_differences.md."""
import pytest

torch = pytest.importorskip("torch")

from torch_diff_util import DTYPES, Case, T, _walk, install_tests  # noqa: E402
from test_torch_diff_elementwise import BINARY, SCALARS, UNARY  # noqa: E402

# Differences still to fix: each key is a pattern over case ids (* matches anything,
# ? one character); its cases run as one strict xfail, which fails once they all agree with
# torch, so the entry is removed with the fix. Deliberate differences are not listed here but in
# docs/torch_differences.md.
KNOWN_BUGS = {
}

MODES = ["jit", "graph"]
REDUCTIONS = ["sum", "mean", "prod", "amax", "argmax", "all", "cumsum", "softmax", "std",
              "nansum", "logsumexp"]


def mode_cases():
    out = []
    for mode in MODES:
        for name, dom in UNARY.items():
            for dt in DTYPES:
                out.append(Case(name, [T((2, 3), dt, dom)], mode=mode))
        for name, (da, db) in BINARY.items():
            for a in DTYPES:
                for b in DTYPES:
                    out.append(Case(name, [T((2, 3), a, da), T((), b, db)], mode=mode))
                for kind, s in SCALARS.items():
                    out.append(Case(name, [T((2, 3), a, da), s], mode=mode))
        for name in REDUCTIONS:
            for dt in DTYPES:
                args = [T((2, 3), dt)] + ([1] if name in ("cumsum", "softmax", "logsumexp")
                                          else [])
                out.append(Case(name, args, mode=mode))
        for a in DTYPES:
            for b in DTYPES:
                out.append(Case("matmul", [T((2, 3), a), T((3, 2), b)], mode=mode))
                out.append(Case("where", [T((2, 3), "bool"), T((2, 3), a), T((3,), b)],
                                mode=mode))
            out.append(Case("clamp", [T((2, 3), a)], {"min": 1}, mode=mode))
            out.append(Case("clamp", [T((2, 3), a)], {"min": 0.5}, mode=mode))
            out.append(Case("full_like", [T((2, 3), a), 2], mode=mode))
    return out


def autocast_cases():
    """The float32 and bfloat16 calls of the nn, reduction and linear-algebra tables under
    autocast("cpu", bfloat16) in both, one per call and shapes: which ops run in bfloat16,
    which in float32, and what mixed inputs give."""
    import test_torch_diff_nn as nn_cases
    import test_torch_diff_reduce as reduce_cases
    out, seen = [], set()
    for c in nn_cases.CASES + reduce_cases.CASES:
        if c.mode != "eager" or not isinstance(c.fn, str) or c.fn.startswith("."):
            continue
        ts = [t for t in _walk([c.args, c.kwargs]) if isinstance(t, T)]
        if not ts or ts[0].dtype not in ("float32", "bfloat16") or c.id.endswith("#edges"):
            continue
        key = (c.fn, ts[0].dtype, tuple(t.shape for t in ts))
        if key in seen:
            continue
        seen.add(key)
        out.append(Case(c.fn, c.args, c.kwargs, ops=c.ops, mode="autocast", grad=False,
                        tol=(3e-2, 0.1)))
    for name, (da, db) in BINARY.items():
        out.append(Case(name, [T((2, 3), "float32", da), T((3,), "bfloat16", db)],
                        mode="autocast", tol=(3e-2, 0.1)))
    return out


def graph_table_cases(mode="graph"):
    """The nn, reduction, linear-algebra and shape calls as Graphs (or under kiln.jit) too, one
    per call, input dtype and shapes, so shape and dtype inference of every op is checked
    against the run and against torch."""
    import test_torch_diff_nn as nn_cases
    import test_torch_diff_reduce as reduce_cases
    import test_torch_diff_shape as shape_cases
    out, seen = [], set()
    for c in nn_cases.CASES + reduce_cases.CASES + shape_cases.CASES:
        if c.mode != "eager" or not isinstance(c.fn, str) or c.fn.startswith(".") or \
                c.id.endswith("#edges"):
            continue
        ts = [t for t in _walk([c.args, c.kwargs]) if isinstance(t, T)]
        if not ts or ts[0].dtype not in ("float32", "int64", "bfloat16", "bool"):
            continue
        key = (c.fn, ts[0].dtype, tuple(t.shape for t in ts))
        if key in seen:
            continue
        seen.add(key)
        out.append(Case(c.fn, c.args, c.kwargs, ops=c.ops, mode=mode, tol=c.tol))
    return out


CASES = mode_cases() + autocast_cases()
_ids = {c.id for c in CASES}
CASES += [c for c in graph_table_cases("graph") + graph_table_cases("jit") if c.id not in _ids]
install_tests(globals(), CASES, KNOWN_BUGS, "traced modes (jit, graph)")
