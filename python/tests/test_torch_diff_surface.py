"""Differential suite against torch 1.13, the rest of the public surface: Tensor methods as
twins of the function cases (and in-place methods on copies), torch's top-level names of nn ops,
conversions and properties, the nn.functional forms the op tables do not reach, dtypes and
shapes of the random factories, and arguments of the wrong type. Engine: torch_diff_util;
deliberate differences: docs/torch_differences.md."""
import pytest

torch = pytest.importorskip("torch")

import kiln  # noqa: E402
import torch_diff_util as U  # noqa: E402

import test_torch_diff_elementwise as _elementwise  # noqa: E402
import test_torch_diff_nn as _nn  # noqa: E402
import test_torch_diff_reduce as _reduce  # noqa: E402
import test_torch_diff_shape as _shape  # noqa: E402

FILES = [_elementwise, _reduce, _shape, _nn]


def _method_twins():
    """For each function with a Tensor method of the same name in kiln and torch, its cases with
    a tensor first argument (up to one per dtype) called as methods."""
    out, seen = [], set()
    for mod in FILES:
        for c in mod.SUITE.cases:
            if not isinstance(c.fn, str) or "." in c.fn or ":" in c.fn or not c.args or \
                    not isinstance(c.args[0], U.T):
                continue
            if not (hasattr(kiln.Tensor, c.fn) and hasattr(torch.Tensor, c.fn)) or \
                    c.fn in ("where",):  # x.where(cond, y) is where(cond, x, y)
                continue
            key = (c.fn, c.args[0].dtype)
            if key in seen:
                continue
            seen.add(key)
            out.append(U.Case("." + c.fn, c.args, c.kwargs, ops=c.ops, tol=c.tol,
                              group="methods:" + c.fn, tag="twin"))
    return out


def _inplace(method, *extra):
    """x.clone().<method>(*extra): the in-place form on a fresh copy, and what it returns."""
    def call(m, x, *args, **kwargs):
        y = x.detach().clone()
        r = getattr(y, method)(*args, *extra, **kwargs)
        return y, r
    call.__name__ = "." + method
    return call


def _info(m, x):
    return x.dtype, tuple(x.shape)


def _random(label, fn):
    def call(m):
        return _info(m, fn(m))
    call.__name__ = label
    return call


