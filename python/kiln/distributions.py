"""kiln.distributions: the torch.distributions most training programs use (Categorical,
Normal, Bernoulli, Uniform, kl_divergence between two of a kind), with torch 1.13's
parameterisation, shapes (sample_shape + batch_shape + event_shape) and formulas; sample()
draws without autograd, rsample() (Normal, Uniform) with it."""
import math

from . import _C

_T = _C.Tensor


def _tensor(x, like=None):
    if isinstance(x, _T):
        return x
    dtype = like.dtype if isinstance(like, _T) and like.dtype.is_floating_point else _C.float32
    return _C.tensor(float(x), dtype=dtype)


def _shape(sample_shape):
    if isinstance(sample_shape, int):
        return (sample_shape,)
    return tuple(sample_shape)


def _broadcast(*ts):
    shape = _C.broadcast_shapes(*[tuple(t.shape) for t in ts])
    return [t.expand(*shape) if tuple(t.shape) != tuple(shape) else t for t in ts]


class _no_grad:
    def __enter__(self):
        self.prev = _C.is_grad_enabled()
        _C._set_grad_enabled(False)

    def __exit__(self, *exc):
        _C._set_grad_enabled(self.prev)
        return False


class Distribution:
    has_rsample = False

    def __init__(self, batch_shape=(), event_shape=(), validate_args=None):
        self._batch_shape = tuple(batch_shape)
        self._event_shape = tuple(event_shape)

    @property
    def batch_shape(self):
        return self._batch_shape

    @property
    def event_shape(self):
        return self._event_shape

    @property
    def stddev(self):
        return self.variance.sqrt()

    def _extended_shape(self, sample_shape=()):
        return _shape(sample_shape) + self._batch_shape + self._event_shape

    def sample(self, sample_shape=()):
        with _no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()):
        raise _C.Error(f"[{type(self).__name__}] has no reparameterized sampler (rsample)")

    def sample_n(self, n):
        return self.sample((n,))

    def __repr__(self):
        return f"{type(self).__name__}()"


