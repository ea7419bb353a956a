#!/usr/bin/env python3
"""refit_summary.py RAW [--json FILE] [--commit C] [--gpu NAME]

The table of bench/mgpu/refit_bench.sh: for each job RAW/NAME.id ("ID MODEL
VARIANT") and its log RAW/NAME.log (`troupe logs`), the refit lines of
policy rank 0 and the generation worker: bytes, the broadcast's ms and GB/s
(median over the refits after the first), each side's whole refit
(total_ms) and hash time, and whether the generation's weights hash equals
rank 0's at every refit. Exit status 1 when a job has no refits or a hash
differs."""
import argparse, glob, json, os, re, statistics, sys

ap = argparse.ArgumentParser()
ap.add_argument("raw")
ap.add_argument("--json")
ap.add_argument("--commit", default="unknown")
ap.add_argument("--gpu", default="")
a = ap.parse_args()


def refits(log, worker):
    out = {}
    for line in open(log, errors="replace"):
        if not line.startswith("[%s]" % worker) or "refit step=" not in line:
            continue
        kv = dict(re.findall(r"(\w+)=(\S+)", line[line.index("refit step="):]))
        kv["hash"] = kv.get("params_fnv1a") or kv.get("params_mix64")
        out[int(kv["step"])] = kv
    return out


def med(rows, key, skip_first=True):
    v = [float(r[key]) for r in rows[1:] if key in r] if skip_first and len(rows) > 1 else [float(r[key]) for r in rows if key in r]
    return statistics.median(v) if v else float("nan")


results, bad = [], 0
for idf in sorted(glob.glob(os.path.join(a.raw, "*.id"))):
    jid, model, variant = open(idf).read().split()
    log = idf[:-3] + ".log"
    pol = refits(log, "job%s-policy-0" % jid)
    gen = refits(log, "job%s-generation-0" % jid)
    steps = sorted(pol)
    if not steps or sorted(gen) != steps:
        print("%s %s: refits at policy %s, generation %s" % (model, variant, steps, sorted(gen)))
        bad += 1
        continue
    prow, grow = [pol[s] for s in steps], [gen[s] for s in steps]
    same = all(pol[s]["hash"] == gen[s]["hash"] for s in steps)
    bad += 0 if same else 1
    by = int(prow[-1]["bytes"])
    r = {"model": model, "variant": variant, "path": prow[-1].get("path"), "dtype": prow[-1].get("dtype"),
         "refits": len(steps), "bytes": by, "hashes_equal": same,
         "policy_ms": med(prow, "ms"), "generation_ms": med(grow, "ms"),
         "policy_total_ms": med(prow, "total_ms"), "generation_total_ms": med(grow, "total_ms"),
         "policy_hash_ms": med(prow, "hash_ms"), "generation_hash_ms": med(grow, "hash_ms"),
         "first_policy_ms": float(prow[0]["ms"]),
         "per_refit": [{"step": s, "policy_ms": float(pol[s]["ms"]), "generation_ms": float(gen[s]["ms"]),
                        "policy_total_ms": float(pol[s].get("total_ms", "nan")),
                        "generation_total_ms": float(gen[s].get("total_ms", "nan")),
                        "hash": pol[s]["hash"], "generation_hash": gen[s]["hash"],
                        "val_loss": float(gen[s].get("val_loss", "nan"))} for s in steps]}
    # GB/s of the broadcast on the policy's clock (header + weights) and of
    # the whole refit as the generation lives it (broadcast + take + hash)
    r["gb_per_s"] = by / (r["policy_ms"] * 1e6) if r["policy_ms"] > 0 else float("nan")
    r["total_gb_per_s"] = by / (max(r["policy_total_ms"], r["generation_total_ms"]) * 1e6)
    results.append(r)

order = {"host": 0, "device": 1, "device_f32": 2}
results.sort(key=lambda r: (r["model"], order.get(r["variant"], 9)))
hdr = ("model", "variant", "path/dtype", "MB", "bcast ms", "GB/s", "policy total ms", "gen total ms",
       "hash ms p/g", "end-to-end GB/s", "hashes")
print("refit policy -> generation, 1 + 1 GPUs (%s, commit %s); medians over refits 2..n" % (a.gpu or "?", a.commit))
print("| " + " | ".join(hdr) + " |")
print("|" + "---|" * len(hdr))
for r in results:
    print("| %s | %s | %s/%s | %.1f | %.2f | %.1f | %.2f | %.2f | %.2f / %.2f | %.1f | %s |" % (
        r["model"], r["variant"], r["path"], r["dtype"], r["bytes"] / 1e6, r["policy_ms"], r["gb_per_s"],
        r["policy_total_ms"], r["generation_total_ms"], r["policy_hash_ms"], r["generation_hash_ms"],
        r["total_gb_per_s"], "equal" if r["hashes_equal"] else "DIFFER"))
for m in sorted({r["model"] for r in results}):
    by = {r["variant"]: r for r in results if r["model"] == m}
    if "host" in by and "device" in by:
        h, d = by["host"], by["device"]
        print("%s: %s/%s vs %s/%s: broadcast %.1fx the GB/s, whole refit %.1fx faster (%.1f -> %.1f ms, the "
              "slower side)" % (
                  m, d["path"], d["dtype"], h["path"], h["dtype"], d["gb_per_s"] / h["gb_per_s"],
                  max(h["policy_total_ms"], h["generation_total_ms"]) / max(d["policy_total_ms"], d["generation_total_ms"]),
                  max(h["policy_total_ms"], h["generation_total_ms"]), max(d["policy_total_ms"], d["generation_total_ms"])))
if a.json:
    json.dump({"commit": a.commit, "gpu": a.gpu, "results": results}, open(a.json, "w"), indent=1)
sys.exit(1 if bad or not results else 0)
