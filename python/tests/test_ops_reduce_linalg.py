# Reductions (prod, cumprod, cummax/cummin, logcumsumexp, median, mode, any/all, amax/amin,
# aminmax, std/var with unbiased/correction, std_mean/var_mean, count_nonzero, nansum/nanmean),
# products and diagonals (mm ... cross) and kiln.linalg, each compared with torch 1.13 on random
# inputs: forward values and dtypes, gradients, batches, negative dims, keepdim, edge cases and
# error messages.
import math

import numpy as np
import pytest

import kiln

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(1234)


def arr(*shape, dtype=np.float64, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(dtype)


def pair(a, requires_grad=False):
    """The same data as a kiln and a torch tensor."""
    k = kiln.tensor(a.copy(), requires_grad=requires_grad)
    t = torch.tensor(a.copy(), requires_grad=requires_grad)
    return k, t


def close(k, t, rtol=1e-6, atol=1e-8):
    kv = np.asarray(k.numpy())
    tv = t.detach().numpy()
    assert kv.shape == tv.shape, (kv.shape, tv.shape)
    np.testing.assert_allclose(kv, tv, rtol=rtol, atol=atol, equal_nan=True)


def check_grad(kf, tf, *arrays, rtol=1e-6, atol=1e-8, weight=True):
    """kf / tf map tensors to one output; compares the output and the gradient of
    sum(output * w) for a random w of the output's shape."""
    ks, ts = zip(*[pair(a, True) for a in arrays])
    ko, to = kf(*ks), tf(*ts)
    close(ko, to, rtol, atol)
    w = arr(*to.shape) if weight else np.ones(to.shape)
    (ko * kiln.tensor(w)).sum().backward()
    (to * torch.tensor(w)).sum().backward()
    for k, t in zip(ks, ts):
        close(k.grad, t.grad, rtol, atol)


# ---- reductions --------------------------------------------------------------------------------

@pytest.mark.parametrize("dim,keepdim", [(None, False), (0, False), (1, True), (-1, False)])
def test_prod(dim, keepdim):
    a = arr(3, 4, 5)
    if dim is None:
        check_grad(lambda x: kiln.prod(x), lambda x: torch.prod(x), a)
    else:
        check_grad(lambda x: x.prod(dim, keepdim=keepdim), lambda x: x.prod(dim, keepdim=keepdim), a)


def test_prod_zeros_gradient():
    a = np.array([[0.5, 0.0, -1.5, 2.0], [0.0, 1.25, 0.0, -0.75], [1.1, -0.9, 1.3, 0.7]])
    check_grad(lambda x: kiln.prod(x, 1), lambda x: torch.prod(x, 1), a)
    check_grad(lambda x: kiln.prod(x), lambda x: torch.prod(x), a)
    b = np.array([0.0, 2.0, 3.0])
    check_grad(lambda x: kiln.prod(x), lambda x: torch.prod(x), b)


def test_prod_dtypes_and_empty():
    k = kiln.tensor(np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32))
    r = kiln.prod(k, 1)
    assert r.dtype == kiln.int64
    assert r.tolist() == [6, 120]
    assert kiln.prod(kiln.tensor([True, True, False])).item() == 0
    e = kiln.zeros(0, 3)
    close(kiln.prod(e, 0), torch.prod(torch.zeros(0, 3), 0))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumprod(dim):
    a = arr(3, 4, 5)
    check_grad(lambda x: kiln.cumprod(x, dim), lambda x: torch.cumprod(x, dim), a)


def test_cumprod_zeros_gradient():
    a = np.array([[0.5, 0.0, -1.5, 2.0, 0.0, 1.25], [0.0, -0.75, 1.1, -0.9, 1.3, 0.7]])
    check_grad(lambda x: x.cumprod(1), lambda x: x.cumprod(1), a)
    assert kiln.cumprod(kiln.tensor([1, 2, 3]), 0).tolist() == [1, 2, 6]


