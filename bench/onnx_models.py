#!/usr/bin/python3
"""W9, imported-CNN inference: exports a ResNet-18 (torchvision's layout: 7x7 stem, 4 stages of
2 BasicBlocks, 64-512 channels, 1000 classes; the classes of tests/onnx/export_models.py) at
224x224 for a given batch, and times PyTorch 1.13 eager on it. Also the torchvision models of
issue #38 and three sequence models (random weights, opset 17) beside onnxruntime-node.
  onnx_models.py export OUT_DIR BATCH     -> OUT_DIR/resnet18_b<BATCH>.onnx (+ input .npy)
  onnx_models.py pytorch BATCH THREADS    -> one JSON line (images/s, median of timed runs)
  onnx_models.py torchvision OUT_DIR BATCH NAME...  -> OUT_DIR/NAME_b<BATCH>.onnx, _x.npy, _y.npy
  onnx_models.py table OUT_DIR BATCHES THREADS ROUNDS NAME...
      -> Kiln (kiln_onnx_bench) and onnxruntime-node (onnx_ort.js) interleaved per model, batch
         and thread count, ROUNDS rounds; JSON lines on stderr, a markdown table on stdout: the
         medians (ms per batch) and the median of each round's Kiln / ORT ratio (the two runs
         of a round are back to back, so a ratio sees one load). BATCHES, THREADS: comma lists.
         `bench/run TV` runs it."""
import json
import os
import resource
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "onnx"))
from export_models import ResNet  # noqa: E402


def model():
    torch.manual_seed(0)
    m = ResNet(widths=(64, 128, 256, 512), blocks=(2, 2, 2, 2), classes=1000)
    return m.eval()


VIDEO = ("r3d_18", "mc3_18", "r2plus1d_18")
# Sequence models beside the vision ones: torch.nn's transformer encoder (4 layers, d 256, 4
# heads, ffn 1024), a 2-layer LSTM (256 hidden) and a bidirectional 2-layer GRU (256 hidden
# each way), each RNN with a linear head, over 128 steps of 256.
SEQUENCE = ("transformer_encoder", "lstm2", "gru2")


class TransformerEncoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)

    def forward(self, x):
        return self.enc(x)


