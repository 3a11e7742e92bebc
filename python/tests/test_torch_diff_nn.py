"""Differential suite against torch 1.13, nn.functional: activations over the dtype matrix with
0-d and empty inputs, losses (reductions, weights, targets of other dtypes), convolutions,
pooling, normalization, embedding, padding and resampling, with float64 gradients; and autocast
(kiln.autocast vs torch.autocast("cpu", bfloat16)). Engine: torch_diff_util; deliberate
differences: docs/torch_differences.md."""
import pytest

torch = pytest.importorskip("torch")

from torch_diff_util import DTYPES, FLOATS, Case, T, install_tests  # noqa: E402

# Differences still to fix: each key is a pattern over case ids (* matches anything,
# ? one character); its cases run as one strict xfail, which fails once they all agree with
# torch, so the entry is removed with the fix. Deliberate differences are not listed here but in
# docs/torch_differences.md.
KNOWN_BUGS = {
}

# name: (kwargs, domain)
ACTIVATIONS = {
    "relu": ({}, "any"), "relu6": ({}, "any"), "gelu": ({}, "any"), "silu": ({}, "any"),
    "sigmoid": ({}, "any"), "tanh": ({}, "any"), "leaky_relu": ({"negative_slope": 0.2}, "any"),
    "elu": ({"alpha": 0.5}, "any"), "selu": ({}, "any"), "celu": ({"alpha": 1.5}, "any"),
    "softplus": ({"beta": 2.0}, "any"), "mish": ({}, "any"), "hardtanh": ({}, "any"),
    "hardswish": ({}, "any"), "hardsigmoid": ({}, "any"), "logsigmoid": ({}, "any"),
    "softsign": ({}, "any"), "tanhshrink": ({}, "any"), "hardshrink": ({"lambd": 0.5}, "any"),
    "softshrink": ({"lambd": 0.5}, "any"), "threshold": ({"threshold": 0.5, "value": -1.0},
                                                         "any"),
    "softmax": ({"dim": -1}, "any"), "log_softmax": ({"dim": -1}, "any"),
    "softmin": ({"dim": -1}, "any"), "glu": ({"dim": -1}, "any"),
    "normalize": ({"dim": -1}, "any"), "dropout": ({"p": 0.5, "training": False}, "any"),
}
SHAPES = [(2, 4), (), (0, 4)]


def activation_cases():
    out = []
    for name, (kw, dom) in ACTIVATIONS.items():
        for dt in DTYPES:
            for shape in SHAPES:
                if name in ("glu", "normalize") and shape == ():
                    continue
                g = dt == "float64" and name != "dropout"
                out.append(Case("F." + name, [T(shape, dt, dom, grad=g)], kw))
    for dt in FLOATS:
        g = dt == "float64"
        out.append(Case("F.gelu", [T((2, 4), dt, grad=g)], {"approximate": "tanh"}))
        out.append(Case("F.prelu", [T((2, 3), dt, grad=g), T((3,), dt, "pos", grad=g)]))
        out.append(Case("F.prelu", [T((2, 3), dt, grad=g), T((1,), dt, "pos", grad=g)]))
        out.append(Case("F.prelu", [T((), dt, grad=g), T((1,), dt, "pos", grad=g)], tag="0d"))
        # the hardsigmoid/hardswish kinks and the shrink thresholds, exactly on the edges
        edge = [-3.0, 3.0, -0.5, 0.5, 0.0, 1.0]
        for name in ["hardsigmoid", "hardswish", "hardshrink", "softshrink", "relu6",
                     "hardtanh"]:
            out.append(Case("F." + name, [T((6,), dt, values=edge, grad=g)], tag="edges"))
        out.append(Case("F.threshold", [T((6,), dt, values=edge, grad=g), 0.5, 2]))
        out.append(Case("F.cosine_similarity", [T((3, 1), dt, grad=g), T((4,), dt, grad=g)],
                        {"dim": -1}, tag="bcast"))
        out.append(Case("F.cosine_similarity", [T((2, 3), dt, grad=g), T((2, 3), dt, grad=g)]))
        out.append(Case("F.pairwise_distance", [T((2, 3), dt, grad=g), T((2, 3), dt, grad=g)]))
    return out


def _target(shape, classes, dt="int64"):
    return T(shape, dt, f"idx:{classes}")


