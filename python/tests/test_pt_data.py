# kiln.utils.data against torch 1.13: datasets, samplers, DataLoader (batching, shuffle,
# drop_last, collate, sampler/batch_sampler, iterable datasets, argument checks), random_split.
import collections

import numpy as np
import pytest

import kiln
from kiln.utils import data as kd

torch = pytest.importorskip("torch")
td = torch.utils.data


def as_lists(x):
    if isinstance(x, (kiln.Tensor, torch.Tensor)):
        return ("T", str(x.dtype).split(".")[-1], x.tolist())
    if isinstance(x, dict):
        return {k: as_lists(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, [as_lists(v) for v in x])
    return x


def both_loaders(make_ds, **kw):
    return (list(kd.DataLoader(make_ds(kiln, kd), **kw)),
            list(td.DataLoader(make_ds(torch, td), **kw)))


def tensor_ds(lib, mod):
    return mod.TensorDataset(lib.arange(20.0).reshape(10, 2), lib.arange(10))


@pytest.mark.parametrize("kw", [dict(), dict(batch_size=3), dict(batch_size=3, drop_last=True),
                                dict(batch_size=None), dict(batch_size=4, num_workers=2)])
def test_sequential_batches_match_torch(kw):
    k, t = both_loaders(tensor_ds, **kw)
    assert as_lists(k) == as_lists(t)
    assert len(kd.DataLoader(tensor_ds(kiln, kd), **kw)) == \
        len(td.DataLoader(tensor_ds(torch, td), **kw))


class PyDataset:
    """A map-style dataset of mixed samples, built for either library."""

    def __init__(self, lib):
        self.lib = lib

    def __len__(self):
        return 7

    def __getitem__(self, i):
        L = self.lib
        return {"x": L.ones(2) * i, "label": i % 3, "w": 0.5 * i, "name": f"s{i}",
                "arr": np.full((2,), i, dtype=np.int32),
                "pair": (L.tensor(i), [i, i + 1])}


def test_default_collate_matches_torch():
    k, t = both_loaders(lambda lib, mod: PyDataset(lib), batch_size=3)
    assert as_lists(k) == as_lists(t)
    Point = collections.namedtuple("Point", "x y")
    kb = kd.default_collate([Point(1, 2.0), Point(3, 4.0)])
    tb = td.default_collate([Point(1, 2.0), Point(3, 4.0)])
    assert type(kb).__name__ == "Point" and as_lists(list(kb)) == as_lists(list(tb))
    assert as_lists(kd.default_collate([np.float32(1), np.float32(2)])) == \
        as_lists(td.default_collate([np.float32(1), np.float32(2)]))
    with pytest.raises(kiln.Error):
        kd.default_collate([[1, 2], [3]])
    assert as_lists(kd.default_convert([np.ones(2), (1, 2)])) == \
        as_lists(td.default_convert([np.ones(2), (1, 2)]))


def test_shuffle_is_a_permutation_per_epoch_and_seeded():
    ds = tensor_ds(kiln, kd)
    dl = kd.DataLoader(ds, batch_size=4, shuffle=True)
    kiln.manual_seed(3)
    e1 = [y for _, ys in dl for y in ys.tolist()]
    e2 = [y for _, ys in dl for y in ys.tolist()]
    assert sorted(e1) == sorted(e2) == list(range(10)) and e1 != e2
    kiln.manual_seed(3)
    assert [y for _, ys in dl for y in ys.tolist()] == e1
    g = kiln.Generator().manual_seed(5)
    a = [y for _, ys in kd.DataLoader(ds, batch_size=4, shuffle=True, generator=g)
         for y in ys.tolist()]
    g.manual_seed(5)
    b = [y for _, ys in kd.DataLoader(ds, batch_size=4, shuffle=True, generator=g)
         for y in ys.tolist()]
    assert a == b


def test_samplers():
    ds = list(range(10))
    assert list(kd.SequentialSampler(ds)) == list(td.SequentialSampler(ds))
    r = list(kd.RandomSampler(ds))
    assert sorted(r) == ds and len(kd.RandomSampler(ds)) == 10
    r = list(kd.RandomSampler(ds, replacement=True, num_samples=50))
    assert len(r) == 50 and set(r) <= set(ds)
    assert len(list(kd.RandomSampler(ds, num_samples=15))) == 15
    s = list(kd.SubsetRandomSampler([3, 5, 7]))
    assert sorted(s) == [3, 5, 7]
    w = list(kd.WeightedRandomSampler([0.0, 1.0, 0.0, 3.0], 200))
    assert set(w) == {1, 3} and len(w) == 200
    w = list(kd.WeightedRandomSampler(kiln.tensor([1.0, 1.0, 1.0]), 3, replacement=False))
    assert sorted(w) == [0, 1, 2]
    for drop in (False, True):
        assert list(kd.BatchSampler(kd.SequentialSampler(ds), 4, drop)) == \
            list(td.BatchSampler(td.SequentialSampler(ds), 4, drop))
        assert len(kd.BatchSampler(range(10), 4, drop)) == len(td.BatchSampler(range(10), 4, drop))
    for bad in (lambda: kd.BatchSampler(ds, 0, False), lambda: kd.RandomSampler(ds, num_samples=0),
                lambda: kd.WeightedRandomSampler([1.0], 0)):
        with pytest.raises(kiln.Error):
            bad()


def test_sampler_and_batch_sampler_arguments():
    sampler = [9, 0, 4, 4]
    k, t = both_loaders(tensor_ds, batch_size=2, sampler=sampler)
    assert as_lists(k) == as_lists(t)
    bs = [[1, 2], [7], [3, 3, 3]]
    k, t = both_loaders(tensor_ds, batch_sampler=bs)
    assert as_lists(k) == as_lists(t)
    k, t = both_loaders(tensor_ds, batch_size=3, collate_fn=lambda b: len(b))
    assert k == t == [3, 3, 3, 1]
    ds = tensor_ds(kiln, kd)
    for kw in (dict(sampler=[0], shuffle=True), dict(batch_sampler=bs, batch_size=2),
               dict(batch_sampler=bs, drop_last=True), dict(batch_size=None, drop_last=True),
               dict(num_workers=-1)):
        with pytest.raises(ValueError):
            td.DataLoader(tensor_ds(torch, td), **kw)
        with pytest.raises(kiln.Error):
            kd.DataLoader(ds, **kw)


class Stream:
    def __init__(self, lib, mod):
        class S(mod.IterableDataset):
            def __iter__(self):
                return iter([lib.tensor([float(i)]) for i in range(7)])

            def __len__(self):
                return 7
        self.ds = S()


@pytest.mark.parametrize("kw", [dict(batch_size=3), dict(batch_size=3, drop_last=True),
                                dict(batch_size=None)])
def test_iterable_dataset(kw):
    k, t = both_loaders(lambda lib, mod: Stream(lib, mod).ds, **kw)
    assert as_lists(k) == as_lists(t)
    assert len(kd.DataLoader(Stream(kiln, kd).ds, **kw)) == \
        len(td.DataLoader(Stream(torch, td).ds, **kw))
    with pytest.raises(kiln.Error):
        kd.DataLoader(Stream(kiln, kd).ds, shuffle=True)
    chain = kd.ChainDataset([Stream(kiln, kd).ds, Stream(kiln, kd).ds])
    assert len(list(chain)) == 14


def test_datasets_and_random_split():
    ds = tensor_ds(kiln, kd)
    assert len(ds) == 10 and ds[3][1].item() == 3
    with pytest.raises(kiln.Error):
        kd.TensorDataset(kiln.ones(3), kiln.ones(4))
    cat = kd.ConcatDataset([ds, ds])
    tcat = td.ConcatDataset([tensor_ds(torch, td)] * 2)
    assert len(cat) == len(tcat) == 20 and cat.cumulative_sizes == tcat.cumulative_sizes
    assert cat[13][1].item() == tcat[13][1].item() and cat[-1][1].item() == tcat[-1][1].item()
    assert len(ds + ds) == 20
    sub = kd.Subset(ds, [4, 2])
    assert len(sub) == 2 and sub[1][1].item() == 2
    for lengths in ([3, 7], [0.3, 0.7], [0.33, 0.33, 0.34], [0.5, 0.5]):
        parts = kd.random_split(ds, lengths)
        tparts = td.random_split(tensor_ds(torch, td), lengths)
        assert [len(p) for p in parts] == [len(p) for p in tparts]
        idx = sorted(i for p in parts for i in p.indices)
        assert idx == list(range(10))
    g1 = kd.random_split(ds, [5, 5], generator=kiln.Generator().manual_seed(1))
    g2 = kd.random_split(ds, [5, 5], generator=kiln.Generator().manual_seed(1))
    assert g1[0].indices == g2[0].indices
    with pytest.raises(kiln.Error):
        kd.random_split(ds, [3, 3])


def test_training_loop_over_a_loader():
    x = kiln.randn(64, 3)
    y = x @ kiln.tensor([[1.0], [-2.0], [0.5]]) + 0.1
    w = kiln.zeros(3, 1, requires_grad=True)
    b = kiln.zeros(1, requires_grad=True)
    opt = kiln.optim.SGD([w, b], lr=0.1)
    for _ in range(30):
        for xb, yb in kd.DataLoader(kd.TensorDataset(x, y), batch_size=16, shuffle=True):
            opt.zero_grad()
            ((xb @ w + b - yb) ** 2).mean().backward()
            opt.step()
    np.testing.assert_allclose(w.detach().numpy().ravel(), [1.0, -2.0, 0.5], atol=1e-2)


def test_torch_port_example_runs(tmp_path):
    import os
    import subprocess
    import sys
    root = os.environ.get("KILN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
    script = os.path.join(root, "examples", "python", "torch_port_regression.py")
    r = subprocess.run([sys.executable, script, "--epochs", "10", "--checkpoint",
                        str(tmp_path / "c.pt")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "epoch  10" in r.stdout and "restored from" in r.stdout


@pytest.mark.parametrize("n,drop_last", [(10, False), (10, True), (11, False), (11, True)])
def test_distributed_sampler_shares(n, drop_last):
    ds = list(range(n))
    for shuffle in (False, True):
        parts = [list(kd.DistributedSampler(ds, num_replicas=3, rank=r, shuffle=shuffle,
                                            drop_last=drop_last)) for r in range(3)]
        tparts = [list(td.DistributedSampler(ds, num_replicas=3, rank=r, shuffle=shuffle,
                                             drop_last=drop_last)) for r in range(3)]
        assert [len(p) for p in parts] == [len(p) for p in tparts]
        if not shuffle:
            assert parts == tparts
        assert set(i for p in parts for i in p) <= set(ds)
        if not drop_last:
            assert set(i for p in parts for i in p) == set(ds)
    s = kd.DistributedSampler(ds, num_replicas=2, rank=0)
    first = list(s)
    s.set_epoch(1)
    assert list(s) != first or n < 3
    with pytest.raises(kiln.Error):
        kd.DistributedSampler(ds)


def test_subsets_of_a_tensor_dataset_batch_like_samples():
    ds = tensor_ds(kiln, kd)
    inner = kd.Subset(ds, [9, 7, 5, 3, 1, 0])
    outer = kd.Subset(inner, [5, 0, 2, 3])
    got = [as_lists(b) for b in kd.DataLoader(outer, batch_size=3)]
    by_sample = [as_lists(kd.default_collate([outer[i] for i in range(j, min(j + 3, 4))]))
                 for j in (0, 3)]
    assert got == by_sample
    assert [y for _, ys in kd.DataLoader(outer, batch_size=4) for y in ys.tolist()] == [0, 9, 5, 3]
