"""Counts of the differential suite against torch 1.13: runs the case tables of
python/tests/test_torch_diff_*.py and prints calls compared, agreements, documented differences,
known bugs and silent differences (and, with --list, every difference by kind).

    PYTHONPATH=build/release/python /usr/bin/python3 python/tools/torch_diff_report.py [--list]
"""
import argparse
import glob
import importlib
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(HERE, "..", "tests")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="print every difference, by kind")
    ap.add_argument("--only", default="", help="a substring of the case files to run")
    ap.add_argument("--propose", action="store_true",
                    help="print KNOWN_BUGS candidates: the silent differences, shapes as *")
    args = ap.parse_args()
    sys.path.insert(0, TESTS)
    import torch_diff_util as U
    if U.torch is None:
        print("torch is not installed: nothing compared")
        return 1
    total = U.Tally()
    kinds = {}
    proposals = {}
    for path in sorted(glob.glob(os.path.join(TESTS, "test_torch_diff_*.py"))):
        name = os.path.splitext(os.path.basename(path))[0]
        if args.only not in name:
            continue
        mod = importlib.import_module(name)
        suite = getattr(mod, "SUITE", None)
        if suite is None:
            continue
        t = U.Tally()
        for case in suite.cases:
            o, row, known, _ = suite.check(case)
            t.add(o, documented=row is not None and (o.differs or row.kind == "torch-bf16-bug"),
                  known=known is not None)
            if o.differs and row is None:
                kinds.setdefault(o.kind, []).append((known, o.line()))
                if not known:
                    pat = re.sub(r"\[[0-9,]*\]", "[*]", case.id)
                    proposals.setdefault(name, {}).setdefault(pat, (o.kind, o.detail[:70]))
        print(t.summary(name[len("test_torch_diff_"):]))
        total.merge(t)
    print(total.summary("total"))
    if args.propose:
        for name, pats in proposals.items():
            print(f"\n# {name}: {len(pats)} patterns")
            for pat, (kind, detail) in sorted(pats.items()):
                print(f"    {pat!r}: {(kind + ': ' + detail)!r},")
    if args.list:
        for kind in sorted(kinds):
            print(f"\n## {kind} ({len(kinds[kind])})")
            for known, line in kinds[kind]:
                print(("  (known) " if known else "  ") + line)
        if total.binding_lines:
            print(f"\n## both refuse the type, kiln through the binding layer "
                  f"({len(total.binding_lines)})")
            for line in total.binding_lines:
                print("  " + line)
    return 0 if total.silent == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
