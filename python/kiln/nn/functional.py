"""kiln.nn.functional: torch.nn.functional's names over Kiln's ops (most are the ops
themselves; the rest are compositions of ops, so autograd, graphs and jit see ordinary ops).
`import kiln.nn.functional as F` and `from kiln.nn import functional as F` both work."""
from .. import _C, no_grad
from ._functional_more import _reduce


def _inplace(input, out, inplace):
    """torch's inplace=True: the result written into input, which is returned. A tensor that
    autograd is tracking is left as it is and the result returned instead (same values and
    gradients): Kiln's autograd keeps every input an op reads, so a write into one would fail
    the backward pass ("modified in place after it was saved"), where torch's relu_ and
    friends save their output instead."""
    if not inplace or (input.requires_grad and _C.is_grad_enabled()):
        return out
    input.copy_(out)
    return input


silu = _C.silu
sigmoid = _C.sigmoid
tanh = _C.tanh
softplus = _C.softplus


# inplace=True writes the result into the input (torch's in-place form) and returns it.
def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    return _inplace(input, _C.hardtanh(input, min_val, max_val), inplace)


def relu6(input, inplace=False):
    return _inplace(input, _C.relu6(input), inplace)


def hardswish(input, inplace=False):
    return _inplace(input, _C.hardswish(input), inplace)


def hardsigmoid(input, inplace=False):
    return _inplace(input, _C.hardsigmoid(input), inplace)


def mish(input, inplace=False):
    return _inplace(input, _C.mish(input), inplace)


def selu(input, inplace=False):
    return _inplace(input, _C.selu(input), inplace)


def celu(input, alpha=1.0, inplace=False):
    return _inplace(input, _C.celu(input, alpha), inplace)

logsigmoid = _C.logsigmoid
glu = _C.glu


# Compositions of Kiln ops (so autograd, graphs and jit see ordinary ops), as torch's
# definitions of the same names.
def softsign(input):
    return input / (_C.abs(input) + 1.0)


def tanhshrink(input):
    return input - _C.tanh(input)


def hardshrink(input, lambd=0.5):
    # Zero inside [-lambd, lambd] only, so NaN passes through (torch's kernel compares so too).
    inside = _C.logical_and(input >= -lambd, input <= lambd)
    return _C.where(inside, _C.zeros_like(input), input)


def softshrink(input, lambd=0.5):
    if lambd < 0:
        raise _C.ValueError(f"[softshrink] lambd must be >= 0, got {lambd}")
    return _C.where(input > lambd, input - lambd,
                    _C.where(input < -lambd, input + lambd, _C.zeros_like(input)))


def threshold(input, threshold, value, inplace=False):
    # The replacement takes input's dtype (an int tensor stays int, bfloat16 stays bfloat16).
    # torch: x <= threshold ? value : x, so NaN stays NaN.
    return _inplace(input, _C.where(input <= threshold, _C.full_like(input, value), input),
                    inplace)


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    x = input if dtype is None else input.to(dtype)
    return _C.softmax(-x, _softmax_dim(dim, input))


def prelu(input, weight):
    """max(0, x) + weight * min(0, x); weight has 1 or C (= input.shape[1]) elements."""
    w = weight
    if input.dim() >= 2 and weight.numel() > 1:
        w = weight.reshape([weight.numel()] + [1] * (input.dim() - 2))
    elif input.dim() == 0 and weight.numel() == 1:
        w = weight.reshape([])  # a 0-d input gives a 0-d result, as torch
    return _C.where(input > 0, input, w * input)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    from .. import linalg
    return linalg.vector_norm(x1 - x2 + eps, p, -1, keepdim)


