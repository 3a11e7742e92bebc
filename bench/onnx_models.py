#!/usr/bin/python3
"""W9, imported-CNN inference: exports a ResNet-18 (torchvision's layout: 7x7 stem, 4 stages of
2 BasicBlocks, 64-512 channels, 1000 classes; the classes of tests/onnx/export_models.py) at
224x224 for a given batch, and times PyTorch 1.13 eager on it.
  onnx_models.py export OUT_DIR BATCH     -> OUT_DIR/resnet18_b<BATCH>.onnx (+ input .npy)
  onnx_models.py pytorch BATCH THREADS    -> one JSON line (images/s, median of timed runs)"""
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


def main():
    cmd = sys.argv[1]
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
