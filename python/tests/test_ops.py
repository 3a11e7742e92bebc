# Every public op of kiln._C called from Python at least once, its values against NumPy (or a
# direct formula); a completeness check fails when a new function is bound without a case here.
import inspect
import math

import numpy as np
import pytest

import kiln
import kiln._C as C

R = np.random.RandomState(5)
A = R.randn(3, 4)                       # float64 references, exact comparisons at 1e-10
B = R.randn(3, 4)
P = R.rand(3, 4) + 0.5                  # positive
I = np.array([[0, 2], [1, 3], [3, 0]])  # int indices into dim 1
Y = np.array([2, 0, 3])                 # class labels


def t(a):
    return kiln.tensor(a, dtype=kiln.float64) if np.asarray(a).dtype.kind == "f" else kiln.tensor(a)


def erf(x):
    return np.vectorize(math.erf)(x)


def softmax(x, d=-1):
    e = np.exp(x - x.max(d, keepdims=True))
    return e / e.sum(d, keepdims=True)


def log_softmax(x, d=-1):
    return np.log(softmax(x, d))


CASES = {
    "add": (lambda: kiln.add(t(A), t(B)), lambda: A + B),
    "sub": (lambda: kiln.sub(t(A), 2.0), lambda: A - 2),
    "subtract": (lambda: kiln.subtract(t(A), t(B)), lambda: A - B),
    "rsub": (lambda: kiln.rsub(t(A), 1.0), lambda: 1 - A),
    "mul": (lambda: kiln.mul(t(A), t(B)), lambda: A * B),
    "multiply": (lambda: kiln.multiply(t(A), 3.0), lambda: A * 3),
    "div": (lambda: kiln.div(t(A), t(P)), lambda: A / P),
    "divide": (lambda: kiln.divide(t(A), 4.0), lambda: A / 4),
    "true_divide": (lambda: kiln.true_divide(t(A), t(P)), lambda: A / P),
    "floor_divide": (lambda: kiln.floor_divide(t(A), t(P)), lambda: np.floor_divide(A, P)),
    "pow": (lambda: kiln.pow(t(P), t(B)), lambda: P ** B),
    "neg": (lambda: kiln.neg(t(A)), lambda: -A),
    "negative": (lambda: kiln.negative(t(A)), lambda: -A),
    "abs": (lambda: kiln.abs(t(A)), lambda: np.abs(A)),
    "sign": (lambda: kiln.sign(t(A)), lambda: np.sign(A)),
    "exp": (lambda: kiln.exp(t(A)), lambda: np.exp(A)),
    "log": (lambda: kiln.log(t(P)), lambda: np.log(P)),
    "log1p": (lambda: kiln.log1p(t(P)), lambda: np.log1p(P)),
    "expm1": (lambda: kiln.expm1(t(A)), lambda: np.expm1(A)),
    "sqrt": (lambda: kiln.sqrt(t(P)), lambda: np.sqrt(P)),
    "rsqrt": (lambda: kiln.rsqrt(t(P)), lambda: 1 / np.sqrt(P)),
    "sin": (lambda: kiln.sin(t(A)), lambda: np.sin(A)),
    "cos": (lambda: kiln.cos(t(A)), lambda: np.cos(A)),
    "erf": (lambda: kiln.erf(t(A)), lambda: erf(A)),
    "tanh": (lambda: kiln.tanh(t(A)), lambda: np.tanh(A)),
    "sigmoid": (lambda: kiln.sigmoid(t(A)), lambda: 1 / (1 + np.exp(-A))),
    "relu": (lambda: kiln.relu(t(A)), lambda: np.maximum(A, 0)),
    "silu": (lambda: kiln.silu(t(A)), lambda: A / (1 + np.exp(-A))),
    "gelu": (lambda: kiln.gelu(t(A)), lambda: A * 0.5 * (1 + erf(A / np.sqrt(2)))),
    "leaky_relu": (lambda: kiln.leaky_relu(t(A), 0.1), lambda: np.where(A > 0, A, 0.1 * A)),
    "elu": (lambda: kiln.elu(t(A)), lambda: np.where(A > 0, A, np.expm1(A))),
    "softplus": (lambda: kiln.softplus(t(A)), lambda: np.log1p(np.exp(A))),
    "clamp": (lambda: kiln.clamp(t(A), -0.5, 0.5), lambda: np.clip(A, -0.5, 0.5)),
    "clip": (lambda: kiln.clip(t(A), min=0.0), lambda: np.maximum(A, 0)),
    "maximum": (lambda: kiln.maximum(t(A), t(B)), lambda: np.maximum(A, B)),
    "minimum": (lambda: kiln.minimum(t(A), t(B)), lambda: np.minimum(A, B)),
    "lt": (lambda: kiln.lt(t(A), t(B)), lambda: A < B),
    "le": (lambda: kiln.le(t(A), 0.0), lambda: A <= 0),
    "gt": (lambda: kiln.gt(t(A), t(B)), lambda: A > B),
    "ge": (lambda: kiln.ge(t(A), 0.0), lambda: A >= 0),
    "eq": (lambda: kiln.eq(t(A), t(A)), lambda: A == A),
    "ne": (lambda: kiln.ne(t(A), t(B)), lambda: A != B),
    "logical_and": (lambda: kiln.logical_and(t(A > 0), t(B > 0)), lambda: (A > 0) & (B > 0)),
    "logical_or": (lambda: kiln.logical_or(t(A > 0), t(B > 0)), lambda: (A > 0) | (B > 0)),
    "logical_not": (lambda: kiln.logical_not(t(A > 0)), lambda: ~(A > 0)),
    "where": (lambda: kiln.where(t(A > 0), t(A), t(B)), lambda: np.where(A > 0, A, B)),
    "masked_fill": (lambda: kiln.masked_fill(t(A), t(A > 0), 7.0), lambda: np.where(A > 0, 7, A)),
    "sum": (lambda: kiln.sum(t(A), 1), lambda: A.sum(1)),
    "mean": (lambda: kiln.mean(t(A), (0, 1)), lambda: A.mean()),
    "max": (lambda: kiln.max(t(A), 0).values, lambda: A.max(0)),
    "min": (lambda: kiln.min(t(A), 1, True).values, lambda: A.min(1, keepdims=True)),
    "amax": (lambda: kiln.amax(t(A)), lambda: A.max()),
    "amin": (lambda: kiln.amin(t(A), 0), lambda: A.min(0)),
    "var": (lambda: kiln.var(t(A), 1), lambda: A.var(1, ddof=1)),
    "std": (lambda: kiln.std(t(A)), lambda: A.std(ddof=1)),
    "std_dev": (lambda: kiln.std_dev(t(A), 0, correction=0), lambda: A.std(0)),
    "argmax": (lambda: kiln.argmax(t(A), 1), lambda: A.argmax(1)),
    "argmin": (lambda: kiln.argmin(t(A)), lambda: A.argmin()),
    "logsumexp": (lambda: kiln.logsumexp(t(A), 1), lambda: np.log(np.exp(A).sum(1))),
    "cumsum": (lambda: kiln.cumsum(t(A), 1), lambda: A.cumsum(1)),
    "vector_norm": (lambda: kiln.vector_norm(t(A), 3.0), lambda: (np.abs(A) ** 3).sum() ** (1 / 3)),
    "norm": (lambda: kiln.norm(t(A), dim=1), lambda: np.linalg.norm(A, axis=1)),
    "normalize": (lambda: kiln.normalize(t(A)), lambda: A / np.linalg.norm(A, axis=1, keepdims=True)),
    "cosine_similarity": (lambda: kiln.cosine_similarity(t(A), t(B)),
                          lambda: (A * B).sum(1) / np.linalg.norm(A, axis=1) / np.linalg.norm(B, axis=1)),
    "softmax": (lambda: kiln.softmax(t(A), 1), lambda: softmax(A, 1)),
    "log_softmax": (lambda: kiln.log_softmax(t(A)), lambda: log_softmax(A)),
    "sum_to": (lambda: kiln.sum_to(t(A), (1, 4)), lambda: A.sum(0, keepdims=True)),
    "matmul": (lambda: kiln.matmul(t(A), t(B.T)), lambda: A @ B.T),
    "mm": (lambda: kiln.mm(t(A), t(B.T)), lambda: A @ B.T),
    "addmm": (lambda: kiln.addmm(t(A[:, :3]), t(A), t(B.T), beta=0.5), lambda: 0.5 * A[:, :3] + A @ B.T),
    "einsum": (lambda: kiln.einsum("ij,kj->ik", t(A), t(B)), lambda: A @ B.T),
    "linear": (lambda: kiln.linear(t(A), t(B), t(P[:, 0])), lambda: A @ B.T + P[:, 0]),
    "reshape": (lambda: kiln.reshape(t(A), (4, 3)), lambda: A.reshape(4, 3)),
    "transpose": (lambda: kiln.transpose(t(A), 0, 1), lambda: A.T),
    "permute": (lambda: kiln.permute(t(A), (1, 0)), lambda: A.T),
    "slice": (lambda: kiln.slice(t(A), 1, 1, 4, 2), lambda: A[:, 1:4:2]),
    "expand": (lambda: kiln.expand(t(A[:1]), (3, 4)), lambda: np.broadcast_to(A[:1], (3, 4))),
    "expand_as": (lambda: kiln.expand_as(t(A[:1]), t(B)), lambda: np.broadcast_to(A[:1], (3, 4))),
    "squeeze": (lambda: kiln.squeeze(t(A[:1])), lambda: A[0]),
    "unsqueeze": (lambda: kiln.unsqueeze(t(A), 1), lambda: A[:, None]),
    "flatten": (lambda: kiln.flatten(t(A)), lambda: A.ravel()),
    "contiguous": (lambda: kiln.contiguous(t(A).T), lambda: A.T),
    "clone": (lambda: kiln.clone(t(A)), lambda: A),
    "cast": (lambda: kiln.cast(t(A), kiln.int64), lambda: A.astype(np.int64)),
    "detach": (lambda: kiln.detach(t(A)), lambda: A),
    "pad": (lambda: kiln.pad(t(A), [1, 2], 9.0), lambda: np.pad(A, ((0, 0), (1, 2)), constant_values=9)),
    "as_strided": (lambda: kiln.as_strided(t(A), (2, 2), (4, 1), 1), lambda: A[:2, 1:3]),
    "cat": (lambda: kiln.cat([t(A), t(B)], 1), lambda: np.concatenate([A, B], 1)),
    "concat": (lambda: kiln.concat([t(A), t(B)]), lambda: np.concatenate([A, B])),
    "stack": (lambda: kiln.stack([t(A), t(B)], 2), lambda: np.stack([A, B], 2)),
    "split": (lambda: kiln.split(t(A), [1, 3], 1)[1], lambda: A[:, 1:]),
    "chunk": (lambda: kiln.chunk(t(A), 2, 1)[0], lambda: A[:, :2]),
    "flip": (lambda: kiln.flip(t(A), [0, 1]), lambda: A[::-1, ::-1]),
    "roll": (lambda: kiln.roll(t(A), 1, 1), lambda: np.roll(A, 1, 1)),
    "repeat": (lambda: kiln.repeat(t(A), (2, 1)), lambda: np.tile(A, (2, 1))),
    "gather": (lambda: kiln.gather(t(A), 1, t(I)), lambda: np.take_along_axis(A, I, 1)),
    "index_select": (lambda: kiln.index_select(t(A), 1, t(np.array([3, 0]))), lambda: A[:, [3, 0]]),
    "scatter_add": (lambda: kiln.scatter_add(t(A), 1, t(I), t(B[:, :2])),
                    lambda: _scatter_add(A, I, B[:, :2])),
    "index_add": (lambda: kiln.index_add(t(A), 0, t(np.array([2, 2])), t(B[:2])),
                  lambda: A + np.stack([0 * A[0], 0 * A[0], B[0] + B[1]])),
    "nonzero": (lambda: kiln.nonzero(t(A > 0)), lambda: np.argwhere(A > 0)),
    "masked_select": (lambda: kiln.masked_select(t(A), t(A > 0)), lambda: A[A > 0]),
    "one_hot": (lambda: kiln.one_hot(t(Y), 4), lambda: np.eye(4, dtype=np.int64)[Y]),
    "topk": (lambda: kiln.topk(t(A), 2)[0], lambda: -np.sort(-A, 1)[:, :2]),
    "sort": (lambda: kiln.sort(t(A), descending=True)[0], lambda: -np.sort(-A, 1)),
    "argsort": (lambda: kiln.argsort(t(A), 0), lambda: np.argsort(A, 0, kind="stable")),
    "tril": (lambda: kiln.tril(t(A)), lambda: np.tril(A)),
    "triu": (lambda: kiln.triu(t(A), 1), lambda: np.triu(A, 1)),
    "cross_entropy": (lambda: kiln.cross_entropy(t(A), t(Y)), lambda: -log_softmax(A)[range(3), Y].mean()),
    "nll_loss": (lambda: kiln.nll_loss(t(A), t(Y), reduction="sum"), lambda: -A[range(3), Y].sum()),
    "mse_loss": (lambda: kiln.mse_loss(t(A), t(B)), lambda: ((A - B) ** 2).mean()),
    "binary_cross_entropy_with_logits": (
        lambda: kiln.binary_cross_entropy_with_logits(t(A), t((B > 0).astype(float))),
        lambda: np.mean(np.log1p(np.exp(A)) - (B > 0) * A)),
    "smooth_l1_loss": (lambda: kiln.smooth_l1_loss(t(A), t(B), "none"),
                       lambda: np.where(np.abs(A - B) < 1, 0.5 * (A - B) ** 2, np.abs(A - B) - 0.5)),
    "huber_loss": (lambda: kiln.huber_loss(t(A), t(B), delta=0.5),
                   lambda: np.where(np.abs(A - B) < 0.5, 0.5 * (A - B) ** 2,
                                    0.5 * (np.abs(A - B) - 0.25)).mean()),
    "dropout": (lambda: kiln.dropout(t(A), 0.5, False), lambda: A),
    "layer_norm": (lambda: kiln.layer_norm(t(A), [4]),
                   lambda: (A - A.mean(1, keepdims=True)) / np.sqrt(A.var(1, keepdims=True) + 1e-5)),
    "batch_norm": (lambda: kiln.batch_norm(t(A), None, None, training=True),
                   lambda: (A - A.mean(0)) / np.sqrt(A.var(0) + 1e-5)),
    "embedding": (lambda: kiln.embedding(t(np.array([1, 0])), t(A)), lambda: A[[1, 0]]),
    "scaled_dot_product_attention": (
        lambda: kiln.scaled_dot_product_attention(t(A), t(B), t(P)),
        lambda: softmax(A @ B.T / 2.0) @ P),
}
CONV_X = R.randn(1, 2, 5, 5)
CONV_W = R.randn(3, 2, 3, 3)


