#!/usr/bin/env python3
"""Summarise an Nsight Compute CSV (`ncu --csv --metrics gpu__time_duration.sum`)
into the kernels that take the most GPU time: calls, total µs, share.

    python3 scripts/gpu/ncu_top.py ncu-llama-small.csv [--top 15]

Kernels are grouped by their name up to the first '<' or '(' (template
arguments and signatures dropped), so `k_repeat_back<float>` and its
instances count as one.
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    text = open(a.csv, encoding="utf-8", errors="replace").read()
    # ncu prints its own log lines (==PROF==) before the CSV header.
    start = text.find('"ID"')
    if start < 0:
        sys.exit(f"{a.csv}: no CSV table found")
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    total, calls = defaultdict(float), defaultdict(int)
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(r["Metric Value"].replace(",", ""))
        us = v * SCALE.get(r.get("Metric Unit", "ns").strip().lower(), 1e-3)
        k = short(r["Kernel Name"])
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
