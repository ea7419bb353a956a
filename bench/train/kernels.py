#!/usr/bin/env python3
"""kernels.py FILE - per-kernel GPU time from `ncu --csv --print-summary
per-kernel --metrics gpu__time_duration.sum`, largest first, with shares."""
import csv
import io
import sys

text = open(sys.argv[1]).read()
start = text.find('"Process ID"')
if start < 0:
    start = text.find('"ID"')
rows = list(csv.DictReader(io.StringIO(text[start:]))) if start >= 0 else []
agg = {}
for r in rows:
    name = r.get("Kernel Name") or r.get("Function Name") or "?"
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    unit = r.get("Metric Unit", "ns")
    n = int(r.get("Invocations", "1") or 1)
    v = float((r.get("Average") or r.get("Metric Value") or "0").replace(",", ""))
    scale = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0}.get(unit, 1e-6)
    key = name[:90]
    t, c = agg.get(key, (0.0, 0))
    agg[key] = (t + v * scale * n, c + n)
total = sum(t for t, _ in agg.values())
print(f"total kernel time {total:.2f} ms over {sum(c for _, c in agg.values())} launches")
for k, (t, c) in sorted(agg.items(), key=lambda kv: -kv[1][0]):
    print(f"{t:8.3f} ms {100 * t / total if total else 0:5.1f}% {c:5d}x  {k}")
