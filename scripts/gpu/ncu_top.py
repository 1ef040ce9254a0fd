#!/usr/bin/env python3
"""Summarise an Nsight Compute CSV (`ncu --csv --metrics gpu__time_duration.sum`)
into the kernels that take the most GPU time: calls, total µs, share.

    python3 scripts/gpu/ncu_top.py ncu-llama-small.csv [--top 15] [--last-half] [--full-names]

Kernels are grouped by their name up to the first '<' or '(' (template
arguments and signatures dropped), so `k_repeat_back<float>` and its
instances count as one; with --full-names by their first 90 characters.
Reads ncu's default CSV (one row a metric) and `--page raw` (one row a kernel,
its units on the row under the header). --last-half keeps the second half of
the launches: the timed step of a `toy debug bench --warmup 1 --steps 1` run.
"""

import argparse
import csv
import io
import re
import sys
from collections import defaultdict

SCALE = {"ns": 1e-3, "nsecond": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}


def short(name):
    name = re.sub(r"^void ", "", name)
    return re.split(r"[<(]", name, maxsplit=1)[0].strip()


def launches(rows):
    """(kernel name, µs) of each launch, in order, from either CSV layout."""
    metric = "gpu__time_duration.sum"
    if rows and metric in rows[0]:  # --page raw: the first row holds the units
        unit = rows[0][metric].strip().lower()
        rows = rows[1:]
        return [(r["Kernel Name"], float(r[metric].replace(",", "")) * SCALE.get(unit, 1e-3)) for r in rows if r.get(metric)]
    return [(r["Kernel Name"], float(r["Metric Value"].replace(",", "")) * SCALE.get(r.get("Metric Unit", "ns").strip().lower(), 1e-3))
            for r in rows if r.get("Metric Name") == metric]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--last-half", action="store_true", help="only the second half of the launches (the timed step)")
    ap.add_argument("--full-names", action="store_true", help="group by the first 90 characters of the name")
    a = ap.parse_args()
    text = open(a.csv, encoding="utf-8", errors="replace").read()
    # ncu prints its own log lines (==PROF==) before the CSV header.
    start = text.find('"ID"')
    if start < 0:
        sys.exit(f"{a.csv}: no CSV table found")
    runs = launches(list(csv.DictReader(io.StringIO(text[start:]))))
    if a.last_half:
        runs = runs[len(runs) // 2:]
    total, calls = defaultdict(float), defaultdict(int)
    for name, us in runs:
        k = name[:90] if a.full_names else short(name)
        total[k] += us
        calls[k] += 1
    grand = sum(total.values())
    n = sum(calls.values())
    print(f"{n} kernels, {grand / 1e3:.3f} ms of GPU time")
    print(f"| kernel | calls | µs | share |\n|---|---:|---:|---:|")
    for k, us in sorted(total.items(), key=lambda kv: -kv[1])[: a.top]:
        print(f"| `{k[:70]}` | {calls[k]} | {us:.1f} | {100 * us / grand:.1f}% |")


if __name__ == "__main__":
    main()