@pytest.mark.parametrize("name", ["cummax", "cummin"])
def test_cummax_cummin(name):
    a = arr(4, 5)
    check_grad(lambda x: getattr(kiln, name)(x, 1).values,
               lambda x: getattr(torch, name)(x, 1).values, a)
    ties = np.round(arr(3, 6) * 1.5)
    k, t = pair(ties)
    kr, tr = getattr(k, name)(0), getattr(t, name)(0)
    close(kr.values, tr.values)
    assert kr.indices.tolist() == tr.indices.tolist()
    assert type(kr).__name__ == name and kr[0] is kr.values


def test_logcumsumexp():
    a = arr(3, 6, scale=3.0)
    check_grad(lambda x: kiln.logcumsumexp(x, 1), lambda x: torch.logcumsumexp(x, 1), a)
    check_grad(lambda x: x.logcumsumexp(0), lambda x: x.logcumsumexp(0), a)
    big = arr(2, 5) * 800
    close(kiln.logcumsumexp(kiln.tensor(big), -1), torch.logcumsumexp(torch.tensor(big), -1))


def test_median():
    a = arr(5, 7)
    check_grad(lambda x: kiln.median(x), lambda x: torch.median(x), a)
    even = arr(4, 6)
    for dim, keepdim in [(0, False), (1, True), (-1, False)]:
        k, t = pair(even)
        kr, tr = kiln.median(k, dim, keepdim), torch.median(t, dim, keepdim)
        close(kr.values, tr.values)
        assert kr.indices.tolist() == tr.indices.tolist()
    check_grad(lambda x: x.median(1).values, lambda x: x.median(1).values, even)
    # Ties: the value is the lower median; the index points at an element of that value.
    ties = np.round(arr(3, 8))
    k, t = pair(ties)
    kr, tr = k.median(1), t.median(1)
    close(kr.values, tr.values)
    np.testing.assert_array_equal(
        np.take_along_axis(ties, np.asarray(kr.indices.numpy())[:, None], 1)[:, 0],
        tr.values.numpy())


def test_mode():
    a = np.round(arr(6, 9))
    for dim, keepdim in [(-1, False), (0, True), (1, False)]:
        k, t = pair(a)
        kr, tr = kiln.mode(k, dim, keepdim), torch.mode(t, dim, keepdim)
        close(kr.values, tr.values)
        idx = np.asarray(kr.indices.numpy())
        vals = np.take_along_axis(a, idx if keepdim else np.expand_dims(idx, dim), dim)
        np.testing.assert_array_equal(vals.reshape(tr.values.shape), tr.values.numpy())
    distinct = arr(3, 5)
    check_grad(lambda x: x.mode().values, lambda x: x.mode().values, distinct)


def test_any_all():
    a = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [2.0, float("nan"), 3.0]])
    k, t = pair(a)
    for dim in [None, 0, 1, -1]:
        for keepdim in [False, True]:
            if dim is None and keepdim:
                continue
            kr = kiln.any(k) if dim is None else kiln.any(k, dim, keepdim=keepdim)
            tr = torch.any(t) if dim is None else torch.any(t, dim, keepdim=keepdim)
            assert kr.dtype == kiln.bool
            np.testing.assert_array_equal(kr.numpy(), tr.numpy())
            kr = k.all() if dim is None else k.all(dim, keepdim=keepdim)
            tr = t.all() if dim is None else t.all(dim, keepdim=keepdim)
            np.testing.assert_array_equal(kr.numpy(), tr.numpy())
    assert kiln.any(kiln.zeros(0)).item() is False
    assert kiln.all(kiln.zeros(0)).item() is True
    b = kiln.tensor([True, False])
    assert kiln.any(b).item() and not kiln.all(b).item()