def _scatter_add(a, idx, src):
    out = a.copy()
    for i in range(idx.shape[0]):
        for j in range(idx.shape[1]):
            out[i, idx[i, j]] += src[i, j]
    return out


def _conv2d(x, w, pad=0):
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    out = np.zeros((n, o, h - kh + 1, wd - kw + 1))
    for i in range(out.shape[2]):
        for j in range(out.shape[3]):
            out[:, :, i, j] = np.einsum("nchw,ochw->no", x[:, :, i:i + kh, j:j + kw], w)
    return out


CASES.update({
    "conv2d": (lambda: kiln.conv2d(t(CONV_X), t(CONV_W), padding=1), lambda: _conv2d(CONV_X, CONV_W, 1)),
    "conv1d": (lambda: kiln.conv1d(t(CONV_X[:, :, 0]), t(CONV_W[:, :, 0])),
               lambda: _conv2d(CONV_X[:, :, :1], CONV_W[:, :, :1])[:, :, 0]),
    "conv_transpose2d": (lambda: kiln.conv_transpose2d(t(_conv2d(CONV_X, CONV_W)), t(CONV_W)),
                         lambda: _conv_t(_conv2d(CONV_X, CONV_W), CONV_W)),
    "max_pool2d": (lambda: kiln.max_pool2d(t(CONV_X), 2), lambda: CONV_X[:, :, :4, :4].reshape(1, 2, 2, 2, 2, 2).max((3, 5))),
    "avg_pool2d": (lambda: kiln.avg_pool2d(t(CONV_X), 2), lambda: CONV_X[:, :, :4, :4].reshape(1, 2, 2, 2, 2, 2).mean((3, 5))),
    "adaptive_avg_pool2d": (lambda: kiln.adaptive_avg_pool2d(t(CONV_X), 1), lambda: CONV_X.mean((2, 3), keepdims=True)),
    "interpolate": (lambda: kiln.interpolate(t(CONV_X), [10, 10]), lambda: CONV_X.repeat(2, 2).repeat(2, 3)),
})


