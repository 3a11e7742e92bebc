"""Random sampling in torch's form: randperm, multinomial, normal's overloads, bernoulli and
the in-place initialisers (normal_, uniform_, exponential_, cauchy_, log_normal_, geometric_,
bernoulli_, random_), each drawing from the global generator or a kiln.Generator. Installed on
kiln.Tensor and into kiln by kiln/_tensor_api.py."""
import math
import numbers

from . import _C
from ._device import _check_device
from ._generator import _using

_T = _C.Tensor
_bool, _int, _float = bool, int, float


def _finish(r, requires_grad, out, op):
    from ._tensor_api import _finish as finish
    return finish(r, requires_grad, out, op)


def randperm(n, *, generator=None, out=None, dtype=None, layout=None, device=None,
             requires_grad=False, pin_memory=False):
    """A random permutation of 0..n-1 (int64), as torch.randperm: the argsort of n float64
    uniform draws (ties have probability ~n^2 / 2^53)."""
    _check_device(device, "randperm")
    n = _int(n)
    if n < 0:
        raise _C.ValueError(f"[randperm] n must be non-negative, got {n}")
    with _using(generator):
        keys = _C.rand((n,), dtype=_C.float64)
    r = _C.argsort(keys) if n else _C.zeros((0,), dtype=_C.int64)
    if dtype is not None and dtype != r.dtype:
        r = r.to(dtype)
    return _finish(r, requires_grad, out, "randperm")


def multinomial(input, num_samples, replacement=False, *, generator=None, out=None):
    """Indices drawn from the categorical distributions in the rows of `input` (weights, not
    necessarily normalised), as torch.multinomial: with replacement by inverse CDF, without by
    the Gumbel-top-k trick (the same distribution as drawing one at a time)."""
    if input.dim() not in (1, 2):
        raise _C.ValueError(f"[multinomial] prob_dist must be 1 or 2 dim, got {input.dim()}")
    k = input.shape[-1]
    num_samples = _int(num_samples)
    if num_samples <= 0:
        raise _C.ValueError(f"[multinomial] cannot sample n_sample <= 0 samples, got {num_samples}")
    if not replacement and num_samples > k:
        raise _C.ValueError(
            f"[multinomial] cannot sample n_sample > prob_dist.size(-1) samples without "
            f"replacement (n_sample={num_samples}, size={k})")
    p = input.detach().to(_C.float64)
    rows = p if p.dim() == 2 else p.reshape(1, k)
    if _bool((rows < 0).any()) or not _bool(_C.isfinite(rows).all()):
        raise _C.ValueError("[multinomial] probability tensor contains either inf, nan or "
                            "element < 0")
    total = rows.sum(1, keepdim=True)
    if _bool((total <= 0).any()):
        raise _C.ValueError("[multinomial] invalid multinomial distribution (sum of "
                            "probabilities <= 0)")
    n = rows.shape[0]
    with _using(generator):
        u = _C.rand((n, num_samples if replacement else k), dtype=_C.float64)
    if replacement:
        cdf = (rows / total).cumsum(1)
        # The first category whose cdf exceeds u (categories of weight 0 are never taken).
        idx = (u.unsqueeze(2) >= cdf.unsqueeze(1)).sum(2).clamp(0, k - 1)
        # Skip zero-weight categories a rounding of the last cdf could land on.
        r = idx
    else:
        gumbel = -_C.log(-_C.log(u.clamp(1e-300, 1.0)))
        keys = _C.where(rows > 0, _C.log(rows) + gumbel, _C.full((n, k), -math.inf,
                                                                   dtype=_C.float64))
        r = keys.topk(num_samples, 1).indices
    r = r.to(_C.int64)
    if input.dim() == 1:
        r = r.reshape(num_samples)
    return _finish(r, False, out, "multinomial")


def normal(mean=0.0, std=1.0, size=None, *, generator=None, out=None, dtype=None, layout=None,
           device=None, pin_memory=False, requires_grad=False):
    """torch.normal's overloads: (Tensor mean, Tensor std), (Tensor mean, float std),
    (float mean, Tensor std) (the broadcast shape, the tensor's dtype) and
    (float mean, float std, size)."""
    _check_device(device, "normal")
    tm, ts = isinstance(mean, _T), isinstance(std, _T)
    if tm or ts:
        if size is not None:
            raise _C.TypeError("[normal] size= is only for float mean and std")
        ref = mean if tm else std
        shape = _C.broadcast_shapes(tuple(mean.shape), tuple(std.shape)) if tm and ts \
            else tuple(ref.shape)
        if ts and _bool((std < 0).any()):
            raise _C.ValueError("[normal] expects all elements of std >= 0.0")
        with _using(generator):
            z = _C.randn(tuple(shape), dtype=ref.dtype)
        r = (z * (std.detach() if ts else std) + (mean.detach() if tm else mean))
    else:
        if size is None:
            raise _C.TypeError("[normal] normal(float mean, float std) needs size=")
        if std < 0:
            raise _C.ValueError(f"[normal] expects std >= 0.0, but found std {std}")
        if isinstance(size, numbers.Integral):
            size = (size,)
        with _using(generator):
            r = _C.randn(tuple(size), dtype=dtype) * _float(std) + _float(mean)
    return _finish(r, requires_grad, out, "normal")


