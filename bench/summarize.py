#!/usr/bin/python3
"""Ratio table from bench/run's JSON lines: per workload/name/params/threads, Kiln's median per
mode beside raw references and the best PyTorch configuration. Ratios > 1 mean Kiln is better
(for us/op, lower is better, so the ratio is inverted)."""
import json
import statistics
import sys
from collections import defaultdict

LOWER_IS_BETTER = {"us/op", "us/call", "us/step", "ms", "s", "val_loss", "train_loss_last",
                   "val_loss_rel_diff_pct"}


def key_params(p):
    # "note" (W5/W7/W8: what TorchScript covers, or why it could not run) is not a parameter.
    return json.dumps({k: v for k, v in p.items() if k not in ("config", "note")}, sort_keys=True)


def main(path):
    rows = [json.loads(l) for l in open(path) if l.startswith("{")]
    # A PyTorch mode that could not run (W5/W7/W8 TorchScript) is reported with value null.
    rows = [r for r in rows if r.get("value") is not None]
    groups = defaultdict(lambda: defaultdict(list))
    rss = defaultdict(list)
    for r in rows:
        k = (r["workload"], r["name"], key_params(r["params"]), r["threads"], r["metric"])
        impl = r["impl"] if r["impl"] != "pytorch" else "pytorch:" + r["params"].get("config", "?")
        groups[k][(impl, r["mode"])].append(r["value"])
        rss[(k, impl)].append(r["peak_rss_mib"])
    print(f"{'workload':8} {'name':16} {'params':14} {'T':>2} {'impl/mode':36} {'value':>10} {'metric':8} {'vs best pytorch':>21}")
    for k in sorted(groups):
        w, name, params, t, metric = k
        g = groups[k]
        lower = metric in LOWER_IS_BETTER
        torch_vals = [statistics.median(v) for (impl, _), v in g.items() if impl.startswith("pytorch")]
        best_torch = (min(torch_vals) if lower else max(torch_vals)) if torch_vals else None
        # Rows without a PyTorch side (DIST, kiln_dist_bench; HEAL; SYM) compare with their own
        # reference in the same run: raw MPI_Allreduce, one process on all the threads, eager,
        # or (SYM) the per-length static jit version.
        ref_vals = [statistics.median(v) for (impl, mode), v in g.items()
                    if impl == "mpi" or mode.startswith("1proc") or (w == "HEAL" and mode == "eager")
                    or (w == "CONV" and mode == "best") or (w == "SYM" and mode == "jit_static")]
        ref_mark = ""
        if best_torch is None and ref_vals:
            best_torch, ref_mark = ref_vals[0], " (ref)"
        for (impl, mode), v in sorted(g.items()):
            m = statistics.median(v)
            ratio = ""
            if best_torch and not impl.startswith("pytorch"):
                ratio = f"{(best_torch / m) if lower else (m / best_torch):.2f}x{ref_mark}"
            short = params.replace('"', "").replace(" ", "")[:14]
            print(f"{w:8} {name:16} {short:14} {t:>2} {impl + '/' + mode:36} {m:10.3f} {metric:8} {ratio:>21}")


if __name__ == "__main__":
    main(sys.argv[1])