def test_amax_amin_ties_gradient():
    a = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    check_grad(lambda x: kiln.amax(x, 1), lambda x: torch.amax(x, 1), a)
    check_grad(lambda x: x.amin((0, 1), keepdim=True), lambda x: x.amin((0, 1), keepdim=True), a)
    k, t = pair(arr(3, 4))
    r = kiln.aminmax(k)
    tr = torch.aminmax(t)
    close(r.min, tr.min)
    close(r.max, tr.max)
    r = k.aminmax(dim=1, keepdim=True)
    tr = t.aminmax(dim=1, keepdim=True)
    close(r[0], tr[0])
    close(r[1], tr[1])


def test_std_var_unbiased_correction():
    a = arr(4, 5)
    k, t = pair(a)
    close(kiln.std(k), torch.std(t))
    close(k.std(1, unbiased=False), t.std(1, unbiased=False))
    close(kiln.std(k, False), torch.std(t, False))
    close(k.var(0, keepdim=True), t.var(0, keepdim=True))
    close(kiln.var(k, dim=1, correction=0), torch.var(t, dim=1, correction=0))
    close(kiln.std(k, dim=(0, 1), correction=2), torch.std(t, dim=(0, 1), correction=2))
    check_grad(lambda x: x.std(1), lambda x: x.std(1), a)
    for fn in ["std_mean", "var_mean"]:
        ks, km = getattr(kiln, fn)(k, 1, keepdim=True)
        ts, tm = getattr(torch, fn)(t, 1, keepdim=True)
        close(ks, ts)
        close(km, tm)
        ks, km = getattr(kiln, fn)(k, unbiased=False)
        ts, tm = getattr(torch, fn)(t, unbiased=False)
        close(ks, ts)
        close(km, tm)


def test_count_nonzero_nansum_nanmean():
    a = np.array([[0.0, 1.0, float("nan")], [2.0, 0.0, -3.0]])
    k, t = pair(a)
    for dim in [None, 0, 1, (0, 1)]:
        kr = kiln.count_nonzero(k, dim)
        tr = torch.count_nonzero(t, dim)
        assert kr.dtype == kiln.int64
        np.testing.assert_array_equal(kr.numpy(), tr.numpy())
    for dim, keepdim in [(None, False), (0, False), (1, True)]:
        close(kiln.nansum(k, dim, keepdim=keepdim) if dim is not None else kiln.nansum(k),
              torch.nansum(t, dim, keepdim=keepdim) if dim is not None else torch.nansum(t))
        close(k.nanmean(dim, keepdim=keepdim) if dim is not None else k.nanmean(),
              t.nanmean(dim, keepdim=keepdim) if dim is not None else t.nanmean())
    check_grad(lambda x: kiln.nansum(x, 1), lambda x: torch.nansum(x, 1), a)
    check_grad(lambda x: kiln.nanmean(x, 0), lambda x: torch.nanmean(x, 0), a)


def test_reduction_errors():
    with pytest.raises(kiln.Error, match=r"^\[median\]"):
        kiln.median(kiln.zeros(0, dtype=kiln.int64))
    assert kiln.median(kiln.zeros(0)).isnan().item()  # an empty float tensor: NaN, as torch
    with pytest.raises(kiln.Error, match=r"^\[mode\]"):
        kiln.mode(kiln.zeros(2, 0), 1)
    with pytest.raises(kiln.Error, match=r"^\[cumprod\]"):
        kiln.cumprod(kiln.zeros(2, 3), 2)
    with pytest.raises(kiln.Error, match=r"^\[logcumsumexp\]"):
        kiln.logcumsumexp(kiln.zeros(2, 3), -3)


# ---- products and diagonals ----------------------------------------------------------------------

def test_mm_bmm_mv_and_shape_checks():
    check_grad(kiln.mm, torch.mm, arr(3, 4), arr(4, 2))
    check_grad(kiln.bmm, torch.bmm, arr(2, 3, 4), arr(2, 4, 5))
    check_grad(kiln.mv, torch.mv, arr(3, 4), arr(4))
    with pytest.raises(kiln.Error, match=r"^\[mm\] .*2-D"):
        kiln.mm(kiln.zeros(2, 3, 4), kiln.zeros(4, 2))
    with pytest.raises(kiln.Error, match=r"^\[bmm\] .*3-D"):
        kiln.bmm(kiln.zeros(3, 4), kiln.zeros(4, 2))
    with pytest.raises(kiln.Error, match=r"^\[bmm\] batch sizes differ"):
        kiln.bmm(kiln.zeros(2, 3, 4), kiln.zeros(3, 4, 2))
    with pytest.raises(kiln.Error, match=r"^\[mv\]"):
        kiln.mv(kiln.zeros(2, 3), kiln.zeros(2, 3))


