"""kiln.utils.data: torch.utils.data's datasets, samplers and DataLoader, with torch 1.13's
arguments and semantics (num_workers > 0 loads in this process, in the same order)."""
from .dataset import (Dataset, IterableDataset, TensorDataset, ConcatDataset,  # noqa: F401
                      ChainDataset, Subset, random_split)
from .sampler import (Sampler, SequentialSampler, RandomSampler,  # noqa: F401
                      SubsetRandomSampler, WeightedRandomSampler, BatchSampler)
from .dataloader import (DataLoader, default_collate, default_convert,  # noqa: F401
                         get_worker_info)
from .distributed import DistributedSampler  # noqa: F401
from . import dataset, sampler, dataloader, distributed  # noqa: F401
