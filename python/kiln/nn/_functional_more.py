"""More of torch.nn.functional as compositions of Kiln ops (re-exported by kiln.nn.functional):
CTC loss, embedding bags, grid sampling, Gumbel-softmax, pdist, multilabel margin loss and the
multi-head attention forward that kiln.nn.MultiheadAttention runs."""
import math

from .. import _C

_BIG_NEG = -1e30  # log(0) for CTC: finite, so logsumexp's gradient stays defined


def _reduce(loss, reduction, who):
    if reduction == "none":
        return loss
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    raise _C.ValueError(f"[{who}] reduction must be 'none', 'mean' or 'sum', got {reduction!r}")


def _ints(t):
    if isinstance(t, int):
        return [t]
    if isinstance(t, _C.Tensor):
        return [int(v) for v in t.reshape(-1).tolist()]
    return [int(v) for v in t]


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
             zero_infinity=False):
    """Connectionist temporal classification loss: -log of the summed probability of every
    alignment of each target, by the forward (alpha) recursion over the extended label
    sequence (blanks between labels), in log space. log_probs [T, N, C] (or [T, C]),
    targets [N, S] padded or 1-D concatenated."""
    who = "ctc_loss"
    batched = log_probs.dim() == 3
    lp = log_probs if batched else log_probs.unsqueeze(1)
    T, N, C = lp.shape
    in_lens, tg_lens = _ints(input_lengths), _ints(target_lengths)
    if len(in_lens) != N or len(tg_lens) != N:
        raise _C.ValueError(f"[{who}] input_lengths and target_lengths must have {N} entries, "
                            f"got {len(in_lens)} and {len(tg_lens)}")
    if any(n > T or n < 0 for n in in_lens):
        raise _C.ValueError(f"[{who}] input_lengths must be in [0, {T}], got {in_lens}")
    tg = _ints(targets)
    if batched and targets.dim() == 2:  # padded [N, S]
        width = targets.shape[1]
        rows = [tg[i * width:i * width + tg_lens[i]] for i in range(N)]
    elif batched:  # 1-D: the targets one after another
        rows, off = [], 0
        for n in tg_lens:
            rows.append(tg[off:off + n])
            off += n
    else:  # unbatched: targets [S]
        rows = [tg[:tg_lens[0]]]
    S = max(tg_lens) if tg_lens else 0
    Lx = 2 * S + 1
    ext, skip_ok = [], []
    for r in rows:
        e = [blank] * Lx
        for i, c in enumerate(r):
            e[2 * i + 1] = c
        ext.append(e)
        skip_ok.append([s >= 2 and e[s] != blank and e[s] != e[s - 2] for s in range(Lx)])
    ext_t = _C.tensor(ext, dtype=_C.int64)                       # [N, Lx]
    skip = _C.tensor(skip_ok, dtype=_C.bool)                     # [N, Lx]
    neg = _C.full([N, 1], _BIG_NEG, dtype=lp.dtype)
    neg2 = _C.full([N, 2], _BIG_NEG, dtype=lp.dtype)
    start = [[0.0 if s < 2 and s < 2 * tg_lens[n] + 1 else _BIG_NEG for s in range(Lx)]
             for n in range(N)]
    alpha = _C.tensor(start, dtype=lp.dtype) + _C.gather(lp[0], 1, ext_t)
    for t in range(1, T):
        a1 = _C.cat([neg, alpha[:, :-1]], 1)
        if Lx > 2:
            a2 = _C.where(skip, _C.cat([neg2, alpha[:, :-2]], 1), _BIG_NEG)
        else:
            a2 = _C.full(list(alpha.shape), _BIG_NEG, dtype=lp.dtype)
        new = _C.logsumexp(_C.stack([alpha, a1, a2], 0), 0) + _C.gather(lp[t], 1, ext_t)
        running = _C.tensor([[t < n] for n in in_lens], dtype=_C.bool)
        alpha = _C.where(running, new, alpha)
    ends = []
    for n in range(N):
        last = 2 * tg_lens[n]
        ends.append([last, max(last - 1, 0)] if tg_lens[n] > 0 else [0, 0])
    ends_t = _C.tensor(ends, dtype=_C.int64)
    fin = _C.gather(alpha, 1, ends_t)                             # [N, 2]
    both = _C.tensor([[True, tg_lens[n] > 0] for n in range(N)], dtype=_C.bool)
    fin = _C.where(both, fin, _BIG_NEG)
    loss = -_C.logsumexp(fin, 1)
    # torch's CTC backward returns exp(log_probs) - posterior (the gradient with respect to the
    # logits, when log_probs is their log_softmax); a zero-valued term gives the same here.
    valid = _C.tensor([[[1.0] if t < n else [0.0] for n in in_lens] for t in range(T)],
                      dtype=lp.dtype)
    e = _C.exp(lp) * valid
    loss = loss + (e - e.detach()).sum([0, 2])
    impossible = loss > 1e29
    empty = _C.tensor([n == 0 for n in in_lens], dtype=_C.bool)
    impossible = impossible | (empty & _C.tensor([m > 0 for m in tg_lens], dtype=_C.bool))
    if zero_infinity:
        loss = _C.where(impossible, 0.0, loss)
    else:
        loss = _C.where(impossible, float("inf"), loss)
    if reduction == "mean":
        denom = _C.tensor([max(m, 1) for m in tg_lens], dtype=lp.dtype)
        return (loss / denom).mean()
    out = _reduce(loss, reduction, who)
    return out if batched or reduction != "none" else out.reshape([])


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False,
                  mode="mean", sparse=False, per_sample_weights=None, include_last_offset=False,
                  padding_idx=None):
    """Sums, means or maxes of embedding rows per bag: input [B, n] (one bag a row) or 1-D
    with offsets (bag starts). Entries equal to padding_idx are left out; an empty bag is 0."""
    who = "embedding_bag"
    if mode not in ("sum", "mean", "max"):
        raise _C.ValueError(f"[{who}] mode must be 'sum', 'mean' or 'max', got {mode!r}")
    if per_sample_weights is not None and mode != "sum":
        raise _C.ValueError(f"[{who}] per_sample_weights is only supported for mode='sum', got "
                            f"mode={mode!r}")
    if input.dim() == 2:
        if offsets is not None:
            raise _C.ValueError(f"[{who}] offsets must be None for a 2-D input")
        B, n = input.shape
        starts = [i * n for i in range(B)] + [B * n]
        flat = input.reshape(-1)
        psw = per_sample_weights.reshape(-1) if per_sample_weights is not None else None
    elif input.dim() == 1:
        if offsets is None:
            raise _C.ValueError(f"[{who}] offsets are required for a 1-D input")
        starts = _ints(offsets)
        if not include_last_offset:
            starts = starts + [input.shape[0]]
        B = len(starts) - 1
        flat, psw = input, per_sample_weights
    else:
        raise _C.ValueError(f"[{who}] input must be 1-D or 2-D, got shape {tuple(input.shape)}")
    if max_norm is not None:
        from . import functional as F
        F.embedding(flat, weight, max_norm=max_norm, norm_type=norm_type)
    idx = _ints(flat)
    if padding_idx is not None and padding_idx < 0:
        padding_idx += weight.shape[0]
    keep = [i for i, v in enumerate(idx) if v != padding_idx]
    bag_of = []
    for b in range(B):
        bag_of += [b] * (starts[b + 1] - starts[b])
    D = weight.shape[1]
    if not keep:
        return _C.zeros(B, D, dtype=weight.dtype)
    keep_t = _C.tensor(keep, dtype=_C.int64)
    rows = _C.embedding(flat.index_select(0, keep_t), weight)
    bags = [bag_of[i] for i in keep]
    if psw is not None:
        rows = rows * psw.index_select(0, keep_t).unsqueeze(1)
    if mode == "max":
        out = []
        for b in range(B):
            sel = [j for j, g in enumerate(bags) if g == b]
            if sel:
                out.append(rows.index_select(0, _C.tensor(sel, dtype=_C.int64)).max(0)[0])
            else:
                out.append(_C.zeros(D, dtype=weight.dtype))
        return _C.stack(out, 0)
    bag_t = _C.tensor(bags, dtype=_C.int64)
    out = _C.index_add(_C.zeros(B, D, dtype=rows.dtype), 0, bag_t, rows)
    if mode == "mean":
        counts = [0] * B
        for g in bags:
            counts[g] += 1
        out = out / _C.tensor([[max(c, 1)] for c in counts], dtype=rows.dtype)
    return out


