#!/usr/bin/env python3
"""Kernel times of one decode step from an ncu CSV (gpu__time_duration.sum per kernel).

Usage: ncu_step.py NCU.csv [LABEL [--by-grid]]. A step is the run of kernels between two embedding launches; the last complete
step before the final one is summed per kernel name, largest first.
"""
import collections
import csv
import sys

rows = []
with open(sys.argv[1], newline="") as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") == "gpu__time_duration.sum":
        rows.append((r["Kernel Name"], float(r["Metric Value"].replace(",", "")), r.get("Metric Unit", ""),
                     r.get("Grid Size", "")))
emb = [i for i, r in enumerate(rows) if "embedding" in r[0].lower()]
print(f"ncu: {len(rows)} kernels, {len(emb)} embedding launches")
if len(emb) >= 2:
    step = rows[emb[-2]:emb[-1]]
    unit = step[0][2]
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(unit, 1e-3)
    total = sum(r[1] for r in step) * scale
    agg = collections.OrderedDict()
    for name, t, _, _ in step:
        key = name.split("(")[0][:70]
        c, s = agg.get(key, (0, 0.0))
        agg[key] = (c + 1, s + t * scale)
    label = sys.argv[2] if len(sys.argv) > 2 else "one decode step"
    print(f"{label}: {len(step)} kernels, {total:.0f} us of kernel time")
    print("| kernel | launches | us | share |")
    print("| --- | --- | --- | --- |")
    for k, (c, s) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:16]:
        print(f"| {k} | {c} | {s:.1f} | {100 * s / total:.1f}% |")
    if len(sys.argv) > 3 and sys.argv[3] == "--by-grid":  # launches of one kernel told apart by grid (matmul shapes)
        grid = collections.OrderedDict()
        for name, t, _, gsz in step:
            key = (name.split("(")[0][:60], gsz)
            c, s = grid.get(key, (0, 0.0))
            grid[key] = (c + 1, s + t * scale)
        print("| kernel | grid | launches | us each |")
        print("| --- | --- | --- | --- |")
        for (k, gsz), (c, s) in sorted(grid.items(), key=lambda kv: -kv[1][1])[:12]:
            print(f"| {k} | {gsz} | {c} | {s / c:.2f} |")
