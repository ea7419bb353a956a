#!/usr/bin/env python3
"""The table of bench/store/run.sh: the median over the rounds of each
figure, troupe beside TCPStore, from store-{troupe,tcpstore}-N-rR.json."""
import argparse
import json
import os
import statistics


def load(path):
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError):
        return None
    if "results" in d:  # rdzv_bench's file: one size
        d = d["results"][0] if d["results"] else None
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--ranks", required=True)
    ap.add_argument("--rounds", type=int, required=True)
    ap.add_argument("--connect", default="seq")
    ap.add_argument("--json")
    a = ap.parse_args()
    keys = ("connect_ms", "last_ms", "median_ms", "total_ms")
    table = []
    print(f"median of {a.rounds} alternated rounds (connect={a.connect}); ms")
    print(f"{'ranks':>6} {'side':>9} {'connect':>10} {'fan-out last':>13} {'fan-out median':>15} {'whole path':>11}"
          f" {'runs':>5}")
    for n in [int(x) for x in a.ranks.split(",")]:
        row = {"ranks": n}
        for side in ("troupe", "tcpstore"):
            runs = [load(os.path.join(a.out, f"store-{side}-{n}-r{r}.json")) for r in range(1, a.rounds + 1)]
            for r, d in enumerate(runs, 1):
                cpu = os.path.join(a.out, f"store-{side}-{n}-r{r}.head_cpu_s")
                if d and os.path.exists(cpu):
                    d["head_cpu_s"] = float(open(cpu).read())
            ok = [d for d in runs if d and not d.get("hang") and "total_ms" in d]
            hangs = [d for d in runs if d and d.get("hang")]
            med = {k: statistics.median(d[k] for d in ok) for k in keys} if ok else {}
            if ok and all("head_cpu_s" in d for d in ok):
                med["head_cpu_s"] = statistics.median(d["head_cpu_s"] for d in ok)
            row[side] = dict(med, runs=len(ok), hangs=len(hangs),
                             each=[{k: d[k] for k in keys + ("head_cpu_s",) if k in d} for d in ok],
                             why=[w for d in hangs for w in d.get("why", [])][:3])
            if ok:
                print(f"{n:>6} {side:>9} {med['connect_ms']:>10.1f} {med['last_ms']:>13.1f} {med['median_ms']:>15.1f}"
                      f" {med['total_ms']:>11.1f} {len(ok):>5}" + (f"  ({len(hangs)} hung)" if hangs else "") +
                      (f"  head CPU {med['head_cpu_s']:.2f} s" if "head_cpu_s" in med else ""))
            elif any(runs):
                print(f"{n:>6} {side:>9} {'HANG':>10}  {row[side]['why']}")
        t, p = row["troupe"], row["tcpstore"]
        if t["runs"] and p["runs"]:
            row["tcpstore_over_troupe"] = {k: p[k] / t[k] for k in keys if t[k] > 0}
            print(f"{n:>6} {'TCPStore/troupe':>9}: connect {row['tcpstore_over_troupe']['connect_ms']:.2f}x, "
                  f"fan-out {row['tcpstore_over_troupe']['last_ms']:.2f}x, "
                  f"whole path {row['tcpstore_over_troupe']['total_ms']:.2f}x (above 1: troupe faster)")
        table.append(row)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"bench": "store", "connect": a.connect, "rounds": a.rounds,
                       "cores": os.cpu_count(), "results": table}, f)


if __name__ == "__main__":
    main()