def _feature_dropout(name, input, p, training, inplace):
    """torch's feature_dropout: one keep/drop draw per (dim 0, dim 1) pair, the rest of each
    feature map shared, scaled by 1/(1-p)."""
    if p < 0 or p > 1:
        raise _C.ValueError(f"[{name}] dropout probability has to be between 0 and 1, but got "
                            f"{p}")
    if input.dim() < 2:
        raise _C.Error(f"[{name}] expects an input with a channel dim (2-D or more), got shape "
                       f"{tuple(input.shape)}")
    if not training or p == 0:
        return input
    shape = list(input.shape[:2]) + [1] * (input.dim() - 2)
    keep = (_C.rand(*shape, dtype=input.dtype) >= p).to(input.dtype)
    out = input * keep * (0.0 if p == 1 else 1.0 / (1.0 - p))
    return _inplace(input, out, inplace)


def _unbatched_feature_dropout(name, input, p, training, inplace, batched):
    if batched:
        return _feature_dropout(name, input, p, training, inplace)
    out = _feature_dropout(name, input.unsqueeze(0), p, training, False)
    if not training or p == 0:
        return input
    return _inplace(input, out.squeeze(0), inplace)


def dropout1d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of [N, C, L] (or [C, L])."""
    if input.dim() not in (2, 3):
        raise _C.Error(f"[dropout1d] Expected 2D or 3D input, but received a {input.dim()}D "
                       f"input (shape {tuple(input.shape)})")
    return _unbatched_feature_dropout("dropout1d", input, p, training, inplace,
                                      input.dim() == 3)


def dropout2d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of [N, C, H, W]; as torch 1.13, other ranks warn and drop per
    (dim 0, dim 1) pair (a 3-D input is read as [N, C, L], a 2-D one element by element)."""
    import warnings
    d = input.dim()
    if d not in (3, 4):
        warnings.warn(f"dropout2d: Received a {d}-D input to dropout2d, which is deprecated and "
                      f"will result in an error in a future release. To retain the behavior and "
                      f"silence this warning, please use dropout instead.", stacklevel=2)
    if d == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that channel-wise "
                      "1D dropout behavior is desired - input is interpreted as shape (N, C, L), "
                      "where C is the channel dim.", stacklevel=2)
    return _feature_dropout("dropout2d", input, p, training, inplace)