def surface_cases():
    """The public functions the op tables do not reach: torch's top-level nn names, conversions,
    properties, in-place methods, the *_with_indices and in-place nn.functional forms, dtype
    and shape of the random factories."""
    T, D, C = U.T, U.D, U.Case
    out = []
    for dt in U.DTYPES:
        x = T((2, 3), dt)
        for conv in ["bfloat16", "bool", "byte", "char", "double", "float", "half", "int",
                     "long", "short"]:
            out.append(C("." + conv, [x], ops=["cast"]))
        for prop in ["item", "tolist"]:
            out.append(C("." + prop, [T((), dt) if prop == "item" else x], ops=[]))
        for prop in ["dim", "numel", "size", "stride", "element_size", "is_contiguous",
                     "is_floating_point"]:
            out.append(C("." + prop, [x], ops=[]))
        out.append(C(".size", [x, 1], ops=[]))
        out.append(C("numel", [x], ops=[]))
        out.append(C("is_tensor", [x], ops=[]))
        out.append(C("detach", [T((2, 3), dt, grad=dt == "float64")], grad=False))
        out.append(C(".detach", [x], grad=False))
        out.append(C(".contiguous", [x]))
        out.append(C(".expand_as", [T((3,), dt), x], ops=["expand_as"]))
        out.append(C(".select", [x, 1, 2], ops=["slice", "squeeze"]))
        for b in U.DTYPES:
            out.append(C(".where", [x, T((2, 3), "bool"), T((3,), b)]))
        out.append(C(".as_strided", [x, (2, 2), (1, 2)]))
        out.append(C("as_strided", [x, (3, 2), (1, 3), 0]))
        out.append(C(_inplace("zero_"), [x], name=".zero_", ops=["fill_like"]))
        out.append(C(_inplace("neg_"), [x], name=".neg_", ops=["neg"]))
        out.append(C(_inplace("relu_"), [x], name=".relu_", ops=["relu"]))
        out.append(C(_inplace("clamp_", -1, 1), [x], name=".clamp_", ops=["clamp"]))
        out.append(C(_inplace("copy_"), [x, T((3,), "float32")], name=".copy_", ops=["cast"]))
        out.append(C(_inplace("index_fill_"), [x, 1, T((2,), "int64", "idx:3"), 2],
                     name=".index_fill_", ops=["index_fill"]))
        out.append(C(_inplace("index_copy_"), [x, 0, T((1,), "int64", "idx:2"), T((1, 3), dt)],
                     name=".index_copy_", ops=["index_copy"]))
        out.append(C(_inplace("index_put_"), [x, U.L(T((2,), "int64", "idx:2"), tuple_=True),
                                              T((3,), dt)], name=".index_put_",
                     ops=["index_put"]))
        out.append(C(_inplace("masked_scatter_"), [x, T((2, 3), "bool"), T((6,), dt)],
                     name=".masked_scatter_", ops=["masked_scatter"]))
        out.append(C(_inplace("scatter_"), [x, 0, T((2, 3), "int64", "idx:2"), T((2, 3), dt)],
                     name=".scatter_", ops=["scatter"]))
        out.append(C(_inplace("scatter_reduce_"), [x, 0, T((2, 3), "int64", "idx:2"),
                                                   T((2, 3), dt), "sum"],
                     name=".scatter_reduce_", ops=["scatter_reduce"]))
        out.append(C(_inplace("requires_grad_"), [x], name=".requires_grad_", ops=[]))
        out.append(C(_inplace("detach_"), [x], name=".detach_", ops=["detach"]))
        out.append(C(".type", [x, D("float64")], ops=["cast"]))
    for dt in U.FLOATS:
        g = dt == "float64"
        x1, x2, x3 = T((2, 2, 6), dt, "perm"), T((1, 2, 4, 4), dt, "perm"), \
            T((1, 1, 4, 4, 4), dt, "perm")
        tol = (3e-2, 0.1) if dt == "bfloat16" else None
        out.append(C("conv1d", [T((2, 2, 6), dt, grad=g), T((3, 2, 3), dt, grad=g)], tol=tol))
        out.append(C("conv2d", [T((1, 2, 4, 4), dt, grad=g), T((3, 2, 3, 3), dt, grad=g)],
                     tol=tol))
        out.append(C("conv3d", [T((1, 1, 3, 3, 3), dt, grad=g), T((2, 1, 2, 2, 2), dt)],
                     tol=tol))
        out.append(C("conv_transpose1d", [T((2, 2, 5), dt, grad=g), T((2, 3, 3), dt)],
                     tol=tol))
        out.append(C("conv_transpose2d", [T((1, 2, 3, 3), dt, grad=g), T((2, 3, 3, 3), dt)],
                     tol=tol))
        out.append(C("conv_transpose3d", [T((1, 2, 2, 2, 2), dt), T((2, 2, 2, 2, 2), dt)],
                     tol=tol))
        for name, x, k in [("max_pool1d", x1, 2), ("max_pool2d", x2, 2), ("max_pool3d", x3, 2),
                           ("avg_pool1d", x1, 2), ("adaptive_avg_pool1d", x1, 3),
                           ("adaptive_max_pool1d", x1, 3), ("max_pool1d_with_indices", x1, 2)]:
            out.append(C(name, [x, k]))
        for name, x, k in [("max_pool1d_with_indices", x1, 2), ("max_pool2d_with_indices", x2, 2),
                           ("max_pool3d_with_indices", x3, 2),
                           ("adaptive_max_pool1d_with_indices", x1, 3),
                           ("adaptive_max_pool2d_with_indices", x2, 3),
                           ("adaptive_max_pool3d_with_indices", x3, 2)]:
            out.append(C("F." + name, [x, k], ops=[name.replace("_with_indices", "")]))
        out.append(C(_unpool(1), [x1], name="F.max_unpool1d", ops=["max_unpool"]))
        out.append(C(_unpool(3), [x3], name="F.max_unpool3d", ops=["max_unpool"]))
        out.append(C("pixel_shuffle", [T((1, 4, 2, 3), dt), 2]))
        out.append(C("pixel_unshuffle", [T((1, 1, 4, 6), dt), 2]))
        out.append(C("selu", [T((2, 3), dt, grad=g)]))
        out.append(C("celu", [T((2, 3), dt, grad=g)]))
        out.append(C("cosine_similarity", [T((2, 3), dt, grad=g), T((2, 3), dt)]))
        out.append(C("F.upsample", [T((1, 2, 3, 3), dt)], {"scale_factor": 2}))
        out.append(C("F.upsample_nearest", [T((1, 2, 3, 3), dt)], {"scale_factor": 2}))
        out.append(C("F.upsample_bilinear", [T((1, 2, 3, 3), dt)], {"size": (4, 5)}))
        for name in ["dropout1d", "dropout2d", "dropout3d"]:
            shape = {"dropout1d": (2, 3, 4), "dropout2d": (1, 2, 3, 4),
                     "dropout3d": (1, 2, 2, 3, 4)}[name]
            out.append(C("F." + name, [T(shape, dt)], {"p": 0.5, "training": False},
                         ops=["dropout"]))
        for name, extra in [("celu_", ()), ("elu_", ()), ("hardtanh_", ()),
                            ("leaky_relu_", ()), ("relu_", ()), ("selu_", ()),
                            ("threshold_", (0.5, -1.0))]:
            out.append(C(_f_inplace(name, *extra), [T((2, 3), dt)], name="F." + name,
                         ops=[name[:-1]]))
    for dt in U.FLOATS:
        g = dt == "float64"
        qkv = [T((2, 3, 4), dt, grad=g), T((2, 5, 4), dt, grad=g), T((2, 5, 4), dt, grad=g)]
        out.append(C(_sdpa, qkv, name="F.scaled_dot_product_attention",
                     tol=(3e-2, 5e-2) if dt == "bfloat16" else None))
        out.append(C(_sdpa, [T((2, 3, 4), dt, grad=g), T((2, 3, 4), dt, grad=g),
                             T((2, 3, 4), dt, grad=g)], {"is_causal": True},
                     name="F.scaled_dot_product_attention",
                     tol=(3e-2, 5e-2) if dt == "bfloat16" else None))
    out.append(C("broadcast_shapes", [(2, 1), (3,)], ops=[]))
    out.append(C("broadcast_shapes", [(2, 1), (3, 3)], ops=[]))
    for a in U.DTYPES:
        for b in U.DTYPES:
            out.append(C("promote_types", [D(a), D(b)], ops=[]))
    for dt in ["float32", "float64", "bfloat16"]:
        out.append(C(_random("rand", lambda m, dt=dt: m.rand(2, 3, dtype=m.dtype(dt))), [],
                     name="rand", tag=dt))
        out.append(C(_random("randn", lambda m, dt=dt: m.randn(2, 3, dtype=m.dtype(dt))), [],
                     name="randn", tag=dt))
    out.append(C(_random("rand", lambda m: m.rand(2, 3)), [], name="rand"))
    out.append(C(_random("randn", lambda m: m.randn(())), [], name="randn", tag="0d"))
    out.append(C(_random("randint", lambda m: m.randint(0, 5, (2, 3))), [], name="randint"))
    out.append(C(_random("randint", lambda m: m.randint(5, (4,))), [], name="randint",
                 tag="high"))
    out.append(C(_random("randint", lambda m: m.randint(0, 5, (2,), dtype=m.int32)), [],
                 name="randint", tag="int32"))
    return out


