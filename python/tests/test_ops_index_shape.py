# Indexing and shape ops with torch's names, against torch 1.13 on random inputs: values and
# gradients, duplicate indices, negative dims and indices, empty tensors, int32/int64 indices,
# bool masks, and the errors for out-of-range indices.
import numpy as np
import pytest
import torch

import kiln

R = np.random.RandomState(21)


def k(a, requires_grad=False):
    """A kiln tensor of the torch tensor's data and dtype."""
    a = a.detach().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
    return kiln.tensor(a, requires_grad=requires_grad)


def close(kt, tt, tol=1e-10):
    if isinstance(tt, (tuple, list)):
        assert len(kt) == len(tt)
        for a, b in zip(kt, tt):
            close(a, b, tol)
        return
    kn, tn = kt.numpy(), tt.detach().numpy()
    assert kn.shape == tn.shape, (kn.shape, tn.shape)
    assert kn.dtype == tn.dtype, (kn.dtype, tn.dtype)
    np.testing.assert_allclose(kn, tn, rtol=tol, atol=tol)


def both(shape, requires_grad=True):
    """The same random float64 data as a kiln and a torch tensor requiring grad."""
    a = R.randn(*shape)
    return (kiln.tensor(a, requires_grad=requires_grad),
            torch.tensor(a, requires_grad=requires_grad))


def grads_agree(kf, tf, kins, tins, tol=1e-10):
    """Forward values and the gradients of sum(out * w) for a random w agree."""
    ko, to = kf(*kins), tf(*tins)
    close(ko, to, tol)
    w = R.randn(*to.shape)
    (to * torch.tensor(w)).sum().backward()
    (ko * kiln.tensor(w)).sum().backward()
    for a, b in zip(kins, tins):
        if isinstance(b, torch.Tensor) and b.requires_grad:
            close(a.grad, b.grad, tol)


def idx(a, dtype=torch.int64):
    return torch.tensor(a, dtype=dtype)


# ---- scatter family ----------------------------------------------------------------------------

@pytest.mark.parametrize("itype", [torch.int64, torch.int32])
def test_scatter_src_and_value_match_torch(itype):
    ka, ta = both((3, 5))
    ks, ts = both((2, 5))
    i = torch.tensor([[0, 1, 2, 0, 1], [2, 0, 1, 1, 0]])  # distinct rows per column
    grads_agree(lambda a, s: kiln.scatter(a, 0, k(i.to(itype)), s),
                lambda a, s: torch.scatter(a, 0, i, s), [ka, ks], [ta, ts])
    ka, ta = both((3, 5))
    grads_agree(lambda a: a.scatter(-1, k(idx([[4, 0], [1, 1], [2, 3]], itype)), value=2.5),
                lambda a: a.scatter(-1, idx([[4, 0], [1, 1], [2, 3]]), 2.5), [ka], [ta])
    # a number as src is the value form; reduce='add' / 'multiply' as torch 1.13
    a = R.randn(3, 4)
    s = R.randn(3, 4)
    i = R.randint(0, 4, (3, 4))
    for red in ("add", "multiply"):
        close(k(a).scatter(1, k(i), k(s), reduce=red),
              torch.tensor(a).scatter(1, torch.tensor(i), torch.tensor(s), reduce=red))
        close(k(a).scatter(1, k(i), 1.5, reduce=red),
              torch.tensor(a).scatter(1, torch.tensor(i), 1.5, reduce=red))
    # integer and bool inputs
    x = torch.arange(12).reshape(3, 4)
    close(k(x).scatter(0, k(idx([[2, 1, 0, 2]])), k(idx([[7, 8, 9, 10]]))),
          x.scatter(0, idx([[2, 1, 0, 2]]), idx([[7, 8, 9, 10]])))
    b = torch.tensor([True, False, False])
    close(k(b).scatter(0, k(idx([2])), k(torch.tensor([True]))),
          b.scatter(0, idx([2]), torch.tensor([True])))


