#!/usr/bin/env bash
# bench/mgpu/troupe_bench.sh RAW STAGE... - troupe's side of the multi-GPU
# benchmarks on one machine: a troupe-head and one troupe-node (real GPU
# discovery) and, per stage, jobs of N workers x 1 GPU. Raw results go to the
# folder RAW; bench/mgpu/summarize.py turns them into tables and JSON.
#   weak      troupe-train data-parallel, 124M and 350M (T 1024, micro_batch
#             WEAK_B per rank, default 16; WEAK_STEPS steps, default 25) at
#             N = 1, 2, 4, 8 GPUs (those the machine has; WEAK_SIZES): each rank's
#             metrics (weak-MODEL-N.RANK), logs and job record; dp settings
#             from DP_BUCKET_MB (25), DP_GRAD_DTYPE (fp32), DP_OVERLAP (true),
#             DP_ZERO (0; 1 = ZeRO-1)
#   allreduce troupe-bench-allreduce at N = 2, 4, 8: troupe-train's gradient
#             buckets beside plain NCCL all-reduces of the same bytes
#             (allreduce-N.json, written by rank 0)
#   startup   STARTUP_REPS (2) jobs of 124M troupe-train, 3 steps, at N = 2,
#             4, 8 (STARTUP_SIZES; "1" measures one worker): the submit time taken here, the job record (placement,
#             process starts), the logs (rendezvous, NCCL init, warm-up from
#             each rank's "nccl: communicator ... ready" line) and the step
#             metrics with their timestamps (first step)
# N comes from nvidia-smi, or TROUPE_GPUS. TROUPE_GPU_DRYRUN=1 runs the same
# logic without GPUs: simulated GPUs, troupe-train and the benchmark on the
# CPU (CPU collective), models shrunk to a few layers of width 64.
# Every worker environment has NCCL_NVLS_ENABLE=0.
set -euo pipefail
# Agents here run workers as themselves, as every figure before isolation was
# measured (the workers write into this script's temp dir).
export TROUPE_SHARED_UID=true
HERE=$(cd "$(dirname "$0")" && pwd)
RAW=$(mkdir -p "${1:?usage: troupe_bench.sh RAW STAGE...}" && cd "$1" && pwd)
shift
: "${TROUPE_BIN:?TROUPE_BIN must point at the build tree (or .device/bin)}"
source "$HERE/../../tests/integration/lib.sh"
BENCH_AR=$TROUPE_BIN/bench/mgpu/troupe-bench-allreduce
DRY=${TROUPE_GPU_DRYRUN:-0}
export NCCL_NVLS_ENABLE=0

js() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
jstate() { cli -o json job "$1" | js 'd["state"]'; }
ended() { case "$(jstate "$1")" in SUCCEEDED | FAILED | STOPPED) return 0 ;; esac; return 1; }
alive_one() { [ "$(cli -o json nodes --alive | js 'd["count"]')" = 1 ]; }

if [ "$DRY" = 1 ]; then
    G=${TROUPE_GPUS:-2}
    DEVICE=cpu
else
    nvidia-smi -L >/dev/null 2>&1 || fail "no GPU here (nvidia-smi -L fails); TROUPE_GPU_DRYRUN=1 runs without"
    G=${TROUPE_GPUS:-$(nvidia-smi -L | grep -c '^GPU ')}
    DEVICE=cuda
fi
sizes() { local n; for n in "$@"; do [ "$n" -le "$G" ] && echo "$n"; done; return 0; }

start_head --heartbeat-ms 500 --suspect-after 10 --dead-after 60
if [ "$DRY" = 1 ]; then
    start_node gpu0 "${G}xH200:141GB"
else
    "$NODE_BIN" --head "$HEAD" --name gpu0 --state-dir "$T/node-gpu0" >>"$T/node-gpu0.log" 2>&1 &
    PIDS+=("$!")
fi
wait_for 30 "the node agent to register" alive_one
cli -o json nodes >"$RAW/nodes.json"

# model NAME: the YAML model line of a shape (shrunk in a dry run)
model() {
    if [ "$DRY" = 1 ]; then
        case $1 in 124M) echo "{layers: 2, width: 64, heads: 4, seq_len: 64}" ;; *) echo "{layers: 4, width: 64, heads: 4, seq_len: 64}" ;; esac
    else
        case $1 in 124M) echo "{layers: 12, width: 768, heads: 12, seq_len: 1024, vocab: 50257}" ;;
                   *) echo "{layers: 24, width: 1024, heads: 16, seq_len: 1024, vocab: 50257}" ;; esac
    fi
}
if [ "$DRY" = 1 ]; then
    "$TRAIN_BIN" --make-data "$T/data.tok" --tokens 262144 >/dev/null