def dropout3d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of [N, C, D, H, W] (or [C, D, H, W])."""
    d = input.dim()
    if d not in (4, 5):
        import warnings
        warnings.warn(f"dropout3d: Received a {d}-D input to dropout3d, which is deprecated and "
                      f"will result in an error in a future release. To retain the behavior and "
                      f"silence this warning, please use dropout instead.", stacklevel=2)
    if d < 2:  # torch would read a 1-D input as one channel; Kiln asks for a channel dim
        raise _C.Error(f"[dropout3d] expects an input with a channel dim (2-D or more), got "
                       f"shape {tuple(input.shape)}")
    return _unbatched_feature_dropout("dropout3d", input, p, training, inplace, d == 5)


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    return _C.interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    return _C.interpolate(input, size, scale_factor, "nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    return _C.interpolate(input, size, scale_factor, "bilinear", True)



# torch's trailing-underscore in-place forms.
def relu_(input):
    return _inplace(input, _C.relu(input), True)


def elu_(input, alpha=1.0):
    return _inplace(input, _C.elu(input, alpha), True)


def leaky_relu_(input, negative_slope=0.01):
    return _inplace(input, _C.leaky_relu(input, negative_slope), True)


def hardtanh_(input, min_val=-1.0, max_val=1.0):
    return _inplace(input, _C.hardtanh(input, min_val, max_val), True)


def selu_(input):
    return _inplace(input, _C.selu(input), True)


def celu_(input, alpha=1.0):
    return _inplace(input, _C.celu(input, alpha), True)


def threshold_(input, threshold, value):
    return _inplace(input, _C.where(input <= threshold, _C.full_like(input, value), input), True)
linear = _C.linear
conv2d = _C.conv2d
conv1d = _C.conv1d
max_pool2d = _C.max_pool2d
avg_pool2d = _C.avg_pool2d
adaptive_avg_pool2d = _C.adaptive_avg_pool2d
layer_norm = _C.layer_norm
batch_norm = _C.batch_norm
pad = _C.pad
interpolate = _C.interpolate
normalize = _C.normalize
cosine_similarity = _C.cosine_similarity
cross_entropy = _C.cross_entropy
nll_loss = _C.nll_loss
huber_loss = _C.huber_loss
binary_cross_entropy = _C.binary_cross_entropy
kl_div = _C.kl_div
cosine_embedding_loss = _C.cosine_embedding_loss
margin_ranking_loss = _C.margin_ranking_loss
hinge_embedding_loss = _C.hinge_embedding_loss
soft_margin_loss = _C.soft_margin_loss
multilabel_soft_margin_loss = _C.multilabel_soft_margin_loss
poisson_nll_loss = _C.poisson_nll_loss
gaussian_nll_loss = _C.gaussian_nll_loss
triplet_margin_loss = _C.triplet_margin_loss
scaled_dot_product_attention = _C.scaled_dot_product_attention
# convolution, pooling, resampling, functional norms (kiln/ops/conv.cpp, pool.cpp, norm.cpp)
conv3d = _C.conv3d
conv_transpose1d = _C.conv_transpose1d
conv_transpose2d = _C.conv_transpose2d
conv_transpose3d = _C.conv_transpose3d
max_pool1d = _C.max_pool1d
max_pool3d = _C.max_pool3d
max_pool1d_with_indices = _C.max_pool1d_with_indices
max_pool2d_with_indices = _C.max_pool2d_with_indices
max_pool3d_with_indices = _C.max_pool3d_with_indices
max_unpool1d = _C.max_unpool1d
max_unpool2d = _C.max_unpool2d
max_unpool3d = _C.max_unpool3d
avg_pool1d = _C.avg_pool1d
avg_pool3d = _C.avg_pool3d
lp_pool1d = _C.lp_pool1d
lp_pool2d = _C.lp_pool2d
adaptive_avg_pool1d = _C.adaptive_avg_pool1d
adaptive_avg_pool3d = _C.adaptive_avg_pool3d
adaptive_max_pool1d = _C.adaptive_max_pool1d
adaptive_max_pool2d = _C.adaptive_max_pool2d
adaptive_max_pool3d = _C.adaptive_max_pool3d
adaptive_max_pool1d_with_indices = _C.adaptive_max_pool1d_with_indices
adaptive_max_pool2d_with_indices = _C.adaptive_max_pool2d_with_indices
adaptive_max_pool3d_with_indices = _C.adaptive_max_pool3d_with_indices
grid_sample = _C.grid_sample
pixel_shuffle = _C.pixel_shuffle
pixel_unshuffle = _C.pixel_unshuffle
unfold = _C._unfold
fold = _C._fold
group_norm = _C.group_norm
instance_norm = _C.instance_norm
local_response_norm = _C.local_response_norm




# ---- torch's signatures where Kiln's op takes fewer arguments ----


def _reduction(size_average, reduce, reduction):
    """torch's legacy size_average/reduce pair to a reduction string (None means True)."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    out = ("mean" if size_average else "sum") if reduce else "none"
    import warnings
    warnings.warn(f"size_average and reduce args will be deprecated, please use "
                  f"reduction='{out}' instead.", stacklevel=3)
    return out


def relu(input, inplace=False):
    return _inplace(input, _C.relu(input), inplace)


def elu(input, alpha=1.0, inplace=False):
    return _inplace(input, _C.elu(input, alpha), inplace)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    return _inplace(input, _C.leaky_relu(input, negative_slope), inplace)


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    """Leaky ReLU with a slope drawn from U(lower, upper) per element in training, the mean
    slope (lower + upper) / 2 in evaluation."""
    if training:
        slope = _C.rand(*input.shape, dtype=input.dtype) * (upper - lower) + lower
        out = _C.where(input >= 0, input, input * slope)
    else:
        out = _C.leaky_relu(input, (lower + upper) / 2)
    return _inplace(input, out, inplace)


