# kiln.save / kiln.load against torch 1.13's behaviour: state dicts, tensors of every dtype,
# nested containers, whole modules behind weights_only=False, torch.save files, hostile files
# (never code, always kiln.Error), map_location; and kiln.onnx.export.
import collections
import io
import os
import pickle
import zipfile

import numpy as np
import pytest

import kiln
from kiln import nn

torch = pytest.importorskip("torch")


def test_round_trip_of_nested_data(tmp_path):
    shared = kiln.arange(6.0).reshape(2, 3)
    obj = {
        "f32": kiln.randn(3, 4), "f64": kiln.randn(2, dtype=kiln.float64),
        "bf16": kiln.tensor([1.5, -2.25, 3e-3]).to(kiln.bfloat16),
        "f16": kiln.tensor([0.5, 65504.0]).to(kiln.float16),
        "i64": kiln.arange(5), "i32": kiln.tensor([1, -2], dtype=kiln.int32),
        "u8": kiln.tensor([0, 255], dtype=kiln.uint8), "b": kiln.tensor([True, False]),
        "scalar": kiln.tensor(3.5), "empty": kiln.zeros(0, 3),
        "view": kiln.arange(10.0)[2:8:2],
        "nested": [shared, (shared, 1, 2.5, "s", None), {"deep": [kiln.ones(1)]}],
        "od": collections.OrderedDict(a=1, b=kiln.zeros(2)), "set": {1, 2},
        "device": kiln.device("cpu"), "bytes": b"\x00\x01", "np": np.arange(3.0),
        "npscalar": np.float64(0.25),
    }
    path = tmp_path / "obj.pt"
    kiln.save(obj, path)
    back = kiln.load(path)
    assert set(back) == set(obj)
    for k in ("f32", "f64", "bf16", "f16", "i64", "i32", "u8", "b", "scalar", "empty", "view"):
        assert back[k].dtype == obj[k].dtype and back[k].shape == obj[k].shape, k
        assert back[k].tolist() == obj[k].tolist(), k
    n = back["nested"]
    assert n[0] is n[1][0]  # one tensor saved once stays one tensor
    assert n[1][1:] == (1, 2.5, "s", None) and n[2]["deep"][0].tolist() == [1.0]
    assert isinstance(back["od"], collections.OrderedDict) and back["set"] == {1, 2}
    assert back["device"] == kiln.device("cpu") and back["bytes"] == b"\x00\x01"
    np.testing.assert_array_equal(back["np"], np.arange(3.0))
    assert back["npscalar"] == 0.25
    # File objects and str paths too.
    buf = io.BytesIO()
    kiln.save([kiln.ones(2)], buf)
    buf.seek(0)
    assert kiln.load(buf)[0].tolist() == [1.0, 1.0]
    kiln.save(kiln.ones(1), str(path))
    assert kiln.load(str(path)).tolist() == [1.0]


def test_requires_grad_and_parameters_survive(tmp_path):
    w = kiln.randn(2, requires_grad=True)
    p = nn.Parameter(kiln.ones(3))
    kiln.save({"w": w, "p": p}, tmp_path / "g.pt")
    back = kiln.load(tmp_path / "g.pt")
    assert back["w"].requires_grad and back["w"].is_leaf
    assert back["p"].requires_grad and type(back["p"]).__name__ == type(p).__name__


def test_state_dict_of_a_model(tmp_path):
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    kiln.save(m.state_dict(), tmp_path / "m.pt")
    m2 = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    m2.load_state_dict(kiln.load(tmp_path / "m.pt"))
    x = kiln.randn(5, 4)
    assert m(x).tolist() == m2(x).tolist()
    # The optimizer's state dict too.
    opt = kiln.optim.Adam(m.parameters(), lr=0.1)
    m(x).sum().backward()
    opt.step()
    kiln.save(opt.state_dict(), tmp_path / "o.pt")
    sd = kiln.load(tmp_path / "o.pt")
    assert sd["param_groups"][0]["betas"] == (0.9, 0.999) and len(sd["state"]) == 4


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        return self.fc(x)


def test_whole_module_needs_weights_only_false(tmp_path):
    m = Net()
    kiln.save(m, tmp_path / "net.pt")
    with pytest.raises(kiln.Error, match="weights_only"):
        kiln.load(tmp_path / "net.pt")
    m2 = kiln.load(tmp_path / "net.pt", weights_only=False)
    x = kiln.randn(4, 3)
    assert type(m2) is Net and m2(x).tolist() == m(x).tolist()


class Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/kiln_pt_save_pwned",))


def test_load_never_runs_code_by_default(tmp_path):
    marker = "/tmp/kiln_pt_save_pwned"
    if os.path.exists(marker):
        os.remove(marker)
    # A kiln.save file carrying a code-running object.
    kiln.save({"w": kiln.ones(1), "x": Evil()}, tmp_path / "evil.pt")
    with pytest.raises(kiln.Error, match="refuses the global"):
        kiln.load(tmp_path / "evil.pt")
    # The same inside a torch.save file.
    torch.save({"x": Evil()}, tmp_path / "evil_torch.pt")
    with pytest.raises(kiln.Error):
        kiln.load(tmp_path / "evil_torch.pt")
    # A hand-made pickle calling builtins.eval.
    with zipfile.ZipFile(tmp_path / "eval.pt", "w") as z:
        z.writestr("kiln/data.pkl", b"cbuiltins\neval\n(V__import__('os').system('touch " +
                   marker.encode() + b"')\ntR.")
    with pytest.raises(kiln.Error, match="builtins.eval"):
        kiln.load(tmp_path / "eval.pt")
    assert not os.path.exists(marker)


