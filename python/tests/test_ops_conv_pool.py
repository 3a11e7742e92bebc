# Convolution, pooling, resampling, padding, functional norms and attention against PyTorch 1.13:
# every case runs the Kiln op and torch's on the same float64 data and compares the values and
# the gradients of <output, g> for a random g (indices exactly), over grids of the options.
import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kiln

KF = kiln.nn.functional
R = np.random.RandomState(21)


def _k(a, grad):
    if np.asarray(a).dtype.kind != "f":
        return kiln.tensor(a)
    t = kiln.tensor(a, dtype=kiln.float64)
    if grad:
        t.requires_grad_(True)
    return t


def _t(a, grad):
    if np.asarray(a).dtype.kind != "f":
        return torch.tensor(a)
    return torch.tensor(a, dtype=torch.float64, requires_grad=grad)


def check(kfn, tfn, *arrays, grad=True, rtol=1e-9, atol=1e-9):
    """kfn(*kiln tensors) against tfn(*torch tensors): values, indices and input gradients."""
    kx = [_k(a, grad) for a in arrays]
    tx = [_t(a, grad) for a in arrays]
    ky, ty = kfn(*kx), tfn(*tx)
    kys = list(ky) if isinstance(ky, (tuple, list)) else [ky]
    tys = list(ty) if isinstance(ty, (tuple, list)) else [ty]
    assert len(kys) == len(tys)
    for a, b in zip(kys, tys):
        b = b.detach().numpy()
        assert tuple(a.shape) == b.shape, (tuple(a.shape), b.shape)
        if b.dtype.kind in "biu":
            np.testing.assert_array_equal(a.numpy(), b)
        else:
            np.testing.assert_allclose(a.numpy(), b, rtol=rtol, atol=atol)
    if not grad:
        return
    g = R.randn(*tys[0].shape)
    (kys[0] * kiln.tensor(g, dtype=kiln.float64)).sum().backward()
    (tys[0] * torch.tensor(g)).sum().backward()
    for a, b, arr in zip(kx, tx, arrays):
        if np.asarray(arr).dtype.kind != "f" or b.grad is None:
            continue
        assert a.grad is not None
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=rtol * 10, atol=atol * 10)


# ---- convolution ---------------------------------------------------------------------------

