"""The promotion table and the op semantics once found different from torch 1.13, each case
against torch itself: true division, int64 accumulation, Python scalars by kind, 0-d tensors,
bool arithmetic, calls torch accepts that Kiln refused, and the errors for bad input."""
import numpy as np
import pytest

import kiln
import kiln.nn.functional as KF

torch = pytest.importorskip("torch")
TF = torch.nn.functional

DTYPES = ["bool", "int32", "int64", "float32", "float64", "bfloat16"]


def same(k, t, rtol=1e-6, atol=1e-7):
    """Same dtype, shape and values (NaN where torch has NaN)."""
    assert str(k.dtype).split(".")[-1] == str(t.dtype).split(".")[-1], (k.dtype, t.dtype)
    assert tuple(k.shape) == tuple(t.shape), (k.shape, t.shape)
    kv = np.array(k.to(kiln.float64).tolist() if k.dtype != kiln.float64 else k.tolist(),
                  dtype=np.float64)
    tv = t.detach().double().numpy()
    np.testing.assert_allclose(kv, tv, rtol=rtol, atol=atol, equal_nan=True)


def pair(values, dtype):
    return (kiln.tensor(values).to(getattr(kiln, dtype)),
            torch.tensor(values).to(getattr(torch, dtype)))


# ---- silent wrong answers ------------------------------------------------------------------

def test_integer_true_division_is_float():
    same(kiln.tensor([3, 4]) / kiln.tensor([2, 3]), torch.tensor([3, 4]) / torch.tensor([2, 3]))
    same(kiln.tensor([3, 4]) / 2, torch.tensor([3, 4]) / 2)
    same(7 / kiln.tensor([2, 4]), 7 / torch.tensor([2, 4]))
    same(kiln.div(kiln.tensor([7, -7]), 2), torch.div(torch.tensor([7, -7]), 2))
    # with a zero divisor: inf, as float division
    same(kiln.tensor([1, 0]) / kiln.tensor([0, 0]), torch.tensor([1, 0]) / torch.tensor([0, 0]))


