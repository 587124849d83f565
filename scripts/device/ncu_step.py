#!/usr/bin/env python3
"""Kernel times of one decode step from an ncu CSV (gpu__time_duration.sum per kernel; dram__bytes_read.sum too
when the CSV has it, giving each kernel's read rate).

Usage: ncu_step.py NCU.csv [LABEL [--by-grid] [--largest N]]. A step is the run of kernels between two embedding
launches; the last complete step before the final one is summed per kernel name, largest first. --largest N sums the
N steps of most kernel time instead, one table each (a prefill step among decodes; a cache hit's step beside a cold
one).
"""
import collections
import csv
import sys

TIME_SCALE = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}
BYTE_SCALE = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}

launches = collections.OrderedDict()  # ID -> [name, grid, us, bytes]
with open(sys.argv[1], newline="") as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    key = r.get("ID", str(len(launches)))
    rec = launches.setdefault(key, [r["Kernel Name"], r.get("Grid Size", ""), 0.0, 0.0])
    v = float(r["Metric Value"].replace(",", ""))
    if r.get("Metric Name") == "gpu__time_duration.sum":
        rec[2] = v * TIME_SCALE.get(r.get("Metric Unit", ""), 1e-3)
    elif r.get("Metric Name") == "dram__bytes_read.sum":
        rec[3] = v * BYTE_SCALE.get(r.get("Metric Unit", ""), 1.0)
rows = list(launches.values())
emb = [i for i, r in enumerate(rows) if "embedding" in r[0].lower()]
print(f"ncu: {len(rows)} kernels, {len(emb)} embedding launches")
args = sys.argv[3:]
by_grid = "--by-grid" in args
largest = int(args[args.index("--largest") + 1]) if "--largest" in args else 0
steps = [rows[a:b] for a, b in zip(emb, emb[1:])]
if largest:
    steps += [rows[emb[-1]:]] if emb else []  # the run's last step too (a cache hit's, at the end of its bench)
    picked = sorted(steps, key=lambda st: -sum(r[2] for r in st))[:largest]
else:
    picked = steps[-1:]
for n, step in enumerate(picked):
    total = sum(r[2] for r in step)
    total_b = sum(r[3] for r in step)
    label = sys.argv[2] if len(sys.argv) > 2 else "one decode step"
    if largest:
        label += f" (step {n + 1} of the {largest} longest)"
    print(f"{label}: {len(step)} kernels, {total:.0f} us of kernel time, {total_b / 1e9:.3f} GB read "
          f"({total_b / 1e3 / total if total else 0:.0f} GB/s over kernel time)")

    def table(keyf, head):
        agg = collections.OrderedDict()
        for name, grid, us, b in step:
            k = keyf(name.split("(")[0][:70], grid)
            c, s, bb = agg.get(k, (0, 0.0, 0.0))
            agg[k] = (c + 1, s + us, bb + b)
        print(head)
        print("| " + " | ".join("---" for _ in head.split("|")[1:-1]) + " |")
        for k, (c, s, bb) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:16]:
            rate = f"{bb / 1e3 / s:.0f}" if s and bb else "-"
            key = " | ".join(k) if isinstance(k, tuple) else k
            print(f"| {key} | {c} | {s:.1f} | {s / c:.2f} | {100 * s / total:.1f}% | {bb / c / 1e6:.2f} | {rate} |")

    table(lambda n, g: n, "| kernel | launches | us | us each | share | MB each | GB/s |")
    if by_grid:  # launches of one kernel told apart by grid (matmul shapes)
        table(lambda n, g: (n[:60], g), "| kernel | grid | launches | us | us each | share | MB each | GB/s |")
