#!/usr/bin/env python3
"""summarize.py WORK [--json FILE] - the tables of bench/mgpu/run_device.sh from
the raw results in WORK/raw (troupe_bench.sh, torch_ddp.py), and one JSON file
with all of them plus the machine and the commit (WORK/machine.json).

  weak scaling  tokens/s per GPU of troupe-train at N GPUs (median step_ms of
                steps 6.. of the slowest rank; per-GPU rate = B x T / step),
                efficiency = per-GPU rate at N / at 1; GiB/GPU = the largest rank's
                peak of the backend's device allocations (mem_peak_bytes)
  all-reduce    troupe-train's gradient buckets vs plain NCCL, bus bandwidth
  DDP           troupe vs PyTorch DDP (torchrun, same model, bf16, same global
                batch), global tokens/s and the ratio
  startup       troupe submit -> first training step and -> all communicators
                ready, by phase: milestones are the latest rank's, phases the
                gaps between successive milestones (so they add up)
The multi-GPU goals are printed beside each table."""
import glob
import json
import os
import re
import statistics
import sys
from datetime import datetime, timezone

work = sys.argv[1]
raw = os.path.join(work, "raw")
out_json = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
result = {"machine": {}, "weak": [], "allreduce": [], "ddp": [], "startup": []}
try:
    result["machine"] = json.load(open(os.path.join(work, "machine.json")))
except (OSError, ValueError):
    pass


def load_lines(path):
    out = []
    for line in open(path):
        if line.strip():
            out.append(json.loads(line))
    return out


def skip_first(ms, n=5):
    return ms[n:] if len(ms) > n + 2 else ms


# ---- weak scaling ---------------------------------------------------------------
T = 1024
for job in sorted(glob.glob(os.path.join(raw, "weak-*.job.json"))):
    name = os.path.basename(job)[: -len(".job.json")]
    _, model, n = name.split("-")
    n = int(n)
    per_rank, B, tok_reported, mem = [], None, [], []
    for path in sorted(glob.glob(os.path.join(raw, f"{name}.[0-9]*"))):
        lines = load_lines(path)
        if not lines:
            continue
        per_rank.append(statistics.median(skip_first([m["step_ms"] for m in lines])))
        tok_reported.append(statistics.median(skip_first([m["tokens_per_s"] for m in lines])))
        B = lines[-1]["tokens"]  # tokens of the step, this rank's
        mem.append(lines[-1].get("mem_peak_bytes", 0))  # the backend's device allocations, peak
    if len(per_rank) != n:
        print(f"weak: {name}: {len(per_rank)} rank metrics files, want {n}", file=sys.stderr)
        continue
    step = max(per_rank)
    result["weak"].append({"model": model, "gpus": n, "step_ms": step, "step_ms_ranks": per_rank,
                           "tokens_per_step_per_gpu": B, "tok_s_per_gpu": B / (step / 1e3),
                           "tok_s_total": n * B / (step / 1e3), "tok_s_reported_median": statistics.median(tok_reported),
                           "mem_peak_gib_max_rank": max(mem) / 2**30})
if result["weak"]:
    print("weak scaling: troupe-train data-parallel under troupe, fixed micro-batch per GPU")
    print(f"{'model':>5} {'GPUs':>4} {'step ms':>9} {'tok/s/GPU':>10} {'tok/s total':>12} {'efficiency':>10} {'GiB/GPU':>8}")
    for w in sorted(result["weak"], key=lambda w: (w["model"], w["gpus"])):
        base = [b for b in result["weak"] if b["model"] == w["model"] and b["gpus"] == 1]
        w["efficiency"] = w["tok_s_per_gpu"] / base[0]["tok_s_per_gpu"] if base else None
        eff = f"{100 * w['efficiency']:9.1f}%" if w["efficiency"] else f"{'n/a':>10}"
        print(f"{w['model']:>5} {w['gpus']:>4} {w['step_ms']:>9.2f} {w['tok_s_per_gpu']:>10.0f} {w['tok_s_total']:>12.0f} {eff} "
              f"{w['mem_peak_gib_max_rank']:>8.2f}")
    print("goal: >= 95% efficiency at 8 GPUs\n")

