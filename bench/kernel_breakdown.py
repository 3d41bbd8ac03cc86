#!/usr/bin/env python3
"""Per-kernel time breakdown of a run profiled by Nsight Compute (the GPU machines have ncu, not nsys).

  ncu --metrics gpu__time_duration.sum --csv --log-file K.csv ./build/hytra bench llama3.2-1b ...
  python3 bench/kernel_breakdown.py K.csv [--steps S] [--last-step MARKER]

Sums gpu__time_duration per kernel name (template arguments dropped) and prints the kernels by total
time, with their share and calls; --steps divides the totals by the number of profiled steps.
--last-step keeps only the kernels from the last launch whose name contains MARKER (a step's first
kernel, e.g. embedding_fwd) on: the first step also tunes the GEMMs and fills the weights. The marker
must run once a step: one micro-batch a step (gpu_run.sh profiles at global batch = micro-batch) and
no MTP depths or learned positions, which launch embedding_fwd again.
"""
import argparse, collections, csv, re, sys


def short(name):
    name = name.replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"[<(].*", "", name)    # template arguments, parameter list
    return name.strip()[:70]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--steps", type=float, default=1.0)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--last-step", default=None)
    a = ap.parse_args()
    with open(a.csv, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu prints its own log lines before the table
    total = collections.Counter()
    calls = collections.Counter()
    rows = [r for r in csv.DictReader(lines) if r.get("Metric Name") == "gpu__time_duration.sum"]
    if a.last_step:
        starts = [i for i, r in enumerate(rows) if a.last_step in r["Kernel Name"]]
        if not starts:
            sys.exit(f"--last-step: no kernel named like {a.last_step!r} in {a.csv}")
        rows = rows[starts[-1]:]
    for row in rows:
        v = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "nsecond")
        scale = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0,
                 "second": 1e3, "s": 1e3}[unit]
        k = short(row["Kernel Name"])
        total[k] += v * scale
        calls[k] += 1
    if not total:
        sys.exit("no gpu__time_duration rows in " + a.csv)
    grand = sum(total.values())
    print(f"{'kernel':70s} {'ms/step':>9s} {'share':>6s} {'calls/step':>10s}")
    for k, ms in total.most_common(a.top):
        print(f"{k:70s} {ms / a.steps:9.3f} {100 * ms / grand:5.1f}% {calls[k] / a.steps:10.1f}")
    print(f"{'total':70s} {grand / a.steps:9.3f}")


if __name__ == "__main__":
    main()