def test_add_products():
    check_grad(lambda i, a, b: kiln.addmv(i, a, b, beta=0.5, alpha=2.0),
               lambda i, a, b: torch.addmv(i, a, b, beta=0.5, alpha=2.0), arr(3), arr(3, 4), arr(4))
    check_grad(lambda i, a, b: kiln.baddbmm(i, a, b, alpha=-1.0),
               lambda i, a, b: torch.baddbmm(i, a, b, alpha=-1.0), arr(1, 3, 5), arr(2, 3, 4),
               arr(2, 4, 5))
    check_grad(lambda i, a, b: i.addbmm(a, b, beta=2.0),
               lambda i, a, b: i.addbmm(a, b, beta=2.0), arr(3, 5), arr(2, 3, 4), arr(2, 4, 5))
    # beta = 0 ignores input, NaN included.
    nan_in, m, v = np.full((3,), np.nan), arr(3, 2), arr(2)
    close(kiln.addmv(kiln.tensor(nan_in), kiln.tensor(m), kiln.tensor(v), beta=0),
          torch.addmv(torch.tensor(nan_in), torch.tensor(m), torch.tensor(v), beta=0))
    with pytest.raises(kiln.Error, match=r"^\[baddbmm\] input"):
        kiln.baddbmm(kiln.zeros(2, 4, 5), kiln.zeros(2, 3, 4), kiln.zeros(2, 4, 5))


def test_dot_outer_inner_kron_tensordot():
    check_grad(kiln.dot, torch.dot, arr(5), arr(5))
    check_grad(kiln.vdot, torch.vdot, arr(5), arr(5))
    check_grad(kiln.outer, torch.outer, arr(3), arr(4))
    check_grad(kiln.inner, torch.inner, arr(2, 3, 4), arr(5, 4))
    check_grad(kiln.kron, torch.kron, arr(2, 3), arr(3, 2))
    check_grad(kiln.kron, torch.kron, arr(2, 2, 3), arr(3, 2))
    check_grad(lambda a, b: kiln.tensordot(a, b, 2), lambda a, b: torch.tensordot(a, b, 2),
               arr(2, 3, 4), arr(3, 4, 5))
    check_grad(lambda a, b: kiln.tensordot(a, b, ([0, 2], [2, 0])),
               lambda a, b: torch.tensordot(a, b, ([0, 2], [2, 0])), arr(2, 3, 4), arr(4, 5, 2))
    assert kiln.dot(kiln.tensor([1, 2, 3]), kiln.tensor([4, 5, 6])).item() == 32
    with pytest.raises(kiln.Error, match=r"^\[dot\]"):
        kiln.dot(kiln.zeros(3), kiln.zeros(4))
    with pytest.raises(kiln.Error, match=r"^\[tensordot\]"):
        kiln.tensordot(kiln.zeros(2, 3), kiln.zeros(4, 5), 1)


@pytest.mark.parametrize("offset", [0, 1, -2])
def test_diag_diagonal_diag_embed_trace(offset):
    check_grad(lambda x: kiln.diag(x, offset), lambda x: torch.diag(x, offset), arr(4))
    check_grad(lambda x: x.diag(offset), lambda x: x.diag(offset), arr(4, 5))
    check_grad(lambda x: kiln.diagonal(x, offset, 0, 2), lambda x: torch.diagonal(x, offset, 0, 2),
               arr(3, 2, 4))
    check_grad(lambda x: x.diagonal(offset, -1, -2), lambda x: x.diagonal(offset, -1, -2),
               arr(2, 4, 4))
    check_grad(lambda x: kiln.diag_embed(x, offset), lambda x: torch.diag_embed(x, offset),
               arr(2, 3))
    check_grad(lambda x: kiln.diag_embed(x, offset, 0, 2),
               lambda x: torch.diag_embed(x, offset, 0, 2), arr(2, 3))
    check_grad(kiln.trace, torch.trace, arr(3, 4))