def test_scatter_in_place_and_errors():
    a = R.randn(3, 4)
    x = k(a)
    y = x.scatter_(1, k(idx([[0], [3], [1]])), 9.0)
    ref = torch.tensor(a).scatter_(1, idx([[0], [3], [1]]), 9.0)
    close(x, ref)
    close(y, ref)
    with pytest.raises(kiln.Error, match=r"\[scatter\] index 4 is out of range .* size 4"):
        kiln.scatter(k(a), 1, k(idx([[4]])), 1.0)
    with pytest.raises(kiln.Error, match=r"\[scatter\] index -1 is out of range"):
        kiln.scatter(k(a), 0, k(idx([[-1]])), 1.0)
    with pytest.raises(kiln.Error, match=r"\[scatter\].*dtype"):
        kiln.scatter(k(a), 0, k(idx([[0]])), k(np.array([[1]])))
    with pytest.raises(kiln.Error, match=r"\[scatter\].*reduce"):
        kiln.scatter(k(a), 0, k(idx([[0]])), 1.0, reduce="max")


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_matches_torch(reduce, include_self):
    ka, ta = both((4, 3))
    ks, ts = both((5, 3))
    i = torch.tensor(R.randint(0, 4, (5, 3)))  # repeats on purpose
    kf = lambda a, s: kiln.scatter_reduce(a, 0, k(i), s, reduce, include_self=include_self)
    tf = lambda a, s: torch.scatter_reduce(a, 0, i, s, reduce, include_self=include_self)
    if reduce == "prod":
        close(kf(ka, ks), tf(ta, ts))
        with pytest.raises(kiln.Error, match="prod"):
            kf(ka, ks).sum().backward()
    else:
        grads_agree(kf, tf, [ka, ks], [ta, ts])
    # index smaller than src (only its extent is read), along the last dim; torch 1.13's
    # backward refuses this case (a gradient of the index's shape for src), so the gradient is
    # compared with torch's on src cropped to the index's extent
    ka, ta = both((3, 4))
    ks, ts = both((3, 6))
    i = torch.tensor(R.randint(0, 4, (3, 2)))
    ko = ka.scatter_reduce(-1, k(i.int()), ks, reduce, include_self=include_self)
    close(ko, ta.scatter_reduce(-1, i, ts, reduce, include_self=include_self))
    if reduce != "prod":
        ko.sum().backward()
        tc = ts.detach()[:, :2].clone().requires_grad_()
        ta.scatter_reduce(-1, i, tc, reduce, include_self=include_self).sum().backward()
        close(ka.grad, ta.grad)
        close(kiln.narrow(ks.grad, 1, 0, 2), tc.grad)
        assert not ks.grad.numpy()[:, 2:].any()


def test_scatter_reduce_ties_share_the_gradient_and_integer_means_floor():
    a = torch.tensor([1.0, 5.0, 2.0], requires_grad=True)
    s = torch.tensor([5.0, 5.0, 0.0], requires_grad=True)
    i = idx([1, 1, 0])
    ka, ks = k(a, True), k(s, True)
    grads_agree(lambda x, y: x.scatter_reduce(0, k(i), y, "amax"),
                lambda x, y: x.scatter_reduce(0, i, y, "amax"), [ka, ks], [a, s])
    x = torch.tensor([1, 2, 3])
    for inc in (True, False):
        close(k(x).scatter_reduce(0, k(idx([0, 0, 1])), k(idx([4, 5, 7])), "mean",
                                  include_self=inc),
              x.scatter_reduce(0, idx([0, 0, 1]), idx([4, 5, 7]), "mean", include_self=inc))
    y = k(np.zeros(3))
    y.scatter_reduce_(0, k(idx([2, 2])), k(np.array([1.0, 3.0])), "sum")
    assert y.tolist() == [0.0, 0.0, 4.0]


# ---- index_put / index_fill / index_copy / take / take_along_dim / masked_scatter ----------------