class Lstm2(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.LSTM(256, 256, num_layers=2, batch_first=True)
        self.head = torch.nn.Linear(256, 256)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


class Gru2(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.GRU(256, 256, num_layers=2, batch_first=True, bidirectional=True)
        self.head = torch.nn.Linear(512, 256)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


def torchvision_input(name, b):
    if name in VIDEO:
        return (b, 3, 16, 112, 112)
    if name in SEQUENCE:
        return (b, 128, 256)
    return (b, 3, 299, 299) if name == "inception_v3" else (b, 3, 224, 224)


def make_model(name):
    if name in SEQUENCE:
        return {"transformer_encoder": TransformerEncoder, "lstm2": Lstm2, "gru2": Gru2}[name]()
    import torchvision
    mod = torchvision.models.video if name in VIDEO else torchvision.models
    return getattr(mod, name)()


def export_torchvision(out, b, names):
    os.makedirs(out, exist_ok=True)
    for name in names:
        path = os.path.join(out, f"{name}_b{b}.onnx")
        if os.path.exists(path):
            continue
        torch.manual_seed(0)
        m = make_model(name).eval()
        x = torch.randn(*torchvision_input(name, b))
        with torch.no_grad():
            y = m(x)
        # Exported with autograd on: under no_grad torch 1.13's transformer layers take their
        # fused inference path, which has no ONNX export.
        torch.onnx.export(m, (x,), path, opset_version=17, input_names=["x"],
                          output_names=["y"])
        np.save(os.path.join(out, f"{name}_b{b}_x.npy"), x.numpy())
        np.save(os.path.join(out, f"{name}_b{b}_y.npy"), y.numpy())
        print(f"exported {path}", file=sys.stderr)


def table(out, batches, threads, rounds, names):
    import subprocess
    root = os.path.join(os.path.dirname(__file__), "..")
    # KILN_ONNX_BENCH_BIN: a copy of the binary (with its libraries on LD_LIBRARY_PATH), so that a
    # rebuild of the shared build directory during the run cannot swap the library under it.
    kiln = os.environ.get("KILN_ONNX_BENCH_BIN") or os.path.join(root, "build", "release", "bench",
                                                                 "kiln_onnx_bench")
    node_path = os.path.join(root, "build", "node", "node_modules")
    env = dict(os.environ, NODE_PATH=node_path)
    rows = []
    for b in batches:
        export_torchvision(out, b, names)
        for name in names:
            model = os.path.join(out, f"{name}_b{b}.onnx")
            chw = ",".join(str(d) for d in torchvision_input(name, b)[1:])
            for t in threads:
                got = {"kiln": [], "onnxruntime": []}
                ratios = []  # per round: the two runs back to back see about the same load
                for _ in range(rounds):
                    for impl, cmd in (
                            ("kiln", [kiln, model, os.path.join(out, f"{name}_b{b}_x.npy"),
                                      str(t), name]),
                            ("onnxruntime", ["node", os.path.join(root, "bench", "onnx_ort.js"),
                                             model, str(b), str(t), name, chw])):
                        # Retried: on a shared host a rebuild may briefly replace libkiln.
                        for attempt in range(3):
                            r = subprocess.run(cmd, capture_output=True, text=True, env=env)
                            if r.returncode == 0:
                                break
                            print(f"# retry {cmd[0]}: {r.stderr.strip()[-200:]}", file=sys.stderr)
                            time.sleep(20)
                        r.check_returncode()
                        line = r.stdout.strip().splitlines()[-1]
                        print(line, file=sys.stderr, flush=True)
                        got[impl].append(b / json.loads(line)["value"] * 1000)
                    ratios.append(got["kiln"][-1] / got["onnxruntime"][-1])
                k, o = statistics.median(got["kiln"]), statistics.median(got["onnxruntime"])
                rows.append((name, b, t, k, o, statistics.median(ratios)))
    print("| model | batch | threads | Kiln ms | ORT ms | Kiln / ORT |")
    print("|---|---|---|---|---|---|")
    for name, b, t, k, o, r in rows:
        print(f"| {name} | {b} | {t} | {k:.2f} | {o:.2f} | {r:.2f} |")


def main():
    cmd = sys.argv[1]
    if cmd == "torchvision":
        export_torchvision(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
        return
    if cmd == "table":
        table(sys.argv[2], [int(v) for v in sys.argv[3].split(",")],
              [int(v) for v in sys.argv[4].split(",")], int(sys.argv[5]), sys.argv[6:])
        return
    if cmd == "export":
        out, b = sys.argv[2], int(sys.argv[3])
        os.makedirs(out, exist_ok=True)
        x = torch.randn(b, 3, 224, 224)
        path = os.path.join(out, f"resnet18_b{b}.onnx")
        torch.onnx.export(model(), (x,), path, opset_version=13, input_names=["x"],
                          output_names=["logits"])
        np.save(os.path.join(out, f"resnet18_b{b}_x.npy"), x.numpy())
        return
    b, threads = int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(threads)
    m = model()
    x = torch.randn(b, 3, 224, 224)
    times = []
    with torch.no_grad():
        for _ in range(2):
            m(x)
        start = time.perf_counter()
        while len(times) < 5 or (time.perf_counter() - start < 3 and len(times) < 200):
            t = time.perf_counter()
            m(x)
            times.append(time.perf_counter() - t)
    print(json.dumps({"workload": "W9", "name": "resnet18_onnx", "impl": "pytorch",
                      "mode": "eager", "threads": threads,
                      "params": {"batch": b, "config": "default"}, "metric": "images/s",
                      "value": round(b / statistics.median(times), 3),
                      "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                                            / 1024.0, 1)}), flush=True)


if __name__ == "__main__":
    main()
