#!/usr/bin/python3
"""kiln-run end to end (ctest, after the onnx_models fixture): feeds an exported model's input as
.npy, writes .npz, and compares with PyTorch's output; then a Kiln saved graph written by the
runner's own test path; then uint16/32/64 arrays in and out of a small model built here.
Usage: check_kiln_run.py KILN_RUN MODELS_DIR"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper


def pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def unsigned_model(path, elem_type):
    """y = max(a, b) >> s and m = max(a, b), all of one unsigned ONNX type."""
    from onnx import helper
    nodes = [helper.make_node("Max", ["a", "b"], ["m"]),
             helper.make_node("BitShift", ["m", "s"], ["y"], direction="RIGHT")]
    g = helper.make_graph(nodes, "unsigned",
                          [helper.make_tensor_value_info(n, elem_type, [5]) for n in "abs"],
                          [helper.make_tensor_value_info(n, elem_type, [5]) for n in "ym"])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(m)
    onnx.save(m, path)


def check_unsigned(kiln_run, tmp):
    """uint16/32/64 .npy inputs are read (held widened), outputs written back in their declared
    dtypes with numpy's values; a uint64 of 2^63 or more and a wrong dtype are refused."""
    def run(model, arrays, check=True):
        args = [kiln_run, model, "--output", os.path.join(tmp, "u.npz")]
        for n, a in arrays.items():
            np.save(os.path.join(tmp, f"u_{n}.npy"), a)
            args += ["--input", f"{n}=" + os.path.join(tmp, f"u_{n}.npy")]
        return subprocess.run(args, capture_output=True, text=True, check=check)

    rng = np.random.default_rng(0)
    for elem_type, dt in ((onnx.TensorProto.UINT16, np.uint16), (onnx.TensorProto.UINT32, np.uint32),
                          (onnx.TensorProto.UINT64, np.uint64)):
        model = os.path.join(tmp, f"{np.dtype(dt).name}.onnx")
        unsigned_model(model, elem_type)
        top = min(np.iinfo(dt).max, 2**63 - 1)  # uint64: Kiln holds int64's range
        a = np.concatenate([[top, 0], rng.integers(0, top, 3, endpoint=True)]).astype(dt)
        b = np.concatenate([[1, top], rng.integers(0, top, 3, endpoint=True)]).astype(dt)
        s = np.array([0, 1, np.iinfo(dt).bits - 1, 3, 7], dt)
        r = run(model, {"a": a, "b": b, "s": s})
        got = np.load(os.path.join(tmp, "u.npz"))
        assert got["m"].dtype == dt and got["y"].dtype == dt, (got["m"].dtype, got["y"].dtype)
        np.testing.assert_array_equal(got["m"], np.maximum(a, b))
        np.testing.assert_array_equal(got["y"], np.maximum(a, b) >> s)
        assert f"m: {np.dtype(dt).name}[5]" in r.stdout, r.stdout
        print(f"{np.dtype(dt).name}: kiln-run Max/BitShift equal numpy's")
        # Fed in another unsigned dtype: refused, naming the input and both types.
        other = np.uint16 if dt != np.uint16 else np.uint32
        r = run(model, {"a": a.astype(other), "b": b, "s": s}, check=False)
        assert r.returncode == 1 and "[kiln-run] input 'a' expects " \
            f"{np.dtype(dt).name}[5], given {np.dtype(other).name}[5]" in r.stderr, r.stderr
    # uint64 values of 2^63 or more do not fit the int64 Kiln holds them in.
    big = np.array([1, 2**63 + 5, 3, 4, 5], np.uint64)
    zero = np.zeros(5, np.uint64)
    r = run(os.path.join(tmp, "uint64.onnx"), {"a": zero, "b": big, "s": zero}, check=False)
    assert r.returncode == 1 and "[kiln-run] input 'b': element 1" in r.stderr \
        and str(2**63 + 5) in r.stderr, r.stderr
    print(r.stderr.strip())


