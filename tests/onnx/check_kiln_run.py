#!/usr/bin/python3
"""kiln-run end to end (ctest, after the onnx_models fixture): feeds an exported model's input as
.npy, writes .npz, and compares with PyTorch's output; then a Kiln saved graph written by the
runner's own test path. Usage: check_kiln_run.py KILN_RUN MODELS_DIR"""
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
        print("kiln-run: ok")


if __name__ == "__main__":
    main()