def loss_cases():
    out = []
    for dt in DTYPES:
        g = dt == "float64"
        for red in ["mean", "sum", "none"]:
            kw = {"reduction": red}
            out.append(Case("F.cross_entropy", [T((3, 4), dt, grad=g), _target((3,), 4)], kw))
            out.append(Case("F.nll_loss", [T((3, 4), dt, grad=g), _target((3,), 4)], kw))
            out.append(Case("F.mse_loss", [T((3, 4), dt, grad=g), T((3, 4), dt)], kw))
            out.append(Case("F.l1_loss", [T((3, 4), dt, grad=g), T((3, 4), dt)], kw))
            out.append(Case("F.smooth_l1_loss", [T((3, 4), dt, grad=g), T((3, 4), dt)], kw))
            out.append(Case("F.huber_loss", [T((3, 4), dt, grad=g), T((3, 4), dt)], kw))
            out.append(Case("F.binary_cross_entropy",
                            [T((3, 4), dt, "prob", grad=g), T((3, 4), dt, "prob")], kw))
            out.append(Case("F.binary_cross_entropy_with_logits",
                            [T((3, 4), dt, grad=g), T((3, 4), dt, "prob")], kw))
            out.append(Case("F.kl_div", [T((3, 4), dt, grad=g), T((3, 4), dt, "prob")], kw))
            out.append(Case("F.soft_margin_loss", [T((3, 4), dt, grad=g),
                                                   T((3, 4), dt, "nonzero")], kw))
            out.append(Case("F.poisson_nll_loss", [T((3, 4), dt, grad=g), T((3, 4), dt, "pos")],
                            kw))
            out.append(Case("F.gaussian_nll_loss", [T((3, 4), dt, grad=g), T((3, 4), dt),
                                                    T((3, 4), dt, "pos")], kw))
            out.append(Case("F.margin_ranking_loss", [T((3,), dt, grad=g), T((3,), dt),
                                                      T((3,), dt, "nonzero")], kw))
            out.append(Case("F.hinge_embedding_loss", [T((3, 4), dt, grad=g),
                                                       T((3, 4), dt, "nonzero")], kw))
            out.append(Case("F.cosine_embedding_loss", [T((3, 4), dt, grad=g), T((3, 4), dt),
                                                        T((3,), dt, "nonzero")], kw))
            out.append(Case("F.multilabel_soft_margin_loss", [T((3, 4), dt, grad=g),
                                                              T((3, 4), dt, "prob")], kw))
            out.append(Case("F.triplet_margin_loss", [T((3, 4), dt, grad=g), T((3, 4), dt),
                                                      T((3, 4), dt)], kw))
        out.append(Case("F.cross_entropy", [T((3, 4), dt, grad=g), T((3, 4), dt, "prob")],
                        tag="probs"))
        out.append(Case("F.cross_entropy", [T((3, 4), dt, grad=g), _target((3,), 4)],
                        {"label_smoothing": 0.1, "weight": T((4,), dt, "pos")}))
        out.append(Case("F.cross_entropy", [T((3, 4), dt), _target((3,), 4, "int32")],
                        tag="int32-target"))
        out.append(Case("F.nll_loss", [T((3, 4), dt), _target((3,), 4)],
                        {"ignore_index": 1}))
        out.append(Case("F.kl_div", [T((3, 4), dt, grad=g), T((3, 4), dt)],
                        {"reduction": "batchmean", "log_target": True}))
        out.append(Case("F.mse_loss", [T((3, 4), dt, grad=g), T((4,), dt)], tag="bcast"))
        out.append(Case("F.mse_loss", [T((), dt, grad=g), T((), dt)], tag="0d"))
        out.append(Case("F.mse_loss", [T((0, 4), dt), T((0, 4), dt)], tag="empty"))
    # targets and inputs of different floating dtypes
    for a in FLOATS:
        for b in FLOATS:
            if a != b:
                out.append(Case("F.mse_loss", [T((3, 4), a), T((3, 4), b)], tag="mixed"))
                out.append(Case("F.binary_cross_entropy_with_logits",
                                [T((3, 4), a), T((3, 4), b, "prob")], tag="mixed"))
    return out