@pytest.mark.parametrize("stride,padding,dilation,groups,bias,unbatched", [
    (1, 0, 1, 1, True, False),
    (2, 1, 1, 1, False, False),
    ((1, 2, 1), (1, 0, 2), (2, 1, 1), 2, True, False),
    (1, "same", (1, 2, 1), 1, True, False),
    (1, "same", 1, 2, False, True),
    (1, "valid", 1, 1, True, True),
    ((2, 1, 2), 2, 1, 2, True, False),
])
def test_conv3d(stride, padding, dilation, groups, bias, unbatched):
    x = R.randn(*(([] if unbatched else [2]) + [4, 5, 6, 7]))
    w = R.randn(6, 4 // groups, 3, 2, 4)
    b = R.randn(6)
    args = [x, w, b] if bias else [x, w]
    check(lambda *a: KF.conv3d(*a[:2], a[2] if bias else None, stride, padding, dilation, groups),
          lambda *a: F.conv3d(*a[:2], a[2] if bias else None, stride, padding, dilation, groups),
          *args)


@pytest.mark.parametrize("dims", [1, 2])
@pytest.mark.parametrize("padding", ["same", "valid", 1])
def test_conv1d_conv2d_string_padding_and_unbatched(dims, padding):
    shape = [3] + [9] * dims  # unbatched
    x = R.randn(*shape)
    w = R.randn(4, 3, *([4] * dims))
    kf, tf = (KF.conv1d, F.conv1d) if dims == 1 else (KF.conv2d, F.conv2d)
    check(lambda a, b: kf(a, b, padding=padding, dilation=2 if padding == "same" else 1),
          lambda a, b: tf(a, b, padding=padding, dilation=2 if padding == "same" else 1), x, w)


def test_conv_same_padding_needs_stride_one():
    x, w = kiln.randn(1, 2, 5, 5, 5), kiln.randn(2, 2, 3, 3, 3)
    with pytest.raises(kiln.Error, match=r"\[conv3d\].*strided"):
        kiln.conv3d(x, w, stride=2, padding="same")
    with pytest.raises(kiln.Error, match=r"\[conv3d\]"):
        kiln.conv3d(x, kiln.randn(2, 3, 3, 3, 3))


@pytest.mark.parametrize("stride,padding,output_padding,groups,dilation,unbatched", [
    (1, 0, 0, 1, 1, False),
    (2, 1, 1, 1, 1, False),
    (3, 2, 2, 2, 1, True),
    (2, 0, 0, 1, 2, False),
])
def test_conv_transpose1d(stride, padding, output_padding, groups, dilation, unbatched):
    x = R.randn(*(([] if unbatched else [2]) + [4, 7]))
    w = R.randn(4, 6 // groups, 3)
    b = R.randn(6)
    check(lambda a, c, d: KF.conv_transpose1d(a, c, d, stride, padding, output_padding, groups, dilation),
          lambda a, c, d: F.conv_transpose1d(a, c, d, stride, padding, output_padding, groups, dilation),
          x, w, b)


@pytest.mark.parametrize("stride,padding,output_padding,groups,dilation", [
    (1, 0, 0, 1, 1),
    (2, 1, 1, 1, 1),
    ((2, 1, 3), (1, 0, 2), (1, 0, 1), 2, 1),
    (2, 1, 0, 1, (2, 1, 1)),
    (3, 2, 1, 1, 1),
])
def test_conv_transpose3d(stride, padding, output_padding, groups, dilation):
    x = R.randn(2, 4, 3, 4, 3)
    w = R.randn(4, 6 // groups, 3, 2, 3)
    b = R.randn(6)
    check(lambda a, c, d: KF.conv_transpose3d(a, c, d, stride, padding, output_padding, groups, dilation),
          lambda a, c, d: F.conv_transpose3d(a, c, d, stride, padding, output_padding, groups, dilation),
          x, w, b)


def test_conv_float32():
    x, w = R.randn(2, 3, 6, 7, 8).astype(np.float32), R.randn(5, 3, 3, 3, 3).astype(np.float32)
    got = kiln.conv3d(kiln.tensor(x), kiln.tensor(w), padding=1).numpy()
    np.testing.assert_allclose(got, F.conv3d(torch.tensor(x), torch.tensor(w), padding=1).numpy(),
                               rtol=1e-4, atol=1e-4)


# ---- pooling -------------------------------------------------------------------------------

MAX_GRID = list(itertools.product([2, 3], [None, 2], [0, 1], [1, 2], [False, True]))


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("kernel,stride,padding,dilation,ceil", MAX_GRID)
def test_max_pool(nd, kernel, stride, padding, dilation, ceil):
    if padding > kernel // 2:
        return
    x = R.randn(*([2, 3] + [7, 6, 5][:nd]))
    kf = {1: KF.max_pool1d, 2: KF.max_pool2d, 3: KF.max_pool3d}[nd]
    tf = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[nd]
    for ret in (False, True):
        check(lambda a: kf(a, kernel, stride, padding, dilation, ceil, ret),
              lambda a: tf(a, kernel, stride, padding, dilation, ceil, ret), x)


def test_max_pool_unbatched_with_indices_and_ties():
    x = np.zeros((3, 6, 6))
    x[:, 2, 3] = 1.0
    check(lambda a: kiln.max_pool2d_with_indices(a, 3, 1, 1),
          lambda a: F.max_pool2d(a, 3, 1, 1, return_indices=True), x, grad=False)
    check(lambda a: KF.max_pool1d(a, 2, ceil_mode=True, return_indices=True),
          lambda a: F.max_pool1d(a, 2, ceil_mode=True, return_indices=True), R.randn(3, 7))


def test_max_pool_errors():
    with pytest.raises(kiln.Error, match=r"\[max_pool2d\].*half"):
        kiln.max_pool2d(kiln.randn(1, 1, 5, 5), 2, padding=2, dilation=2)
    with pytest.raises(kiln.Error, match=r"\[max_pool3d\].*5-D"):
        kiln.max_pool3d(kiln.randn(5, 5), 2)


AVG_GRID = list(itertools.product([2, 3], [None, 2], [0, 1], [False, True], [True, False]))


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("kernel,stride,padding,ceil,cip", AVG_GRID)
def test_avg_pool(nd, kernel, stride, padding, ceil, cip):
    if padding > kernel // 2:
        return
    x = R.randn(*([2, 3] + [7, 6, 5][:nd]))
    if nd == 1:
        check(lambda a: KF.avg_pool1d(a, kernel, stride, padding, ceil, cip),
              lambda a: F.avg_pool1d(a, kernel, stride, padding, ceil, cip), x)
        return
    kf = KF.avg_pool2d if nd == 2 else KF.avg_pool3d
    tf = F.avg_pool2d if nd == 2 else F.avg_pool3d
    for div in (None, 4):
        check(lambda a: kf(a, kernel, stride, padding, ceil, cip, div),
              lambda a: tf(a, kernel, stride, padding, ceil, cip, div), x)


# Stride-1 and mixed-stride windows (inception's 3x3/1/1): the kernel's flattened-plane
# interior passes, their border columns and the gradient's gather form.
@pytest.mark.parametrize("nd,kernel,stride,padding", [
    (1, 3, 1, 1), (1, 4, 1, 2), (2, 3, 1, 1), (2, 3, 1, 0), (2, (5, 3), 1, (2, 1)),
    (2, (3, 5), (1, 2), (1, 2)), (2, (3, 2), (2, 1), (0, 1)), (2, 7, 1, 3), (3, 3, 1, 1),
    (3, (3, 1, 3), (2, 1, 1), (1, 0, 1))])
@pytest.mark.parametrize("ceil,cip,div", [(False, True, None), (True, False, None),
                                          (False, False, None), (True, True, 5)])
def test_avg_pool_stride1(nd, kernel, stride, padding, ceil, cip, div):
    x = R.randn(*([2, 3] + [9, 8, 7][:nd]))
    if nd == 1:
        check(lambda a: KF.avg_pool1d(a, kernel, stride, padding, ceil, cip),
              lambda a: F.avg_pool1d(a, kernel, stride, padding, ceil, cip), x)
        return
    kf = KF.avg_pool2d if nd == 2 else KF.avg_pool3d
    tf = F.avg_pool2d if nd == 2 else F.avg_pool3d
    check(lambda a: kf(a, kernel, stride, padding, ceil, cip, div),
          lambda a: tf(a, kernel, stride, padding, ceil, cip, div), x)
    check(lambda a: kf(a, kernel, stride, padding, ceil, cip, div),
          lambda a: tf(a, kernel, stride, padding, ceil, cip, div), x[0])  # unbatched


def test_avg_pool_float32_inception():
    # A float32 map large enough to split into chunks of planes, and a global 7x7 pool.
    for shape, k, s, p in [((2, 24, 17, 17), 3, 1, 1), ((1, 40, 7, 7), 7, None, 0)]:
        x = R.randn(*shape).astype(np.float32)
        kx, tx = kiln.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        ky, ty = KF.avg_pool2d(kx, k, s, p), F.avg_pool2d(tx, k, s, p)
        assert ky.dtype == kiln.float32
        np.testing.assert_allclose(ky.detach().numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-6)
        g = R.randn(*ty.shape).astype(np.float32)
        (ky * kiln.tensor(g)).sum().backward()
        (ty * torch.tensor(g)).sum().backward()
        np.testing.assert_allclose(kx.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("nd,kernel,stride", [(1, 2, 2), (2, 2, 2), (2, 3, 1), (3, 2, 2), (2, (2, 3), (2, 1))])
def test_max_unpool(nd, kernel, stride):
    x = torch.tensor(R.randn(*([2, 3] + [8, 6, 4][:nd])))
    pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[nd]
    v, i = pool(x, kernel, stride, return_indices=True)
    kf = {1: KF.max_unpool1d, 2: KF.max_unpool2d, 3: KF.max_unpool3d}[nd]
    tf = {1: F.max_unpool1d, 2: F.max_unpool2d, 3: F.max_unpool3d}[nd]
    size = list(x.shape[2:])
    check(lambda a, b: kf(a, b, kernel, stride, output_size=size),
          lambda a, b: tf(a, b, kernel, stride, output_size=size), v.numpy(), i.numpy())
    check(lambda a, b: kf(a, b, kernel, stride), lambda a, b: tf(a, b, kernel, stride),
          v.numpy(), i.numpy())


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0])
@pytest.mark.parametrize("nd,kernel,stride,ceil", [(1, 3, 2, False), (1, 2, None, True),
                                                   (2, 2, None, False), (2, (3, 2), 2, True)])
def test_lp_pool(p, nd, kernel, stride, ceil):
    x = R.rand(*([2, 3] + [7, 6][:nd])) + 0.1
    kf, tf = (KF.lp_pool1d, F.lp_pool1d) if nd == 1 else (KF.lp_pool2d, F.lp_pool2d)
    check(lambda a: kf(a, p, kernel, stride, ceil), lambda a: tf(a, p, kernel, stride, ceil), x)


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("out", [1, 3, 4, "none"])
def test_adaptive_pools(nd, out, ):
    x = R.randn(*([2, 3] + [7, 9, 5][:nd]))
    size = out if out != "none" else [None] + [3] * (nd - 1)
    ka = {1: KF.adaptive_avg_pool1d, 2: KF.adaptive_avg_pool2d, 3: KF.adaptive_avg_pool3d}[nd]
    ta = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}[nd]
    km = {1: KF.adaptive_max_pool1d, 2: KF.adaptive_max_pool2d, 3: KF.adaptive_max_pool3d}[nd]
    tm = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d, 3: F.adaptive_max_pool3d}[nd]
    if nd > 1 or out != "none":
        check(lambda a: ka(a, size), lambda a: ta(a, size), x)
        check(lambda a: km(a, size, True), lambda a: tm(a, size, True), x)
        check(lambda a: km(a, size), lambda a: tm(a, size), x[0])  # unbatched


