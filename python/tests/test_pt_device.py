# The device API against torch 1.13 on a CPU-only machine: kiln.device, Tensor.device/to/cpu,
# device= on factories, kiln.cuda and kiln.backends, and the error for a device Kiln lacks.
import pickle

import pytest

import kiln

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("spec", ["cpu", "cuda", "cuda:1", "mps", "meta", "cpu:0"])
def test_device_parses_like_torch(spec):
    k, t = kiln.device(spec), torch.device(spec)
    assert (k.type, k.index) == (t.type, t.index)
    assert str(k) == str(t) and repr(k) == repr(t)
    assert k == kiln.device(spec) and hash(k) == hash(kiln.device(spec))
    assert pickle.loads(pickle.dumps(k)) == k


def test_device_forms():
    assert kiln.device("cuda", 1) == kiln.device("cuda:1")
    assert kiln.device(0) == kiln.device("cuda:0") and torch.device(0) == torch.device("cuda:0")
    assert kiln.device(kiln.device("cpu")) == kiln.device("cpu")
    assert kiln.device("cpu") == "cpu" and kiln.device("cpu") != kiln.device("cuda")
    for bad in ("gpu", "cuda:x", "cuda:-1"):
        with pytest.raises(RuntimeError):
            torch.device(bad)
        with pytest.raises(kiln.Error):
            kiln.device(bad)
    with pytest.raises(kiln.Error):
        kiln.device("cuda:1", 2)


def test_tensor_device_and_to():
    x = kiln.randn(2, 3)
    tx = torch.randn(2, 3)
    assert x.device == kiln.device("cpu") and str(x.device) == str(tx.device)
    assert x.is_cuda is tx.is_cuda is False and x.get_device() == tx.get_device() == -1
    # Nothing to do returns the tensor itself, as torch.
    for args in [("cpu",), (kiln.device("cpu"),), (kiln.float32,), (x,)]:
        assert x.to(*args) is x
    assert tx.to("cpu") is tx and tx.cpu() is tx and x.cpu() is x
    assert x.to("cpu", copy=True) is not x
    assert x.to("cpu", kiln.float64).dtype == kiln.float64
    assert x.to(device="cpu", dtype=kiln.int64).dtype == kiln.int64
    assert x.to(kiln.float64, non_blocking=True).dtype == kiln.float64
    assert x.to(kiln.zeros(1, dtype=kiln.float64)).dtype == kiln.float64
    y = x.to(kiln.float64, copy=True)
    assert y.dtype == kiln.float64
    # A copy keeps autograd history, as torch's to() does.
    w = kiln.ones(2, requires_grad=True)
    w.to(kiln.float64).sum().backward()
    assert w.grad.tolist() == [1.0, 1.0]


def test_cuda_is_a_clear_error():
    x = kiln.ones(2)
    for call in (lambda: x.to("cuda"), lambda: x.cuda(), lambda: x.to("cuda:0"),
                 lambda: kiln.zeros(2, device="cuda"), lambda: kiln.tensor([1.0], device="cuda"),
                 lambda: x.to(kiln.device("cuda"), kiln.float64), lambda: kiln.cuda.FloatTensor(2)):
        with pytest.raises(kiln.Error, match="cuda"):
            call()
    with pytest.raises(kiln.Error, match="mps"):
        x.to("mps")


def test_cuda_and_backends_answer_as_cpu_only_torch():
    assert kiln.cuda.is_available() is torch.cuda.is_available() is False
    assert kiln.cuda.device_count() == torch.cuda.device_count() == 0
    kiln.cuda.manual_seed(1)
    kiln.cuda.manual_seed_all(1)
    assert kiln.backends.mps.is_available() is False
    assert kiln.backends.cudnn.is_available() is torch.backends.cudnn.is_available()
    kiln.backends.cudnn.benchmark = True
    kiln.backends.cudnn.deterministic = True
    assert not isinstance(kiln.ones(1), kiln.cuda.FloatTensor)
    # The usual idiom.
    device = kiln.device("cuda" if kiln.cuda.is_available() else "cpu")
    assert kiln.ones(2).to(device).device == device


@pytest.mark.parametrize("name,args", [
    ("zeros", (2, 3)), ("ones", ((2, 3),)), ("empty", (4,)), ("rand", (2, 2)),
    ("randn", (3,)), ("full", ((2,), 1.5)), ("arange", (5,)), ("linspace", (0, 1, 5)),
    ("eye", (3,)), ("tensor", ([1.0, 2.0],)), ("as_tensor", ([1, 2],)),
    ("randint", (5, (3,))), ("randperm", (4,)), ("logspace", (0, 1, 3)),
])
def test_factories_take_device_and_dtype(name, args):
    k = getattr(kiln, name)(*args, device="cpu")
    t = getattr(torch, name)(*args, device="cpu")
    assert tuple(k.shape) == tuple(t.shape)
    assert str(k.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
    assert k.device == kiln.device("cpu")
    k2 = getattr(kiln, name)(*args, device=kiln.device("cpu"), dtype=kiln.float64)
    assert k2.dtype == kiln.float64
    if name not in ("tensor", "as_tensor"):
        k3 = getattr(kiln, name)(*args, dtype=kiln.float64, requires_grad=True)
        assert k3.requires_grad


@pytest.mark.parametrize("name", ["zeros_like", "ones_like", "empty_like", "rand_like",
                                  "randn_like"])
def test_like_factories_take_device(name):
    base = kiln.ones(2, 3, dtype=kiln.float64)
    k = getattr(kiln, name)(base, device="cpu")
    t = getattr(torch, name)(torch.ones(2, 3, dtype=torch.float64), device="cpu")
    assert tuple(k.shape) == tuple(t.shape) and k.dtype == kiln.float64


def test_cuda_amp_disables_itself_as_torch_does():
    scaler = kiln.cuda.amp.GradScaler()
    w = kiln.ones(2, requires_grad=True)
    opt = kiln.optim.SGD([w], lr=0.5)
    with pytest.warns(UserWarning):
        ctx = kiln.cuda.amp.autocast()
    with ctx:
        loss = (w * w).sum()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
    assert w.tolist() == [0.0, 0.0] and not scaler.is_enabled()
    with kiln.cuda.amp.autocast(enabled=False):
        pass
