"""Differential suite against torch 1.13, coverage: every registry op is exercised by some case of
test_torch_diff_*.py (the cases are traced into a Graph and differentiated to see which ops they
build) or listed here as internal with a reason; every public function of the package with a
torch namesake (kiln.X, kiln.nn.functional.X, kiln.linalg.X, Tensor methods) is called by some
case or listed with a reason; and every row of docs/torch_differences.md names a case that
differs as documented."""
import re

import pytest

torch = pytest.importorskip("torch")

import kiln  # noqa: E402
import kiln.linalg  # noqa: E402
import kiln.nn  # noqa: E402
import torch_diff_util as U  # noqa: E402

import test_torch_diff_elementwise as _elementwise  # noqa: E402
import test_torch_diff_modes as _modes  # noqa: E402
import test_torch_diff_nn as _nn  # noqa: E402
import test_torch_diff_reduce as _reduce  # noqa: E402
import test_torch_diff_shape as _shape  # noqa: E402
import test_torch_diff_surface as _surface  # noqa: E402

FILES = [_elementwise, _reduce, _shape, _nn, _modes, _surface]
ALL_CASES = [c for mod in FILES for c in mod.SUITE.cases]

# Registry ops no case reaches, with why: internal (a fused, blocked or helper variant that
# passes and other ops choose, not a call of its own), gradient (only a gradient rule emits it,
# in a path the traces do not take), graph (graph-mode control flow, state and host calls: no
# torch counterpart), dist (collectives). Every other op is exercised: the cases are traced into
# a Graph (and differentiated) to see which ops they build.
INTERNAL = {
    "conv2d_fused": "internal", "conv2d_fused_add": "internal", "fused": "internal",
    "max_pool2d_blocked": "internal",
    "check_numel": "internal", "split_like": "internal", "sym_size": "graph",
    "mean_hw_blocked": "internal", "scale_channels_blocked": "internal",
    "max_pool2d_values": "internal", "avg_pool2d_values": "internal",
    "gather_channels_blocked": "internal",
    "assign": "graph", "group": "graph", "merge": "graph", "switch": "graph", "while": "graph",
    "while_grad": "graph", "print": "graph", "jit_call": "graph", "py_function": "graph",
    "all_reduce": "dist",
    # the broadcast reduction of gradients when a graph's dims are only known at run time
    "sum_to_like": "gradient",
    # behind kiln.nms (torchvision's, no torch namesake): against torchvision in
    # test_ops_conv_pool.py, and ONNX's NonMaxSuppression
    "nms_batched": "internal",
    # behind ONNX's Unique in a graph (torch.unique reads the values on the host instead)
    "unique_rows": "internal",
    # behind kiln.nn's RNN/LSTM/GRU and ONNX's (no torch namesake): against torch's layers in
    # test_pt_nn_rnn.py
    "rnn_sequence": "internal", "rnn_sequence_grad": "gradient",
}
_OP_RE = re.compile(r"= ([A-Za-z_0-9]+)\(")


def _trace_ops(case):
    """The registry ops a case's kiln call builds when its tensors are Graph placeholders, and
    those its gradient (kiln.gradients) adds; empty when the call does not trace."""
    g = kiln.Graph()
    phs = []

    def ph(a):
        if isinstance(a, U.T):
            p = g.placeholder(getattr(kiln, a.dtype), list(a.shape))
            if a.dtype in ("float32", "float64", "bfloat16"):
                phs.append(p)
            return p
        if isinstance(a, U.L):
            items = [ph(x) for x in a.items]
            return tuple(items) if a.tuple_ else items
        if isinstance(a, U.D):
            return getattr(kiln, a.name)
        return a
    try:
        args = [ph(a) for a in case.args]
        kwargs = {k: ph(v) for k, v in case.kwargs.items()}
        out = case._invoke(U.Lib(True), args, kwargs)
    except Exception:  # noqa: BLE001 - eager-only calls (data-dependent shapes, ...)
        return set()
    try:
        outs = [o for o in U._flat_tensors(out)
                if U.dtype_name(o.dtype) in ("float32", "float64", "bfloat16")]
        if outs and phs:
            total = outs[0].sum()
            for o in outs[1:]:
                total = total + o.sum()
            kiln.gradients(total, phs)
    except Exception:  # noqa: BLE001 - not differentiable
        pass
    return set(_OP_RE.findall(g.to_text()))


def _exercised_ops(reg):
    """Registry ops the cases reach: traced through a Graph (one case per call and input dtype),
    or, for calls that run eagerly only, the ops a case names."""
    ops, seen = set(), set()
    for c in ALL_CASES:
        ts = [t for t in U._walk([c.args, c.kwargs]) if isinstance(t, U.T)]
        key = (c.name, ts[0].dtype if ts else None, tuple(t.shape for t in ts),
               c.fn if isinstance(c.fn, str) else c.fn.__name__)
        if key in seen:
            continue
        seen.add(key)
        traced = _trace_ops(c)
        ops |= traced if traced else (c.ops & reg)
    return ops


