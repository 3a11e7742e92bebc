#!/usr/bin/python3
"""onnx.checker (full_check) on every model test_onnx_export wrote. Usage: check_export.py DIR"""
import os
import sys

import onnx

root = sys.argv[1]
names = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
assert names, "no exported models under " + root
for d in names:
    m = onnx.load(os.path.join(root, d, "model.onnx"))
    onnx.checker.check_model(m, full_check=True)
    print(f"{d}: onnx.checker ok ({len(m.graph.node)} nodes, opset "
          f"{m.opset_import[0].version})")