def test_diagonal_is_a_view():
    x = kiln.tensor(arr(3, 3))
    d = x.diagonal()
    x[1, 1] = 100.0
    assert d[1].item() == 100.0


def test_cross():
    check_grad(lambda a, b: kiln.cross(a, b), lambda a, b: torch.cross(a, b), arr(3, 4), arr(3, 4))
    check_grad(lambda a, b: a.cross(b, dim=1), lambda a, b: a.cross(b, dim=1), arr(2, 3, 2),
               arr(2, 3, 2))
    with pytest.raises(kiln.Error, match=r"^\[linalg_cross\] dim"):
        kiln.cross(kiln.zeros(2, 4), kiln.zeros(2, 4), dim=1)


# ---- kiln.linalg ---------------------------------------------------------------------------------

def test_linalg_diagonal_cross():
    check_grad(kiln.linalg.diagonal, torch.linalg.diagonal, arr(2, 3, 3))
    check_grad(lambda a, b: kiln.linalg.cross(a, b), lambda a, b: torch.linalg.cross(a, b),
               arr(2, 3), arr(1, 3))
    with pytest.raises(kiln.Error, match=r"^\[linalg_cross\] dim"):
        kiln.linalg.cross(kiln.zeros(2, 4), kiln.zeros(2, 4))


def well_conditioned(*shape):
    n = shape[-1]
    return arr(*shape) + 3 * np.eye(n)


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-9), (np.float32, 1e-4)])
def test_det_slogdet_inv_solve_forward(dtype, tol):
    a = arr(3, 4, 4).astype(dtype)
    b = arr(3, 4, 2).astype(dtype)
    k, t = pair(a)
    close(kiln.linalg.det(k), torch.linalg.det(t), tol, tol)
    close(k.det(), t.det(), tol, tol)
    s, l = kiln.linalg.slogdet(k)
    ts, tl = torch.linalg.slogdet(t)
    close(s, ts)
    close(l, tl, tol, tol)
    r = kiln.linalg.slogdet(k)  # a named tuple, as torch.return_types.slogdet
    assert r._fields == ("sign", "logabsdet")
    close(r.logabsdet, tl, tol, tol)
    close(kiln.linalg.inv(k), torch.linalg.inv(t), tol * 10, tol * 10)
    close(k.inverse(), t.inverse(), tol * 10, tol * 10)
    kb, tb = pair(b)
    close(kiln.linalg.solve(k, kb), torch.linalg.solve(t, tb), tol * 10, tol * 10)
    v = arr(3, 4).astype(dtype)
    close(kiln.linalg.solve(k, kiln.tensor(v)), torch.linalg.solve(t, torch.tensor(v)),
          tol * 10, tol * 10)
    br = arr(3, 2, 4).astype(dtype)
    close(kiln.linalg.solve(k, kiln.tensor(br), left=False),
          torch.linalg.solve(t, torch.tensor(br), left=False), tol * 10, tol * 10)
    assert kiln.linalg.det(k).dtype == (kiln.float64 if dtype == np.float64 else kiln.float32)