def gelu(input, approximate="none"):
    if approximate not in ("none", "tanh", True, False):
        raise _C.ValueError(f"[gelu] approximate must be 'none' or 'tanh', got {approximate!r}")
    return _C.gelu(input, approximate in ("tanh", True))


def _softmax_dim(dim, input):
    # torch's implicit dim (deprecated there): 0 for 0-, 1- and 3-D input, else 1.
    if dim is not None:
        return dim
    return 0 if input.dim() in (0, 1, 3) else 1


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    x = input if dtype is None else input.to(dtype)
    return _C.softmax(x, _softmax_dim(dim, input))


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    x = input if dtype is None else input.to(dtype)
    return _C.log_softmax(x, _softmax_dim(dim, input))


def dropout(input, p=0.5, training=True, inplace=False):
    if p < 0 or p > 1:
        raise _C.ValueError(f"[dropout] p must be in [0, 1], got {p}")
    if not training or p == 0:
        return input
    return _inplace(input, _C.dropout(input, p, True), inplace)


def _alpha_dropout(name, input, p, training, inplace, feature):
    if p < 0 or p > 1:
        raise _C.ValueError(f"[{name}] p must be in [0, 1], got {p}")
    if not training or p == 0:
        return input
    if p == 1:
        return _inplace(input, input * 0.0, inplace)
    # SELU's negative saturation value; a and b keep mean 0 and variance 1 (torch's formula).
    alpha_p = -1.7580993408473766
    a = ((1 - p) * (1 + p * alpha_p ** 2)) ** -0.5
    b = -a * alpha_p * p
    shape = list(input.shape[:2]) + [1] * (input.dim() - 2) if feature else list(input.shape)
    keep = (_C.rand(*shape, dtype=input.dtype) >= p).to(input.dtype)
    out = (input * keep + alpha_p * (1.0 - keep)) * a + b
    return _inplace(input, out, inplace)


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    return _alpha_dropout("alpha_dropout", input, p, training, inplace, False)


def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    return _alpha_dropout("feature_alpha_dropout", input, p, training, inplace, True)


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """Rows of weight by index. padding_idx's row gets no gradient (torch); max_norm renormalizes
    the looked-up rows of weight in place first."""
    if max_norm is not None:
        from .. import linalg
        with no_grad():
            idx = input.reshape(-1).to(_C.int64)
            rows = _C.index_select(weight, 0, idx)
            norms = linalg.vector_norm(rows, norm_type, -1, True)
            scale = _C.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)
            weight.detach().index_copy_(0, idx, rows * scale)
    out = _C.embedding(input, weight)
    if padding_idx is not None and weight.requires_grad and _C.is_grad_enabled():
        # No gradient flows into the padding row: its output rows are cut from the graph.
        pad = padding_idx if padding_idx >= 0 else weight.shape[0] + padding_idx
        mask = (input == pad).unsqueeze(-1)
        out = _C.where(mask, out.detach(), out)
    return out


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    return _C.mse_loss(input, target, _reduction(size_average, reduce, reduction))


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    return _C.l1_loss(input, target, reduction=_reduction(size_average, reduce, reduction))


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    return _C.smooth_l1_loss(input, target, _reduction(size_average, reduce, reduction), beta)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction="mean", pos_weight=None):
    reduction = _reduction(size_average, reduce, reduction)
    if weight is None:
        return _C.binary_cross_entropy_with_logits(input, target, reduction, pos_weight)
    loss = _C.binary_cross_entropy_with_logits(input, target, "none", pos_weight) * weight
    return _reduce(loss, reduction, "binary_cross_entropy_with_logits")


def bilinear(input1, input2, weight, bias=None):
    """y_k = x1^T W_k x2 + b_k; weight [out, in1, in2]."""
    y = _C.einsum("...i,kij,...j->...k", input1, weight, input2)
    return y if bias is None else y + bias


