#!/usr/bin/env bash
# gpu.runtime.train_elastic - troupe-train follows an elastic group over NCCL
# on 2 GPUs of one node, under a real head and node agent: gpu.dp's small
# model (4 x 256, T 128, micro_batch ELASTIC_B (default 8), fp32 at lr 1e-3,
# grad_clip 0.5, 800 steps), 2 ranks, `elastic: {min_workers: 1}`, dp.elastic
# on; ELASTIC_MODEL=124m trains 124M in bf16 instead, for the timings only
# (no curve check, see 3). After ELASTIC_KILL_AT steps (default 50; 40 at
# 124M) rank 1 is SIGKILLed:
#   1. shrink: rank 0's collective ends (NCCL's asynchronous error, or the
#      head's new epoch seen by the wait loop), it aborts the communicator
#      (ncclCommAbort), waits for the new membership, builds a communicator
#      of one from a new ID and redoes the step in flight with both halves of
#      the global batch (micro_batch 2 x ELASTIC_B in two chunks); the job goes
#      on with 1;
#   2. grow-back: after restart_backoff_ms (1000) the head starts rank 1 again
#      in its slot (GREW 1 -> 2); rank 0 leaves its communicator at the next
#      step boundary, both build the new epoch's, the replacement takes the
#      weights and AdamW state over NCCL, and the job SUCCEEDS with 2;
#   3. the loss curve of rank 0 (every step, the redone one once) equals a
#      standalone run of micro_batch 2 x ELASTIC_B within ELASTIC_TOL (default
#      5e-2: other GEMM shapes and reduction order; the largest difference is
#      printed), up to the horizon: the reference runs twice, and as fp32
#      on a GPU is not deterministic (atomic sums) the two part after some
#      hundreds of steps; the curve is compared up to the last step at which
#      they still agree within a fifth of the tolerance, and the check fails
#      unless that lies 20 steps past the grow-back. Not at 124M: there one H200
#      alone parts micro_batch 16 from 8 x accum_steps 2 after step 14 (bf16,
#      default lr: loss 1.4 against 5.9 at step 400) and two identical fp32
#      runs differ by 0.44 in grad_norm (and take 1.1 s a step), so no curve
#      check could hold.
# Timings printed and written to $GPU_OUT/elastic.json: from the kill to the
# survivor's next completed step (polled every 20 ms), troupe-train's own
# breakdown (membership and communicator, state), and from the replacement's
# start (its process's start time from /proc, or when the job first listed
# it at attempt 1 if that is earlier) to its first step at full size.
# ELASTIC_STEPS (default 800; 400 at 124M).
# Exits 77 without 2 GPUs (a failure under TROUPE_REQUIRE_GPU=1). No jq.
# TROUPE_GPU_DRYRUN=1 checks the script's logic on any machine
# (integration.dp.elastic_gpu_dryrun): 2 simulated GPUs, troupe-train's CPU
# backend on the CPU collective with a small model (B 2, 600 steps), 1e-5.
source "$(dirname "$0")/../../integration/lib.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
COMPARE=$HERE/../../integration/dp/compare.py

source "$(dirname "$0")/gpu_lib.bash"
DRY=${TROUPE_GPU_DRYRUN:-0}
if [ "$DRY" = 1 ]; then
    OUTDIR=${GPU_OUT:-$T/out}
    mkdir -p "$OUTDIR"
    B=${ELASTIC_B:-2} STEPS=${ELASTIC_STEPS:-600} TOL=${ELASTIC_TOL:-1e-5}
    WHAT="small model on 2 simulated GPUs (CPU collective)" CURVE=1 KILL_AT=${ELASTIC_KILL_AT:-40}
    TRAIN="lr: 1e-3, grad_clip: 0.5, precision: fp32"
    MODEL="device: cpu
model: {layers: 2, width: 32, heads: 2, seq_len: 16}"
    DATA_ARGS=(--tokens 16384)
else
    gpu_require nccl
    N=$(nvidia-smi -L | grep -c '^GPU ')
    [ "$N" -ge 2 ] || skip "an elastic group of 2 ranks needs 2 GPUs, this machine has $N"
    TOL=${ELASTIC_TOL:-5e-2}
    if [ "${ELASTIC_MODEL:-small}" = 124m ]; then
        B=${ELASTIC_B:-8} STEPS=${ELASTIC_STEPS:-400} KILL_AT=${ELASTIC_KILL_AT:-40} CURVE=0
        WHAT="124M (bf16) on 2 GPUs"
        MODEL="device: cuda
model: {layers: 12, width: 768, heads: 12, seq_len: 1024, vocab: 50257}"
        DATA_ARGS=(--vocab 50257 --tokens 4000000)
        TRAIN="precision: bf16"
    else
        B=${ELASTIC_B:-8} STEPS=${ELASTIC_STEPS:-800} KILL_AT=${ELASTIC_KILL_AT:-50} CURVE=1
        WHAT="small model (fp32) on 2 GPUs"
        MODEL="device: cuda
