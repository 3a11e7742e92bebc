# kiln.nn from Python: Module subclasses with attribute registration, parameters, state_dict,
# train/eval, C++ layers inside Python modules, optimizers, schedules, data loading, safetensors.
import numpy as np
import pytest

import kiln
import kiln.nn as nn


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 3)
        self.scale = nn.Parameter(kiln.ones(3))
        self.register_buffer("calls", kiln.zeros(1))
        self.note = "not a parameter"

    def forward(self, x):
        return self.fc2(kiln.relu(self.fc1(x))) * self.scale


def test_registration_and_state_dict():
    m = MLP()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["scale", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert len(list(m.parameters())) == 5 and m.num_parameters() == 3 + 8 * 16 + 16 + 16 * 3 + 3
    sd = m.state_dict()
    assert list(sd) == ["scale", "calls", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert m.note == "not a parameter" and isinstance(m.fc1, nn.Module)
    m.train(False)
    assert not m.training and not m.fc1.training
    m.train()
    assert m.fc2.training
    m2 = MLP()
    m2.load_state_dict(sd)
    x = kiln.randn(4, 8)
    np.testing.assert_array_equal(m(x).detach().numpy(), m2(x).detach().numpy())
    with pytest.raises(kiln.Error):
        m2.load_state_dict({"scale": kiln.ones(3)})          # strict: missing keys
    with pytest.raises(ValueError):
        bad = dict(sd)
        bad["scale"] = kiln.ones(4)
        m2.load_state_dict(bad)


def train_steps(model, opt, xs, ys, steps):
    losses = []
    for _ in range(steps):
        loss = kiln.cross_entropy(model(xs), ys)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_python_module_trains_like_the_cpp_modules():
    # The same MLP twice from one seed: once as a Python nn.Module (forward in Python), once as
    # Kiln's C++ modules and optimizer driven directly (kiln._C.nn / kiln._C.optim). Five SGD
    # steps with momentum give the same losses.
    kiln.manual_seed(7)
    py_model = MLP()
    kiln.manual_seed(7)
    fc1, fc2 = kiln._C.nn.Linear(8, 16), kiln._C.nn.Linear(16, 3)
    scale = kiln.ones(3, requires_grad=True)
    cpp_params = [scale] + [t for _, t in fc1.named_parameters()] + [t for _, t in fc2.named_parameters()]
    xs, ys = kiln.randn(32, 8), kiln.randint(0, 3, (32,))
    a = train_steps(py_model, kiln.optim.SGD(py_model.parameters(), lr=0.1, momentum=0.9), xs, ys, 5)
    cpp_opt = kiln._C.optim.SGD(cpp_params, lr=0.1, momentum=0.9)
    b = []
    for _ in range(5):
        loss = kiln.cross_entropy(fc2(kiln.relu(fc1(xs))) * scale, ys)
        cpp_opt.zero_grad()
        loss.backward()
        cpp_opt.step()
        b.append(loss.item())
    assert a == b
    assert a[-1] < a[0]


def test_cpp_layers_and_batchnorm_buffers():
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 10))
    x = kiln.randn(2, 1, 8, 8)
    assert net(x).shape == (2, 10)
    names = list(net.state_dict())
    assert "1.running_mean" in names and "1.num_batches_tracked" in names
    rm = net[1].running_mean.clone()
    net(x)
    assert not np.array_equal(net[1].running_mean.numpy(), rm.numpy())   # updated in training
    net.eval()
    before = net[1].running_mean.clone()
    net(x)
    np.testing.assert_array_equal(net[1].running_mean.numpy(), before.numpy())
    lstm = nn.LSTM(4, 8)
    out, (h, c) = lstm(kiln.randn(5, 2, 4))
    assert out.shape == (5, 2, 8) and h.shape == (1, 2, 8) and c.shape == (1, 2, 8)


def test_optimizers_schedules_and_clipping():
    w = kiln.tensor([1.0, -2.0], requires_grad=True)
    for opt_cls, kw in [(kiln.optim.SGD, {"lr": 0.1}), (kiln.optim.Adam, {"lr": 0.1}),
                        (kiln.optim.AdamW, {"lr": 0.1}), (kiln.optim.RMSprop, {"lr": 0.01})]:
        p = w.detach().clone().requires_grad_()
        opt = opt_cls([p], **kw)
        for _ in range(3):
            opt.zero_grad()
            (p * p).sum().backward()
            opt.step()
        assert (p * p).sum().item() < 5.0, opt_cls
    opt = kiln.optim.SGD([w], lr=1.0)
    sched = kiln.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    for _ in range(4):
        sched.step()
    assert opt.lr == pytest.approx(0.25)
    (w * 10).sum().backward()
    total = kiln.optim.clip_grad_norm_([w], 1.0)
    assert total == pytest.approx(np.sqrt(200.0)) and w.grad.norm().item() == pytest.approx(1.0, rel=1e-4)
    with pytest.raises(kiln.Error):
        kiln.optim.SGD([w], lr=-1.0)


def test_dataloader_and_safetensors(tmp_path):
    xs, ys = kiln.arange(10.0).reshape(10, 1), kiln.arange(10)
    dl = kiln.io.DataLoader((xs, ys), batch_size=4, shuffle=True, seed=3)
    assert len(dl) == 3
    seen = sorted(v for xb, yb in dl for v in yb.tolist())
    assert seen == list(range(10))
    m = MLP()
    path = str(tmp_path / "m.safetensors")
    kiln.io.save_file(m.state_dict(), path)
    loaded = kiln.io.load_file(path)
    assert list(loaded) == list(m.state_dict())
    m2 = MLP()
    m2.load_state_dict(loaded)
    np.testing.assert_array_equal(m2.fc1.weight.detach().numpy(), m.fc1.weight.detach().numpy())
    (tmp_path / "bad.safetensors").write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{}")
    with pytest.raises(kiln.Error):
        kiln.io.load_file(str(tmp_path / "bad.safetensors"))
    with pytest.raises(kiln.Error):
        kiln.io.load_file(str(tmp_path / "missing.safetensors"))


def test_attention_transformer_moe_and_conv_transpose():
    mha = nn.MultiheadAttention(16, 4, batch_first=True)   # torch's arguments and results
    x = kiln.randn(2, 5, 16)
    out, weights = mha(x, x, x)
    assert out.shape == (2, 5, 16) and weights.shape == (2, 5, 5)
    assert mha(x, kiln.randn(2, 7, 16), kiln.randn(2, 7, 16))[0].shape == (2, 5, 16)
    names = [n for n, _ in mha.named_parameters()]
    assert len(names) == 4
    block = nn.TransformerBlock(16, 4)
    y = block(x)
    assert y.shape == (2, 5, 16)
    y.sum().backward()
    assert all(p.grad is not None for p in block.parameters())
    moe = nn.MoE(16, 32, num_experts=4, top_k=2)
    out, aux = moe._cpp.route(x)
    assert out.shape == x.shape and aux.numel() == 1
    ct = nn.ConvTranspose2d(3, 2, 3, stride=2)
    assert ct(kiln.randn(1, 3, 4, 4)).shape == (1, 2, 9, 9)
