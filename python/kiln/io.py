"""kiln.io: safetensors files, IDX files (MNIST format), Fashion-MNIST and a DataLoader over
in-memory tensors."""
from . import _C

save_safetensors = _C.io.save_safetensors
load_safetensors = _C.io.load_safetensors
read_idx = _C.io.read_idx
load_fashion_mnist = _C.io.load_fashion_mnist


def save_file(tensors, path, metadata=None):
    """safetensors.torch.save_file's order: a dict {name: tensor}, then the path."""
    _C.io.save_safetensors(str(path), tensors, metadata or {})


def load_file(path):
    """{name: tensor} from a safetensors file."""
    return _C.io.load_safetensors(str(path))


class DataLoader:
    """Mini-batches of tensors that share dim 0 (torch's DataLoader over a TensorDataset):
    `for x, y in DataLoader((images, labels), batch_size=64, shuffle=True, seed=1)`. Each
    iteration is an epoch; with shuffle every epoch has its own order, drawn from (seed, epoch)."""

    def __init__(self, tensors, batch_size=1, shuffle=False, drop_last=False, seed=0):
        self._c = _C.io.DataLoader(list(tensors), batch_size, shuffle, drop_last, seed)

    def __len__(self):
        return len(self._c)

    def __iter__(self):
        self._c._start_epoch()
        for i in range(len(self._c)):
            yield self._c.batch(i)

    @property
    def epoch(self):
        return self._c.epoch

    def set_epoch(self, epoch):
        self._c.set_epoch(epoch)