def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None,
                      reduce=None, reduction="mean"):
    """sum_{j != y} max(0, margin - x[y] + x[j])^p / C per sample (torch's MultiMarginLoss)."""
    if p not in (1, 2):
        raise _C.ValueError(f"[multi_margin_loss] p must be 1 or 2, got {p}")
    x = input if input.dim() == 2 else input.reshape(1, -1)
    t = target.reshape(-1, 1).to(_C.int64)
    c = x.shape[1]
    xy = _C.gather(x, 1, t)
    m = _C.clamp_min(margin - xy + x, 0.0)
    if p == 2:
        m = m * m
    if weight is not None:
        m = m * _C.gather(weight.reshape(1, -1).expand(x.shape[0], c), 1, t)
    not_y = (_C.arange(c).reshape(1, -1) != t).to(x.dtype)
    loss = (m * not_y).sum(1) / c
    if input.dim() == 1:
        loss = loss.reshape([])
    return _reduce(loss, _reduction(size_average, reduce, reduction), "multi_margin_loss")


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None,
                                      margin=1.0, swap=False, reduction="mean"):
    dist = distance_function if distance_function is not None else pairwise_distance
    d_ap, d_an = dist(anchor, positive), dist(anchor, negative)
    if swap:
        d_an = _C.minimum(d_an, dist(positive, negative))
    loss = _C.clamp_min(margin + d_ap - d_an, 0.0)
    return _reduce(loss, reduction, "triplet_margin_with_distance_loss")


def conv_tbc(input, weight, bias, pad=0):
    """1-D convolution over time-major input [T, B, C_in] with weight [K, C_in, C_out]."""
    x = input.permute(1, 2, 0)                                   # [B, C_in, T]
    y = _C.conv1d(x, weight.permute(2, 1, 0), bias, 1, pad)      # [B, C_out, T']
    return y.permute(2, 0, 1)


def rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False):
    return rrelu(input, lower, upper, training, True)


from ._functional_more import (affine_grid, channel_shuffle, ctc_loss,  # noqa: E402,F401
                               embedding_bag, fractional_max_pool2d,
                               fractional_max_pool2d_with_indices, fractional_max_pool3d,
                               fractional_max_pool3d_with_indices, gumbel_softmax,
                               multi_head_attention_forward, multilabel_margin_loss,
                               native_channel_shuffle, pdist)


def one_hot(tensor, num_classes=-1):
    """int64 one-hot rows; num_classes=-1 takes the largest index + 1, as torch."""
    if num_classes < 0:
        num_classes = int(tensor.max().item()) + 1 if tensor.numel() else 0
    return _C.one_hot(tensor, num_classes)


def _fp32_under_autocast(fn):
    """torch.autocast's float32 list on CPU: under autocast, float16/bfloat16 tensor arguments of
    these losses, 3-D pools, transposed convolutions and local_response_norm are computed in
    float32, as torch computes them (precision-sensitive reductions)."""
    def to32(a):
        if isinstance(a, _C.Tensor) and a.dtype in (_C.bfloat16, _C.float16):
            return a.to(_C.float32)
        return a

    def wrapper(*args, **kwargs):
        if _C.is_autocast_enabled():
            args = tuple(to32(a) for a in args)
            kwargs = {k: to32(v) for k, v in kwargs.items()}
        return fn(*args, **kwargs)

    wrapper.__name__ = wrapper.__qualname__ = getattr(fn, "__name__", "fn")
    wrapper.__doc__ = getattr(fn, "__doc__", None)
    return wrapper


for _n in ("l1_loss", "soft_margin_loss", "poisson_nll_loss", "margin_ranking_loss",
           "hinge_embedding_loss", "cosine_embedding_loss", "triplet_margin_loss", "cross_entropy",
           "binary_cross_entropy", "local_response_norm", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "max_pool3d", "avg_pool3d", "adaptive_avg_pool3d",
           "adaptive_max_pool3d", "max_pool3d_with_indices", "adaptive_max_pool3d_with_indices"):
    globals()[_n] = _fp32_under_autocast(globals()[_n])
del _n