def _registry_names():
    names = getattr(kiln._C, "_registry_op_names", None)
    if names is None:
        pytest.skip("this build has no kiln._C._registry_op_names")
    return set(names())


def test_every_registry_op_is_exercised_or_listed():
    reg = _registry_names()
    covered = _exercised_ops(reg) & reg
    missing = sorted(reg - covered - set(INTERNAL))
    assert not missing, ("registry ops neither exercised by a case nor listed in INTERNAL: "
                         f"{missing}")
    stale = sorted(set(INTERNAL) - reg)
    assert not stale, f"INTERNAL lists ops the registry lacks: {stale}"
    both = sorted(set(INTERNAL) & covered)
    assert not both, f"INTERNAL lists ops a case exercises (remove them): {both}"
    assert set(INTERNAL.values()) <= {"internal", "gradient", "graph", "dist"}
    print(f"\nregistry: {len(covered)} of {len(reg)} ops exercised, {len(INTERNAL)} internal")


# Public names with a torch namesake that no case calls, with why: random (seeding and
# generator state; the random factories' dtypes and shapes are compared), state (global
# settings), autograd (exercised through every float64 case), interop (NumPy and DLPack, see
# test_interop.py), io (files), device (CPU-only placement queries), module (torch.jit is a
# module, kiln.jit a decorator), aten-signature.
SURFACE_SKIP = {
    "manual_seed": "random", "get_rng_state": "random", "set_rng_state": "random",
    "get_num_threads": "state", "set_num_threads": "state", "is_grad_enabled": "state",
    "is_autocast_enabled": "state", "is_autocast_cpu_enabled": "state",
    "get_autocast_cpu_dtype": "state", "get_default_dtype": "state",
    "set_default_dtype": "state", "use_deterministic_algorithms": "state",
    "are_deterministic_algorithms_enabled": "state",
    ".backward": "autograd", ".retain_grad": "autograd",
    "from_numpy": "interop", "from_dlpack": "interop", "to_dlpack": "interop",
    ".numpy": "interop", ".data_ptr": "interop",
    "jit": "module", "seed": "random", "initial_seed": "random",
    "save": "io", "load": "io",
    ".cpu": "device", ".cuda": "device", ".get_device": "device", ".is_pinned": "device",
    ".pin_memory": "device", ".share_memory_": "device", ".is_shared": "device",
    # torch's top-level names of these are ATen ops with other signatures (torch.embedding(weight,
    # indices), reductions as ints, every argument positional); kiln.X is nn.functional's form,
    # compared as F.X.
    "batch_norm": "aten-signature", "binary_cross_entropy_with_logits": "aten-signature",
    "cosine_embedding_loss": "aten-signature", "dropout": "aten-signature",
    "embedding": "aten-signature", "group_norm": "aten-signature",
    "hinge_embedding_loss": "aten-signature", "instance_norm": "aten-signature",
    "kl_div": "aten-signature", "layer_norm": "aten-signature",
    "margin_ranking_loss": "aten-signature", "poisson_nll_loss": "aten-signature",
    "triplet_margin_loss": "aten-signature",
}


def _surface():
    """(path, kiln object, torch object) of every public kiln callable with a torch namesake."""
    spaces = [("", kiln, torch), ("F.", kiln.nn.functional, torch.nn.functional),
              ("linalg.", kiln.linalg, torch.linalg), (".", kiln.Tensor, torch.Tensor)]
    out = []
    for prefix, kns, tns in spaces:
        for name in dir(kns):
            if name.startswith("_") or not hasattr(tns, name):
                continue
            kobj = getattr(kns, name)
            if not callable(kobj) or isinstance(kobj, type):
                continue
            out.append(prefix + name)
    return out


def test_every_public_function_with_a_torch_namesake_is_compared():
    called = {c.name for c in ALL_CASES}
    missing = sorted(p for p in _surface() if p not in called and p not in SURFACE_SKIP)
    assert not missing, f"public functions no case calls (add cases or SURFACE_SKIP): {missing}"
    stale = sorted(p for p in SURFACE_SKIP if p in called)
    assert not stale, f"SURFACE_SKIP lists names a case calls: {stale}"


def test_documented_rows_name_differing_cases():
    """Every row of docs/torch_differences.md names at least one case that differs as the row
    says (so no row is stale); the case files check that no case a row names differs another
    way."""
    rows = U.load_documented()
    assert rows, "docs/torch_differences.md has no table rows"
    stale = []
    for r in rows:
        cases = [c for c in ALL_CASES if r.matches(c.id)]
        if r.kind == "torch-bf16-bug":
            ok = any(U.run_case(c).differs for c in cases)  # differs from bf16 torch
        else:
            ok = any(U.run_case(c).kind == r.kind for c in cases)
        if not ok:
            stale.append(f"{r.key} ({len(cases)} cases, none differing as {r.kind})")
    assert not stale, f"documented differences no case shows: {stale}"
    kinds = {"dtype", "shape", "values", "grad", "structure", "refused", "accepted", "binding",
             "torch-bf16-bug"}
    bad = [r.key for r in rows if r.kind not in kinds or not r.reason]
    assert not bad, f"rows with an unknown kind or no reason: {bad}"