def conv_cases():
    out = []
    for dt in DTYPES:
        g = dt == "float64"
        tol = (3e-2, 0.1) if dt == "bfloat16" else None
        x1, x2, x3 = T((2, 2, 6), dt, grad=g), T((1, 2, 5, 5), dt, grad=g), \
            T((1, 2, 4, 4, 4), dt, grad=g)
        out.append(Case("F.conv1d", [x1, T((3, 2, 3), dt, grad=g), T((3,), dt, grad=g)],
                        {"padding": 1}, tol=tol))
        out.append(Case("F.conv2d", [x2, T((3, 2, 3, 3), dt, grad=g)],
                        {"stride": 2, "padding": 1}, tol=tol))
        out.append(Case("F.conv2d", [T((1, 4, 5, 5), dt), T((4, 2, 3, 3), dt)], {"groups": 2},
                        tol=tol))
        out.append(Case("F.conv3d", [x3, T((2, 2, 2, 2, 2), dt, grad=g)], tol=tol))
        out.append(Case("F.conv_transpose1d", [T((2, 2, 5), dt, grad=g),
                                               T((2, 3, 3), dt, grad=g)], {"stride": 2},
                        tol=tol))
        out.append(Case("F.conv_transpose2d", [T((1, 2, 4, 4), dt, grad=g),
                                               T((2, 3, 3, 3), dt, grad=g)],
                        {"stride": 2, "padding": 1, "output_padding": 1}, tol=tol))
        out.append(Case("F.conv_transpose3d", [T((1, 2, 3, 3, 3), dt, grad=g),
                                               T((2, 2, 2, 2, 2), dt, grad=g)], {"stride": 2},
                        tol=tol))
        out.append(Case("F.linear", [T((2, 3), dt, grad=g), T((4, 3), dt, grad=g),
                                     T((4,), dt, grad=g)], tol=tol))
        out.append(Case("F.max_pool1d", [T((2, 2, 6), dt, "perm", grad=g), 2]))
        out.append(Case("F.max_pool2d", [T((1, 2, 4, 4), dt, "perm", grad=g), 2]))
        out.append(Case("F.max_pool2d", [T((1, 2, 5, 5), dt, "perm", grad=g), 3],
                        {"stride": 2, "padding": 1, "ceil_mode": True}))
        out.append(Case("F.max_pool3d", [T((1, 1, 4, 4, 4), dt, "perm", grad=g), 2]))
        out.append(Case("F.max_pool2d", [T((1, 2, 4, 4), dt, "perm"), 2],
                        {"return_indices": True}))
        out.append(Case("F.avg_pool1d", [T((2, 2, 6), dt, grad=g), 2]))
        out.append(Case("F.avg_pool2d", [T((1, 2, 5, 5), dt, grad=g), 3],
                        {"stride": 2, "padding": 1, "count_include_pad": False}))
        out.append(Case("F.avg_pool3d", [T((1, 1, 4, 4, 4), dt, grad=g), 2]))
        out.append(Case("F.adaptive_avg_pool1d", [T((2, 2, 7), dt, grad=g), 3]))
        out.append(Case("F.adaptive_avg_pool2d", [T((1, 2, 5, 7), dt, grad=g), (2, 3)]))
        out.append(Case("F.adaptive_avg_pool3d", [T((1, 1, 4, 5, 3), dt, grad=g), 2]))
        out.append(Case("F.adaptive_max_pool1d", [T((2, 2, 7), dt, "perm", grad=g), 3]))
        out.append(Case("F.adaptive_max_pool2d", [T((1, 2, 5, 7), dt, "perm", grad=g), (2, 3)]))
        out.append(Case("F.adaptive_max_pool3d", [T((1, 1, 4, 4, 4), dt, "perm", grad=g), 2]))
        out.append(Case("F.lp_pool1d", [T((2, 2, 6), dt, "pos", grad=g), 2.0, 2]))
        out.append(Case("F.lp_pool2d", [T((1, 2, 4, 4), dt, "pos", grad=g), 2.0, 2]))
        out.append(Case("F.pixel_shuffle", [T((1, 4, 2, 3), dt, grad=g), 2]))
        out.append(Case("F.pixel_unshuffle", [T((1, 1, 4, 6), dt, grad=g), 2]))
        out.append(Case("F.pad", [T((1, 2, 3), dt, grad=g), (1, 2)]))
        out.append(Case("F.pad", [T((1, 2, 3), dt, grad=g), (1, 2)], {"value": 1.5}))
        out.append(Case("F.pad", [T((1, 2, 3), dt, grad=g), (2, 1)], {"mode": "reflect"}))
        out.append(Case("F.pad", [T((1, 2, 3), dt, grad=g), (2, 1)], {"mode": "replicate"}))
        out.append(Case("F.interpolate", [T((1, 2, 3, 3), dt, grad=g)],
                        {"scale_factor": 2, "mode": "nearest"}))
        out.append(Case("F.interpolate", [T((1, 2, 3, 3), dt, grad=g)],
                        {"size": (5, 4), "mode": "bilinear", "align_corners": False}))
        out.append(Case("F.unfold", [T((1, 2, 4, 4), dt, grad=g), 2]))
        out.append(Case("F.fold", [T((1, 8, 9), dt, grad=g), (4, 4), 2]))
        out.append(Case("F.embedding", [T((2, 3), "int64", "idx:5"), T((5, 4), dt, grad=g)]))
        out.append(Case("F.layer_norm", [T((2, 3, 4), dt, grad=g), (4,),
                                         T((4,), dt, grad=g), T((4,), dt, grad=g)]))
        out.append(Case("F.group_norm", [T((2, 4, 3), dt, grad=g), 2, T((4,), dt, grad=g),
                                         T((4,), dt, grad=g)]))
        out.append(Case("F.batch_norm", [T((3, 2, 4), dt, grad=g), T((2,), dt), T((2,), dt,
                                                                                   "pos")],
                        {"training": False}))
        out.append(Case("F.batch_norm", [T((3, 2, 4), dt, grad=g), None, None],
                        {"training": True}))
        out.append(Case("F.instance_norm", [T((2, 3, 5), dt, grad=g)]))
        out.append(Case("F.local_response_norm", [T((1, 4, 3, 3), dt, grad=g), 3]))
    for dt in FLOATS:
        out.append(Case(_unpool, [T((1, 2, 4, 4), dt, "perm")], name="F.max_unpool2d",
                        ops=["max_unpool2d", "max_pool2d"]))
    return out