# ---- all-reduce -----------------------------------------------------------------
for path in sorted(glob.glob(os.path.join(raw, "allreduce-*.json"))):
    if path.endswith(".job.json") or path.endswith(".metrics.json"):
        continue
    d = json.load(open(path))
    for r in d["rows"]:
        r.update({"ranks": d["ranks"], "transport": d["transport"], "device": d["device"], "grad_dtype": d["grad_dtype"]})
        result["allreduce"].append(r)
if result["allreduce"]:
    print("all-reduce of the gradient bytes (median ms; busbw GB/s = bytes/time x 2(n-1)/n), same communicator, same run")
    print(f"{'ranks':>5} {'model':>5} {'MiB':>8} {'bucket':>6} {'troupe ms':>10} {'busbw':>7} {'plain-bkt':>10} {'busbw':>7} "
          f"{'plain-one':>10} {'busbw':>7} {'nccl-tests':>10} {'busbw':>7} {'troupe/plain-bkt bw':>20}")
    for r in sorted(result["allreduce"], key=lambda r: (r["model"], r["ranks"], r["bucket_mb"])):
        print(f"{r['ranks']:>5} {r['model']:>5} {r['bytes'] / 2**20:>8.1f} {r['bucket_mb']:>6} {r['troupe_ms']:>10.3f} "
              f"{r['troupe_busbw_GBps']:>7.1f} {r['plain-bucketed_ms']:>10.3f} {r['plain-bucketed_busbw_GBps']:>7.1f} "
              f"{r['plain-one_ms']:>10.3f} {r['plain-one_busbw_GBps']:>7.1f} {r['nccl-tests_ms']:>10.3f} "
              f"{r['nccl-tests_busbw_GBps']:>7.1f} {r['troupe_over_plain_bucketed']:>20.3f}")
    print("goal: troupe within 5% of plain NCCL (ratio >= 0.95); anchor ~330 GB/s busbw, 1 GB fp32, 2 GPUs, NVLS off\n")

# ---- PyTorch DDP ----------------------------------------------------------------
for path in sorted(glob.glob(os.path.join(raw, "ddp-*.json"))):
    d = json.load(open(path))
    for r in d["results"]:
        r.update({"torch": d.get("torch"), "device": d.get("device")})
        result["ddp"].append(r)
if result["ddp"]:
    print("troupe-train vs PyTorch DDP (torchrun), same model, bf16, same global batch (micro-batch per GPU x GPUs)")
    print(f"{'model':>5} {'GPUs':>4} {'troupe tok/s':>13} {'DDP tok/s':>10} {'troupe/DDP':>10} {'DDP step ms':>11}")
    for r in sorted(result["ddp"], key=lambda r: (r["model"], r["gpus"])):
        ours = [w for w in result["weak"] if w["model"] == r["model"] and w["gpus"] == r["gpus"]]
        r["troupe_tok_s"] = ours[0]["tok_s_total"] if ours else None
        r["troupe_over_ddp"] = r["troupe_tok_s"] / r["tok_s"] if ours else None
        t = f"{r['troupe_tok_s']:>13.0f}" if ours else f"{'n/a':>13}"
        ratio = f"{r['troupe_over_ddp']:>10.3f}" if ours else f"{'n/a':>10}"
        print(f"{r['model']:>5} {r['gpus']:>4} {t} {r['tok_s']:>10.0f} {ratio} {r['step_ms']:>11.2f}")
    print("goal: troupe >= 1.05x DDP's tokens/s at 2, 4 and 8 GPUs\n")

# ---- startup ----------------------------------------------------------------------
TS = re.compile(r"^\[(job\d+-\S+)\] (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z ")


def ts_ms(s):
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp() * 1e3


PHASES = [("submitted", "submit RPC (CLI -> head)"), ("placed", "placement"), ("spawned", "process start (agent)"),
          ("up", "troupe-train up (exec, worker API)"), ("rendezvous", "rendezvous (NCCL ID via the head)"),
          ("comm_ready", "NCCL init + warm-up all-reduce"), ("train_ready", "model build + weights from rank 0"),
          ("first_step", "first training step")]
