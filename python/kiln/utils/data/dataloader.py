"""kiln.utils.data.DataLoader: batches from a dataset, as torch.utils.data.DataLoader (batch
size, shuffle, sampler, batch_sampler, drop_last, collate_fn with default_collate,
generator). Loading runs in this process: num_workers > 0 is accepted and gives the same
batches in the same order as torch's worker processes would.

A TensorDataset (or a Subset of one, as random_split makes) with the default collate is batched
by indexing each tensor with the batch's indices (one gather per tensor) rather than stacking
samples one by one: the same values.
"""
import collections.abc
import numbers

from ... import _C
from .dataset import IterableDataset, Subset, TensorDataset
from .sampler import BatchSampler, RandomSampler, SequentialSampler

_T = _C.Tensor


def _np():
    import numpy
    return numpy


def default_convert(data):
    """NumPy arrays (not of strings) to tensors, through mappings and sequences; the rest as
    is (what DataLoader applies when batch_size=None)."""
    t = type(data)
    if isinstance(data, _T):
        return data
    if t.__module__ == "numpy" and t.__name__ not in ("str_", "string_", "bytes_"):
        np = _np()
        if isinstance(data, np.ndarray) and data.dtype.kind in "OSUa":
            return data
        return _C.as_tensor(np.asarray(data))
    if isinstance(data, collections.abc.Mapping):
        try:
            return t({k: default_convert(v) for k, v in data.items()})
        except TypeError:
            return {k: default_convert(v) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return t(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        try:
            return t([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data


def default_collate(batch):
    """A list of samples to one batch, as torch's default_collate: tensors stacked (a new dim
    0), NumPy arrays and numbers to tensors (floats float64, ints int64), strings kept as a
    list, mappings per key, namedtuples per field, other sequences transposed (a list)."""
    elem = batch[0]
    t = type(elem)
    if isinstance(elem, _T):
        return _C.stack(list(batch), 0)
    if t.__module__ == "numpy" and t.__name__ not in ("str_", "string_", "bytes_"):
        np = _np()
        if isinstance(elem, np.ndarray):
            if elem.dtype.kind in "OSUa":
                raise _C.TypeError(
                    "[default_collate] default_collate: batch must contain tensors, numpy "
                    f"arrays, numbers, dicts or lists; found {elem.dtype}")
            return default_collate([_C.as_tensor(np.ascontiguousarray(b)) for b in batch])
        if elem.shape == ():
            return _C.as_tensor(np.asarray(batch))
    if isinstance(elem, float):
        return _C.tensor(list(batch), dtype=_C.float64)
    if isinstance(elem, numbers.Integral):
        return _C.tensor(list(batch))
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        try:
            return t({k: default_collate([d[k] for d in batch]) for k in elem})
        except TypeError:
            return {k: default_collate([d[k] for d in batch]) for k in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return t(*(default_collate(s) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        it = iter(batch)
        size = len(next(it))
        if not all(len(e) == size for e in it):
            raise _C.Error("[default_collate] each element in list of batch should be of "
                           "equal size")
        transposed = list(zip(*batch))
        if isinstance(elem, tuple):
            return [default_collate(s) for s in transposed]
        try:
            return t([default_collate(s) for s in transposed])
        except TypeError:
            return [default_collate(s) for s in transposed]
    raise _C.TypeError(
        "[default_collate] default_collate: batch must contain tensors, numpy arrays, numbers, "
        f"dicts or lists; found {t.__name__}")


def _base(ds):
    """The dataset under any Subsets."""
    while type(ds) is Subset:
        ds = ds.dataset
    return ds


def get_worker_info():
    """None: loading runs in the main process."""
    return None


class DataLoader:
    """DataLoader(dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
    num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
    worker_init_fn=None, multiprocessing_context=None, generator=None, *, prefetch_factor=2,
    persistent_workers=False, pin_memory_device='')."""

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor=2, persistent_workers=False, pin_memory_device=""):
        if num_workers < 0:
            raise _C.ValueError("[DataLoader] num_workers option should be non-negative; use "
                                "num_workers=0 to disable multiprocessing.")
        if timeout < 0:
            raise _C.ValueError("[DataLoader] timeout option should be non-negative")
        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.persistent_workers = persistent_workers
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            if shuffle not in (None, False):
                raise _C.ValueError("[DataLoader] DataLoader with IterableDataset: expected "
                                    f"unspecified shuffle option, but got shuffle={shuffle}")
            if sampler is not None:
                raise _C.ValueError("[DataLoader] DataLoader with IterableDataset: expected "
                                    f"unspecified sampler option, but got sampler={sampler}")
            if batch_sampler is not None:
                raise _C.ValueError("[DataLoader] DataLoader with IterableDataset: expected "
                                    "unspecified batch_sampler option, but got "
                                    f"batch_sampler={batch_sampler}")
        if sampler is not None and shuffle:
            raise _C.ValueError("[DataLoader] sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise _C.ValueError("[DataLoader] batch_sampler option is mutually exclusive "
                                    "with batch_size, shuffle, sampler, and drop_last")
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise _C.ValueError("[DataLoader] batch_size=None option disables auto-batching and "
                                "is mutually exclusive with drop_last")
        if sampler is None:
            if self._iterable:
                sampler = None
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and not self._iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator
        self._auto_collate = collate_fn is None
        if collate_fn is None:
            collate_fn = default_collate if batch_size is not None or \
                batch_sampler is not None else default_convert
        self.collate_fn = collate_fn

    def __len__(self):
        if self._iterable:
            n = len(self.dataset)
            if self.batch_size is not None:
                n = n // self.batch_size if self.drop_last else \
                    (n + self.batch_size - 1) // self.batch_size
            return n
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        return len(self.sampler)

    def __iter__(self):
        if self.worker_init_fn is not None and self.num_workers > 0:
            for i in range(self.num_workers):
                self.worker_init_fn(i)
        if self._iterable:
            return self._iter_iterable()
        if self.batch_sampler is None:
            return (self.collate_fn(self.dataset[i]) for i in self.sampler)
        if self._auto_collate and type(_base(self.dataset)) is TensorDataset:
            return self._iter_tensors()
        return (self.collate_fn([self.dataset[i] for i in batch])
                for batch in self.batch_sampler)

    def _iter_tensors(self):
        tensors = _base(self.dataset).tensors
        for batch in self.batch_sampler:
            ds = self.dataset
            while type(ds) is Subset:  # outermost first: its indices index the next dataset
                batch = [int(ds.indices[i]) for i in batch]
                ds = ds.dataset
            idx = _C.tensor(list(batch), dtype=_C.int64)
            yield [t[idx] for t in tensors]

    def _iter_iterable(self):
        if self.batch_size is None:
            for sample in self.dataset:
                yield self.collate_fn(sample)
            return
        batch = []
        for sample in self.dataset:
            batch.append(sample)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch)