def bernoulli(input, p=None, *, generator=None, out=None):
    """1 with probability input (or p) per element, in input's dtype (torch.bernoulli)."""
    probs = input if p is None else _C.full(tuple(input.shape), _float(p), dtype=input.dtype)
    with _using(generator):
        u = _C.rand(tuple(input.shape), dtype=_C.float64)
    r = (u < probs.detach().to(_C.float64)).to(input.dtype)
    return _finish(r, False, out, "bernoulli")


def _fill_with(self, values):
    """Writes values into self in place (autograd sees a write, as torch's in-place ops);
    returns self itself, as torch's in-place methods do."""
    self.copy_(values)
    return self


def _shape(self):
    return tuple(self.shape)


def _normal_(self, mean=0.0, std=1.0, *, generator=None):
    with _using(generator):
        z = _C.randn(_shape(self), dtype=self.dtype)
    return _fill_with(self, z * _float(std) + _float(mean))


def _uniform_(self, a=0.0, b=1.0, *, generator=None, **kw):
    a, b = kw.pop("from", a), kw.pop("to", b)
    with _using(generator):
        u = _C.rand(_shape(self), dtype=_C.float64)
    return _fill_with(self, (u * (_float(b) - _float(a)) + _float(a)).to(self.dtype))


def _exponential_(self, lambd=1.0, *, generator=None):
    with _using(generator):
        u = _C.rand(_shape(self), dtype=_C.float64)
    return _fill_with(self, (-_C.log1p(-u) / _float(lambd)).to(self.dtype))


def _cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
    with _using(generator):
        u = _C.rand(_shape(self), dtype=_C.float64)
    return _fill_with(self, (_C.tan((u - 0.5) * math.pi) * sigma + median).to(self.dtype))


def _log_normal_(self, mean=1.0, std=2.0, *, generator=None):
    with _using(generator):
        z = _C.randn(_shape(self), dtype=_C.float64)
    return _fill_with(self, _C.exp(z * std + mean).to(self.dtype))


def _geometric_(self, p, *, generator=None):
    with _using(generator):
        u = _C.rand(_shape(self), dtype=_C.float64)
    return _fill_with(self, _C.ceil(_C.log1p(-u) / math.log1p(-p)).clamp(1, None).to(self.dtype))


def _bernoulli_(self, p=0.5, *, generator=None):
    probs = p.to(_C.float64) if isinstance(p, _T) else _float(p)
    with _using(generator):
        u = _C.rand(_shape(self), dtype=_C.float64)
    return _fill_with(self, (u < probs).to(self.dtype))


def _random_(self, *args, generator=None, **kw):
    """random_(), random_(to), random_(from, to): integers in [from, to)."""
    a = list(args)
    lo, hi = kw.pop("from", None), kw.pop("to", None)
    if len(a) == 2:
        lo, hi = a
    elif len(a) == 1:
        hi = a[0]
    lo = 0 if lo is None else lo
    if hi is None:  # up to the largest integer the dtype holds exactly, as torch
        d = self.dtype
        hi = {_C.float32: 2 ** 24 + 1, _C.float64: 2 ** 53 + 1, _C.float16: 2 ** 11 + 1,
              _C.bfloat16: 2 ** 8 + 1, _C.bool: 2, _C.uint8: 256, _C.int8: 128,
              _C.int16: 2 ** 15, _C.int32: 2 ** 31}.get(d, 2 ** 63 - 1)
    with _using(generator):
        r = _C.randint(_int(lo), _int(hi), _shape(self), dtype=_C.int64)
    return _fill_with(self, r.to(self.dtype))


def _bernoulli_method(self, p=None, *, generator=None):
    return bernoulli(self, p, generator=generator)


def _multinomial_method(self, num_samples, replacement=False, *, generator=None):
    return multinomial(self, num_samples, replacement, generator=generator)