def corrupt_files(tmp_path):
    good = tmp_path / "good.pt"
    kiln.save({"w": kiln.ones(4)}, good)
    raw = good.read_bytes()
    yield b"", "empty"
    yield b"not a zip at all" * 10, "garbage"
    yield raw[: len(raw) // 2], "truncated"
    with zipfile.ZipFile(good) as z:
        pkl = z.read("kiln/data.pkl")
    for name, members in [
        ("short tensor", {"kiln/data.pkl": pkl, "kiln/tensors/0": b"\x00" * 8}),
        ("missing tensor", {"kiln/data.pkl": pkl}),
        ("bad pickle", {"kiln/data.pkl": b"\x80\x04garbage", "kiln/tensors/0": b"\x00" * 16}),
        ("no data.pkl", {"x": b""}),
    ]:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            for n, data in members.items():
                z.writestr(n, data)
        yield buf.getvalue(), name

    class P(pickle.Pickler):
        def persistent_id(self, o):
            return o if isinstance(o, tuple) and o and o[0] in ("kiln.tensor", "storage") \
                else None

    for pid, name in [(("kiln.tensor", 0, "float32", (-1,), False, False), "negative dim"),
                      (("kiln.tensor", 0, "complex64", (1,), False, False), "bad dtype"),
                      (("kiln.tensor", 0, "float32", (2 ** 40, 2 ** 40), False, False), "huge"),
                      (("storage", 1), "short pid")]:
        b = io.BytesIO()
        P(b).dump({"w": pid})
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr("kiln/data.pkl", b.getvalue())
            z.writestr("kiln/tensors/0", b"\x00" * 4)
        yield buf.getvalue(), name


def test_malformed_files_raise_kiln_errors(tmp_path):
    for data, name in corrupt_files(tmp_path):
        path = tmp_path / "bad.pt"
        path.write_bytes(data)
        with pytest.raises(kiln.Error):
            kiln.load(path)
        with pytest.raises(kiln.Error):
            kiln.load(io.BytesIO(data))
    with pytest.raises(kiln.Error):
        kiln.load(tmp_path / "does_not_exist.pt")


def test_reads_torch_save_files(tmp_path):
    lin = torch.nn.Linear(3, 2)
    base = torch.arange(12.0).reshape(3, 4)
    obj = {"model": lin.state_dict(), "view": base[:, 1::2], "i": torch.arange(4),
           "bf16": torch.tensor([1.5, 2.0], dtype=torch.bfloat16), "epoch": 7,
           "np": np.ones(2)}
    torch.save(obj, tmp_path / "t.pt")
    back = kiln.load(tmp_path / "t.pt")
    assert back["epoch"] == 7 and back["np"].tolist() == [1.0, 1.0]
    for k in ("weight", "bias"):
        np.testing.assert_array_equal(back["model"][k].numpy(), lin.state_dict()[k].numpy())
    assert back["view"].tolist() == base[:, 1::2].tolist()
    assert back["i"].dtype == kiln.int64 and back["bf16"].dtype == kiln.bfloat16
    assert back["bf16"].to(kiln.float32).tolist() == [1.5, 2.0]
    m = nn.Linear(3, 2)
    m.load_state_dict(back["model"])
    x = np.ones((1, 3), np.float32)
    np.testing.assert_allclose(m(kiln.tensor(x)).detach().numpy(),
                               lin(torch.tensor(x)).detach().numpy(), rtol=1e-6)


def test_map_location(tmp_path):
    kiln.save({"w": kiln.ones(2)}, tmp_path / "m.pt")
    assert kiln.load(tmp_path / "m.pt", map_location="cpu")["w"].tolist() == [1.0, 1.0]
    assert kiln.load(tmp_path / "m.pt", map_location=kiln.device("cpu"))["w"].device == \
        kiln.device("cpu")
    got = kiln.load(tmp_path / "m.pt", map_location=lambda s, loc: s * 2)
    assert got["w"].tolist() == [2.0, 2.0]
    assert kiln.load(tmp_path / "m.pt", map_location={"cuda:0": "cpu"})["w"].shape == (2,)
    with pytest.raises(kiln.Error, match="cuda"):
        kiln.load(tmp_path / "m.pt", map_location="cuda")


@pytest.mark.skipif(not hasattr(kiln._C, "_export_onnx"),
                    reason="kiln._C built without the ONNX exporter binding")
def test_onnx_export(tmp_path):
    onnx = pytest.importorskip("onnx")
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    path = tmp_path / "m.onnx"
    m.train()
    kiln.onnx.export(m, kiln.randn(3, 4), str(path), input_names=["x"], output_names=["y"],
                     dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, opset_version=17)
    assert m.training  # restored
    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    assert [i.name for i in model.graph.input] == ["x"]
    assert [o.name for o in model.graph.output] == ["y"]
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 0  # dynamic
    buf = io.BytesIO()
    kiln.onnx.export(m, (kiln.randn(2, 4),), buf)
    assert onnx.load_from_string(buf.getvalue()).graph.node


def test_mutated_files_raise_only_kiln_errors():
    import random
    buf = io.BytesIO()
    kiln.save({"w": kiln.randn(3, 4), "n": [1, 2.5, "x", kiln.arange(3)],
               "od": collections.OrderedDict(a=kiln.ones(2, dtype=kiln.bfloat16))}, buf)
    good = buf.getvalue()
    rng = random.Random(0)
    for _ in range(300):
        b = bytearray(good)
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        if rng.random() < 0.2:
            b = b[:rng.randrange(len(b))]
        try:
            kiln.load(io.BytesIO(bytes(b)))
        except kiln.Error:
            pass
