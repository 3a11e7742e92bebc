"""kiln.utils.data.distributed.DistributedSampler: each of num_replicas processes takes every
num_replicas-th index (padded or truncated to equal shares), reshuffled per set_epoch from
seed + epoch, as torch's."""
import math

from ... import _C
from .sampler import Sampler


class DistributedSampler(Sampler):
    """DistributedSampler(dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
    drop_last=False). Kiln's Python package has no default process group: pass num_replicas
    and rank (e.g. from kiln's launcher's environment)."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False):
        if num_replicas is None or rank is None:
            raise _C.Error("[DistributedSampler] pass num_replicas and rank: Kiln's Python "
                           "package has no default process group to read them from")
        if rank >= num_replicas or rank < 0:
            raise _C.ValueError(f"[DistributedSampler] Invalid rank {rank}, rank should be in "
                                f"the interval [0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        n = len(dataset)
        if drop_last and n % num_replicas != 0:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas
        self.shuffle = shuffle
        self.seed = seed

    def __iter__(self):
        from ... import Generator, randperm
        n = len(self.dataset)
        if self.shuffle:
            g = Generator().manual_seed(self.seed + self.epoch)
            indices = randperm(n, generator=g).tolist()
        else:
            indices = list(range(n))
        if not self.drop_last:
            padding = self.total_size - len(indices)
            if padding <= len(indices):
                indices += indices[:padding]
            else:
                indices += (indices * math.ceil(padding / len(indices)))[:padding]
        else:
            indices = indices[:self.total_size]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        self.epoch = epoch