# ---- resampling ----------------------------------------------------------------------------

INTERP = [
    ("nearest", 1), ("nearest", 2), ("nearest", 3),
    ("nearest-exact", 1), ("nearest-exact", 2), ("nearest-exact", 3),
    ("linear", 1), ("bilinear", 2), ("bicubic", 2), ("trilinear", 3),
    ("area", 1), ("area", 2), ("area", 3),
]


@pytest.mark.parametrize("mode,nd", INTERP)
@pytest.mark.parametrize("how", ["size_up", "size_down", "scale_up", "scale_frac", "scale_recompute"])
@pytest.mark.parametrize("align", [None, True, False])
def test_interpolate(mode, nd, how, align):
    if align is not None and mode in ("nearest", "nearest-exact", "area"):
        return
    x = R.randn(*([2, 2] + [5, 4, 6][:nd]))
    kw = {"mode": mode, "align_corners": align}
    if how == "size_up":
        kw["size"] = [9, 7, 11][:nd]
    elif how == "size_down":
        kw["size"] = [3, 3, 4][:nd] if nd > 1 else 3
    elif how == "scale_up":
        kw["scale_factor"] = 2.0
    elif how == "scale_frac":
        kw["scale_factor"] = [1.7, 0.6, 2.3][:nd]
    else:
        kw["scale_factor"], kw["recompute_scale_factor"] = 1.7, True
    check(lambda a: KF.interpolate(a, **kw), lambda a: F.interpolate(a, **kw), x,
          rtol=1e-6, atol=1e-6)