def _conv_t(y, w):
    # The transposed convolution is the adjoint of conv2d: scatter each output back.
    n, o, h, wd = y.shape
    _, c, kh, kw = w.shape
    out = np.zeros((n, c, h + kh - 1, wd + kw - 1))
    for i in range(h):
        for j in range(wd):
            out[:, :, i:i + kh, j:j + kw] += np.einsum("no,ochw->nchw", y[:, :, i, j], w)
    return out


AI = np.array([[5, -7, 12], [-3, 8, 0]])   # int64 operands of the integer and bitwise ops
BI = np.array([[3, 2, -5], [2, -3, 4]])
SI = np.array([[1, 2, 3], [0, 4, 63]])     # shift counts
U = np.clip(A / 4, -0.9, 0.9)              # inside (-1, 1)


def _sig(x):
    return 1 / (1 + np.exp(-x))


CASES.update({
    "floor": (lambda: kiln.floor(t(A)), lambda: np.floor(A)),
    "ceil": (lambda: kiln.ceil(t(A)), lambda: np.ceil(A)),
    "trunc": (lambda: kiln.trunc(t(A)), lambda: np.trunc(A)),
    "fix": (lambda: kiln.fix(t(A)), lambda: np.fix(A)),
    "frac": (lambda: kiln.frac(t(A)), lambda: A - np.trunc(A)),
    "round": (lambda: kiln.round(t(A * 3)), lambda: np.round(A * 3)),
    "reciprocal": (lambda: kiln.reciprocal(t(P)), lambda: 1 / P),
    "square": (lambda: kiln.square(t(AI)), lambda: AI * AI),
    "log2": (lambda: kiln.log2(t(P)), lambda: np.log2(P)),
    "log10": (lambda: kiln.log10(t(P)), lambda: np.log10(P)),
    "exp2": (lambda: kiln.exp2(t(A)), lambda: np.exp2(A)),
    "tan": (lambda: kiln.tan(t(U)), lambda: np.tan(U)),
    "asin": (lambda: kiln.asin(t(U)), lambda: np.arcsin(U)),
    "arcsin": (lambda: kiln.arcsin(t(U)), lambda: np.arcsin(U)),
    "acos": (lambda: kiln.acos(t(U)), lambda: np.arccos(U)),
    "arccos": (lambda: kiln.arccos(t(U)), lambda: np.arccos(U)),
    "atan": (lambda: kiln.atan(t(A)), lambda: np.arctan(A)),
    "arctan": (lambda: kiln.arctan(t(A)), lambda: np.arctan(A)),
    "atan2": (lambda: kiln.atan2(t(A), t(B)), lambda: np.arctan2(A, B)),
    "arctan2": (lambda: kiln.arctan2(t(A), t(B)), lambda: np.arctan2(A, B)),
    "sinh": (lambda: kiln.sinh(t(A)), lambda: np.sinh(A)),
    "cosh": (lambda: kiln.cosh(t(A)), lambda: np.cosh(A)),
    "asinh": (lambda: kiln.asinh(t(A)), lambda: np.arcsinh(A)),
    "arcsinh": (lambda: kiln.arcsinh(t(A)), lambda: np.arcsinh(A)),
    "acosh": (lambda: kiln.acosh(t(P + 1)), lambda: np.arccosh(P + 1)),
    "arccosh": (lambda: kiln.arccosh(t(P + 1)), lambda: np.arccosh(P + 1)),
    "atanh": (lambda: kiln.atanh(t(U)), lambda: np.arctanh(U)),
    "arctanh": (lambda: kiln.arctanh(t(U)), lambda: np.arctanh(U)),
    "fmod": (lambda: kiln.fmod(t(AI), t(BI)), lambda: np.fmod(AI, BI)),
    "remainder": (lambda: kiln.remainder(t(A), 0.7), lambda: np.mod(A, 0.7)),
    "isnan": (lambda: kiln.isnan(t(np.log(A))), lambda: np.isnan(np.log(A))),
    "isinf": (lambda: kiln.isinf(t(1 / np.floor(A))), lambda: np.isinf(1 / np.floor(A))),
    "isfinite": (lambda: kiln.isfinite(t(np.log(A))), lambda: np.isfinite(np.log(A))),
    "nan_to_num": (lambda: kiln.nan_to_num(t(np.log(A)), nan=-1.0), lambda: np.nan_to_num(np.log(A), nan=-1.0)),
    "logical_xor": (lambda: kiln.logical_xor(t(A > 0), t(B > 0)), lambda: np.logical_xor(A > 0, B > 0)),
    "bitwise_and": (lambda: kiln.bitwise_and(t(AI), t(BI)), lambda: AI & BI),
    "bitwise_or": (lambda: kiln.bitwise_or(t(AI), t(BI)), lambda: AI | BI),
    "bitwise_xor": (lambda: kiln.bitwise_xor(t(AI), t(BI)), lambda: AI ^ BI),
    "bitwise_not": (lambda: kiln.bitwise_not(t(AI)), lambda: ~AI),
    "bitwise_left_shift": (lambda: kiln.bitwise_left_shift(t(AI), t(SI)), lambda: AI << SI),
    "bitwise_right_shift": (lambda: kiln.bitwise_right_shift(t(AI), t(SI)), lambda: AI >> SI),
    "lerp": (lambda: kiln.lerp(t(A), t(B), 0.25), lambda: A + 0.25 * (B - A)),
    "addcmul": (lambda: kiln.addcmul(t(A), t(B), t(P), value=0.5), lambda: A + 0.5 * B * P),
    "addcdiv": (lambda: kiln.addcdiv(t(A), t(B), t(P), value=0.5), lambda: A + 0.5 * B / P),
    "clamp_min": (lambda: kiln.clamp_min(t(A), t(B)), lambda: np.maximum(A, B)),
    "clamp_max": (lambda: kiln.clamp_max(t(A), 0.1), lambda: np.minimum(A, 0.1)),
    "hardtanh": (lambda: kiln.hardtanh(t(A), -0.5, 0.5), lambda: np.clip(A, -0.5, 0.5)),
    "relu6": (lambda: kiln.relu6(t(A * 4)), lambda: np.clip(A * 4, 0, 6)),
    "hardswish": (lambda: kiln.hardswish(t(A * 3)), lambda: A * 3 * np.clip(A * 3 + 3, 0, 6) / 6),
    "hardsigmoid": (lambda: kiln.hardsigmoid(t(A * 3)), lambda: np.clip(A * 3 + 3, 0, 6) / 6),
    "mish": (lambda: kiln.mish(t(A)), lambda: A * np.tanh(np.log1p(np.exp(A)))),
    "selu": (lambda: kiln.selu(t(A)),
             lambda: 1.0507009873554805 * np.where(A > 0, A, 1.6732632423543772 * np.expm1(A))),
    "celu": (lambda: kiln.celu(t(A), 0.5), lambda: np.where(A > 0, A, 0.5 * np.expm1(A / 0.5))),
    "logsigmoid": (lambda: kiln.logsigmoid(t(A)), lambda: np.log(_sig(A))),
    "glu": (lambda: kiln.glu(t(A)), lambda: A[:, :2] * _sig(A[:, 2:])),
    "l1_loss": (lambda: kiln.l1_loss(t(A), t(B)), lambda: np.abs(A - B).mean()),
    "binary_cross_entropy": (lambda: kiln.binary_cross_entropy(t(_sig(A)), t(_sig(B)), reduction="sum"),
                             lambda: -(_sig(B) * np.log(_sig(A)) + (1 - _sig(B)) * np.log(1 - _sig(A))).sum()),
    "kl_div": (lambda: kiln.kl_div(t(A), t(P), reduction="batchmean"), lambda: (P * (np.log(P) - A)).sum() / 3),
    "margin_ranking_loss": (lambda: kiln.margin_ranking_loss(t(A), t(B), t(np.sign(P - 1)), 0.1),
                            lambda: np.maximum(-np.sign(P - 1) * (A - B) + 0.1, 0).mean()),
    "soft_margin_loss": (lambda: kiln.soft_margin_loss(t(A), t(np.sign(B)), reduction="none"),
                         lambda: np.log1p(np.exp(-A * np.sign(B)))),
})
# Losses compared with torch (every reduction, weights, edge cases) in test_ops_math_losses.py.
TORCH_COMPARED = {"cosine_embedding_loss", "hinge_embedding_loss", "multilabel_soft_margin_loss",
                  "poisson_nll_loss", "gaussian_nll_loss", "triplet_margin_loss"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_against_numpy(name):
    run, ref = CASES[name]
    got = run()
    want = np.asarray(ref())
    got = got.numpy() if isinstance(got, kiln.Tensor) else np.asarray(got)
    assert got.shape == want.shape, name
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


# Functions tested elsewhere in this suite (factories, interop, autograd, graphs, control flow).
ELSEWHERE = {
    "arange", "as_tensor", "empty", "empty_like", "eye", "from_dlpack", "from_numpy", "full",
    "full_like", "linspace", "ones", "ones_like", "rand", "randint", "randn", "scalar_tensor",
    "tensor", "zeros", "zeros_like", "to_dlpack", "manual_seed", "get_rng_state", "set_rng_state",
    "get_num_threads", "set_num_threads", "backward", "grad", "gradcheck", "gradients",
    "is_grad_enabled", "assign", "group", "print", "cond", "while_loop", "switch_", "merge",
    "promote_types",  # test_dtypes.py
    "sym_max", "sym_min", "mark_dynamic", "mark_static",  # test_jit_symbolic.py
}


# Convolution, pooling, resampling, functional norms: against torch in test_ops_conv_pool.py.
ELSEWHERE |= {
    "conv3d", "conv_transpose1d", "conv_transpose3d", "max_pool1d", "max_pool3d",
    "max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices",
    "max_unpool1d", "max_unpool2d", "max_unpool3d", "avg_pool1d", "avg_pool3d", "lp_pool1d",
    "lp_pool2d", "adaptive_avg_pool1d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
    "adaptive_max_pool2d", "adaptive_max_pool3d", "adaptive_max_pool1d_with_indices",
    "adaptive_max_pool2d_with_indices", "adaptive_max_pool3d_with_indices", "pixel_shuffle",
    "pixel_unshuffle", "group_norm", "instance_norm", "local_response_norm", "grid_sample",
    "roi_align", "nms",
}
# A recurrent layer's fused time loop: against torch's layers in test_pt_nn_rnn.py.
ELSEWHERE |= {"rnn_sequence"}
# Compared with torch in test_ops_index_shape.py.
ELSEWHERE |= {
    "argwhere", "atleast_1d", "atleast_2d", "atleast_3d", "broadcast_shapes", "broadcast_tensors",
    "broadcast_to", "bucketize", "column_stack", "dsplit", "dstack", "fliplr", "flipud", "hsplit",
    "hstack", "index_copy", "index_fill", "index_put", "logspace", "masked_scatter", "meshgrid",
    "moveaxis", "movedim", "narrow", "repeat_interleave", "rot90", "row_stack", "scatter",
    "scatter_reduce", "searchsorted", "swapaxes", "swapdims", "take", "take_along_dim",
    "tensor_split", "tile", "tril_indices", "triu_indices", "unbind", "unique",
    "unique_consecutive", "vsplit", "vstack",
}
# Compared with torch in test_ops_reduce_linalg.py (values, gradients, errors).
ELSEWHERE |= {
    "addbmm", "addmv", "all", "aminmax", "any", "baddbmm", "bmm", "count_nonzero", "cross",
    "cummax", "cummin", "cumprod", "det", "diag", "diag_embed", "diagonal", "dot", "ger", "inner",
    "inverse", "kron", "logcumsumexp", "logdet", "median", "mode", "mv", "nanmean", "nansum",
    "outer", "pinverse", "prod", "slogdet", "std_mean", "tensordot", "trace", "var_mean", "vdot",
}
# The autocast state: test_autocast.py.
ELSEWHERE |= {"get_autocast_dtype", "is_autocast_enabled"}


def test_every_public_function_has_a_case():
    public = {n for n, v in vars(C).items()
              if not n.startswith("_") and callable(v) and not inspect.isclass(v)}
    missing = sorted(public - set(CASES) - ELSEWHERE - TORCH_COMPARED)
    assert not missing, f"bound without a test case: {missing}"


def test_max_and_min_along_a_dim_give_values_and_indices_as_torch():
    a = np.array([[3.0, 7.0, 7.0], [9.0, -1.0, 4.0]])
    r = kiln.max(t(a), 1)
    assert type(r) is kiln.return_types.max and r._fields == ("values", "indices")
    values, indices = r                      # a tuple too
    assert values.tolist() == [7.0, 9.0] and indices.tolist() == [1, 0]
    assert r.indices.dtype == kiln.int64
    r = t(a).min(0, keepdim=True)
    assert r.values.tolist() == [[3.0, -1.0, 4.0]] and r.indices.tolist() == [[0, 1, 1]]
    assert t(a).max(dim=-1).indices.tolist() == [1, 0]
    assert kiln.max(t(a)).item() == 9.0     # over everything: a tensor
    assert kiln.max(t(a), (0, 1)).item() == 9.0  # several dims: the values (amax)
    assert kiln.max(t(a), t(a) * 0 + 5).tolist() == [[5, 7, 7], [9, 5, 5]]  # elementwise
    assert kiln.min(t(a), t(a) * 0 + 5).tolist() == [[3, 5, 5], [5, -1, 4]]
    # Gradients reach the max through the values.
    x = kiln.tensor([[1.0, 5.0], [4.0, 2.0]], requires_grad=True)
    x.max(1).values.sum().backward()
    assert x.grad.tolist() == [[0.0, 1.0], [1.0, 0.0]]
    # topk and sort name their parts too; the named tuples pickle by name.
    k = kiln.topk(t(a), 1)
    assert type(k) is kiln.return_types.topk and k.indices.tolist() == [[1], [0]]
    assert kiln.sort(t(a)).values.tolist() == [[3, 7, 7], [-1, 4, 9]]
    import pickle
    assert type(pickle.loads(pickle.dumps(kiln.return_types.max(1, 2)))) is kiln.return_types.max
    with pytest.raises(kiln.Error, match=r"^\[max\]"):
        kiln.max(t(a), 2)


def test_state_and_switch_merge_eagerly():
    v = kiln.zeros(2)
    kiln.assign(v, kiln.tensor([1.0, 2.0]))
    assert v.tolist() == [1.0, 2.0]
    assert kiln.group([v]).item() == 0.0
    f, tr = kiln.switch_(kiln.tensor([3.0]), kiln.tensor(True))
    assert f.is_dead and tr.tolist() == [3.0]
    out, idx = kiln.merge([f, tr])
    assert out.tolist() == [3.0] and idx.item() == 1
    s = kiln.get_rng_state()
    a = kiln.randn(3)
    kiln.set_rng_state(s)
    assert kiln.randn(3).tolist() == a.tolist()
    n = kiln.get_num_threads()
    kiln.set_num_threads(1)
    assert kiln.get_num_threads() == 1
    kiln.set_num_threads(n)
    assert kiln.empty(2, 3).shape == (2, 3) and kiln.scalar_tensor(2.0).item() == 2.0