@pytest.mark.parametrize("itype", [torch.int64, torch.int32])
def test_index_put_matches_torch(itype):
    ka, ta = both((4, 3, 2))
    kv, tv = both((3, 2))
    i0 = idx([3, -2, 0], itype)  # negative counts from the end
    grads_agree(lambda a, v: kiln.index_put(a, (k(i0),), v),
                lambda a, v: torch.index_put(a, (i0.long(),), v), [ka, kv], [ta, tv])
    # two index tensors broadcast together, values broadcast, accumulate with repeats
    ka, ta = both((4, 5))
    kv, tv = both((1,))
    i0 = idx([[0], [3], [3]], itype)
    i1 = idx([1, 4, 1, 1], itype)
    grads_agree(lambda a, v: a.index_put((k(i0), k(i1)), v, accumulate=True),
                lambda a, v: a.index_put((i0.long(), i1.long()), v, accumulate=True),
                [ka, kv], [ta, tv])
    # a bool mask as the index
    a = R.randn(3, 4)
    m = torch.tensor(a > 0)
    close(k(a).index_put((k(m),), k(np.array(7.0))),
          torch.tensor(a).index_put((m,), torch.tensor(7.0)))
    # in place, a Python number as the values
    x = k(a)
    x.index_put_((k(idx([1, 2])),), 0.5)
    close(x, torch.tensor(a).index_put_((idx([1, 2]),), torch.tensor(0.5, dtype=torch.float64)))
    # empty index
    close(kiln.index_put(k(a), (k(idx([])),), k(np.zeros((0, 4)))),
          torch.index_put(torch.tensor(a), (idx([]),), torch.zeros(0, 4, dtype=torch.float64)))


def test_index_put_errors_name_the_op_index_and_size():
    a = k(np.zeros((3, 4)))
    with pytest.raises(kiln.Error, match=r"\[index_put\] index 3 is out of range for dim 0 of size 3"):
        kiln.index_put(a, (k(idx([0, 3])),), k(np.zeros(4)))
    with pytest.raises(kiln.Error, match=r"\[index_put\] index -5 is out of range for dim 1"):
        kiln.index_put(a, (k(idx([0])), k(idx([-5]))), k(np.zeros(1)))
    with pytest.raises(kiln.Error, match=r"\[index_put\].*broadcast"):
        kiln.index_put(a, (k(idx([0, 1])),), k(np.zeros(3)))
    with pytest.raises(kiln.Error, match=r"\[index_put\].*int64 or int32"):
        kiln.index_put(a, (k(np.array([0.0])),), k(np.zeros(4)))


def test_index_fill_and_index_copy_match_torch():
    ka, ta = both((3, 4))
    grads_agree(lambda a: a.index_fill(1, k(idx([0, -1, 0])), -2.0),
                lambda a: a.index_fill(1, idx([0, -1, 0]), -2.0), [ka], [ta])
    ka, ta = both((3, 4))
    grads_agree(lambda a: kiln.index_fill(a, -2, k(idx([2], torch.int32)), 1.0),
                lambda a: torch.index_fill(a, -2, idx([2]), 1.0), [ka], [ta])
    ka, ta = both((4, 3))
    ks, ts = both((2, 3))
    grads_agree(lambda a, s: a.index_copy(0, k(idx([3, 1])), s),
                lambda a, s: a.index_copy(0, idx([3, 1]), s), [ka, ks], [ta, ts])
    ka, ta = both((2, 3, 4))
    ks, ts = both((2, 3, 2))
    grads_agree(lambda a, s: kiln.index_copy(a, -1, k(idx([0, 2], torch.int32)), s),
                lambda a, s: torch.index_copy(a, -1, idx([0, 2]), s), [ka, ks], [ta, ts])
    x = k(np.zeros((2, 2)))
    x.index_fill_(0, k(idx([1])), 3.0)
    x.index_copy_(1, k(idx([0])), k(np.ones((2, 1))))
    assert x.tolist() == [[1.0, 0.0], [1.0, 3.0]]
    with pytest.raises(kiln.Error, match=r"\[index_copy\] index -1 is out of range"):
        kiln.index_copy(k(np.zeros(3)), 0, k(idx([-1])), k(np.zeros(1)))
    with pytest.raises(kiln.Error, match=r"\[index_fill\] index 5 is out of range for dim 0 of size 3"):
        kiln.index_fill(k(np.zeros(3)), 0, k(idx([5])), 1.0)