def test_linalg_gradients():
    check_grad(kiln.linalg.det, torch.linalg.det, well_conditioned(2, 3, 3), rtol=1e-6)
    check_grad(lambda x: kiln.linalg.slogdet(x).logabsdet,
               lambda x: torch.linalg.slogdet(x).logabsdet, well_conditioned(3, 3))
    check_grad(kiln.linalg.inv, torch.linalg.inv, well_conditioned(2, 3, 3))
    check_grad(kiln.linalg.solve, torch.linalg.solve, well_conditioned(2, 3, 3), arr(3, 2))
    check_grad(kiln.linalg.solve, torch.linalg.solve, well_conditioned(2, 3, 3), arr(2, 3))
    check_grad(kiln.linalg.solve, torch.linalg.solve, well_conditioned(3, 3), arr(2, 3, 4))

    def kchol(x):
        return kiln.linalg.cholesky(x @ x.mT + 3 * kiln.eye(3, dtype=kiln.float64))

    def tchol(x):
        return torch.linalg.cholesky(x @ x.mT + 3 * torch.eye(3, dtype=torch.float64))
    check_grad(kchol, tchol, arr(2, 3, 3))
    check_grad(lambda x: kiln.linalg.cholesky(x @ x.mT + 3 * kiln.eye(3, dtype=kiln.float64),
                                              upper=True),
               lambda x: torch.linalg.cholesky(x @ x.mT + 3 * torch.eye(3, dtype=torch.float64),
                                               upper=True), arr(3, 3))


def test_qr():
    for shape in [(5, 3), (2, 4, 4)]:
        a = arr(*shape)
        k, t = pair(a)
        kq, kr = kiln.linalg.qr(k)
        tq, tr = torch.linalg.qr(t)
        close(kq, tq, 1e-9, 1e-9)
        close(kr, tr, 1e-9, 1e-9)
        check_grad(lambda x: kiln.linalg.qr(x).Q, lambda x: torch.linalg.qr(x).Q, a)
        check_grad(lambda x: kiln.linalg.qr(x).R, lambda x: torch.linalg.qr(x).R, a)
    a = arr(4, 2)
    k, t = pair(a)
    kq, kr = kiln.linalg.qr(k, mode="complete")
    tq, tr = torch.linalg.qr(t, mode="complete")
    close(kq, tq, 1e-9, 1e-9)
    close(kr, tr, 1e-9, 1e-9)
    close(kiln.linalg.qr(k, mode="r").R, torch.linalg.qr(t, mode="r").R, 1e-9, 1e-9)
    wide = arr(2, 4)
    kq, kr = kiln.linalg.qr(kiln.tensor(wide))
    tq, tr = torch.linalg.qr(torch.tensor(wide))
    close(kq, tq, 1e-9, 1e-9)
    close(kr, tr, 1e-9, 1e-9)


@pytest.mark.parametrize("shape,full", [((5, 3), False), ((3, 5), True), ((2, 4, 4), True),
                                        ((2, 3, 4), False)])
def test_svd(shape, full):
    a = arr(*shape)
    k, t = pair(a)
    ku, ks, kvh = kiln.linalg.svd(k, full_matrices=full)
    tu, ts, tvh = torch.linalg.svd(t, full_matrices=full)
    close(ks, ts, 1e-9, 1e-9)
    assert ku.shape == tu.shape and kvh.shape == tvh.shape
    m, n = shape[-2:]
    kk = min(m, n)
    close((ku[..., :kk] * ks.unsqueeze(-2)) @ kvh[..., :kk, :], t, 1e-9, 1e-9)
    close(kiln.linalg.svdvals(k), torch.linalg.svdvals(t), 1e-9, 1e-9)
    c = np.arange(1, kk + 1, dtype=np.float64)

    def kf(x):
        u, s, vh = kiln.linalg.svd(x, full_matrices=False)
        return (u * kiln.tensor(c)) @ vh + s.sum()

    def tf(x):
        u, s, vh = torch.linalg.svd(x, full_matrices=False)
        return (u * torch.tensor(c)) @ vh + s.sum()
    check_grad(kf, tf, a, rtol=1e-6, atol=1e-7)
    check_grad(kiln.linalg.svdvals, torch.linalg.svdvals, a, rtol=1e-6, atol=1e-7)