else
    "$TRAIN_BIN" --make-data "$T/data.tok" --vocab 50257 --tokens 8000000 >/dev/null
fi
B=${WEAK_B:-$([ "$DRY" = 1 ] && echo 4 || echo 16)}

# train_config FILE MODEL STEPS: troupe-train's settings for a benchmark job
train_config() {
    cat >"$1" <<YAML
seed: 1
device: $DEVICE
model: $(model "$2")
train: {steps: $3, micro_batch: $B, warmup_steps: 5, precision: bf16}
data: {path: $T/data.tok, val_fraction: 0}
eval: {every: 0}
dp: {bucket_mb: ${DP_BUCKET_MB:-25}, grad_dtype: ${DP_GRAD_DTYPE:-fp32}, overlap: ${DP_OVERLAP:-true}, zero: ${DP_ZERO:-0}}
YAML
}

# run NAME N COMMAND...: a job of N workers x 1 GPU running COMMAND (a YAML
# list body), until it ends; RAW/NAME.{log,job.json}. Fails unless SUCCEEDED.
run() {
    local name=$1 n=$2 cmd=$3 id
    cat >"$T/$name.yaml" <<YAML
name: $name
cluster: {nodes: [$n]}
groups:
  - {name: policy, workers: $n, resources: {gpu: 1}, command: [$cmd]}
env: {NCCL_NVLS_ENABLE: "0"}
YAML
    SUBMIT_MS=$(date +%s%3N)
    id=$(submit "$T/$name.yaml")
    echo "$SUBMIT_MS" >"$RAW/$name.submit_ms"
    wait_for "${JOB_WAIT_S:-300}" "job $id ($name) to end" ended "$id"
    cli logs "$id" >"$RAW/$name.log" 2>&1 || true
    cli -o json job "$id" >"$RAW/$name.job.json"
    cli -o json metrics "$id" --name step_ms >"$RAW/$name.metrics.json" 2>/dev/null || true
    [ "$(jstate "$id")" = SUCCEEDED ] || fail "job $id ($name) $(jstate "$id"): $(tail -n 20 "$RAW/$name.log")"
    echo "$name: job $id SUCCEEDED"
}
# per-rank metrics files: bash -c exec's troupe-train with metrics.json=PREFIX.RANK
train_cmd() { echo "bash, -c, 'exec \"\$0\" --config \"\$1\" --set metrics.json=\"\$2.\$RANK\"', $TRAIN_BIN, $1, $2"; }

stage_weak() {
    local m n
    for m in ${WEAK_MODELS:-124M 350M}; do
        train_config "$T/weak-$m.yaml" "$m" "${WEAK_STEPS:-25}"
        for n in $(sizes ${WEAK_SIZES:-1 2 4 8}); do
            rm -f "$RAW/weak-$m-$n".[0-9]*
            run "weak-$m-$n" "$n" "$(train_cmd "$T/weak-$m.yaml" "$RAW/weak-$m-$n")"
        done
    done
}

stage_allreduce() {
    local n models=${AR_MODELS:-124M,350M} buckets=${AR_BUCKET_MB:-25}
    [ -x "$BENCH_AR" ] || fail "no $BENCH_AR (build target troupe-bench-allreduce, then stage it)"
    [ "$DRY" = 1 ] && models=tiny buckets=1
    for n in $(sizes 2 4 8); do
        run "allreduce-$n" "$n" "$BENCH_AR, --model, \"$models\", --bucket-mb, $buckets, --iters, ${AR_ITERS:-20}, --json, $RAW/allreduce-$n.json"
    done
}

stage_startup() {
    local n rep
    train_config "$T/startup.yaml" 124M 3
    for n in $(sizes ${STARTUP_SIZES:-2 4 8}); do
        for rep in $(seq 1 "${STARTUP_REPS:-2}"); do
            rm -f "$RAW/startup-$n-$rep".[0-9]*
            run "startup-$n-$rep" "$n" "$(train_cmd "$T/startup.yaml" "$RAW/startup-$n-$rep")"
        done
    done
}

for s in "$@"; do
    echo "=== troupe_bench $s (G=$G, $DEVICE)"
    "stage_$s"
done
cp "$T/head.log" "$RAW/head.log"