def test_take_and_take_along_dim_match_torch():
    ka, ta = both((3, 4))
    i = idx([[0, 11, -1], [5, 5, 2]])
    grads_agree(lambda a: kiln.take(a, k(i)), lambda a: torch.take(a, i), [ka], [ta])
    ka, ta = both((3, 4))
    grads_agree(lambda a: a.take(k(i.int())), lambda a: a.take(i), [ka], [ta])
    with pytest.raises(kiln.Error, match=r"\[take\] index 12 is out of range .* size 12"):
        kiln.take(k(np.zeros((3, 4))), k(idx([12])))
    # along a dim, with broadcasting (indices [3, 1] against input [1, 4]); repeats add up
    ka, ta = both((3, 4))
    i = torch.tensor(R.randint(0, 3, (5, 4)))
    grads_agree(lambda a: kiln.take_along_dim(a, k(i), 0),
                lambda a: torch.take_along_dim(a, i, 0), [ka], [ta])
    ka, ta = both((1, 4))
    i = torch.tensor(R.randint(0, 4, (3, 2)))
    grads_agree(lambda a: a.take_along_dim(k(i), dim=-1),
                lambda a: a.take_along_dim(i, dim=-1), [ka], [ta])
    ka, ta = both((2, 3))
    i = idx([5, 0, 5])
    grads_agree(lambda a: kiln.take_along_dim(a, k(i)), lambda a: torch.take_along_dim(a, i),
                [ka], [ta])
    # argsort's indices, as the docs use it
    a = R.randn(4, 5)
    close(kiln.take_along_dim(k(a), kiln.argsort(k(a), 1), 1),
          torch.take_along_dim(torch.tensor(a), torch.argsort(torch.tensor(a), 1), 1))


def test_masked_scatter_matches_torch():
    ka, ta = both((3, 4))
    ks, ts = both((13,))
    m = torch.tensor(R.rand(3, 4) > 0.5)
    grads_agree(lambda a, s: kiln.masked_scatter(a, k(m), s),
                lambda a, s: torch.masked_scatter(a, m, s), [ka, ks], [ta, ts])
    ka, ta = both((3, 4))
    ks, ts = both((3, 5))
    mrow = torch.tensor([True, False, True, True])  # broadcast over rows
    grads_agree(lambda a, s: a.masked_scatter(k(mrow), s),
                lambda a, s: a.masked_scatter(mrow, s), [ka, ks], [ta, ts])
    x = k(np.zeros(3))
    x.masked_scatter_(k(torch.tensor([True, False, True])), k(np.array([1.0, 2.0])))
    assert x.tolist() == [1.0, 0.0, 2.0]
    with pytest.raises(kiln.Error, match=r"\[masked_scatter\] source has 1 elements"):
        kiln.masked_scatter(k(np.zeros(3)), k(torch.tensor([True, False, True])),
                            k(np.array([1.0])))


def test_gather_exists_with_int32_and_its_gradient():
    ka, ta = both((3, 4))
    i = torch.tensor(R.randint(0, 4, (3, 6)))
    grads_agree(lambda a: a.gather(1, k(i.int())), lambda a: a.gather(1, i), [ka], [ta])


# ---- shape helpers -------------------------------------------------------------------------------

def test_unbind_movedim_swapaxes_tile_narrow():
    ka, ta = both((2, 3, 4))
    for dim in (0, 1, -1):
        kr, tr = kiln.unbind(ka, dim), torch.unbind(ta, dim)
        close(kr, tr)
    grads_agree(lambda a: kiln.stack([p * (i + 1) for i, p in enumerate(a.unbind(1))], 0),
                lambda a: torch.stack([p * (i + 1) for i, p in enumerate(a.unbind(1))], 0),
                [ka], [ta])
    ka, ta = both((2, 3, 4, 5))
    for s, d in [(0, -1), ((0, 1), (2, 3)), ([-1, 0], [0, 1]), (2, 2)]:
        close(kiln.movedim(ka, s, d), torch.movedim(ta, s, d))
        close(ka.moveaxis(s, d), ta.moveaxis(s, d))
    grads_agree(lambda a: a.movedim((0, 3), (2, 0)), lambda a: a.movedim((0, 3), (2, 0)), [ka],
                [ta])
    close(kiln.swapaxes(ka, 0, -1), torch.swapaxes(ta, 0, -1))
    close(ka.swapdims(1, 2), ta.swapdims(1, 2))
    ka, ta = both((2, 3))
    for reps in ((2,), (2, 1), (1, 2, 3), (0, 2)):
        close(kiln.tile(ka, reps), torch.tile(ta, reps))
    close(ka.tile(2, 2), ta.tile(2, 2))
    grads_agree(lambda a: a.tile((3, 1, 2)), lambda a: a.tile((3, 1, 2)), [ka], [ta])
    ka, ta = both((4, 5))
    close(kiln.narrow(ka, 1, -3, 2), torch.narrow(ta, 1, -3, 2))
    grads_agree(lambda a: kiln.narrow(a, 0, 1, 2), lambda a: torch.narrow(a, 0, 1, 2), [ka], [ta])