def gumbel_softmax(logits, tau=1, hard=False, eps=1e-10, dim=-1):
    """softmax((logits + Gumbel noise) / tau); hard=True gives one-hot samples whose gradient is
    the soft sample's (straight-through)."""
    u = _C.rand(*logits.shape, dtype=logits.dtype)
    exponential = (-_C.log(u.clamp(1e-20, 1.0))).clamp_min(1e-20)
    gumbels = -_C.log(exponential)
    y_soft = _C.softmax((logits + gumbels) / tau, dim)
    if not hard:
        return y_soft
    index = y_soft.argmax(dim, True)
    y_hard = _C.scatter(_C.zeros_like(y_soft), dim, index, value=1.0)
    return y_hard - y_soft.detach() + y_soft


def pdist(input, p=2):
    """Distances between every pair of rows i < j of input [N, M], in row-major pair order."""
    if input.dim() != 2:
        raise _C.ValueError(f"[pdist] expects a 2-D input, got shape {tuple(input.shape)}")
    n = input.shape[0]
    ii = [i for i in range(n) for _ in range(i + 1, n)]
    jj = [j for i in range(n) for j in range(i + 1, n)]
    if not ii:
        return _C.zeros(0, dtype=input.dtype)
    from .. import linalg
    a = input.index_select(0, _C.tensor(ii, dtype=_C.int64))
    b = input.index_select(0, _C.tensor(jj, dtype=_C.int64))
    return linalg.vector_norm(a - b, p, -1)