model: {layers: 4, width: 256, heads: 4, seq_len: 128}"
        DATA_ARGS=(--tokens 1048576)
        TRAIN="lr: 1e-3, grad_clip: 0.5, precision: fp32"
    fi
fi

start_head --heartbeat-ms 200 --suspect-after 5 --dead-after 25 --restart-backoff-ms 1000
if [ "$DRY" = 1 ]; then
    "$NODE_BIN" --head "$HEAD" --name gpu0 --fake-gpus 2xH200:141GB --state-dir "$T/node-gpu0" >>"$T/node-gpu0.log" 2>&1 &
else
    "$NODE_BIN" --head "$HEAD" --name gpu0 --state-dir "$T/node-gpu0" >>"$T/node-gpu0.log" 2>&1 &
fi
PIDS+=("$!")
wait_for 30 "the node agent to register with its real GPUs" alive_count

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
# last_step FILE: the step of FILE's last metrics line (0 when none); no
# python here: it is polled every 20 ms
last_step() {
    local s
    s=$([ -f "$1" ] && tail -n 1 "$1" | sed -n 's/^{"step":\([0-9]*\),.*/\1/p')
    echo "${s:-0}"
}
# tt_pid ID WORKER: the pid of worker WORKER's troupe-train (the job lists the
# agent's supervisor, whose only child is bash exec'ing it); lib.sh's
# train_pid needs jq, which the GPU machines lack.
tt_pid() {
    local shim
    shim=$(cli -o json job "$1" | js "[w['pid'] for w in d['workers'] if w['name'] == 'job$1-$2'][0]")
    pgrep -P "$shim" troupe-train
}
kinds() { cli -o json job "$1" | js '" ".join(m["kind"] for m in d.get("membership") or [])'; }

"$TRAIN_BIN" --make-data "$T/big.tok" "${DATA_ARGS[@]}" >/dev/null
cat >"$T/big.yaml" <<YAML
seed: 1
$MODEL
train: {steps: $STEPS, micro_batch: $B, warmup_steps: 10, $TRAIN}
data: {path: $T/big.tok, val_fraction: 0}
eval: {every: 0}
dp: {timeout_ms: 30000, init_timeout_ms: 120000, elastic: true}
YAML
if [ "$CURVE" = 1 ]; then
"$TRAIN_BIN" --config "$T/big.yaml" --set train.micro_batch=$((2 * B)) --set dp.mode=off --set dp.elastic=false \
    --metrics-json "$OUTDIR/ref.json" >"$OUTDIR/ref.log" 2>&1 || fail "standalone reference: $(tail -5 "$OUTDIR/ref.log")"
"$TRAIN_BIN" --config "$T/big.yaml" --set train.micro_batch=$((2 * B)) --set dp.mode=off --set dp.elastic=false \
    --metrics-json "$OUTDIR/ref2.json" >"$OUTDIR/ref2.log" 2>&1 || fail "standalone reference, again: $(tail -5 "$OUTDIR/ref2.log")"
# fp32 on a GPU is not deterministic (atomic sums in the backward): two
# identical runs part after some hundreds of steps. The curve is compared up
# to where they still agree within a fifth of the tolerance, and that horizon
# must lie past the grow-back (checked below).
hz=$(python3 "$COMPARE" "$OUTDIR/ref.json" "$OUTDIR/ref2.json" --horizon-of "$TOL" 2>&1) || fail "standalone references: $hz"
horizon=$(sed -n 's/^horizon \([0-9]*\) .*/\1/p' <<<"$hz")
[ -n "$horizon" ] || fail "cannot read the horizon: $hz"
echo "$hz"
fi

rm -f "$OUTDIR"/m.[0-9]*
cat >"$T/elastic.yaml" <<YAML
name: elastic
cluster: {nodes: [2]}
groups:
  - name: policy
    workers: 2
    resources: {gpu: 1}
    command: [bash, -c, 'exec "\$0" --config "\$1" --set metrics.json="\$2.\$RANK"', $TRAIN_BIN, $T/big.yaml, $OUTDIR/m]
    elastic: {min_workers: 1}
env: {NCCL_NVLS_ENABLE: "0"}
YAML
id=$(submit "$T/elastic.yaml")
wait_for 300 "rank 1 to finish $KILL_AT steps" lines_at_least "$OUTDIR/m.1" "$KILL_AT"
pid=$(tt_pid "$id" policy-1) || fail "no troupe-train process for policy-1"
at=$(last_step "$OUTDIR/m.0")
t_kill=$(now_ms)
kill -9 "$pid"
# shrink: the survivor's first step completed after the kill, past the one
# in flight (a step it completed before it noticed does not count)
deadline=$((t_kill + 120000))
while [ "$(last_step "$OUTDIR/m.0")" -le $((at + 1)) ]; do
    [ "$(now_ms)" -lt "$deadline" ] || fail "rank 0 completed no step within 120 s of the kill: $(cli logs "$id" | grep -v step= | tail -20)"
    sleep 0.02