def _sdpa(m, q, k, v, is_causal=False):
    """torch 1.13 has no F.scaled_dot_product_attention: its definition (PyTorch 2's docs),
    softmax(q k^T / sqrt(d) + causal mask) v, is the oracle."""
    if m.is_kiln:
        return m.F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    s = q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5)
    if is_causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1) @ v


def _unpool(rank):
    def call(m, x):
        pool = getattr(m.F, f"max_pool{rank}d")
        y, i = pool(x, 2, return_indices=True)
        return getattr(m.F, f"max_unpool{rank}d")(y, i, 2)
    return call


def _f_inplace(name, *extra):
    def call(m, x):
        y = x.clone()
        r = getattr(m.F, name)(y, *extra)
        return y, r
    call.__name__ = "F." + name
    return call


def bad_type_cases():
    """Arguments of the wrong type: both refuse; Kiln should say so with a kiln.Error naming the
    op and the argument (a binding-layer TypeError where torch also raises TypeError is counted
    as agreement and listed by the report)."""
    T, C = U.T, U.Case
    x = T((2, 3), "float32")
    out = []
    for name, args, kw in [
            ("add", [x, "a"], {}), ("add", [x, None], {}), ("mul", [x, [1, 2]], {}),
            ("sum", [x], {"dim": "a"}), ("sum", [x], {"dim": 1.5}), ("mean", [x, "a"], {}),
            ("reshape", [x, "a"], {}), ("reshape", [x, (2.5, 2)], {}), ("permute", [x, "ab"], {}),
            ("transpose", [x, 0, "a"], {}), ("cat", [x], {}), ("cat", [U.L(x, "a")], {}),
            ("stack", [[1, 2]], {}), ("matmul", [x, 3], {}), ("exp", ["a"], {}),
            ("exp", [None], {}), ("exp", [[1.0, 2.0]], {}), ("softmax", [x, "a"], {}),
            ("softmax", [x, 1.5], {}), ("clamp", [x], {"min": "a"}), ("where", [x, x, x], {}),
            ("gather", [x, 1, T((2, 2), "float32")], {}), ("index_select", [x, 0, [0, 1]], {}),
            ("zeros", ["a"], {}), ("zeros", [2, "a"], {}), ("ones", [(2, -1)], {}),
            ("full", [(2,), "a"], {}), ("arange", ["a"], {}), ("tensor", [{"a": 1}], {}),
            ("unsqueeze", [x, 5], {}), ("squeeze", [x, 7], {}), ("topk", [x, 10], {}),
            ("F.relu", ["a"], {}), ("F.linear", [x, "w"], {}), ("F.conv2d", [x, x], {}),
            ("F.cross_entropy", [x, T((2,), "float32", "idx:3")], {}),
            ("F.pad", [x, (1,)], {}), ("F.pad", [x, "a"], {}), ("linalg.det", [x], {}),
            ("linalg.inv", ["a"], {}), ("linalg.vector_norm", [x], {"ord": "fro"}),
            (".view", [x, "a"], {}), (".to", [x, "notadtype"], {}),
            (".expand", [x, 3, 3], {}), (".index_fill_", [x, 0, [0], 1.0], {}),
            ("split", [x, "a"], {}), ("chunk", [x, 0], {}), ("narrow", [x, 0, 5, 2], {}),
            ("repeat_interleave", [x, -1], {}), ("einsum", ["ij,jk", x], {}),
            ("F.one_hot", [T((3,), "float32")], {}), ("max", [x, "a"], {})]:
        fn = name if name.startswith(("F.", "linalg.", ".")) else name
        out.append(C(fn, args, kw, tag="badtype"))
    return out


