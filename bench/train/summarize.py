#!/usr/bin/env python3
"""summarize.py DIR - one table of troupe-bench-train beside the PyTorch peer
from the JSON files run_device.sh wrote into DIR; ratios are ours / theirs at
the same model and micro-batch."""
import glob
import json
import os
import sys

d = sys.argv[1] if len(sys.argv) > 1 else "."
rows, ceiling = [], None
for f in sorted(glob.glob(os.path.join(d, "*.json"))):
    if os.path.basename(f) == "summary.json":
        continue
    j = json.load(open(f))
    ceiling = j.get("gemm_ceiling_tflops") or ceiling
    rows += j["results"]
best = {}
for r in rows:
    if r["impl"].startswith("pytorch"):
        best[(r["impl"], r["model"], r["B"])] = r
print(f"GEMM ceiling (measured): {ceiling} TFLOP/s")
print(f"{'impl':16s} {'model':5s} {'B':>3s} {'tok/s':>9s} {'MFU':>6s} {'GiB':>6s} {'B/par':>6s} "
      f"{'vs eager':>8s} {'vs compile':>10s}")
for r in sorted(rows, key=lambda r: (r["model"], r["impl"], r.get("recompute", 0), r["B"])):
    e = best.get(("pytorch-eager", r["model"], r["B"]))
    c = best.get(("pytorch-compile", r["model"], r["B"]))
    re = f"{r['tok_s'] / e['tok_s']:.2f}x" if e else "-"
    rc = f"{r['tok_s'] / c['tok_s']:.2f}x" if c else "-"
    impl = r["impl"] + ("+rc" if r.get("recompute") else "")
    print(f"{impl:16s} {r['model']:5s} {r['B']:3d} {r['tok_s']:9.0f} {100 * r['mfu']:5.1f}% "
          f"{r['peak_gib']:6.1f} {r['peak_bytes_per_param']:6.1f} {re:>8s} {rc:>10s}")
json.dump({"gemm_ceiling_tflops": ceiling, "results": rows}, open(os.path.join(d, "summary.json"), "w"), indent=1)
