#!/usr/bin/env bash
# bench/dp/run.sh BUILD_DIR [OUT_DIR] - the CPU collective as data
# parallelism's transport, on this host:
#   1. all-reduce of 1, 16 and 64 MiB float32 between 2 and 4 processes over
#      loopback TCP: troupe's CPU collective (coll_bench) beside torch gloo
#      (gloo_bench.py, the first of /usr/bin/python3, python3 with torch), the two
#      alternated over ROUNDS rounds (default 3) so that load on a shared
#      machine hits both alike; the median of the rounds' medians is reported;
#   2. troupe-train data-parallel step time under a real head and agents:
#      N = 1, 2, 4 ranks with the same micro-batch per rank (so N x the global
#      batch), median step_ms of steps 6..40, beside standalone.
# Prints two tables and writes OUT_DIR/dp.json (default bench/results).
# Smaller runs: AR_RANKS (default "2 4"), AR_MIB ("1 16 64"), DP_N ("1 2 4";
# must hold 1, the baseline), DP_STEPS (40; the median is of steps 6 on),
# DP_MODEL (troupe-train's model line, default 4 layers x 128, T 64).
set -euo pipefail
B=$(cd "${1:?usage: run.sh BUILD_DIR [OUT_DIR]}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${2:-$HERE/../results}
ROUNDS=${ROUNDS:-3}
mkdir -p "$OUT"
export TROUPE_BIN=$B
source "$HERE/../../tests/integration/lib.sh"
RAW=$T/raw.jsonl
: >"$RAW"

# The python with torch: Debian's python3-torch lives with /usr/bin/python3.
PY=
for p in /usr/bin/python3 python3; do
    if "$p" -c 'import torch' 2>/dev/null; then PY=$p; break; fi
done
[ -n "$PY" ] || fail "no python3 with torch (apt-get install python3-torch): gloo cannot run"
port=$(free_port)
allreduce() { # allreduce IMPL N MIB
    local pids=() r
    for ((r = 0; r < $2; r++)); do
        if [ "$1" = troupe-coll ]; then
            "$B/bench/dp/coll_bench" "$r" "$2" "$port" "$3" 11 >>"$T/ar.$r" &
        else
            "$PY" "$HERE/gloo_bench.py" "$r" "$2" "$port" "$3" 11 >>"$T/ar.$r" 2>"$T/gloo.err" &
        fi
        pids+=($!)
    done
    for r in "${pids[@]}"; do wait "$r" || fail "$1 with $2 ranks, $3 MiB failed"; done
    tail -n 1 "$T/ar.0" >>"$RAW"
    port=$((port + 8))
}
for ((round = 0; round < ROUNDS; round++)); do
    for n in ${AR_RANKS:-2 4}; do
        for mib in ${AR_MIB:-1 16 64}; do
            allreduce troupe-coll "$n" "$mib"
            allreduce torch-gloo "$n" "$mib"
        done
    done
done

# ---- 2. troupe-train step time, N ranks vs 1 ---------------------------------
start_cluster
"$TRAIN_BIN" --make-data "$T/data.tok" --tokens 262144 >/dev/null
cat >"$T/train.yaml" <<YAML
seed: 1
device: cpu
model: ${DP_MODEL:-{layers: 4, width: 128, heads: 4, seq_len: 64\}}
train: {steps: ${DP_STEPS:-40}, micro_batch: 4, warmup_steps: 5}
data: {path: $T/data.tok, val_fraction: 0}
eval: {every: 0}
dp: {mode: on}
YAML
"$TRAIN_BIN" --config "$T/train.yaml" --set dp.mode=off --metrics-json "$T/step.alone.0" >/dev/null 2>&1
DP_N=${DP_N:-1 2 4}
for n in $DP_N; do
    cat >"$T/job$n.yaml" <<YAML
name: dp$n
cluster: {nodes: [4]}
groups:
  - name: policy
    workers: $n
    resources: {gpu: 1}
    command: [bash, -c, 'exec "\$0" --config "\$1" --set metrics.json="\$2.\$RANK"', $TRAIN_BIN, $T/train.yaml, $T/step.$n]
YAML
    id=$(submit "$T/job$n.yaml")
    wait_for 300 "job $id (N=$n) to succeed" is_job_state "$id" SUCCEEDED
done
python3 - "$RAW" "$T" "$OUT/dp.json" "$ROUNDS" "$DP_N" <<'PY'
import json, os, platform, statistics, sys, time
raw, tdir, out, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
dp_n = [int(n) for n in sys.argv[5].split()]
rows = [json.loads(l) for l in open(raw) if l.strip()]
ar = {}
for r in rows:
    ar.setdefault((r["size"], r["bytes"], r["impl"]), []).append(r["median_ms"])
print(f"all-reduce, float32, loopback TCP, median of {rounds} rounds' medians (11 iterations each)")
print(f"{'ranks':>5} {'MiB':>5} {'troupe ms':>10} {'gloo ms':>9} {'troupe GB/s':>12} {'gloo GB/s':>10} {'troupe/gloo':>12}")
table = []
for (n, b) in sorted({(k[0], k[1]) for k in ar}):
    t, g = statistics.median(ar[(n, b, "troupe-coll")]), statistics.median(ar[(n, b, "torch-gloo")])
    bus = lambda ms: 2 * (n - 1) / n * b / (ms / 1e3) / 1e9
    table.append({"ranks": n, "bytes": b, "troupe_ms": t, "gloo_ms": g, "troupe_busbw_GBps": bus(t),
                  "gloo_busbw_GBps": bus(g), "troupe_over_gloo_bw": g / t})
    print(f"{n:>5} {b / 1048576:>5.0f} {t:>10.2f} {g:>9.2f} {bus(t):>12.3f} {bus(g):>10.3f} {g / t:>12.2f}")
steps = {}
def med(path):
    ms = [json.loads(l)["step_ms"] for l in open(path) if l.strip()][5:]
    return statistics.median(ms)
steps["standalone"] = {"ranks": 1, "step_ms": med(f"{tdir}/step.alone.0")}
for n in dp_n:
    per = [med(f"{tdir}/step.{n}.{r}") for r in range(n)]
    steps[f"dp{n}"] = {"ranks": n, "step_ms": max(per)}
print("\ntroupe-train DP on the CPU collective (4 x 128, T 64, micro_batch 4 per rank; median step_ms of steps 6 on, slowest rank)")
base = steps["dp1"]["step_ms"]
for k, v in steps.items():
    print(f"{k:>10}: {v['ranks']} rank(s) {v['step_ms']:8.2f} ms  ({v['step_ms'] / base:.2f} x dp1)")
json.dump({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "host": platform.node(), "cpus": os.cpu_count(),
           "load_avg": os.getloadavg(), "allreduce": table, "train_steps": steps}, open(out, "w"), indent=1)
print(f"\nwrote {out}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
PY