def _inplace_twins():
    """Every in-place Tensor method x.f_(...) whose out-of-place f has cases: on a copy of the
    first argument, one case per input dtype; compares the tensor written and the result."""
    bases = {}
    for mod in FILES:
        for c in mod.SUITE.cases:
            if isinstance(c.fn, str) and c.args and isinstance(c.args[0], U.T) and \
                    c.mode == "eager" and ":" not in c.fn:
                bases.setdefault(c.fn.lstrip(".").split(".")[-1], []).append(c)
    out = []
    for name in sorted(dir(kiln.Tensor)):
        if not name.endswith("_") or name.startswith("_") or not hasattr(torch.Tensor, name):
            continue
        seen = set()
        for c in bases.get(name[:-1], []):
            if c.args[0].dtype in seen:
                continue
            seen.add(c.args[0].dtype)
            out.append(U.Case(_inplace(name), c.args, c.kwargs, name="." + name,
                              ops=c.ops, tol=c.tol, group="inplace:" + name, tag="twin"))
    return out


def _new_like(method, *extra):
    def call(m, x):
        return _info(m, getattr(x, method)(*extra))
    call.__name__ = "." + method
    return call


def more_cases():
    """nn.functional forms added beside the op tables, conversions between tensors, and the
    random functions (dtype and shape only)."""
    T, C = U.T, U.Case
    out = []
    for dt in U.FLOATS:
        g = dt == "float64"
        tol = (3e-2, 0.1) if dt == "bfloat16" else None
        out.append(C("F.bilinear", [T((2, 3), dt, grad=g), T((2, 4), dt, grad=g),
                                    T((5, 3, 4), dt, grad=g), T((5,), dt)], tol=tol))
        out.append(C("F.channel_shuffle", [T((1, 4, 2), dt), 2]))
        out.append(C("F.native_channel_shuffle", [T((1, 4, 2), dt), 2]))
        out.append(C("F.affine_grid", [T((1, 2, 3), dt, grad=g), (1, 1, 3, 4)],
                     {"align_corners": False}, tol=tol))
        out.append(C("F.grid_sample", [T((1, 1, 3, 4), dt, grad=g), T((1, 2, 2, 2), dt, "unit")],
                     {"align_corners": False}, tol=tol))
        out.append(C("F.conv_tbc", [T((5, 2, 3), dt, grad=g), T((3, 3, 4), dt, grad=g),
                                    T((4,), dt), 1], tol=tol))
        out.append(C("F.pdist", [T((4, 3), dt, grad=g)], tol=tol))
        out.append(C("F.multi_margin_loss", [T((3, 4), dt, grad=g), T((3,), "int64", "idx:4")]))
        out.append(C("F.multilabel_margin_loss", [T((2, 4), dt, grad=g),
                                                  T((2, 4), "int64",
                                                    values=[[3, 0, -1, 1], [0, 1, 2, 3]])]))
        out.append(C("F.triplet_margin_with_distance_loss", [T((3, 4), dt, grad=g),
                                                             T((3, 4), dt), T((3, 4), dt)]))
        out.append(C("F.embedding_bag", [T((6,), "int64", "idx:5"), T((5, 3), dt, grad=g),
                                         T((2,), "int64", values=[0, 2])], tol=tol))
        out.append(C("F.ctc_loss", [T((6, 2, 4), dt, grad=g),
                                    T((2, 3), "int64", values=[[1, 2, 2], [3, 1, 0]]),
                                    (6, 5), (3, 2)], tol=(1e-4, 1e-4) if dt == "float32" else tol))
        out.append(C("F.rrelu", [T((2, 3), dt, grad=g)], {"training": False}))
        out.append(C("F.alpha_dropout", [T((2, 3), dt)], {"training": False}))
        out.append(C("F.feature_alpha_dropout", [T((2, 3), dt)], {"training": False}))
        out.append(C(_mha, [T((3, 2, 4), dt, grad=g), T((12, 4), dt, grad=g), T((12,), dt),
                            T((4, 4), dt, grad=g), T((4,), dt)],
                     name="F.multi_head_attention_forward", tol=tol))
        out.append(C(_f_inplace("rrelu_"), [T((2, 3), dt)], name="F.rrelu_", ops=["rrelu"]))
    for dt in U.DTYPES:
        x = T((2, 3), dt)
        out.append(C(".reshape_as", [x, T((3, 2), "float32")], ops=["reshape"]))
        out.append(C(".view_as", [x, T((3, 2), "float32")], ops=["reshape"]))
        out.append(C(".type_as", [x, T((1,), "float64")], ops=["cast"]))
        out.append(C(".ndimension", [x], ops=[]))
        out.append(C(".nelement", [x], ops=[]))
        out.append(C(".new_zeros", [x, (2,)], ops=[]))
        out.append(C(".new_ones", [x, (2,)], ops=[]))
        out.append(C(".new_full", [x, (2,), 3], ops=[]))
        out.append(C(".new_tensor", [x, [1, 2]], ops=[]))
        out.append(C(_new_like("new_empty", (2,)), [x], name=".new_empty", ops=[]))
        out.append(C(_new_like("new", 2, 3), [x], name=".new", ops=[]))
        out.append(C(".new", [x, [1, 2]], ops=[], tag="data"))
    for dt in ["float32", "float64"]:
        x = T((2, 3), dt, "prob")
        for name, fn in [("rand_like", lambda m, x: m.rand_like(x)),
                         ("randn_like", lambda m, x: m.randn_like(x)),
                         ("randint_like", lambda m, x: m.randint_like(x, 5)),
                         ("bernoulli", lambda m, x: m.bernoulli(x)),
                         ("multinomial", lambda m, x: m.multinomial(x, 2)),
                         ("normal", lambda m, x: m.normal(x, 1.0)),
                         (".bernoulli", lambda m, x: x.bernoulli()),
                         (".multinomial", lambda m, x: x.multinomial(2)),
                         (".bernoulli_", lambda m, x: x.clone().bernoulli_(0.5)),
                         (".cauchy_", lambda m, x: x.clone().cauchy_()),
                         (".exponential_", lambda m, x: x.clone().exponential_()),
                         (".geometric_", lambda m, x: x.clone().geometric_(0.5)),
                         (".log_normal_", lambda m, x: x.clone().log_normal_()),
                         (".normal_", lambda m, x: x.clone().normal_()),
                         (".random_", lambda m, x: x.clone().random_(0, 5)),
                         (".uniform_", lambda m, x: x.clone().uniform_()),
                         ("F.gumbel_softmax", lambda m, x: m.F.gumbel_softmax(x)),
                         ("F.fractional_max_pool2d", lambda m, x: m.F.fractional_max_pool2d(
                             x.reshape(1, 1, 2, 3), 2, output_size=(1, 2))),
                         ("F.fractional_max_pool2d_with_indices",
                          lambda m, x: m.F.fractional_max_pool2d_with_indices(
                              x.reshape(1, 1, 2, 3), 2, output_size=(1, 2))[1]),
                         ("F.fractional_max_pool3d", lambda m, x: m.F.fractional_max_pool3d(
                             x.sum() * m.ones(1, 1, 3, 3, 3, dtype=x.dtype), 2,
                             output_size=(1, 1, 1))),
                         ("F.fractional_max_pool3d_with_indices",
                          lambda m, x: m.F.fractional_max_pool3d_with_indices(
                              x.sum() * m.ones(1, 1, 3, 3, 3, dtype=x.dtype), 2,
                              output_size=(1, 1, 1))[1])]:
            out.append(C(_random_of(name, fn), [x], name=name, ops=[]))
    for a in U.DTYPES:
        x = T((2, 3), a)
        out.append(C("is_floating_point", [x], ops=[]))
        out.append(C("is_complex", [x], ops=[]))
        out.append(C(".is_complex", [x], ops=[]))
        out.append(C("typename", [x], ops=[]))
        for b in U.DTYPES:
            out.append(C("equal", [T((2, 3), a, "nonneg"), T((2, 3), b, "nonneg")], ops=[]))
            out.append(C(".equal", [T((2, 3), a, "small"), T((2, 3), b, "small")], ops=[]))
            out.append(C("isclose", [T((2, 3), a), T((3,), b)]))
            out.append(C(".isclose", [T((2, 3), a), T((3,), b)]))
            out.append(C("allclose", [T((2, 3), a), T((3,), b)], ops=[]))
            out.append(C(".allclose", [T((2, 3), a), T((3,), b)], ops=[]))
    near = [[1.0, 1.00001, float("nan")], [float("inf"), -0.0, 1e-9]]
    for dt in ["float32", "float64"]:
        a = T((2, 3), dt, values=[[1.0, 1.0, float("nan")], [float("inf"), 0.0, 0.0]])
        out.append(C("isclose", [a, T((2, 3), dt, values=near)], tag="near"))
        out.append(C("isclose", [a, T((2, 3), dt, values=near)], {"equal_nan": True},
                     tag="near"))
        out.append(C("allclose", [a, T((2, 3), dt, values=near)], {"atol": 1e-8}, tag="near"))
        out.append(C("equal", [a, a], tag="nan", ops=[]))
    # torch requires output + pool - 1 < input along each dim
    out.append(C(_random_of("F.fractional_max_pool3d", lambda m, x: m.F.fractional_max_pool3d(
        x.reshape(1, 1, 1, 2, 3).expand(1, 1, 3, 2, 3).contiguous(), 2,
        output_size=(1, 1, 1))), [T((2, 3), "float32")], name="F.fractional_max_pool3d",
        tag="tight", ops=[]))
    out.append(C(_random("randperm", lambda m: m.randperm(5)), [], name="randperm", ops=[]))
    out.append(C(_random("normal", lambda m: m.normal(0.0, 1.0, (2, 3))), [], name="normal",
                 tag="size", ops=[]))
    out.append(C(_random("randperm", lambda m: m.randperm(4, dtype=m.int32)), [],
                 name="randperm", tag="int32", ops=[]))
    return out


