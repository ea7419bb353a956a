#!/usr/bin/env python3
"""compare.py REF.json RANK.json... [--tol T] [--from STEP] [--until STEP] [--independent]
[--noise-of T | --horizon-of T]: the loss, grad_norm
and val_loss of every step in each rank's metrics file (one JSON object per
line, as troupe-train's metrics.json writes) equal the reference run's within
a relative tolerance, and every rank reports the same figures as rank 0.
Lines of a step seen twice (a run that resumed) must each match. Prints the
largest relative difference; exits 1 naming the first mismatch. --independent:
the files are separate runs, not ranks of one (no equality between them).
--noise-of T: REF and one RANK file are two identical runs; their largest
relative difference is the check's own noise, and must stay within T/5 for a
curve check at tolerance T to mean anything (exits 1 saying so otherwise).
--horizon-of T: the same two runs, where they may part in the end (a chaotic
run on a GPU whose reductions are not deterministic): prints "horizon H of
N" - up to step H they agree within T/5 at every step - for a curve check
with --until H. --until STEP: steps after STEP are not compared."""
import json
import sys

args = sys.argv[1:]
tol, first = 1e-5, 1
independent = "--independent" in args
if independent:
    args.remove("--independent")
noise_of, horizon_of, until = None, None, None
if "--horizon-of" in args:
    i = args.index("--horizon-of"); horizon_of = float(args[i + 1]); del args[i:i + 2]
    independent, tol = True, float("inf")
if "--until" in args:
    i = args.index("--until"); until = int(args[i + 1]); del args[i:i + 2]
if "--noise-of" in args:
    i = args.index("--noise-of"); noise_of = float(args[i + 1]); del args[i:i + 2]
    independent, tol = True, float("inf")
if "--tol" in args:
    i = args.index("--tol"); tol = float(args[i + 1]); del args[i:i + 2]
if "--from" in args:
    i = args.index("--from"); first = int(args[i + 1]); del args[i:i + 2]
ref_path, ranks = args[0], args[1:]


def load(path):
    out = []
    with open(path) as f:
        for line in f:
            if line.strip():
                out.append(json.loads(line))
    return out


ref = {m["step"]: m for m in load(ref_path)}
worst = 0.0
parted = None  # (step, key, difference) where --horizon-of's runs first part
per_rank = []
for path in ranks:
    lines = [m for m in load(path) if m["step"] >= first and (until is None or m["step"] <= until)]
    if not lines:
        sys.exit(f"FAIL: {path}: no steps from {first}")
    per_rank.append(lines)
    for m in lines:
        r = ref.get(m["step"])
        if r is None:
            sys.exit(f"FAIL: {path}: step {m['step']} is not in the reference {ref_path}")
        for key in ("loss", "grad_norm", "val_loss"):
            a, b = m.get(key), r.get(key)
            if (a is None) != (b is None):
                sys.exit(f"FAIL: {path}: step {m['step']} {key} {a} but the reference has {b}")
            if a is None:
                continue
            d = abs(a - b) / max(1.0, abs(b))
            worst = max(worst, d)
            if horizon_of is not None and d > horizon_of / 5 and parted is None:
                parted = (m["step"], key, d)
            if d > tol:
                sys.exit(f"FAIL: {path}: step {m['step']} {key} {a!r} vs reference {b!r} (rel {d:.3g} > {tol})")
# By step (the last line of each): a rank killed mid-run may have written a
# step or two more or fewer than the others before the restart.
last0 = {m["step"]: m for m in per_rank[0]}
for path, lines in ([] if independent else zip(ranks[1:], per_rank[1:])):
    for m in lines:
        m0 = last0.get(m["step"])
        if m0 is None:
            continue
        for key in ("loss", "grad_norm", "val_loss"):
            if m.get(key) != m0.get(key):
                sys.exit(f"FAIL: {path}: step {m['step']} {key} {m.get(key)} but rank 0 says {m0.get(key)}")
print(f"{len(ranks)} rank(s), {len(per_rank[0])} steps from {first}: max relative difference {worst:.3g}")
if noise_of is not None:
    if worst > noise_of / 5:
        sys.exit(f"FAIL: two identical runs differ by {worst:.3g}, above a fifth of the tolerance {noise_of}: "
                 f"a curve check at that tolerance would be below its own noise")
    print(f"noise: two identical runs differ by {worst:.3g} (tolerance {noise_of}, at most {noise_of / 5:.3g} allowed)")
if horizon_of is not None:
    steps = sorted({m["step"] for m in per_rank[0]})
    if parted is None:
        print(f"horizon {steps[-1]} of {steps[-1]}: two identical runs agree within {horizon_of / 5:.3g} at every step")
    else:
        h = max([s for s in steps if s < parted[0]], default=0)
        print(f"horizon {h} of {steps[-1]}: two identical runs agree within {horizon_of / 5:.3g} up to step {h}; "
              f"at step {parted[0]} {parted[1]} differs by {parted[2]:.3g} (largest {worst:.3g})")