def test_repeat_interleave_matches_torch():
    ka, ta = both((2, 3))
    grads_agree(lambda a: kiln.repeat_interleave(a, 2), lambda a: torch.repeat_interleave(a, 2),
                [ka], [ta])
    ka, ta = both((2, 3))
    grads_agree(lambda a: a.repeat_interleave(3, dim=-1), lambda a: a.repeat_interleave(3, dim=-1),
                [ka], [ta])
    ka, ta = both((3, 2))
    r = idx([1, 0, 3])
    grads_agree(lambda a: a.repeat_interleave(k(r), dim=0),
                lambda a: a.repeat_interleave(r, dim=0), [ka], [ta])
    close(kiln.repeat_interleave(k(r)), torch.repeat_interleave(r))
    close(kiln.repeat_interleave(k(idx([2, 2]).int())), torch.repeat_interleave(idx([2, 2]).int()))
    close(kiln.repeat_interleave(k(idx([[1, 2]])), k(idx([2]))),
          torch.repeat_interleave(idx([[1, 2]]), idx([2])))
    with pytest.raises(kiln.Error, match=r"\[repeat_interleave\]"):
        kiln.repeat_interleave(k(np.zeros(3)), k(idx([1, 2])), dim=0)


def test_flips_rot90_and_splits():
    ka, ta = both((3, 4))
    close(kiln.fliplr(ka), torch.fliplr(ta))
    close(ka.flipud(), ta.flipud())
    for kk in range(-5, 6):
        close(kiln.rot90(ka, kk), torch.rot90(ta, kk))
    kb, tb = both((2, 3, 4))
    close(kb.rot90(1, (2, 0)), tb.rot90(1, (2, 0)))
    grads_agree(lambda a: kiln.rot90(a, 3, (0, 1)), lambda a: torch.rot90(a, 3, (0, 1)), [ka], [ta])
    kc, tc = both((7, 6, 4))
    for arg in (3, 7, 1, [2, 5], [0, 3, 3, 10], [-2]):
        close(kiln.tensor_split(kc, arg), torch.tensor_split(tc, arg))
        close(kc.tensor_split(arg, dim=1), tc.tensor_split(arg, dim=1))
    close(kiln.hsplit(kc, 2), torch.hsplit(tc, 2))
    close(kiln.hsplit(kiln.tensor(np.arange(6.0)), [2]), torch.hsplit(torch.arange(6.0).double(), [2]))
    close(kc.vsplit([1, 4]), tc.vsplit([1, 4]))
    close(kiln.dsplit(kc, 4), torch.dsplit(tc, 4))
    with pytest.raises(kiln.Error, match=r"\[hsplit\]"):
        kiln.hsplit(kc, 4)
    close(kiln.split(kc, [2, 5], 0), torch.split(tc, [2, 5], 0))
    close(kc.chunk(3, -1), tc.chunk(3, -1))