class Categorical(Distribution):
    """Categorical(probs=None, logits=None): indices 0..K-1 drawn with the given (unnormalised)
    probabilities or logits over the last dim."""

    def __init__(self, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise _C.ValueError("[Categorical] either `probs` or `logits` must be specified, but "
                                "not both")
        if probs is not None:
            if probs.dim() < 1:
                raise _C.ValueError("[Categorical] `probs` parameter must be at least "
                                    "one-dimensional")
            self.probs = probs / probs.sum(-1, keepdim=True)
            eps = _finfo_eps(self.probs.dtype)
            self.logits = self.probs.clamp(eps, 1 - eps).log()
        else:
            if logits.dim() < 1:
                raise _C.ValueError("[Categorical] `logits` parameter must be at least "
                                    "one-dimensional")
            self.logits = logits - logits.logsumexp(-1, keepdim=True)
            self.probs = _C.softmax(logits, -1)
        self._num_events = self.probs.shape[-1]
        super().__init__(tuple(self.probs.shape[:-1]))

    @property
    def param_shape(self):
        return tuple(self.probs.shape)

    @property
    def mean(self):
        return _C.full(self._extended_shape(), math.nan, dtype=self.probs.dtype)

    @property
    def mode(self):
        return self.probs.argmax(-1)

    @property
    def variance(self):
        return _C.full(self._extended_shape(), math.nan, dtype=self.probs.dtype)

    def sample(self, sample_shape=()):
        from . import multinomial
        shape = _shape(sample_shape)
        n = 1
        for s in shape:
            n *= s
        probs_2d = self.probs.detach().reshape(-1, self._num_events)
        samples = multinomial(probs_2d, n, True).t()
        return samples.reshape(*self._extended_shape(shape))

    def log_prob(self, value):
        value = value.long().unsqueeze(-1)
        value, log_pmf = _broadcast(value, self.logits)
        value = value[..., :1]
        return log_pmf.gather(-1, value).squeeze(-1)

    def entropy(self):
        min_real = _finfo_min(self.logits.dtype)
        logits = self.logits.clamp(min_real, None)
        return -(logits * self.probs).sum(-1)


def _finfo_eps(dtype):
    from ._torch_misc import finfo
    return finfo(dtype).eps


def _finfo_min(dtype):
    from ._torch_misc import finfo
    return finfo(dtype).min


class Normal(Distribution):
    """Normal(loc, scale)."""

    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        ref = loc if isinstance(loc, _T) else scale
        self.loc, self.scale = _broadcast(_tensor(loc, ref), _tensor(scale, ref))
        super().__init__(tuple(self.loc.shape))

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return self.scale

    @property
    def variance(self):
        return self.scale ** 2

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        eps = _C.randn(shape, dtype=self.loc.dtype)
        return self.loc + eps * self.scale

    def log_prob(self, value):
        value = _tensor(value, self.loc)
        var = self.scale ** 2
        log_scale = self.scale.log()
        return -((value - self.loc) ** 2) / (2 * var) - log_scale - math.log(math.sqrt(2 * math.pi))

    def cdf(self, value):
        value = _tensor(value, self.loc)
        return 0.5 * (1 + _C.erf((value - self.loc) * self.scale.reciprocal() / math.sqrt(2)))

    def entropy(self):
        return 0.5 + 0.5 * math.log(2 * math.pi) + self.scale.log()


class Bernoulli(Distribution):
    """Bernoulli(probs=None, logits=None): 1 with probability probs."""

    def __init__(self, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise _C.ValueError("[Bernoulli] either `probs` or `logits` must be specified, but "
                                "not both")
        if probs is not None:
            self.probs = _tensor(probs)
            eps = _finfo_eps(self.probs.dtype)
            p = self.probs.clamp(eps, 1 - eps)
            self.logits = p.log() - (-p).log1p()
        else:
            self.logits = _tensor(logits)
            self.probs = _C.sigmoid(self.logits)
        super().__init__(tuple(self.probs.shape))

    @property
    def mean(self):
        return self.probs

    @property
    def variance(self):
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape=()):
        from . import bernoulli
        shape = self._extended_shape(sample_shape)
        with _no_grad():
            return bernoulli(self.probs.expand(*shape) if shape != tuple(self.probs.shape)
                             else self.probs)

    def log_prob(self, value):
        from .nn import functional as F
        logits, value = _broadcast(self.logits, _tensor(value, self.logits))
        return -F.binary_cross_entropy_with_logits(logits, value, reduction="none")

    def entropy(self):
        from .nn import functional as F
        return F.binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")


class Uniform(Distribution):
    """Uniform(low, high): the half-open interval [low, high)."""

    has_rsample = True

    def __init__(self, low, high, validate_args=None):
        ref = low if isinstance(low, _T) else high
        self.low, self.high = _broadcast(_tensor(low, ref), _tensor(high, ref))
        super().__init__(tuple(self.low.shape))

    @property
    def mean(self):
        return (self.high + self.low) / 2

    @property
    def variance(self):
        return (self.high - self.low) ** 2 / 12

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        rand = _C.rand(shape, dtype=self.low.dtype)
        return self.low + rand * (self.high - self.low)

    def log_prob(self, value):
        value = _tensor(value, self.low)
        lb = (self.low <= value).to(self.low.dtype)
        ub = (self.high > value).to(self.low.dtype)
        return (lb * ub).log() - (self.high - self.low).log()

    def entropy(self):
        return (self.high - self.low).log()


def kl_divergence(p, q):
    """KL(p || q) for two Normals or two Categoricals (torch's closed forms)."""
    if isinstance(p, Normal) and isinstance(q, Normal):
        var_ratio = (p.scale / q.scale) ** 2
        t1 = ((p.loc - q.loc) / q.scale) ** 2
        return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())
    if isinstance(p, Categorical) and isinstance(q, Categorical):
        t = p.probs * (p.logits - q.logits)
        t = _C.where(q.probs == 0, _C.full(tuple(t.shape), math.inf, dtype=t.dtype), t)
        t = _C.where(p.probs == 0, _C.zeros(tuple(t.shape), dtype=t.dtype), t)
        return t.sum(-1)
    raise _C.Error(f"[kl_divergence] no KL(p || q) for {type(p).__name__} and "
                   f"{type(q).__name__}")
