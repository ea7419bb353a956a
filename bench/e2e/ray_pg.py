#!/usr/bin/env python3
"""ray_pg.py - Ray's placement-group create+remove rate on this machine, the
peer of troupe-bench-e2e's cycles, measured the way Ray's own ray_perf does it.

ray_perf's `placement_group_create/removal` creates 100 one-bundle placement
groups ({"custom": 0.001}), waits until all are ready, removes them, and
reports groups per second. This script does that for bundle counts 1, 8 and 64
(ray #20243 measured 10 and 40) with a batch of B groups in flight, for a
fixed time per cell, on a single-node Ray started here (`ray.init`).

Usage: python3 bench/e2e/ray_pg.py [--seconds 3] [--json OUT.json]
Needs `pip install ray` (not a build dependency; see bench/RESULTS.md).
"""
import argparse
import importlib
import json
import os
import platform
import statistics
import time

CELLS = [(1, 100), (1, 10), (8, 10), (64, 10), (64, 1)]  # (bundles per group, groups per batch)


def one_batch(ray, pg_mod, bundles, batch, confirm):
    t0 = time.perf_counter()
    pgs = [pg_mod.placement_group([{"custom": 0.001}] * bundles, strategy="PACK") for _ in range(batch)]
    ray.get([pg.ready() for pg in pgs], timeout=60)
    t1 = time.perf_counter()
    for pg in pgs:
        pg_mod.remove_placement_group(pg)
    # Removal is asynchronous in Ray. ray_perf does not wait for it; with
    # confirm, wait until the GCS reports every group REMOVED, which is what a
    # troupe cycle waits for (GPUs back with the scheduler).
    deadline = time.time() + 60 if confirm else 0
    ids = {pg.id.hex() for pg in pgs}
    while confirm:
        table = pg_mod.placement_group_table()
        if all(table.get(i, {}).get("state") == "REMOVED" for i in ids):
            break
        if time.time() > deadline:
            raise TimeoutError("placement groups not removed after 60 s")
        time.sleep(0.002)
    t2 = time.perf_counter()
    return t2 - t0, t1 - t0, t2 - t1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--json")
    a = ap.parse_args()
    import ray
    pg_mod = importlib.import_module("ray.util.placement_group")  # the module, not the function

    t = time.perf_counter()
    ray.init(num_cpus=2, resources={"custom": 10000}, include_dashboard=False, logging_level="ERROR",
             log_to_driver=False)
    start_s = time.perf_counter() - t
    rows = []
    print(f"ray {ray.__version__}, python {platform.python_version()}, {os.cpu_count()} cores; "
          f"ray.init {start_s:.1f} s")
    print("removal: ray_perf = remove_placement_group() returned (as ray_perf); confirmed = the GCS lists "
          "every group REMOVED (as a troupe cycle, which waits for the GPUs to be free)")
    print(f"{'removal':>9} {'bundles':>7} {'batch':>5} {'groups/s':>9} {'batch p50 ms':>12} {'create p50':>10} "
          f"{'remove p50':>10}")
    for confirm, bundles, batch in [(c, b, n) for c in (False, True) for b, n in CELLS]:
        one_batch(ray, pg_mod, bundles, batch, confirm)  # warm-up
        lat, cre, rem = [], [], []
        t_end = time.perf_counter() + a.seconds
        t0 = time.perf_counter()
        while time.perf_counter() < t_end:
            l, c, r = one_batch(ray, pg_mod, bundles, batch, confirm)
            lat.append(l)
            cre.append(c)
            rem.append(r)
        window = time.perf_counter() - t0
        row = {
            "removal": "confirmed" if confirm else "ray_perf",
            "bundles": bundles,
            "batch": batch,
            "groups_per_s": len(lat) * batch / window,
            "batch_p50_ms": statistics.median(lat) * 1e3,
            "create_p50_ms": statistics.median(cre) * 1e3,
            "remove_p50_ms": statistics.median(rem) * 1e3,
            "batches": len(lat),
        }
        rows.append(row)
        print(f"{row['removal']:>9} {bundles:>7} {batch:>5} {row['groups_per_s']:>9.0f} {row['batch_p50_ms']:>12.2f} "
              f"{row['create_p50_ms']:>10.2f} {row['remove_p50_ms']:>10.2f}", flush=True)
    ray.shutdown()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"bench": "ray_pg", "ray": ray.__version__, "seconds_per_cell": a.seconds,
                       "cells": rows}, f, indent=2)


if __name__ == "__main__":
    main()