def test_eigh():
    a = arr(2, 4, 4)
    s = a + np.swapaxes(a, -1, -2)
    for uplo in ["L", "U"]:
        k, t = pair(s)
        kw, kv = kiln.linalg.eigh(k, UPLO=uplo)
        tw, tv = torch.linalg.eigh(t, UPLO=uplo)
        close(kw, tw, 1e-9, 1e-9)
        close(kiln.linalg.eigvalsh(k, uplo), torch.linalg.eigvalsh(t, uplo), 1e-9, 1e-9)
        close(kiln.abs(kv), torch.abs(tv), 1e-8, 1e-8)
    c = np.arange(1, 5, dtype=np.float64)

    def kf(x):
        w, v = kiln.linalg.eigh(x + x.mT)
        return (v * kiln.tensor(c)) @ v.mT + w.unsqueeze(-1)

    def tf(x):
        w, v = torch.linalg.eigh(x + x.mT)
        return (v * torch.tensor(c)) @ v.mT + w.unsqueeze(-1)
    check_grad(kf, tf, a, rtol=1e-6, atol=1e-7)
    check_grad(lambda x: kiln.linalg.eigvalsh(x + x.mT), lambda x: torch.linalg.eigvalsh(x + x.mT),
               a, rtol=1e-6, atol=1e-7)