done
t_shrunk=$(now_ms)
# grow-back: the replacement's start (its worker at attempt 1 running), then
# its first step (m.1 written past the kill)
killed=$(last_step "$OUTDIR/m.1")
deadline=$((t_kill + 300000))
until cli -o json job "$id" | js '[w for w in d["workers"] if w["name"].endswith("-policy-1")][0].get("attempt", 0)' | grep -q '^1$'; do
    [ "$(now_ms)" -lt "$deadline" ] || fail "no replacement within 300 s: $(kinds "$id")"
    sleep 0.02
done
t_repl=$(now_ms)
while [ "$(last_step "$OUTDIR/m.1")" -le "$killed" ]; do
    [ "$(now_ms)" -lt "$deadline" ] || fail "the replacement completed no step: $(cli logs "$id" | grep -v step= | tail -20)"
    case "$(job_state_py "$id")" in SUCCEEDED|FAILED|STOPPED) fail "job ended before the replacement trained: $(job_state_py "$id")" ;; esac
    sleep 0.02
done
t_full=$(now_ms)
# the replacement's first step: the first line of m.1 past the killed rank's
# last (the poll above may see it some steps later)
grown_at=$(awk -v k="$killed" -F'[:,]' '$1 == "{\"step\"" && $2 > k { print $2; exit }' "$OUTDIR/m.1")
# the replacement's process start, from /proc (10 ms ticks), beside the poll
rpid=$(tt_pid "$id" policy-1) && t_repl_proc=$(python3 - "$rpid" <<'PY'
import os, sys, time
tick = os.sysconf("SC_CLK_TCK")
start = int(open(f"/proc/{sys.argv[1]}/stat").read().rsplit(")", 1)[1].split()[19]) / tick
up = float(open("/proc/uptime").read().split()[0])
print(int(time.time() * 1000 - (up - start) * 1000))
PY
) || t_repl_proc=$t_repl
[ "$t_repl_proc" -lt "$t_repl" ] && t_repl=$t_repl_proc
wait_for 600 "job $id to end" ended "$id"
cli logs "$id" >"$OUTDIR/elastic.log" 2>&1 || true
cli job "$id" >"$OUTDIR/job.txt" 2>&1 || true
[ "$(job_state_py "$id")" = SUCCEEDED ] || fail "job $id $(job_state_py "$id"): $(grep -v step= "$OUTDIR/elastic.log" | tail -20)"
[ "$(kinds "$id")" = "SHRUNK GREW" ] || fail "membership history: $(kinds "$id")"
grep -q "policy-0\] .*elastic: rank 0 of 1 (was 2 ranks)" "$OUTDIR/elastic.log" || fail "rank 0 did not go on alone: $(grep elastic: "$OUTDIR/elastic.log")"
grep -q "policy-1\] .*elastic: joined the group as rank 1 of 2" "$OUTDIR/elastic.log" || fail "the replacement did not join: $(grep elastic: "$OUTDIR/elastic.log")"
grep -q "policy-0\] .*elastic: rank 0 of 2 (was 1 ranks)" "$OUTDIR/elastic.log" || fail "rank 0 did not meet the replacement: $(grep elastic: "$OUTDIR/elastic.log")"
curve="not checked (124M: see the header)"
if [ "$CURVE" = 1 ]; then
    [ "$horizon" -ge $((grown_at + 20)) ] ||
        fail "two identical standalone runs agree within $TOL/5 only up to step $horizon, not 20 steps past the grow-back (step $grown_at): a curve check would be below its noise ($hz)"
    curve=$(python3 "$COMPARE" "$OUTDIR/ref.json" "$OUTDIR/m.0" --tol "$TOL" --until "$horizon") || fail "rank 0's curve vs micro_batch $((2 * B)) alone (to step $horizon): $curve"
    curve="$curve (to step $horizon, grown at $grown_at)"
fi
shrink_ms=$((t_shrunk - t_kill)); grow_ms=$((t_full - t_repl))
grep -h "elastic:" "$OUTDIR/elastic.log" | sed 's/^/  /'
python3 - "$OUTDIR/elastic.json" <<PY
import json, sys
json.dump({"kill_to_next_step_ms": $shrink_ms, "replacement_start_to_full_step_ms": $grow_ms,
           "killed_after_step": $at, "grown_at_step": $grown_at, "micro_batch": $B, "steps": $STEPS}, open(sys.argv[1], "w"), indent=1)
PY
pass "$WHAT, rank 1 killed after step $at: rank 0 went on alone, next step $shrink_ms ms after the kill; replacement start to first step at 2 ranks $grow_ms ms; SUCCEEDED with 2; curve vs micro_batch $((2 * B)) alone: $curve"