def main():
    kiln_run, models = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("resnet", "transformer", "lstm"):
            d = os.path.join(models, name)
            x = pb(os.path.join(d, "input_0.pb"))
            want = pb(os.path.join(d, "output_0.pb"))
            np.save(os.path.join(tmp, "x.npy"), x)
            out = os.path.join(tmp, "out.npz")
            r = subprocess.run([kiln_run, os.path.join(d, "model.onnx"),
                                "--input", "input_0=" + os.path.join(tmp, "x.npy"),
                                "--output", out, "--bench", "5"],
                               capture_output=True, text=True, check=True)
            print(r.stdout.strip())
            got = np.load(out)["output_0"]
            rel = np.abs(got - want).max() / np.abs(want).max()
            print(f"{name}: kiln-run output {got.shape} vs PyTorch: max rel diff {rel:.2e}")
            assert got.shape == want.shape and rel <= 1e-4, name
            assert "p50" in r.stdout and "p99" in r.stdout
        # The ResNet with its weights as ONNX external data (onnx's own raw file, beside it).
        ext = os.path.join(tmp, "ext")
        os.makedirs(ext)
        m = onnx.load(os.path.join(models, "resnet", "model.onnx"))
        onnx.save_model(m, os.path.join(ext, "model.onnx"), save_as_external_data=True,
                        all_tensors_to_one_file=True, location="weights.bin", size_threshold=256)
        assert os.path.getsize(os.path.join(ext, "model.onnx")) < 100000
        np.save(os.path.join(tmp, "x.npy"), pb(os.path.join(models, "resnet", "input_0.pb")))
        out = os.path.join(tmp, "out.npz")
        r = subprocess.run([kiln_run, os.path.join(ext, "model.onnx"),
                            "--input", "input_0=" + os.path.join(tmp, "x.npy"), "--output", out],
                           capture_output=True, text=True, check=True)
        want = pb(os.path.join(models, "resnet", "output_0.pb"))
        got = np.load(out)["output_0"]
        rel = np.abs(got - want).max() / np.abs(want).max()
        print(f"resnet with external data: kiln-run vs PyTorch: max rel diff {rel:.2e}")
        assert rel <= 1e-4
        # Its weights file truncated: a clean error naming the initializer.
        with open(os.path.join(ext, "weights.bin"), "r+b") as f:
            f.truncate(1000)
        r = subprocess.run([kiln_run, os.path.join(ext, "model.onnx"),
                            "--input", "input_0=" + os.path.join(tmp, "x.npy")],
                           capture_output=True, text=True)
        assert r.returncode == 1 and "run past the end" in r.stderr, r.stderr
        print(r.stderr.strip())
        # A missing input names the model's inputs and fails cleanly.
        r = subprocess.run([kiln_run, os.path.join(models, "resnet", "model.onnx")],
                           capture_output=True, text=True)
        assert r.returncode == 1 and "no --input for 'input_0'" in r.stderr, r.stderr
        # Input checks: a fixed-shape export refuses another batch and another rank, naming the
        # input, the model's shape and the one given.
        resnet = os.path.join(models, "resnet", "model.onnx")
        x = pb(os.path.join(models, "resnet", "input_0.pb"))
        for bad_x, words in ((x[:1], ["input 'input_0'", "fixes its shape to float32[2, 3, 64, 64]",
                                      "given [1, 3, 64, 64]"]),
                             (x[0], ["input 'input_0' has rank 4", "given 3-D [3, 64, 64]"])):
            np.save(os.path.join(tmp, "bad_x.npy"), bad_x)
            r = subprocess.run([kiln_run, resnet, "--input",
                                "input_0=" + os.path.join(tmp, "bad_x.npy")],
                               capture_output=True, text=True)
            assert r.returncode == 1 and all(w in r.stderr for w in words), r.stderr
            print(r.stderr.strip())
        # A dynamic axis: without --input the error names the input and says its dims are
        # dynamic; with one, any size along it runs.
        dyn = os.path.join(models, "transformer_dynamic", "model.onnx")
        r = subprocess.run([kiln_run, dyn], capture_output=True, text=True)
        assert r.returncode == 1 and "no --input for 'input_0' (it expects float32[?, 10, 64]" \
            in r.stderr and "dynamic" in r.stderr, r.stderr
        print(r.stderr.strip())
        np.save(os.path.join(tmp, "x3.npy"), np.random.randn(3, 10, 64).astype(np.float32))
        r = subprocess.run([kiln_run, dyn, "--input", "input_0=" + os.path.join(tmp, "x3.npy"),
                            "--output", out], capture_output=True, text=True, check=True)
        assert np.load(out)["output_0"].shape == (3, 10, 64)
        # A corrupt model file is a clean error, not a crash.
        bad = os.path.join(tmp, "bad.onnx")
        with open(os.path.join(models, "lstm", "model.onnx"), "rb") as f:
            data = f.read()
        with open(bad, "wb") as f:
            f.write(data[: len(data) // 2])
        r = subprocess.run([kiln_run, bad, "--input", "input_0=" + os.path.join(tmp, "x.npy")],
                           capture_output=True, text=True)
        assert r.returncode == 1 and "[" in r.stderr, r.stderr
        check_unsigned(kiln_run, tmp)
        print("kiln-run: ok")


if __name__ == "__main__":
    main()