def test_norms():
    a = arr(2, 3, 4)
    k, t = pair(a)
    for ord in ["fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf]:
        close(kiln.linalg.matrix_norm(k, ord), torch.linalg.matrix_norm(t, ord), 1e-9, 1e-9)
        close(kiln.linalg.matrix_norm(k, ord, dim=(0, 2), keepdim=True),
              torch.linalg.matrix_norm(t, ord, dim=(0, 2), keepdim=True), 1e-9, 1e-9)
        check_grad(lambda x: kiln.linalg.matrix_norm(x, ord),
                   lambda x: torch.linalg.matrix_norm(x, ord), a, rtol=1e-6, atol=1e-7)
    close(kiln.linalg.norm(k), torch.linalg.norm(t))
    close(kiln.linalg.norm(k, dim=(1, 2)), torch.linalg.norm(t, dim=(1, 2)))
    close(kiln.linalg.norm(k, 3, dim=-1, keepdim=True), torch.linalg.norm(t, 3, dim=-1, keepdim=True))
    m, tm = pair(arr(3, 4))
    for ord in [None, "fro", "nuc", 2, -1, math.inf]:
        close(kiln.linalg.norm(m, ord), torch.linalg.norm(tm, ord), 1e-9, 1e-9)
    v, tv = pair(arr(5))
    for ord in [None, 0, 1, 2, 3.5, math.inf, -math.inf]:
        close(kiln.linalg.norm(v, ord), torch.linalg.norm(tv, ord), 1e-9, 1e-9)
    close(kiln.linalg.vector_norm(k, 1, dim=(0, 2)), torch.linalg.vector_norm(t, 1, dim=(0, 2)))
    with pytest.raises(kiln.Error, match=r"^\[linalg_norm\]"):
        kiln.linalg.norm(k, 2)


def test_pinv_matrix_rank():
    a = arr(5, 3) @ arr(3, 4)  # rank 3
    k, t = pair(a)
    close(kiln.linalg.pinv(k), torch.linalg.pinv(t), 1e-8, 1e-8)
    assert kiln.linalg.matrix_rank(k).item() == torch.linalg.matrix_rank(t).item() == 3
    s = a @ a.T
    ks, ts = pair(s)
    close(kiln.linalg.pinv(ks, hermitian=True), torch.linalg.pinv(ts, hermitian=True), 1e-7, 1e-7)
    assert kiln.linalg.matrix_rank(ks, hermitian=True).item() == 3
    b = arr(2, 4, 3)
    kb, tb = pair(b)
    np.testing.assert_array_equal(kiln.linalg.matrix_rank(kb).numpy(),
                                  torch.linalg.matrix_rank(tb).numpy())
    assert kiln.linalg.matrix_rank(kb).dtype == kiln.int64
    check_grad(kiln.linalg.pinv, torch.linalg.pinv, arr(4, 3), rtol=1e-6, atol=1e-7)
    close(k.pinverse(), t.pinverse(), 1e-8, 1e-8)


def test_logdet_multi_dot():
    a = well_conditioned(3, 3)
    k, t = pair(a)
    close(kiln.logdet(k), torch.logdet(t))
    neg = -np.eye(3)
    assert math.isnan(kiln.logdet(kiln.tensor(neg)).item())
    mats = [arr(2, 3), arr(3, 4), arr(4)]
    close(kiln.linalg.multi_dot([kiln.tensor(m) for m in mats]),
          torch.linalg.multi_dot([torch.tensor(m) for m in mats]))


def test_top_level_names_match_linalg_and_torch():
    a = well_conditioned(2, 3, 3)
    k, t = pair(a)
    close(kiln.det(k), torch.det(t), 1e-9, 1e-9)
    close(kiln.inverse(k), torch.inverse(t), 1e-9, 1e-9)
    close(kiln.pinverse(k), torch.pinverse(t), 1e-8, 1e-8)
    s, l = kiln.slogdet(k)
    ts, tl = torch.slogdet(t)
    close(s, ts)
    close(l, tl, 1e-9, 1e-9)
    check_grad(kiln.ger, torch.ger, arr(3), arr(4))
    check_grad(lambda i, a, b: kiln.addbmm(i, a, b, alpha=0.5),
               lambda i, a, b: torch.addbmm(i, a, b, alpha=0.5), arr(3, 5), arr(2, 3, 4),
               arr(2, 4, 5))


def test_linalg_errors_name_op_and_batch():
    sing = np.zeros((3, 2, 2))
    sing[0] = np.eye(2)
    sing[2] = np.eye(2)
    sing[1] = [[1.0, 2.0], [2.0, 4.0]]
    k = kiln.tensor(sing)
    with pytest.raises(kiln.Error, match=r"^\[linalg_inv\] \(batch element 1\).*singular"):
        kiln.linalg.inv(k)
    with pytest.raises(kiln.Error, match=r"^\[linalg_solve\] \(batch element 1\).*singular"):
        kiln.linalg.solve(k, kiln.ones(3, 2, dtype=kiln.float64))
    with pytest.raises(kiln.Error, match=r"^\[linalg_cholesky\] \(batch element 1\).*positive"):
        kiln.linalg.cholesky(k)
    with pytest.raises(kiln.Error, match=r"^\[linalg_inv\] .*square"):
        kiln.linalg.inv(kiln.zeros(2, 3))
    with pytest.raises(kiln.Error, match=r"^\[linalg_det\]|^\[linalg_slogdet\]"):
        kiln.linalg.det(kiln.zeros(2, 3))
    with pytest.raises(kiln.Error, match=r"^\[linalg_qr\] mode"):
        kiln.linalg.qr(kiln.zeros(2, 2), mode="bad")
    with pytest.raises(kiln.Error, match=r"^\[linalg_eigh\] UPLO"):
        kiln.linalg.eigh(kiln.zeros(2, 2), UPLO="X")
    with pytest.raises(kiln.Error, match=r"float32 or float64"):
        kiln.linalg.inv(kiln.tensor([[1, 0], [0, 1]]))
    # A singular matrix: det 0 and slogdet (0, -inf), as torch, without raising.
    assert kiln.linalg.det(kiln.tensor(sing[1])).item() == 0.0
    s, l = kiln.linalg.slogdet(kiln.tensor(sing[1]))
    assert s.item() == 0.0 and l.item() == -math.inf


def test_linalg_in_jit_and_graph_agree():
    a = well_conditioned(2, 3, 3)

    @kiln.jit
    def f(x):
        return kiln.linalg.inv(x).sum() + kiln.linalg.det(x).sum() + kiln.prod(x, 1).sum()

    x = kiln.tensor(a)
    close(f(x), torch.tensor(np.linalg.inv(a).sum() + np.linalg.det(a).sum() + a.prod(1).sum()),
          1e-9, 1e-9)