for job in sorted(glob.glob(os.path.join(raw, "startup-*.job.json"))):
    name = os.path.basename(job)[: -len(".job.json")]
    j = json.load(open(job))
    n = len(j["workers"])
    ms = {"submit": float(open(os.path.join(raw, name + ".submit_ms")).read()), "submitted": j["submitted_ms"]}
    started = [e["ts_ms"] for e in j["events"] if e["kind"] == "STARTED"]
    ms["placed"] = started[0] if started else j["started_ms"]
    ms["spawned"] = max(w["started_ms"] for w in j["workers"])
    up, rdzv, ready, train = {}, {}, {}, {}
    for line in open(os.path.join(raw, name + ".log")):
        m = TS.match(line)
        if not m:
            continue
        w, t = m.group(1), ts_ms(m.group(2))
        if "under troupe: job" in line:
            up[w] = t
        nc = re.search(r"nccl: communicator .* ready .*: rendezvous (\d+) ms, init (\d+) ms, warm-up all-reduce (\d+) ms", line)
        if nc:
            ready[w] = t
            rdzv[w] = t - int(nc.group(2)) - int(nc.group(3))
        # logged together after the weights; one worker alone logs no "data parallel" line
        if "data parallel: rank" in line or "training backend=" in line:
            train.setdefault(w, t)
    ms["up"] = max(up.values()) if len(up) == n else None
    ms["rendezvous"] = max(rdzv.values()) if len(rdzv) == n else None
    ms["comm_ready"] = max(ready.values()) if len(ready) == n else None
    ms["train_ready"] = max(train.values()) if len(train) == n else None
    try:
        pts = json.load(open(os.path.join(raw, name + ".metrics.json")))["points"]
        first = [p["ts_ms"] for p in pts if p["step"] == 1 and p["name"] == "step_ms"]
        ms["first_step"] = max(first) if len(first) == n else None
    except (OSError, ValueError, KeyError):
        ms["first_step"] = None
    phases, prev = {}, ms["submit"]
    for key, _ in PHASES:
        if ms.get(key) is not None:
            phases[key] = ms[key] - prev
            prev = ms[key]
        else:
            phases[key] = None
    row = {"name": name, "workers": n, "milestones_ms": ms, "phases_ms": phases,
           "to_comm_ready_ms": ms["comm_ready"] - ms["submit"] if ms["comm_ready"] else None,
           "to_first_step_ms": ms["first_step"] - ms["submit"] if ms["first_step"] else None}
    result["startup"].append(row)
if result["startup"]:
    print("startup: troupe submit -> all communicators ready -> first training step (124M), latest rank per milestone, ms")
    hdr = "".join(f"{k[:11]:>12}" for k, _ in PHASES)
    print(f"{'job':>14} {'N':>2}{hdr} {'->comms':>8} {'->step 1':>9}")
    for r in sorted(result["startup"], key=lambda r: (r["workers"], r["name"])):
        cells = "".join(f"{r['phases_ms'][k]:>12.0f}" if r["phases_ms"][k] is not None else f"{'n/a':>12}" for k, _ in PHASES)
        c = f"{r['to_comm_ready_ms']:>8.0f}" if r["to_comm_ready_ms"] is not None else f"{'n/a':>8}"
        f1 = f"{r['to_first_step_ms']:>9.0f}" if r["to_first_step_ms"] is not None else f"{'n/a':>9}"
        print(f"{r['name']:>14} {r['workers']:>2}{cells} {c} {f1}")
    print("phases: " + "; ".join(f"{k} = {v}" for k, v in PHASES))
    print("goal: under 5 s at 8 GPUs, most of it NCCL's own init\n")

m = result["machine"]
print(f"machine: {m.get('gpus', '?')} x {m.get('gpu', '?')}, driver {m.get('driver', '?')}, host {m.get('host', '?')}; "
      f"commit {m.get('commit', '?')}; {m.get('date', '?')}{' (DRY RUN: no GPU, CPU collective)' if m.get('dry_run') else ''}")
if out_json:
    json.dump(result, open(out_json, "w"), indent=1)
    print(f"wrote {out_json}")
