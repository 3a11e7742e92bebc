"""Samplers as torch.utils.data.sampler: the order (and batches) of dataset indices."""
from ... import _C


class Sampler:
    def __init__(self, data_source=None):
        pass

    def __iter__(self):
        raise NotImplementedError


class SequentialSampler(Sampler):
    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


def _fresh_generator(generator):
    """torch's rule: without a generator, each epoch draws a seed from the global generator
    (so kiln.manual_seed fixes the order) and shuffles with a Generator of its own."""
    from ... import Generator, randint
    if generator is not None:
        return generator
    seed = int(randint(0, 2 ** 62, (1,)).item())
    return Generator().manual_seed(seed)


class RandomSampler(Sampler):
    """A random permutation per epoch, or num_samples draws with replacement."""

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(self.replacement, bool):
            raise _C.TypeError("[RandomSampler] replacement should be a boolean value, but got "
                               f"replacement={self.replacement}")
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise _C.ValueError("[RandomSampler] num_samples should be a positive integer "
                                f"value, but got num_samples={self.num_samples}")

    @property
    def num_samples(self):
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        from ... import randint, randperm
        n = len(self.data_source)
        gen = _fresh_generator(self.generator)
        if self.replacement:
            for _ in range(self.num_samples // 32):
                yield from randint(high=n, size=(32,), generator=gen).tolist()
            yield from randint(high=n, size=(self.num_samples % 32,), generator=gen).tolist()
        else:
            for _ in range(self.num_samples // n):
                yield from randperm(n, generator=gen).tolist()
            yield from randperm(n, generator=gen).tolist()[:self.num_samples % n]

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a random order each epoch."""

    def __init__(self, indices, generator=None):
        self.indices = indices
        self.generator = generator

    def __iter__(self):
        from ... import randperm
        for i in randperm(len(self.indices), generator=self.generator).tolist():
            yield self.indices[i]

    def __len__(self):
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """num_samples indices drawn with probabilities proportional to weights."""

    def __init__(self, weights, num_samples, replacement=True, generator=None):
        if not isinstance(num_samples, int) or isinstance(num_samples, bool) or \
                num_samples <= 0:
            raise _C.ValueError("[WeightedRandomSampler] num_samples should be a positive "
                                f"integer value, but got num_samples={num_samples}")
        if not isinstance(replacement, bool):
            raise _C.ValueError("[WeightedRandomSampler] replacement should be a boolean "
                                f"value, but got replacement={replacement}")
        from ... import tensor, float64
        w = weights.to(float64) if isinstance(weights, _C.Tensor) else \
            tensor(list(weights), dtype=float64)
        if w.dim() != 1:
            raise _C.ValueError("[WeightedRandomSampler] weights should be a 1d sequence but "
                                f"given weights have shape {tuple(w.shape)}")
        self.weights = w
        self.num_samples = num_samples
        self.replacement = replacement
        self.generator = generator

    def __iter__(self):
        from ... import multinomial
        yield from multinomial(self.weights, self.num_samples, self.replacement,
                               generator=self.generator).tolist()

    def __len__(self):
        return self.num_samples


class BatchSampler(Sampler):
    """Lists of batch_size indices from `sampler` (the last one shorter unless drop_last)."""

    def __init__(self, sampler, batch_size, drop_last):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise _C.ValueError("[BatchSampler] batch_size should be a positive integer value, "
                                f"but got batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise _C.ValueError("[BatchSampler] drop_last should be a boolean value, but got "
                                f"drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self):
        batch = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return (len(self.sampler) + self.batch_size - 1) // self.batch_size
