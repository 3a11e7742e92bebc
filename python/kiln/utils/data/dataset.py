"""Datasets as torch.utils.data.dataset: map-style (Dataset: __getitem__/__len__) and
iterable (IterableDataset), TensorDataset, ConcatDataset, ChainDataset, Subset and
random_split (lengths or fractions)."""
import bisect
import math
from itertools import accumulate

from ... import _C


class Dataset:
    """A map-style dataset: subclasses define __getitem__ (and usually __len__)."""

    def __getitem__(self, index):
        raise NotImplementedError(f"[Dataset] {type(self).__name__} must define __getitem__")

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset that is a stream: subclasses define __iter__."""

    def __iter__(self):
        raise NotImplementedError(f"[IterableDataset] {type(self).__name__} must define "
                                  "__iter__")

    def __add__(self, other):
        return ChainDataset([self, other])


class TensorDataset(Dataset):
    """Sample i is (t[i] for each tensor); every tensor has the same size along dim 0."""

    def __init__(self, *tensors):
        if not tensors:
            raise _C.ValueError("[TensorDataset] needs at least one tensor")
        n = tensors[0].shape[0]
        if any(t.shape[0] != n for t in tensors):
            raise _C.ValueError(
                "[TensorDataset] Size mismatch between tensors: sizes along dim 0 are "
                f"{[t.shape[0] for t in tensors]}")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].shape[0]


class ConcatDataset(Dataset):
    """The datasets one after the other (map-style ones only)."""

    @staticmethod
    def cumsum(sequence):
        r, s = [], 0
        for e in sequence:
            s += len(e)
            r.append(s)
        return r

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise _C.ValueError("[ConcatDataset] datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise _C.TypeError("[ConcatDataset] ConcatDataset does not support "
                                   "IterableDataset")
        self.cumulative_sizes = self.cumsum(self.datasets)

    def __len__(self):
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise _C.ValueError("[ConcatDataset] absolute value of index should not exceed "
                                    "dataset length")
            idx = len(self) + idx
        d = bisect.bisect_right(self.cumulative_sizes, idx)
        sample_idx = idx if d == 0 else idx - self.cumulative_sizes[d - 1]
        return self.datasets[d][sample_idx]


class ChainDataset(IterableDataset):
    """Iterable datasets chained."""

    def __init__(self, datasets):
        self.datasets = datasets

    def __iter__(self):
        for d in self.datasets:
            yield from d

    def __len__(self):
        return sum(len(d) for d in self.datasets)


class Subset(Dataset):
    """The samples of `dataset` at `indices`."""

    def __init__(self, dataset, indices):
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __len__(self):
        return len(self.indices)


def random_split(dataset, lengths, generator=None):
    """Non-overlapping random Subsets of the given lengths, or of fractions summing to 1 (the
    remainder spread one each from the first), as torch.utils.data.random_split."""
    from ... import randperm
    from ..._generator import default_generator
    if generator is None:
        generator = default_generator
    n = len(dataset)
    lengths = list(lengths)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        subset_lengths = []
        for i, frac in enumerate(lengths):
            if frac < 0 or frac > 1:
                raise _C.ValueError(f"[random_split] Fraction at index {i} is not between 0 "
                                    "and 1")
            subset_lengths.append(int(math.floor(n * frac)))
        remainder = n - sum(subset_lengths)
        for i in range(remainder):
            subset_lengths[i % len(subset_lengths)] += 1
        lengths = subset_lengths
    if sum(lengths) != n:
        raise _C.ValueError("[random_split] Sum of input lengths does not equal the length of "
                            f"the input dataset! ({sum(lengths)} vs {n})")
    indices = randperm(sum(lengths), generator=generator).tolist()
    return [Subset(dataset, indices[offset - length:offset])
            for offset, length in zip(accumulate(lengths), lengths)]