def test_atleast_broadcast_stacks():
    for shape in ((), (3,), (2, 3), (2, 3, 4)):
        ka, ta = both(shape, requires_grad=False)
        close(kiln.atleast_1d(ka), torch.atleast_1d(ta))
        close(kiln.atleast_2d(ka), torch.atleast_2d(ta))
        close(kiln.atleast_3d(ka), torch.atleast_3d(ta))
    k1, t1 = both((3,), False)
    k2, t2 = both((2, 3), False)
    close(kiln.atleast_2d(k1, k2), torch.atleast_2d(t1, t2))
    close(kiln.broadcast_to(k1, (4, 3)), torch.broadcast_to(t1, (4, 3)))
    close(k1.broadcast_to((2, 3)), t1.broadcast_to((2, 3)))
    kc, tc = both((4, 1, 1), False)
    close(kiln.broadcast_tensors(k1, k2, kc), torch.broadcast_tensors(t1, t2, tc))
    assert kiln.broadcast_shapes((2, 1), (3,)) == tuple(torch.broadcast_shapes((2, 1), (3,)))
    a, b = both((2, 3))
    c, d = both((2, 3))
    grads_agree(lambda x, y: kiln.hstack([x, y]), lambda x, y: torch.hstack([x, y]), [a, c], [b, d])
    for f in ("hstack", "vstack", "dstack", "column_stack"):
        close(getattr(kiln, f)([k1, k1]), getattr(torch, f)([t1, t1]))
        close(getattr(kiln, f)([k2, k2]), getattr(torch, f)([t2, t2]))
    close(kiln.column_stack([k1, k2.t()]), torch.column_stack([t1, t2.t()]))


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_matches_torch(indexing):
    kx, tx = both((3,))
    ky, ty = both((4,))
    kz, tz = both((2,))
    close(kiln.meshgrid(kx, ky, kz, indexing=indexing),
          torch.meshgrid(tx, ty, tz, indexing=indexing))
    close(kiln.meshgrid([kx, ky], indexing=indexing), torch.meshgrid([tx, ty], indexing=indexing))
    grads_agree(lambda x, y: kiln.meshgrid(x, y, indexing=indexing)[0] * 2
                + kiln.meshgrid(x, y, indexing=indexing)[1],
                lambda x, y: torch.meshgrid(x, y, indexing=indexing)[0] * 2
                + torch.meshgrid(x, y, indexing=indexing)[1], [kx, ky], [tx, ty])


def test_tri_indices_nonzero_forms_where():
    for r, c, off in [(3, 3, 0), (4, 3, 1), (3, 5, -1), (0, 2, 0), (3, 4, 10), (3, 4, -10)]:
        close(kiln.triu_indices(r, c, off), torch.triu_indices(r, c, off))
        close(kiln.tril_indices(r, c, off), torch.tril_indices(r, c, off))
    close(kiln.tril_indices(3, 3, dtype=kiln.int32), torch.tril_indices(3, 3, dtype=torch.int32))
    a = R.randn(3, 4) * (R.rand(3, 4) > 0.5)
    close(kiln.nonzero(k(a), as_tuple=True), torch.nonzero(torch.tensor(a), as_tuple=True))
    close(k(a).nonzero(as_tuple=True), torch.tensor(a).nonzero(as_tuple=True))
    close(kiln.argwhere(k(a)), torch.argwhere(torch.tensor(a)))
    close(k(a).argwhere(), torch.tensor(a).argwhere())
    close(kiln.where(k(a > 0)), torch.where(torch.tensor(a > 0)))
    close(kiln.nonzero(k(np.zeros((0, 3))), as_tuple=True),
          torch.nonzero(torch.zeros(0, 3), as_tuple=True))
    close(kiln.where(k(np.array(True))), torch.where(torch.tensor(True)))
    # the three-argument where still works
    close(kiln.where(k(a > 0), k(a), 0.0), torch.where(torch.tensor(a > 0), torch.tensor(a), 0.0))


# ---- unique / bucketize / searchsorted -------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.int64, np.float64, np.int32])
def test_unique_matches_torch(dtype):
    a = R.randint(-3, 4, (4, 5)).astype(dtype)
    ta = torch.tensor(a)
    for inv in (False, True):
        for cnt in (False, True):
            close(kiln.unique(k(a), return_inverse=inv, return_counts=cnt),
                  torch.unique(ta, return_inverse=inv, return_counts=cnt))
            close(k(a).unique_consecutive(return_inverse=inv, return_counts=cnt),
                  ta.unique_consecutive(return_inverse=inv, return_counts=cnt))
    # sorted=False: torch's order is unspecified; the set and the inverse mapping agree
    v, i = kiln.unique(k(a), sorted=False, return_inverse=True)
    assert sorted(v.tolist()) == sorted(set(a.ravel().tolist()))
    np.testing.assert_array_equal(v.numpy()[i.numpy()], a)
    close(kiln.unique(k(np.zeros((0,), dtype))), torch.unique(torch.tensor(np.zeros((0,), dtype))))
    with pytest.raises(ValueError, match=r"\[unique\] dim"):
        kiln.unique(k(a), dim=0)