def test_interpolate_float32_and_errors():
    x = R.randn(1, 3, 8, 8).astype(np.float32)
    for mode in ("bilinear", "bicubic", "nearest"):
        got = kiln.interpolate(kiln.tensor(x), scale_factor=1.5, mode=mode).numpy()
        want = F.interpolate(torch.tensor(x), scale_factor=1.5, mode=mode).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    with pytest.raises(kiln.Error, match=r"\[interpolate\].*align_corners"):
        kiln.interpolate(kiln.randn(1, 1, 4, 4), size=8, align_corners=True)
    with pytest.raises(kiln.Error, match=r"\[interpolate\].*bilinear.*4-D"):
        kiln.interpolate(kiln.randn(1, 1, 4), size=8, mode="bilinear")
    with pytest.raises(kiln.Error, match=r"\[interpolate\]"):
        kiln.interpolate(kiln.randn(1, 1, 4, 4))


@pytest.mark.parametrize("r,shape", [(2, [8, 3, 4]), (3, [2, 9, 2, 3]), (2, [2, 1, 4, 2, 2])])
def test_pixel_shuffle(r, shape):
    x = R.randn(*shape)
    check(lambda a: KF.pixel_shuffle(a, r), lambda a: F.pixel_shuffle(a, r), x)
    y = F.pixel_shuffle(torch.tensor(x), r).numpy()
    check(lambda a: KF.pixel_unshuffle(a, r), lambda a: F.pixel_unshuffle(a, r), y)


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample(mode, padding_mode, align):
    x = R.randn(2, 3, 5, 4)
    # Points inside, on the border and well outside [-1, 1], so every padding rule is reached.
    grid = R.uniform(-1.7, 1.7, size=(2, 6, 7, 2))
    grid[0, 0, :3] = [[-1.0, -1.0], [1.0, 1.0], [0.0, 0.25]]
    kw = {"mode": mode, "padding_mode": padding_mode, "align_corners": align}
    # nearest: torch's grid gradient is zeros, Kiln's grid has no path to the output (None):
    # only the input's gradient is compared there.
    d = (lambda g: g.detach()) if mode == "nearest" else (lambda g: g)
    check(lambda a, g: KF.grid_sample(a, d(g), **kw), lambda a, g: F.grid_sample(a, d(g), **kw),
          x, grid, rtol=1e-7, atol=1e-7)