def _random_of(label, fn):
    def call(m, x):
        return _info(m, fn(m, x))
    call.__name__ = label
    return call


def _mha(m, x, in_w, in_b, out_w, out_b):
    """One self-attention call of F.multi_head_attention_forward (2 heads, eval)."""
    return m.F.multi_head_attention_forward(x, x, x, 4, 2, in_w, in_b, None, None, False, 0.0,
                                            out_w, out_b, training=False)


def _grad_fn(m):
    return kiln.grad if m.is_kiln else torch.autograd.grad


SECOND = {
    "exp": lambda m, x: m.exp(x), "sin": lambda m, x: m.sin(x), "tanh": lambda m, x: m.tanh(x),
    "sigmoid": lambda m, x: m.sigmoid(x), "log": lambda m, x: m.log(x * x + 1),
    "sqrt": lambda m, x: m.sqrt(x * x + 1), "pow": lambda m, x: m.pow(x, 3),
    "softmax": lambda m, x: m.softmax(x, -1), "log_softmax": lambda m, x: m.log_softmax(x, -1),
    "gelu": lambda m, x: m.F.gelu(x), "silu": lambda m, x: m.F.silu(x),
    "softplus": lambda m, x: m.F.softplus(x), "elu": lambda m, x: m.F.elu(x),
    "matmul": lambda m, x: x @ x.transpose(0, 1), "logsumexp": lambda m, x: m.logsumexp(x, 1),
    "norm": lambda m, x: m.linalg.vector_norm(x), "mse_loss": lambda m, x: m.F.mse_loss(x, x * 0.5),
    "cross_entropy": lambda m, x: m.F.cross_entropy(x, m.tensor([0, 2])),
    "layer_norm": lambda m, x: m.F.layer_norm(x, (3,)), "var": lambda m, x: m.var(x, 1),
    "mul": lambda m, x: x * x * x, "div": lambda m, x: 1.0 / (x * x + 1),
    "tan": lambda m, x: m.tan(x * 0.3), "atan": lambda m, x: m.atan(x),
}


def _second(name, fn):
    """The gradient of sum(fn(x)) with create_graph, compared itself and then differentiated
    again by the engine (second derivatives against torch's)."""
    def call(m, x):
        (g,) = _grad_fn(m)(fn(m, x).sum(), [x], create_graph=True)
        return g
    call.__name__ = "grad." + name
    return call


def second_cases():
    return [U.Case(_second(name, fn), [U.T((2, 3), "float64", grad=True)], name="grad",
                   ops=[name], tag=name) for name, fn in SECOND.items()]


# Differences still to fix: each key is a pattern over case ids (* matches anything,
# ? one character); its cases run as one strict xfail, which fails once they all agree with
# torch, so the entry is removed with the fix. Deliberate differences are not listed here but in
# docs/torch_differences.md.
KNOWN_BUGS = {
}

CASES = (_method_twins() + _inplace_twins() + surface_cases() + more_cases() +
         bad_type_cases() + second_cases())
U.install_tests(globals(), CASES, KNOWN_BUGS, "methods and the rest of the surface")