@pytest.mark.parametrize("mode", ["trunc", "floor"])
def test_rounding_division(mode):
    a, b = [7, -7, 6, -6, 0], [2, 2, -4, 4, 3]
    for dt in ["int32", "int64", "float32"]:
        ka, ta = pair(a, dt)
        kb, tb = pair(b, dt)
        same(kiln.div(ka, kb, rounding_mode=mode), torch.div(ta, tb, rounding_mode=mode))
    same(kiln.tensor(a) // kiln.tensor(b), torch.tensor(a) // torch.tensor(b))
    same(kiln.tensor(a) // 2, torch.tensor(a) // 2)
    with pytest.raises(kiln.Error, match=r"\[div\]"):
        kiln.div(kiln.tensor([1]), kiln.tensor([0]), rounding_mode=mode)


def test_in_place_true_division_of_an_integer_tensor_is_refused():
    with pytest.raises(RuntimeError):
        torch.tensor([4, 2]).div_(2)
    with pytest.raises(kiln.Error, match=r"\[div_\]"):
        kiln.tensor([4, 2]).div_(2)


@pytest.mark.parametrize("fn", ["sum", "nansum", "prod", "cumsum", "cumprod"])
@pytest.mark.parametrize("dt", ["bool", "int32", "int64"])
def test_integer_accumulation_is_int64(fn, dt):
    vals = [2 ** 20, 2 ** 20, 3, 1] if dt != "bool" else [True, False, True, True]
    k, t = pair(vals, dt)
    kargs, targs = ((0,), (0,)) if fn.startswith("cum") else ((), ())
    same(getattr(kiln, fn)(k, *kargs), getattr(torch, fn)(t, *targs))


def test_cosine_similarity_over_a_broadcast_dim():
    a, b = np.random.RandomState(0).randn(3, 1), np.random.RandomState(1).randn(4)
    same(KF.cosine_similarity(kiln.tensor(a), kiln.tensor(b), dim=-1),
         TF.cosine_similarity(torch.tensor(a), torch.tensor(b), dim=-1))


def test_prelu_of_a_0d_input_is_0d():
    same(KF.prelu(kiln.tensor(-2.0), kiln.tensor([0.25])),
         TF.prelu(torch.tensor(-2.0), torch.tensor([0.25])))


def test_var_of_one_element_has_a_nan_gradient():
    # n - correction = 0: the variance is 0/0 and so is its gradient, 2 (x - mean) / 0. torch
    # 1.13 gives NaN over a dim but inf for a 0-d input (docs/torch_differences.md).
    k = kiln.tensor(3.0, dtype=kiln.float64).requires_grad_()
    t = torch.tensor(3.0, dtype=torch.float64).requires_grad_()
    kv, tv = k.var(), t.var()
    kv.backward()
    same(kv, tv)
    assert np.isnan(k.grad.item())
    k1 = kiln.tensor([3.0], dtype=kiln.float64).requires_grad_()
    t1 = torch.tensor([3.0], dtype=torch.float64).requires_grad_()
    k1.var(0).backward()
    t1.var(0).backward()
    same(k1.grad, t1.grad)


# ---- result dtypes -------------------------------------------------------------------------

@pytest.mark.parametrize("dt", ["int32", "int64", "bool"])
def test_integer_powers_stay_integers(dt):
    if dt == "bool":
        k, t = pair([True, False], dt)
    else:
        k, t = pair([2, -3, 0], dt)
    same(k ** 2, t ** 2)
    same(kiln.pow(k, 3), torch.pow(t, 3))
    same(k ** k.to(kiln.int64), t ** t.to(torch.int64))
    same(k ** 0.5, t ** 0.5)
    same(2 ** k, 2 ** t)


def test_full_infers_the_dtype_from_the_fill_value():
    for v in [7, 7.5, True]:
        same(kiln.full((2,), v), torch.full((2,), v))
    same(kiln.full((2,), 7, dtype=kiln.float64), torch.full((2,), 7, dtype=torch.float64))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("scalar", [True, 2, 2.5])
@pytest.mark.parametrize("op", ["add", "mul", "sub", "div", "lt", "eq", "maximum"])
def test_python_scalars_promote_by_kind(dt, scalar, op):
    k, t = pair([1, 0, 3], dt)
    ks, ts = kiln.tensor(scalar), torch.tensor(scalar)
    # (torch.maximum takes no Python number: a documented difference, docs/torch_differences.md)
    cases = [(ks, ts)] if op == "maximum" else [(scalar, scalar), (ks, ts)]
    for kx, tx in cases:
        try:
            want = getattr(torch, op)(t, tx)
        except RuntimeError:
            with pytest.raises(kiln.Error):
                getattr(kiln, op)(k, kx)
            continue
        same(getattr(kiln, op)(k, kx), want, rtol=1e-2 if dt == "bfloat16" else 1e-6)


@pytest.mark.parametrize("a", DTYPES)
@pytest.mark.parametrize("b", DTYPES)
def test_a_0d_tensor_does_not_widen_within_its_category(a, b):
    k, t = pair([1, 0, 2], a)
    k0, t0 = kiln.tensor(1).to(getattr(kiln, b)), torch.tensor(1).to(getattr(torch, b))
    for op in ["add", "mul"]:
        try:
            want = getattr(torch, op)(t, t0)
        except RuntimeError:
            continue
        same(getattr(kiln, op)(k, k0), want, rtol=1e-2)


def test_bool_arithmetic():
    k, t = pair([True, False, True], "bool")
    k2, t2 = pair([True, True, False], "bool")
    same(k + True, t + True)
    same(k + k2, t + t2)
    same(k * k2, t * t2)
    same(k + 1, t + 1)
    same(k * 2.5, t * 2.5)
    with pytest.raises(RuntimeError):
        t - t2
    with pytest.raises(kiln.Error, match=r"\[sub\]"):
        k - k2
    with pytest.raises(kiln.Error, match=r"\[neg\]"):
        -k


@pytest.mark.parametrize("fn", ["hardshrink", "softshrink"])
def test_shrinks_keep_bfloat16(fn):
    k, t = pair([-1.0, 0.25, 2.0], "bfloat16")
    same(getattr(KF, fn)(k), getattr(TF, fn)(t), rtol=1e-2)


def test_threshold_keeps_bfloat16():
    k, t = pair([-1.0, 0.25, 2.0], "bfloat16")
    same(KF.threshold(k, 0.5, -3.0), TF.threshold(t, 0.5, -3.0), rtol=1e-2)


@pytest.mark.parametrize("fn", ["prod", "trace"])
def test_autocast_computes_precision_sensitive_ops_in_float32(fn):
    k, t = pair([[1.5, 2.0], [3.0, 0.5]], "bfloat16")
    with kiln.autocast("cpu"):
        kr = getattr(kiln, fn)(k)
    with torch.autocast("cpu"):
        tr = getattr(torch, fn)(t)
    same(kr, tr)


def test_autocast_computes_kl_div_in_float32():
    k, t = pair([[-1.0, -2.0]], "bfloat16")
    kt, tt = pair([[0.25, 0.75]], "bfloat16")
    with kiln.autocast("cpu"):
        kr = KF.kl_div(k, kt, reduction="sum")
    with torch.autocast("cpu"):
        tr = TF.kl_div(t, tt, reduction="sum")
    same(kr, tr, rtol=1e-6)


# ---- calls torch accepts -------------------------------------------------------------------

def test_cat_promotes_mixed_dtypes():
    same(kiln.cat([kiln.tensor([1, 2]), kiln.tensor([0.5])]),
         torch.cat([torch.tensor([1, 2]), torch.tensor([0.5])]))
    same(kiln.cat([kiln.tensor([True]), kiln.tensor([3], dtype=kiln.int32)]),
         torch.cat([torch.tensor([True]), torch.tensor([3], dtype=torch.int32)]))


@pytest.mark.parametrize("fn", ["logical_and", "logical_or", "logical_xor"])
def test_logical_ops_take_any_dtype(fn):
    ka, ta = pair([0, 1, 2], "int64")
    kb, tb = pair([0.0, 0.0, 0.5], "float32")
    same(getattr(kiln, fn)(ka, kb), getattr(torch, fn)(ta, tb))
    same(kiln.logical_not(ka), torch.logical_not(ta))


@pytest.mark.parametrize("dt", ["int32", "int64"])
def test_integer_matmul(dt):
    a = np.arange(6).reshape(2, 3) - 2
    b = np.arange(12).reshape(3, 4) * 3
    k, t = kiln.tensor(a).to(getattr(kiln, dt)), torch.tensor(a).to(getattr(torch, dt))
    kb, tb = kiln.tensor(b).to(getattr(kiln, dt)), torch.tensor(b).to(getattr(torch, dt))
    same(k @ kb, t @ tb)
    same(kiln.matmul(k[0], kb), torch.matmul(t[0], tb))


def test_rsub_with_a_tensor():
    ka, ta = pair([1.0, 2.0], "float32")
    kb, tb = pair([10.0, 20.0], "float32")
    same(kiln.rsub(ka, kb), torch.rsub(ta, tb))
    same(kiln.rsub(ka, kb, alpha=2), torch.rsub(ta, tb, alpha=2))
    same(kiln.rsub(ka, 3), torch.rsub(ta, 3))
    same(kiln.add(ka, kb, alpha=3), torch.add(ta, tb, alpha=3))
    same(kiln.sub(ka, kb, alpha=0.5), torch.sub(ta, tb, alpha=0.5))


@pytest.mark.parametrize("eq", ["ii->i", "ii", "iij->j", "bii->bi", "ij,jj->i", "iji->j"])
def test_einsum_with_a_repeated_index(eq):
    r = np.random.RandomState(3)
    shapes = {"ii->i": [(3, 3)], "ii": [(3, 3)], "iij->j": [(3, 3, 2)], "bii->bi": [(2, 3, 3)],
              "ij,jj->i": [(2, 3), (3, 3)], "iji->j": [(3, 2, 3)]}[eq]
    arrays = [r.randn(*s) for s in shapes]
    ks = [kiln.tensor(a).requires_grad_() for a in arrays]
    ts = [torch.tensor(a).requires_grad_() for a in arrays]
    ko, to = kiln.einsum(eq, *ks), torch.einsum(eq, *ts)
    same(ko, to, rtol=1e-12)
    ko.sum().backward()
    to.sum().backward()
    for k, t in zip(ks, ts):
        same(k.grad, t.grad, rtol=1e-12)


def test_masked_fill_with_a_broadcast_mask():
    k, t = pair([[1.0, 2.0], [3.0, 4.0]], "float32")
    km, tm = pair([True, False], "bool")
    same(k.masked_fill(km, -1.0), t.masked_fill(tm, -1.0))
    same(kiln.masked_fill(k, km.reshape(2, 1), 5), torch.masked_fill(t, tm.reshape(2, 1), 5))


def test_masked_assignment_after_use_keeps_the_gradient():
    a = np.array([-1.0, 2.0, -3.0, 4.0])
    k = kiln.tensor(a).requires_grad_()
    t = torch.tensor(a).requires_grad_()
    kx, tx = k * 2, t * 2
    ky, ty = kx * 3, tx * 3
    kx[kx > 0] = 0
    tx[tx > 0] = 0
    (kx.sum() + ky.sum()).backward()
    (tx.sum() + ty.sum()).backward()
    same(k.grad, t.grad)


# ---- bad input -----------------------------------------------------------------------------

def test_clamp_needs_a_bound():
    with pytest.raises(RuntimeError):
        torch.clamp(torch.tensor([1.0]))
    with pytest.raises(kiln.Error, match=r"\[clamp\]"):
        kiln.clamp(kiln.tensor([1.0]))


@pytest.mark.parametrize("size", [2 ** 63, -(2 ** 64), 2 ** 70])
def test_huge_sizes_raise_kiln_errors(size):
    with pytest.raises(kiln.Error, match=r"^\[empty\]|^\[size\]|^\[shape\]"):
        kiln.empty(size)
    with pytest.raises(kiln.Error):
        kiln.zeros((2, size))


# ---- second round: values at the edges, and what torch refuses --------------------------------

def test_sign_of_nan_and_bool():
    x = [float("nan"), -2.0, 0.0, 3.0]
    same(kiln.sign(kiln.tensor(x)), torch.sign(torch.tensor(x)))
    same(kiln.sign(kiln.tensor([True, False])), torch.sign(torch.tensor([True, False])))


def test_gelu_far_below_zero_is_zero_in_float32():
    x = [-30.0, -10.0, 30.0]
    same(KF.gelu(kiln.tensor(x)), TF.gelu(torch.tensor(x)), rtol=1e-6, atol=0)


def test_nan_passes_through_hardshrink_and_threshold():
    x = [float("nan"), 0.25, -2.0]
    same(KF.hardshrink(kiln.tensor(x)), TF.hardshrink(torch.tensor(x)))
    same(KF.threshold(kiln.tensor(x), 0.5, -1.0), TF.threshold(torch.tensor(x), 0.5, -1.0))


@pytest.mark.parametrize("call", [
    lambda m, a, b: m.lerp(a, b.to(m.float64), 0.5),
    lambda m, a, b: m.pow(a > 0, b > 0),
    lambda m, a, b: m.remainder(a > 0, b > 0),
    lambda m, a, b: m.floor_divide(a > 0, b > 0),
    lambda m, a, b: +(a > 0),
])
def test_refused_like_torch(call):
    with pytest.raises((RuntimeError, TypeError)):
        call(torch, torch.tensor([1.0, 2.0]), torch.tensor([2.0, 1.0]))
    with pytest.raises(kiln.Error):
        call(kiln, kiln.tensor([1.0, 2.0]), kiln.tensor([2.0, 1.0]))


def test_number_kinds_in_clamp_min_and_addcmul():
    k, t = pair([1, 2, 3], "int32")
    same(kiln.clamp_min(k, 1.5), torch.clamp_min(t, 1.5))
    same(kiln.clamp_min(k, 2), torch.clamp_min(t, 2))
    same(kiln.addcmul(k, k, k, value=2), torch.addcmul(t, t, t, value=2))


def test_like_factories_follow_a_traced_shape():
    f = kiln.jit(lambda x: kiln.full_like(x, 2.5) + kiln.zeros_like(x, dtype=kiln.float64))
    for n in (3, 5, 7):
        same(f(kiln.ones(n)), torch.full((n,), 2.5, dtype=torch.float64))


def test_bool_accumulation_and_median_nan():
    k, t = pair([[True, False, False], [False, False, True]], "bool")
    ki, ti = kiln.tensor([[0, 1, 0], [1, 0, 1]]), torch.tensor([[0, 1, 0], [1, 0, 1]])
    same(kiln.scatter_add(k, 0, ki, k), torch.scatter_add(t, 0, ti, t))
    same(kiln.index_add(k, 0, kiln.tensor([1, 0]), k), torch.index_add(t, 0, torch.tensor([1, 0]), t))
    same(kiln.mode(k, 1).values, torch.mode(t, 1).values)
    x = [[1.0, float("nan"), 3.0], [4.0, 2.0, 5.0]]
    same(kiln.median(kiln.tensor(x)), torch.median(torch.tensor(x)))
    kv, tv = kiln.median(kiln.tensor(x), 1), torch.median(torch.tensor(x), 1)
    same(kv.values, tv.values)
    same(kv.indices, tv.indices)
    same(kiln.median(kiln.zeros(0, 3)), torch.median(torch.zeros(0, 3)))


def test_integer_dot_keeps_its_dtype_and_max_dim_gradient_goes_to_the_index():
    k, t = pair([1, 2, 3], "int32")
    same(kiln.dot(k, k), torch.dot(t, t))
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.5]])
    kx, tx = kiln.tensor(x).requires_grad_(), torch.tensor(x).requires_grad_()
    kiln.max(kx, 1).values.sum().backward()
    torch.max(tx, 1).values.sum().backward()
    same(kx.grad, tx.grad)