def test_grid_sample_float32_graph_and_errors():
    x = R.randn(1, 2, 6, 5).astype(np.float32)
    grid = R.uniform(-1.2, 1.2, size=(1, 3, 4, 2)).astype(np.float32)
    want = F.grid_sample(torch.tensor(x), torch.tensor(grid), align_corners=False).numpy()
    got = KF.grid_sample(kiln.tensor(x), kiln.tensor(grid)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    jitted = kiln.jit(lambda a, g: KF.grid_sample(a, g, mode="bicubic", padding_mode="border"))
    want = F.grid_sample(torch.tensor(x), torch.tensor(grid), mode="bicubic",
                         padding_mode="border", align_corners=False).numpy()
    np.testing.assert_allclose(jitted(kiln.tensor(x), kiln.tensor(grid)).numpy(), want,
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(kiln.Error, match=r"\[grid_sample\] input must be 4-D"):
        KF.grid_sample(kiln.randn(1, 2, 3, 4, 5), kiln.randn(1, 2, 3, 4, 3))
    with pytest.raises(kiln.Error, match=r"\[grid_sample\] grid must be \[N, H_out, W_out, 2\]"):
        KF.grid_sample(kiln.randn(1, 2, 3, 4), kiln.randn(1, 2, 3, 3))
    with pytest.raises(kiln.Error, match=r"\[grid_sample\] mode must be"):
        KF.grid_sample(kiln.randn(1, 2, 3, 4), kiln.randn(1, 2, 3, 2), mode="area")
    with pytest.raises(kiln.Error, match=r"\[grid_sample\] padding_mode must be"):
        KF.grid_sample(kiln.randn(1, 2, 3, 4), kiln.randn(1, 2, 3, 2), padding_mode="wrap")
    with pytest.raises(kiln.Error, match=r"\[grid_sample\].*batch size"):
        KF.grid_sample(kiln.randn(2, 2, 3, 4), kiln.randn(1, 2, 3, 2))


@pytest.mark.parametrize("sampling_ratio", [2, 1, -1])
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("output_size", [(3, 4), 2])
def test_roi_align(sampling_ratio, aligned, output_size):
    tv_ops = pytest.importorskip("torchvision.ops")
    x = R.randn(2, 3, 9, 11)
    # Inside, partly outside, degenerate (smaller than a pixel) and past the image.
    boxes = np.array([[0, 1.2, 0.5, 7.3, 6.1], [1, -2, -1, 4, 12], [1, 3, 3, 3.2, 3.1],
                      [0, 8, 2, 20, 5]])
    kb, tb = kiln.tensor(boxes, dtype=kiln.float64), torch.tensor(boxes)
    # Values and the input's gradient (torchvision's boxes get none).
    check(lambda a: kiln._C.roi_align(a, kb, output_size, 0.8, sampling_ratio, aligned),
          lambda a: tv_ops.roi_align(a, tb, output_size, 0.8, sampling_ratio, aligned), x)


def test_nms_against_torchvision():
    tv_ops = pytest.importorskip("torchvision.ops")
    r = np.random.RandomState(5)
    xy = r.uniform(0, 10, size=(40, 2))
    boxes = np.concatenate([xy, xy + r.uniform(0.5, 4, size=(40, 2))], 1)
    scores = r.permutation(40).astype(np.float64) / 40  # distinct: torchvision's ties are unordered
    for iou in (0.0, 0.3, 0.7, 1.0):
        got = kiln._C.nms(kiln.tensor(boxes), kiln.tensor(scores), iou).numpy()
        want = tv_ops.nms(torch.tensor(boxes), torch.tensor(scores), iou).numpy()
        np.testing.assert_array_equal(got, want)
    # In a graph the number kept is learnt at run.
    f = kiln.jit(lambda b, s: kiln._C.nms(b, s, 0.3))
    got = f(kiln.tensor(boxes.astype(np.float32)), kiln.tensor(scores.astype(np.float32)))
    want = tv_ops.nms(torch.tensor(boxes, dtype=torch.float32),
                      torch.tensor(scores, dtype=torch.float32), 0.3).numpy()
    np.testing.assert_array_equal(got.numpy(), want)
    with pytest.raises(kiln.Error, match=r"\[nms\] boxes must be \[N, 4\]"):
        kiln._C.nms(kiln.randn(3, 5), kiln.randn(3), 0.5)
    with pytest.raises(kiln.Error, match=r"\[nms\] scores must be \[N\]"):
        kiln._C.nms(kiln.randn(3, 4), kiln.randn(4), 0.5)


def test_roi_align_graph_and_errors():
    tv_ops = pytest.importorskip("torchvision.ops")
    x = R.randn(1, 2, 6, 5).astype(np.float32)
    boxes = np.array([[0, 0.5, 1.0, 4.0, 5.5], [0, 2, 0, 3, 2]], dtype=np.float32)
    want = tv_ops.roi_align(torch.tensor(x), torch.tensor(boxes), 3, 0.5, 2, True).numpy()
    f = kiln.jit(lambda a, b: kiln._C.roi_align(a, b, 3, 0.5, 2, True))
    np.testing.assert_allclose(f(kiln.tensor(x), kiln.tensor(boxes)).numpy(), want,
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(kiln.Error, match=r"\[roi_align\] boxes must be \[K, 5\]"):
        kiln._C.roi_align(kiln.randn(1, 2, 3, 4), kiln.randn(2, 4), 2)
    with pytest.raises(kiln.Error, match=r"\[roi_align\] input must be 4-D"):
        kiln._C.roi_align(kiln.randn(2, 3, 4), kiln.randn(2, 5), 2)
    with pytest.raises(kiln.Error, match=r"\[roi_align\] output_size"):
        kiln._C.roi_align(kiln.randn(1, 2, 3, 4), kiln.randn(2, 5), [0, 2])


@pytest.mark.parametrize("kernel,dilation,padding,stride", [
    (2, 1, 0, 1), (3, 1, 1, 2), ((2, 3), (2, 1), (1, 0), (1, 2)), (3, 2, 2, 3)])
@pytest.mark.parametrize("unbatched", [False, True])
def test_unfold_fold(kernel, dilation, padding, stride, unbatched):
    x = R.randn(*(([] if unbatched else [2]) + [3, 7, 8]))
    check(lambda a: KF.unfold(a, kernel, dilation, padding, stride),
          lambda a: F.unfold(a, kernel, dilation, padding, stride), x)
    cols = F.unfold(torch.tensor(x if not unbatched else x[None]), kernel, dilation, padding, stride)
    cols = cols.numpy() if not unbatched else cols[0].numpy()
    check(lambda a: KF.fold(a, (7, 8), kernel, dilation, padding, stride),
          lambda a: F.fold(a, (7, 8), kernel, dilation, padding, stride), cols)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular", "constant"])
@pytest.mark.parametrize("pad,shape", [
    ([1, 2], [3, 5]), ([2, 0], [2, 3, 5]), ([1, 2, 2, 1], [3, 4, 5]), ([0, 1, 3, 2], [2, 3, 4, 5]),
    ([1, 1, 2, 0, 1, 2], [2, 3, 4, 5]), ([2, 1, 0, 1, 1, 1], [2, 2, 3, 4, 5])])
def test_pad_modes(mode, pad, shape):
    x = R.randn(*shape)
    if mode == "circular" and len(shape) == len(pad) // 2 + 1:
        # (torch 1.13 pads circularly only with a batch dim: compare on one)
        check(lambda a: KF.pad(a, pad, mode=mode),
              lambda a: F.pad(a[None], pad, mode=mode)[0], x)
        return
    check(lambda a: KF.pad(a, pad, mode=mode), lambda a: F.pad(a, pad, mode=mode), x)
    if mode == "constant":
        check(lambda a: kiln.pad(a, pad, mode, 2.5), lambda a: F.pad(a, pad, mode, 2.5), x)


def test_pad_errors_and_method():
    x = kiln.randn(1, 2, 3)
    with pytest.raises(kiln.Error, match=r"\[pad\].*padding size"):
        kiln.pad(x, [3, 0], mode="reflect")
    with pytest.raises(kiln.Error, match=r"\[pad\].*mode"):
        kiln.pad(x, [1, 1], mode="mirror")
    np.testing.assert_array_equal(x.pad([1, 1], "replicate").numpy(),
                                  F.pad(torch.tensor(x.numpy()), [1, 1], "replicate").numpy())


# ---- functional norms ----------------------------------------------------------------------

@pytest.mark.parametrize("shape,groups,affine", [([2, 6, 5], 3, True), ([3, 4, 2, 3], 2, False),
                                                 ([2, 6, 2, 2, 3], 6, True), ([2, 4], 1, True)])
def test_group_norm(shape, groups, affine):
    x, w, b = R.randn(*shape), R.randn(shape[1]), R.randn(shape[1])
    if affine:
        check(lambda a, c, d: KF.group_norm(a, groups, c, d, 1e-4),
              lambda a, c, d: F.group_norm(a, groups, c, d, 1e-4), x, w, b, rtol=1e-7, atol=1e-8)
    else:
        check(lambda a: KF.group_norm(a, groups), lambda a: F.group_norm(a, groups), x,
              rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("shape", [[2, 3, 5], [3, 2, 4, 3], [2, 2, 3, 2, 2]])
@pytest.mark.parametrize("stats", ["none", "train", "eval"])
def test_instance_norm(shape, stats):
    x, w, b = R.randn(*shape), R.randn(shape[1]), R.randn(shape[1])
    rm0, rv0 = R.randn(shape[1]), R.rand(shape[1]) + 0.5
    krm, krv = kiln.tensor(rm0, dtype=kiln.float64), kiln.tensor(rv0, dtype=kiln.float64)
    trm, trv = torch.tensor(rm0), torch.tensor(rv0)
    use = stats != "eval"
    if stats == "none":
        check(lambda a, c, d: KF.instance_norm(a, weight=c, bias=d),
              lambda a, c, d: F.instance_norm(a, weight=c, bias=d), x, w, b, rtol=1e-7, atol=1e-8)
        return
    check(lambda a, c, d: KF.instance_norm(a, krm, krv, c, d, use, 0.2, 1e-5),
          lambda a, c, d: F.instance_norm(a, trm, trv, c, d, use, 0.2, 1e-5), x, w, b,
          rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(krm.numpy(), trm.numpy(), rtol=1e-10)
    np.testing.assert_allclose(krv.numpy(), trv.numpy(), rtol=1e-10)


@pytest.mark.parametrize("shape,size", [([2, 5, 4], 3), ([2, 6, 3, 3], 2), ([1, 4, 2, 2, 3], 5)])
def test_local_response_norm(shape, size):
    check(lambda a: KF.local_response_norm(a, size, 1e-2, 0.6, 1.5),
          lambda a: F.local_response_norm(a, size, 1e-2, 0.6, 1.5), R.randn(*shape))


# ---- attention -----------------------------------------------------------------------------

def _torch_sdpa(q, k, v, mask=None, causal=False, scale=None):
    # torch 1.13 has no F.scaled_dot_product_attention: torch 2.x's reference formula.
    s = q @ k.transpose(-2, -1) * (scale if scale is not None else 1 / q.shape[-1] ** 0.5)
    if causal:
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
    return torch.softmax(s, -1) @ v


@pytest.mark.parametrize("mask", ["none", "bool_full", "bool_bcast", "float_full", "float_bcast",
                                  "causal"])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_sdpa_masks(mask, scale):
    q, k, v = R.randn(2, 3, 4, 5), R.randn(2, 3, 6, 5), R.randn(2, 3, 6, 7)
    arrays = [q, k, v]
    if mask.startswith("bool"):
        shape = [2, 3, 4, 6] if mask == "bool_full" else [4, 6]
        m = R.rand(*shape) > 0.3
        m[..., 0] = True  # no fully masked row
        arrays.append(m)
    elif mask.startswith("float"):
        arrays.append(R.randn(*([2, 1, 4, 6] if mask == "float_full" else [6])))
    causal = mask == "causal"
    check(lambda *a: KF.scaled_dot_product_attention(*a[:3], a[3] if len(a) > 3 else None,
                                                     is_causal=causal, scale=scale),
          lambda *a: _torch_sdpa(*a[:3], a[3] if len(a) > 3 else None, causal, scale), *arrays)


def test_sdpa_dropout_and_old_signature():
    q, k, v = (kiln.randn(2, 4, 3) for _ in range(3))
    # p = 1 drops every weight (torch's dropout rule): the output is zero
    np.testing.assert_array_equal(kiln.scaled_dot_product_attention(q, k, v, dropout_p=1.0).numpy(),
                                  np.zeros((2, 4, 3), np.float32))
    out = kiln.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert tuple(out.shape) == (2, 4, 3)
    # Kiln's earlier positional is_causal still means is_causal
    a = kiln.scaled_dot_product_attention(q, k, v, True).numpy()
    b = kiln.scaled_dot_product_attention(q, k, v, is_causal=True).numpy()
    np.testing.assert_allclose(a, b)
    with pytest.raises(kiln.Error, match=r"\[scaled_dot_product_attention\].*attn_mask"):
        kiln.scaled_dot_product_attention(q, k, v, kiln.ones(4, 4), is_causal=True)
    with pytest.raises(kiln.Error, match=r"\[scaled_dot_product_attention\].*broadcast"):
        kiln.scaled_dot_product_attention(q, k, v, kiln.ones(4, 5))


# ---- modules -------------------------------------------------------------------------------

def _np(t):
    return t.detach().numpy() if isinstance(t, torch.Tensor) else t.numpy()


def test_modules_match_functional():
    x = R.randn(2, 4, 6, 5, 7).astype(np.float32)
    kx, tx = kiln.tensor(x), torch.tensor(x)
    conv = kiln.nn.Conv3d(4, 6, 3, padding=1, groups=2)
    assert tuple(conv.weight.shape) == (6, 2, 3, 3, 3)
    assert len(list(conv.parameters())) == 2
    want = F.conv3d(tx, torch.tensor(conv.weight.numpy()), torch.tensor(conv.bias.numpy()),
                    padding=1, groups=2)
    np.testing.assert_allclose(conv(kx).numpy(), _np(want), rtol=1e-4, atol=1e-4)
    pairs = [
        (kiln.nn.MaxPool3d(2, ceil_mode=True), torch.nn.MaxPool3d(2, ceil_mode=True)),
        (kiln.nn.AvgPool3d(3, 2, 1, count_include_pad=False),
         torch.nn.AvgPool3d(3, 2, 1, count_include_pad=False)),
        (kiln.nn.AdaptiveAvgPool3d((2, 3, 1)), torch.nn.AdaptiveAvgPool3d((2, 3, 1))),
        (kiln.nn.AdaptiveMaxPool3d(2), torch.nn.AdaptiveMaxPool3d(2)),
        (kiln.nn.Upsample(scale_factor=2, mode="trilinear"),
         torch.nn.Upsample(scale_factor=2, mode="trilinear")),
        (kiln.nn.ReplicationPad3d(1), torch.nn.ReplicationPad3d(1)),
        (kiln.nn.InstanceNorm3d(4), torch.nn.InstanceNorm3d(4)),
        (kiln.nn.LocalResponseNorm(3), torch.nn.LocalResponseNorm(3)),
    ]
    for km, tm in pairs:
        np.testing.assert_allclose(km(kx).numpy(), _np(tm(tx)), rtol=1e-4, atol=1e-5,
                                   err_msg=type(km).__name__)
    x2 = R.randn(2, 8, 6, 6).astype(np.float32)
    kx2, tx2 = kiln.tensor(x2), torch.tensor(x2)
    pairs2 = [
        (kiln.nn.PixelShuffle(2), torch.nn.PixelShuffle(2)),
        (kiln.nn.PixelUnshuffle(2), torch.nn.PixelUnshuffle(2)),
        (kiln.nn.ReflectionPad2d((1, 2, 0, 3)), torch.nn.ReflectionPad2d((1, 2, 0, 3))),
        (kiln.nn.ZeroPad2d(2), torch.nn.ZeroPad2d(2)),
        (kiln.nn.ConstantPad2d(1, 3.0), torch.nn.ConstantPad2d(1, 3.0)),
        (kiln.nn.Unfold(3, padding=1), torch.nn.Unfold(3, padding=1)),
        (kiln.nn.LPPool2d(2, 2), torch.nn.LPPool2d(2, 2)),
        (kiln.nn.AdaptiveMaxPool2d(3, return_indices=True),
         torch.nn.AdaptiveMaxPool2d(3, return_indices=True)),
    ]
    for km, tm in pairs2:
        a, b = km(kx2), tm(tx2)
        a, b = (a, b) if isinstance(a, tuple) else ((a,), (b,))
        for u, w in zip(a, b):
            np.testing.assert_allclose(u.numpy(), _np(w), rtol=1e-5, atol=1e-5,
                                       err_msg=type(km).__name__)
    cols = kiln.nn.Unfold(2, stride=2)(kx2)
    np.testing.assert_allclose(kiln.nn.Fold((6, 6), 2, stride=2)(cols).numpy(), x2)
    x1 = R.randn(2, 3, 9).astype(np.float32)
    for km, tm in [(kiln.nn.MaxPool1d(3, 2, 1), torch.nn.MaxPool1d(3, 2, 1)),
                   (kiln.nn.AvgPool1d(2, ceil_mode=True), torch.nn.AvgPool1d(2, ceil_mode=True)),
                   (kiln.nn.AdaptiveAvgPool1d(4), torch.nn.AdaptiveAvgPool1d(4)),
                   (kiln.nn.CircularPad1d(2), None),
                   (kiln.nn.ReflectionPad1d(2), torch.nn.ReflectionPad1d(2))]:
        want = _np(tm(torch.tensor(x1))) if tm is not None else F.pad(torch.tensor(x1), [2, 2], "circular").numpy()
        np.testing.assert_allclose(km(kiln.tensor(x1)).numpy(), want, rtol=1e-5, atol=1e-6)
    v, i = kiln.nn.MaxPool2d(2)(kx2), None  # C++ module unchanged
    km, tm = kiln.nn.MaxPool1d(2, return_indices=True), torch.nn.MaxPool1d(2, return_indices=True)
    kv, ki = km(kiln.tensor(x1))
    tv, ti = tm(torch.tensor(x1))
    up = kiln.nn.MaxUnpool1d(2)(kv, ki, output_size=[9])
    np.testing.assert_allclose(up.numpy(), _np(torch.nn.MaxUnpool1d(2)(tv, ti, output_size=[9])))
    assert v is not None and i is None


def test_instance_norm_module_tracks_running_stats():
    x = R.randn(3, 4, 5, 5).astype(np.float32)
    km = kiln.nn.InstanceNorm2d(4, affine=True, track_running_stats=True, momentum=0.3)
    tm = torch.nn.InstanceNorm2d(4, affine=True, track_running_stats=True, momentum=0.3)
    for _ in range(2):
        np.testing.assert_allclose(km(kiln.tensor(x)).numpy(), _np(tm(torch.tensor(x))),
                                   rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(km.running_mean.numpy(), tm.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(km.running_var.numpy(), tm.running_var.numpy(), rtol=1e-5, atol=1e-6)
    km.eval()
    tm.eval()
    np.testing.assert_allclose(km(kiln.tensor(x)).numpy(), _np(tm(torch.tensor(x))), rtol=1e-4,
                               atol=1e-5)