def channel_shuffle(input, groups):
    n, c = input.shape[0], input.shape[1]
    rest = list(input.shape[2:])
    if c % groups:
        raise _C.ValueError(f"[channel_shuffle] channels {c} must be divisible by groups {groups}")
    return input.reshape([n, groups, c // groups] + rest).transpose(1, 2).reshape([n, c] + rest)


native_channel_shuffle = channel_shuffle


def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """sum over target classes j and non-target classes i of max(0, 1 - (x[j] - x[i])) / C;
    each row of target lists class indices and ends at the first -1."""
    from .functional import _reduction
    reduction = _reduction(size_average, reduce, reduction)
    x = input if input.dim() == 2 else input.reshape(1, -1)
    N, C = x.shape
    tg = _ints(target)
    counts, is_t = [[0.0] * C for _ in range(N)], [[0.0] * C for _ in range(N)]
    for n in range(N):
        for c in tg[n * C:(n + 1) * C]:
            if c < 0:
                break
            counts[n][c] += 1.0
            is_t[n][c] = 1.0
    cnt = _C.tensor(counts, dtype=x.dtype)
    ist = _C.tensor(is_t, dtype=x.dtype)
    margins = _C.clamp_min(1.0 - x.unsqueeze(2) + x.unsqueeze(1), 0.0)  # [N, j, i]
    w = cnt.unsqueeze(2) * (1.0 - ist).unsqueeze(1)
    loss = (margins * w).sum([1, 2]) / C
    if input.dim() == 1:
        loss = loss.reshape([])
    return _reduce(loss, reduction, "multilabel_margin_loss")


def _grid_1d(n, align_corners, dtype):
    g = _C.linspace(-1.0, 1.0, n, dtype=dtype) if n > 1 else _C.zeros(1, dtype=dtype)
    return g if align_corners else g * ((n - 1) / n)


def affine_grid(theta, size, align_corners=None):
    """Sampling grid [N, H, W, 2] (or [N, D, H, W, 3]) of the affine maps theta [N, 2, 3]
    (or [N, 3, 4]) over normalized output coordinates."""
    ac = bool(align_corners)
    size = list(size)
    dt = theta.dtype
    if len(size) == 4:
        N, _, H, W = size
        x = _grid_1d(W, ac, dt).reshape(1, W, 1).expand(H, W, 1)
        y = _grid_1d(H, ac, dt).reshape(H, 1, 1).expand(H, W, 1)
        base = _C.cat([x, y, _C.ones(H, W, 1, dtype=dt)], 2).reshape(1, H * W, 3)
        return _C.matmul(base, theta.transpose(1, 2)).reshape(N, H, W, 2)
    if len(size) == 5:
        N, _, D, H, W = size
        x = _grid_1d(W, ac, dt).reshape(1, 1, W, 1).expand(D, H, W, 1)
        y = _grid_1d(H, ac, dt).reshape(1, H, 1, 1).expand(D, H, W, 1)
        z = _grid_1d(D, ac, dt).reshape(D, 1, 1, 1).expand(D, H, W, 1)
        base = _C.cat([x, y, z, _C.ones(D, H, W, 1, dtype=dt)], 3).reshape(1, D * H * W, 4)
        return _C.matmul(base, theta.transpose(1, 2)).reshape(N, D, H, W, 3)
    raise _C.ValueError(f"[affine_grid] size must have 4 or 5 entries, got {size}")


def _additive_mask(mask, dtype, name):
    if mask is None:
        return None
    if mask.dtype == _C.bool:
        return _C.where(mask, float("-inf"), 0.0).to(dtype)
    if not mask.dtype.is_floating_point:
        raise _C.TypeError(f"[multi_head_attention_forward] only bool and floating types of "
                           f"{name} are supported, got {mask.dtype}")
    return mask.to(dtype) if mask.dtype != dtype else mask


def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads,
                                 in_proj_weight, in_proj_bias, bias_k, bias_v, add_zero_attn,
                                 dropout_p, out_proj_weight, out_proj_bias, training=True,
                                 key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None,
                                 k_proj_weight=None, v_proj_weight=None, static_k=None,
                                 static_v=None, average_attn_weights=True):
    """torch.nn.functional.multi_head_attention_forward: query [L, N, E], key/value [S, N, *]
    (or unbatched [L, E]); returns (output [L, N, E], weights [N, L, S] or per head, or None).
    attn_mask [L, S] or [N*H, L, S] and key_padding_mask [N, S]: bool (True = masked out) or
    added to the scores."""
    who = "multi_head_attention_forward"
    from .functional import dropout, pad
    batched = query.dim() == 3
    if not batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    L, N, E = query.shape
    if E != embed_dim_to_check:
        raise _C.ValueError(f"[{who}] query's last dim {E} must be embed_dim "
                            f"{embed_dim_to_check}")
    H = num_heads
    hd = E // H
    if hd * H != E:
        raise _C.ValueError(f"[{who}] embed_dim {E} not divisible by num_heads {H}")
    b = in_proj_bias
    bq, bk, bv = (None, None, None) if b is None else (b[0:E], b[E:2 * E], b[2 * E:])
    if use_separate_proj_weight:
        wq, wk, wv = q_proj_weight, k_proj_weight, v_proj_weight
    else:
        wq, wk, wv = in_proj_weight[0:E], in_proj_weight[E:2 * E], in_proj_weight[2 * E:]
    q = _C.linear(query, wq, bq)
    k = _C.linear(key, wk, bk) if static_k is None else None
    v = _C.linear(value, wv, bv) if static_v is None else None
    dt = q.dtype
    attn_mask = _additive_mask(attn_mask, dt, "attn_mask")
    kpm = _additive_mask(key_padding_mask, dt, "key_padding_mask")
    if attn_mask is not None and attn_mask.dim() == 2:
        attn_mask = attn_mask.unsqueeze(0)
    if bias_k is not None and bias_v is not None:
        k = _C.cat([k, bias_k.expand(1, N, E)], 0)
        v = _C.cat([v, bias_v.expand(1, N, E)], 0)
        if attn_mask is not None:
            attn_mask = pad(attn_mask, [0, 1])
        if kpm is not None:
            kpm = pad(kpm, [0, 1])
    q = q.reshape(L, N * H, hd).transpose(0, 1)
    k = static_k if static_k is not None else k.reshape(k.shape[0], N * H, hd).transpose(0, 1)
    v = static_v if static_v is not None else v.reshape(v.shape[0], N * H, hd).transpose(0, 1)
    if add_zero_attn:
        k = _C.cat([k, _C.zeros(N * H, 1, hd, dtype=dt)], 1)
        v = _C.cat([v, _C.zeros(N * H, 1, hd, dtype=dt)], 1)
        if attn_mask is not None:
            attn_mask = pad(attn_mask, [0, 1])
        if kpm is not None:
            kpm = pad(kpm, [0, 1])
    S = k.shape[1]
    if kpm is not None:
        if tuple(kpm.shape) != (N, S):
            raise _C.ValueError(f"[{who}] key_padding_mask must be [{N}, {S}] (batch, source "
                                f"length), got {tuple(key_padding_mask.shape)}")
        kpm = kpm.reshape(N, 1, 1, S).expand(N, H, 1, S).reshape(N * H, 1, S)
        attn_mask = kpm if attn_mask is None else attn_mask + kpm
    scores = _C.matmul(q * (1.0 / math.sqrt(hd)), k.transpose(1, 2))  # [N*H, L, S]
    if attn_mask is not None:
        scores = scores + attn_mask
    weights = _C.softmax(scores, -1)
    if dropout_p > 0.0 and training:
        weights = dropout(weights, dropout_p, True)
    out = _C.matmul(weights, v).transpose(0, 1).reshape(L, N, E)
    out = _C.linear(out, out_proj_weight, out_proj_bias)
    if not batched:
        out = out.squeeze(1)
    if not need_weights:
        return out, None
    weights = weights.reshape(N, H, L, S)
    if average_attn_weights:
        weights = weights.mean(1)
    if not batched:
        weights = weights.squeeze(0)
    return out, weights


def _fractional_sequences(samples, in_size, out_size, pool):
    """torch's generate_intervals in float32 for every plane: [N, C, out] window starts."""
    N, C = samples.shape[0], samples.shape[1]
    if out_size > 1:
        alpha = _C.tensor(float(in_size - pool), dtype=_C.float32) / float(out_size - 1)
        i = _C.arange(out_size - 1, dtype=_C.float32).reshape(1, 1, -1)
        s = samples.unsqueeze(-1)
        head = _C.floor((i + s) * alpha) - _C.floor(s * alpha)
        tail = _C.full([N, C, 1], float(in_size - pool), dtype=_C.float32)
        return _C.cat([head, tail], 2).to(_C.int64)
    return _C.full([N, C, out_size], float(in_size - pool), dtype=_C.float32).to(_C.int64)


def _fractional_max_pool(name, input, kernel_size, output_size, output_ratio, return_indices,
                         _random_samples, n):
    batched = input.dim() == n + 2
    if input.dim() not in (n + 1, n + 2):
        raise _C.ValueError(f"[{name}] expects a {n + 1}-D or {n + 2}-D input, got shape "
                            f"{tuple(input.shape)}")
    x = input if batched else input.unsqueeze(0)
    N, C = x.shape[0], x.shape[1]
    sizes = list(x.shape[2:])
    k = list(kernel_size) if isinstance(kernel_size, (tuple, list)) else [kernel_size] * n
    if output_size is None:
        if output_ratio is None:
            raise _C.ValueError(f"[{name}] requires specifying either an output_size or an "
                                f"output_ratio")
        r = list(output_ratio) if isinstance(output_ratio, (tuple, list)) else [output_ratio] * n
        out = [int(s * q) for s, q in zip(sizes, r)]
    else:
        out = list(output_size) if isinstance(output_size, (tuple, list)) else [output_size] * n
    for s, o, kk in zip(sizes, out, k):
        if o + kk - 1 > s:
            raise _C.ValueError(f"[{name}] output_size {out} too large for kernel {k} and input "
                                f"{sizes}")
    samples = _random_samples if _random_samples is not None else \
        _C.rand(N, C, n, dtype=_C.float32)
    samples = samples.to(_C.float32)
    # torch's samples: 2-D takes [..., 0] for the width and [..., 1] for the height; 3-D takes
    # them in dim order (time, height, width).
    order = [1, 0] if n == 2 else list(range(n))
    seqs = [_fractional_sequences(samples[:, :, order[d]], sizes[d], out[d], k[d])
            for d in range(n)]
    # Flat input index of every (output position, kernel offset): [N, C, *out, *k].
    idx = None
    stride = 1
    for d in reversed(range(n)):
        shape = [N, C] + [out[e] if e == d else 1 for e in range(n)] + [1] * n
        start = seqs[d].reshape(shape)
        off_shape = [1, 1] + [1] * n + [k[e] if e == d else 1 for e in range(n)]
        pos = (start + _C.arange(k[d]).reshape(off_shape)) * stride
        idx = pos if idx is None else idx + pos
        stride *= sizes[d]
    full = [N, C] + out + k
    idx = idx.expand(*full).reshape(N, C, -1)
    vals = _C.gather(x.reshape(N, C, -1), 2, idx).reshape([N, C] + out + [-1])
    best, arg = vals.max(-1)
    y = best if batched else best.squeeze(0)
    if not return_indices:
        return y
    flat_idx = _C.gather(idx.reshape([N, C] + out + [-1]), -1, arg.unsqueeze(-1)).squeeze(-1)
    return y, (flat_idx if batched else flat_idx.squeeze(0))


def fractional_max_pool2d(input, kernel_size, output_size=None, output_ratio=None,
                          return_indices=False, _random_samples=None):
    """Max pooling over pseudo-random, overlapping windows (torch's fractional max pooling)."""
    return _fractional_max_pool("fractional_max_pool2d", input, kernel_size, output_size,
                                output_ratio, return_indices, _random_samples, 2)


def fractional_max_pool3d(input, kernel_size, output_size=None, output_ratio=None,
                          return_indices=False, _random_samples=None):
    return _fractional_max_pool("fractional_max_pool3d", input, kernel_size, output_size,
                                output_ratio, return_indices, _random_samples, 3)


def fractional_max_pool2d_with_indices(input, kernel_size, output_size=None, output_ratio=None,
                                       return_indices=False, _random_samples=None):
    return fractional_max_pool2d(input, kernel_size, output_size, output_ratio, True,
                                 _random_samples)


def fractional_max_pool3d_with_indices(input, kernel_size, output_size=None, output_ratio=None,
                                       return_indices=False, _random_samples=None):
    return fractional_max_pool3d(input, kernel_size, output_size, output_ratio, True,
                                 _random_samples)
