#!/usr/bin/env python3
"""check.py LOGS METRICS_RANK0 POLICY_WORKER GEN_WORKER... --steps S,S,.. [--tol T]

Checks a refit job's logs (`troupe logs JOB`): for every step in --steps,
policy rank 0 logged one refit and every generation worker printed one with
the same weights hash (params_fnv1a on the host path, params_mix64 on the
device path: the weights it holds are bit-identical to rank 0's),
the hashes differ from step to step (the weights moved), the last refit is
final, and each generation worker's val_loss equals policy rank 0's own
val_loss at that step (its metrics JSON) within a relative --tol."""
import argparse, json, re, sys

ap = argparse.ArgumentParser()
ap.add_argument("logs")
ap.add_argument("metrics")
ap.add_argument("policy")
ap.add_argument("gens", nargs="+")
ap.add_argument("--steps", required=True)
ap.add_argument("--tol", type=float, default=1e-5)
ap.add_argument("--path", choices=["host", "device"], help="every refit line must say this path")
a = ap.parse_args()
steps = [int(s) for s in a.steps.split(",")]

def refits(worker):
    out = {}
    for line in open(a.logs):
        if not line.startswith("[%s]" % worker) or "refit step=" not in line:
            continue
        kv = dict(re.findall(r"(\w+)=(\S+)", line[line.index("refit step="):]))
        step = int(kv["step"])
        if step in out:
            sys.exit("%s: two refit lines for step %d" % (worker, step))
        kv["hash"] = kv.get("params_fnv1a") or kv.get("params_mix64")
        if kv["hash"] is None:
            sys.exit("%s: a refit line without a weights hash: %s" % (worker, line.strip()))
        if a.path and kv.get("path") != a.path:
            sys.exit("%s step %d: path=%s, expected %s" % (worker, step, kv.get("path"), a.path))
        out[step] = kv
    return out

val = {}
for line in open(a.metrics):
    m = json.loads(line)
    if m.get("val_loss") is not None:
        val[m["step"]] = m["val_loss"]

pol = refits(a.policy)
if sorted(pol) != steps:
    sys.exit("%s logged refits at steps %s, expected %s" % (a.policy, sorted(pol), steps))
hashes = [pol[s]["hash"] for s in steps]
if len(set(hashes)) != len(hashes):
    sys.exit("the weights did not change between refits: %s" % hashes)
worst = 0.0
for g in a.gens:
    got = refits(g)
    if sorted(got) != steps:
        sys.exit("%s printed refits at steps %s, expected %s" % (g, sorted(got), steps))
    for s in steps:
        kv = got[s]
        if kv["hash"] != pol[s]["hash"]:
            sys.exit("%s step %d: weights hash %s, policy rank 0 sent %s" % (g, s, kv["hash"], pol[s]["hash"]))
        if int(kv["bytes"]) <= 0 or int(kv["bytes"]) != int(pol[s]["bytes"]):
            sys.exit("%s step %d: %s bytes, rank 0 sent %s" % (g, s, kv["bytes"], pol[s]["bytes"]))
        if int(kv["final"]) != (s == steps[-1]):
            sys.exit("%s step %d: final=%s" % (g, s, kv["final"]))
        if s not in val:
            sys.exit("policy rank 0 has no val_loss at step %d (eval.every must divide refit.every)" % s)
        rel = abs(float(kv["val_loss"]) - val[s]) / abs(val[s])
        worst = max(worst, rel)
        if rel > a.tol:
            sys.exit("%s step %d: val_loss %s, policy %.9g (rel %.2e > %g)" % (g, s, kv["val_loss"], val[s], rel, a.tol))
last = pol[steps[-1]]
print("%d refits x %d generation workers: hashes equal to rank 0's, val_loss within %.1e of the policy's (tol %g); "
      "path %s dtype %s, %s bytes, last %s MB/s" % (len(steps), len(a.gens), worst, a.tol, last.get("path", "?"),
                                                    last.get("dtype", "?"), last["bytes"], last["mb_per_s"]))