def _unpool(m, x):
    y, i = m.F.max_pool2d(x, 2, return_indices=True)
    return m.F.max_unpool2d(y, i, 2)


def _autocast(fn):
    def call(m, *args):
        ac = (m.autocast("cpu", dtype=m.bfloat16))
        with ac:
            return fn(m, *args)
    call.__name__ = "autocast"
    return call


AUTOCAST = {
    "matmul": lambda m, a, b: m.matmul(a, b), "mm": lambda m, a, b: m.mm(a, b),
    "linear": lambda m, a, b: m.F.linear(a, b.t()), "addmm": lambda m, a, b: m.addmm(
        m.zeros(2, 2), a, b), "bmm": lambda m, a, b: m.bmm(a.unsqueeze(0), b.unsqueeze(0)),
    "prod": lambda m, a, b: m.prod(a), "trace": lambda m, a, b: m.trace(a @ b),
    "kl_div": lambda m, a, b: m.F.kl_div(a @ b, (a @ b).softmax(-1)),
    "sum": lambda m, a, b: (a @ b).sum(), "softmax": lambda m, a, b: m.softmax(a @ b, -1),
    "mse_loss": lambda m, a, b: m.F.mse_loss(a @ b, a @ b + 1),
    "cross_entropy": lambda m, a, b: m.F.cross_entropy(a @ b, m.tensor([0, 1])),
    "layer_norm": lambda m, a, b: m.F.layer_norm(a @ b, (2,)),
    "exp": lambda m, a, b: m.exp(a @ b), "add": lambda m, a, b: (a @ b) + a,
    "conv1d": lambda m, a, b: m.F.conv1d(a.unsqueeze(0), b.unsqueeze(-1)),
    "cumsum": lambda m, a, b: m.cumsum(a @ b, 0), "mean": lambda m, a, b: (a @ b).mean(),
    "norm": lambda m, a, b: m.norm(a @ b), "log_softmax": lambda m, a, b: m.log_softmax(
        a @ b, -1),
}


def autocast_cases():
    out = []
    for name, fn in AUTOCAST.items():
        for dt in ["float32", "bfloat16"]:
            out.append(Case(_autocast(fn), [T((2, 2), dt), T((2, 2), dt)],
                            name="autocast." + name, ops=[name], tol=(2e-2, 0.1)))
    return out


EDGES = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 30.0, -30.0, 100.0, -100.0,
         1e-30, 3.0, -3.0]


def edge_cases():
    """The activations at NaN, infinities, signed zeros and large magnitudes (overflow paths of
    softplus, logsigmoid, silu, mish, gelu...)."""
    out = []
    for dt in ["float32", "float64", "bfloat16"]:
        for name, (kw, _) in ACTIVATIONS.items():
            if name in ("glu",):
                continue
            out.append(Case("F." + name, [T((len(EDGES),), dt, values=EDGES)], kw,
                            tag="edges"))
        out.append(Case("F.cross_entropy", [T((2, 3), dt, values=[[0.0, -float("inf"), 1.0],
                                                                  [100.0, -100.0, 0.0]]),
                                            T((2,), "int64", values=[0, 2])], tag="edges"))
        out.append(Case("F.binary_cross_entropy_with_logits",
                        [T((4,), dt, values=[100.0, -100.0, 0.0, 30.0]),
                         T((4,), dt, values=[0.0, 1.0, 0.5, 1.0])], tag="edges"))
        out.append(Case("F.binary_cross_entropy", [T((3,), dt, values=[0.0, 1.0, 0.5]),
                                                   T((3,), dt, values=[1.0, 0.0, 0.5])],
                        tag="edges"))
    return out


CASES = activation_cases() + loss_cases() + conv_cases() + autocast_cases() + edge_cases()
install_tests(globals(), CASES, KNOWN_BUGS, "nn.functional and autocast")
