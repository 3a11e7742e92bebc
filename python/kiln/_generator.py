"""kiln.Generator: a random stream of its own, as torch.Generator, for the `generator=`
argument of random factories, samplers and random_split.

Kiln's kernels draw from one global generator (kiln.manual_seed). A Generator keeps its own
state (a copy of that generator's words) and lends it to the global one for the draws made
under `_using(gen)`, then takes the advanced state back, so its stream is independent of the
global one and reproducible from its seed.
"""
from . import _C

_DEFAULT_SEED = 67280421310721  # torch's default_generator seed


def _state_for(seed):
    saved = _C.get_rng_state()
    try:
        _C.manual_seed(int(seed) & 0xFFFFFFFFFFFFFFFF)
        return _C.get_rng_state()
    finally:
        _C.set_rng_state(saved)


class Generator:
    """Generator(device="cpu"): manual_seed(s) (returns self), seed(), initial_seed(),
    get_state(), set_state(state), as torch.Generator."""

    def __init__(self, device="cpu"):
        from ._device import _backend
        _backend(device)
        self.device = __import__("kiln")._device.device(device)
        self._seed = _DEFAULT_SEED
        self._state = None  # lazily _state_for(_seed)

    def manual_seed(self, seed):
        seed = int(seed)
        self._seed = seed
        self._state = _state_for(seed)
        return self

    def seed(self):
        import random
        s = random.SystemRandom().getrandbits(63)
        self.manual_seed(s)
        return s

    def initial_seed(self):
        return self._seed

    def get_state(self):
        if self._state is None:
            self._state = _state_for(self._seed)
        return _C.tensor(list(self._state), dtype=_C.uint64) if hasattr(_C, "uint64") \
            else list(self._state)

    def set_state(self, new_state):
        state = new_state.tolist() if isinstance(new_state, _C.Tensor) else list(new_state)
        saved = _C.get_rng_state()
        try:
            _C.set_rng_state([int(w) for w in state])  # validates
        finally:
            _C.set_rng_state(saved)
        self._state = [int(w) for w in state]
        return self

    def __reduce__(self):
        return (_restore_generator, (self._seed, self._state))


def _restore_generator(seed, state):
    g = Generator()
    g._seed = seed
    g._state = state
    return g


class _DefaultGenerator(Generator):
    """kiln.default_generator: the global generator itself."""

    def __init__(self):
        self._seed = _DEFAULT_SEED
        self.device = None

    def manual_seed(self, seed):
        self._seed = int(seed)
        _C.manual_seed(self._seed & 0xFFFFFFFFFFFFFFFF)
        return self

    def get_state(self):
        return list(_C.get_rng_state())

    def set_state(self, new_state):
        state = new_state.tolist() if isinstance(new_state, _C.Tensor) else list(new_state)
        _C.set_rng_state([int(w) for w in state])
        return self


default_generator = _DefaultGenerator()


class _using:
    """Draws inside the block come from `gen` (a Generator or None: the global generator)."""

    __slots__ = ("gen", "saved")

    def __init__(self, gen):
        if gen is not None and not isinstance(gen, Generator):
            raise _C.TypeError(
                f"[generator] expected a kiln.Generator, got {type(gen).__name__}")
        self.gen = None if isinstance(gen, _DefaultGenerator) else gen

    def __enter__(self):
        g = self.gen
        if g is not None:
            if g._state is None:
                g._state = _state_for(g._seed)
            self.saved = _C.get_rng_state()
            _C.set_rng_state(g._state)
        return self

    def __exit__(self, *exc):
        g = self.gen
        if g is not None:
            g._state = _C.get_rng_state()
            _C.set_rng_state(self.saved)
        return False


def manual_seed(seed):
    """Seeds the global generator (kiln.manual_seed, torch.manual_seed); returns
    kiln.default_generator, as torch does."""
    return default_generator.manual_seed(seed)


def initial_seed():
    return default_generator.initial_seed()


def seed():
    """Seeds the global generator from the OS and returns the seed."""
    import random
    s = random.SystemRandom().getrandbits(63)
    default_generator.manual_seed(s)
    return s
