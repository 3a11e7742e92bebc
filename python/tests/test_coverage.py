"""docs/pytorch_coverage.md stays true: regenerating it from torch 1.13 and the built package
gives the committed file, so every Kiln name it lists exists and no torch function is left out
(or listed as missing once Kiln has it)."""
import importlib.util
import os

import pytest

torch = pytest.importorskip("torch")

import kiln  # noqa: E402

ROOT = os.environ.get("KILN_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
GEN = os.path.join(ROOT, "python", "tools", "gen_coverage.py")
PAGE = os.path.join(ROOT, "docs", "pytorch_coverage.md")


def load_gen():
    spec = importlib.util.spec_from_file_location("gen_coverage", GEN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_page_matches_the_generated_one():
    with open(PAGE) as f:
        page = f.read()
    assert page == load_gen().render(), (
        "docs/pytorch_coverage.md is stale: run "
        "PYTHONPATH=build/release/python python3 python/tools/gen_coverage.py")


def test_every_listed_kiln_name_resolves():
    with open(PAGE) as f:
        rows = [l for l in f if l.startswith("| `torch")]
    assert len(rows) > 300
    listed = 0
    for row in rows:
        cell = row.split("|")[2].strip()
        if cell == "missing":
            continue
        obj = kiln
        for part in cell.strip("`").split(".")[1:]:
            obj = getattr(obj, part)
        # Tensor properties (shape, grad, device) are attributes; the rest are callables.
        assert callable(obj) or isinstance(obj, property), cell
        listed += 1
    assert listed > 100