def test_bucketize_and_searchsorted_match_torch():
    b = np.sort(R.randn(6))
    b[2] = b[1]
    x = R.randn(3, 4)
    x[0, 0] = b[1]
    for right in (False, True):
        for i32 in (False, True):
            close(kiln.bucketize(k(x), k(b), right=right, out_int32=i32),
                  torch.bucketize(torch.tensor(x), torch.tensor(b), right=right, out_int32=i32))
            close(kiln.searchsorted(k(b), k(x), right=right, out_int32=i32),
                  torch.searchsorted(torch.tensor(b), torch.tensor(x), right=right,
                                     out_int32=i32))
    close(kiln.searchsorted(k(b), k(x), side="right"),
          torch.searchsorted(torch.tensor(b), torch.tensor(x), side="right"))
    close(kiln.bucketize(2.0 * b[3], k(b)), torch.bucketize(2.0 * b[3], torch.tensor(b)))
    # batched rows, a sorter, integer data
    s = np.sort(R.randn(3, 5), axis=1)
    v = R.randn(3, 2)
    close(kiln.searchsorted(k(s), k(v)), torch.searchsorted(torch.tensor(s), torch.tensor(v)))
    u = R.randn(7)
    order = np.argsort(u)
    close(kiln.searchsorted(k(u), k(x[0]), sorter=k(order)),
          torch.searchsorted(torch.tensor(u), torch.tensor(x[0]), sorter=torch.tensor(order)))
    close(kiln.searchsorted(k(np.array([1, 3, 3, 7])), k(np.array([3, 0, 9]))),
          torch.searchsorted(torch.tensor([1, 3, 3, 7]), torch.tensor([3, 0, 9])))
    close(kiln.bucketize(k(np.zeros(0)), k(b)), torch.bucketize(torch.zeros(0).double(), torch.tensor(b)))
    with pytest.raises(kiln.Error, match=r"\[bucketize\] boundaries must be 1-D"):
        kiln.bucketize(k(x), k(s))
    with pytest.raises(kiln.Error, match=r"\[searchsorted\]"):
        kiln.searchsorted(k(s), k(np.zeros((2, 2))))


# ---- factories ---------------------------------------------------------------------------------

def test_factories_match_torch():
    assert kiln.tensor(3.0).shape == tuple(torch.tensor(3.0).shape) == ()
    assert kiln.tensor(3).dtype == kiln.int64 and kiln.tensor(3).shape == ()
    close(kiln.logspace(0, 2, 5), torch.logspace(0, 2, 5), 1e-5)
    close(kiln.logspace(-1, 1, 4, base=2.0, dtype=kiln.float64),
          torch.logspace(-1, 1, 4, base=2.0, dtype=torch.float64))
    close(kiln.logspace(0, 1, 1), torch.logspace(0, 1, 1))
    a = k(np.zeros((2, 3)))
    assert kiln.zeros_like(a).shape == kiln.ones_like(a).shape == kiln.empty_like(a).shape == (2, 3)
    assert kiln.full_like(a, 2.0).tolist() == [[2.0] * 3] * 2
    close(kiln.arange(5), torch.arange(5))
    close(kiln.linspace(0, 1, 5), torch.linspace(0, 1, 5))
    close(kiln.eye(3, 2), torch.eye(3, 2))


# ---- graph and jit modes -----------------------------------------------------------------------

def test_new_ops_agree_under_jit():
    a = R.randn(4, 3)
    s = R.randn(4, 3)
    i = R.randint(0, 4, (4, 3))

    def f(x, y, ix):
        r = kiln.scatter_reduce(x, 0, ix, y, "amax", include_self=False)
        r = r + kiln.index_put(x, (ix[:, 0],), y[0] * 2.0, accumulate=True)
        r = r + kiln.take_along_dim(x, ix, 0) + kiln.movedim(kiln.tile(x, (1, 1)), 0, 1).t()
        return r + kiln.repeat_interleave(x, 1, dim=0)

    g = kiln.jit(f)
    eager = f(k(a), k(s), k(i))
    for _ in range(2):
        np.testing.assert_allclose(g(k(a), k(s), k(i)).numpy(), eager.numpy(), atol=1e-12)