def test_in_place_float_ops_refuse_integer_tensors():
    with pytest.raises(RuntimeError):
        torch.tensor([1, 2]).exp_()
    with pytest.raises(kiln.Error, match=r"\[exp_\]"):
        kiln.tensor([1, 2]).exp_()


def test_integer_linspace_linear_addmm_and_legacy_empty_cat():
    same(kiln.linspace(-1.5, 3.7, 6, dtype=kiln.int64), torch.linspace(-1.5, 3.7, 6, dtype=torch.int64))
    k, t = pair([[1, 2], [3, 4]], "int64")
    kb, tb = pair([1, -1], "int64")
    same(KF.linear(k, k, kb), TF.linear(t, t, tb))
    same(kiln.addmm(k, k, k), torch.addmm(t, t, t))
    same(kiln.cat([kiln.ones(2, 3), kiln.tensor([])]), torch.cat([torch.ones(2, 3), torch.tensor([])]))


def test_fourth_round():
    # linear algebra runs in float32 under autocast, as torch's fp32 list
    k, t = pair([[2.0, 1.0], [1.0, 3.0]], "bfloat16")
    with kiln.autocast("cpu"):
        ki = kiln.linalg.inv(k)
    with torch.autocast("cpu"):
        ti = torch.linalg.inv(t)
    same(ki, ti, rtol=1e-2)
    # one dtype for tensordot/inner; integers keep theirs
    ka, ta = pair([[1, 2], [3, 4]], "int32")
    same(kiln.inner(ka, ka), torch.inner(ta, ta))
    same(kiln.tensordot(ka, ka, dims=1), torch.tensordot(ta, ta, dims=1))
    with pytest.raises(kiln.Error):
        kiln.tensordot(ka, ka.to(kiln.int64), dims=1)
    # number kinds
    kb, tb = pair(1.5, "bfloat16")
    same(kiln.floor_divide(kb, 2.5), torch.floor_divide(tb, 2.5))
    kx, tx = pair([[1, 2, 3], [4, 5, 6]], "int32")
    km, tm = pair([True, False, True], "bool")
    same(kiln.addcmul(kx, km, km.reshape(3, 1)[:2], value=2),
         torch.addcmul(tx, tm, tm.reshape(3, 1)[:2], value=2))
    kbool, tbool = pair([True, False], "bool")
    same(kiln.clamp(kbool, min=2), torch.clamp(tbool, min=2))
    same(kiln.clamp_min(kbool, 2), torch.clamp_min(tbool, 2))
    # integer addmm truncates a fractional beta, as torch
    kv, tv = pair([1, 2], "int64")
    same(kiln.addmm(kv, ka.to(kiln.int64), ka.to(kiln.int64), beta=0.5, alpha=2),
         torch.addmm(tv, ta.long(), ta.long(), beta=0.5, alpha=2))
    # median's gradient splits among ties
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.5]])
    kx2, tx2 = kiln.tensor(x).requires_grad_(), torch.tensor(x).requires_grad_()
    kiln.median(kx2).backward()
    torch.median(tx2).backward()
    same(kx2.grad, tx2.grad)
    with pytest.raises(kiln.Error):
        kiln.cat(kiln.ones(2, 3))
    with pytest.raises(kiln.Error):
        kiln.linspace(0, 1, 3, dtype=kiln.bool)


@pytest.mark.parametrize("call,name", [
    (lambda x: kiln.add(x, "a"), "add"),
    (lambda x: kiln.exp("a"), "exp"),
    (lambda x: kiln.softmax(x, "a"), "softmax"),
    (lambda x: kiln.clamp(x, min="a"), "clamp"),
    (lambda x: kiln.arange("a"), "arange"),
    (lambda x: kiln.matmul(x, 3), "matmul"),
    (lambda x: x.index_fill_(0, [0], 1.0), "index_fill_"),
    (lambda x: kiln.linalg.inv("a"), "inv"),
])
def test_binding_layer_errors_are_kiln_errors_naming_the_call(call, name):
    with pytest.raises(kiln.Error, match=r"^\[") as e:
        call(kiln.ones(3))
    assert name in str(e.value).split("]")[0], str(e.value)[:120]
    assert "incompatible function arguments" not in str(e.value).splitlines()[0]
