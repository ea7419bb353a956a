#!/usr/bin/env bash
# bench/mgpu/refit_bench.sh [STAGE...] - the weight refit policy -> generation
# on 2 GPUs in ONE device call (nvidia-h200-x2), from the repository root,
# with binaries staged by tests/gpu/runtime/stage.sh into .device.
#
# Stages (default: both, in this order):
#   test   gpu.train.refit_ops (the CUDA backend's refit ops against the
#          host: hash, in-place take in fp32 and bf16), when stage.sh staged
#          test_train_gpu, then tests/gpu/runtime/refit.sh
#          (gpu.runtime.refit): the refit over the CPU collective on one
#          GPU, then over NCCL on two: device to device in fp32 and in bf16,
#          and refit.path host
#   bench  one job per model and variant: 1 policy worker training on GPU 0,
#          1 generation worker on GPU 1, a refit after every step
#          (REFIT_STEPS, default 5, the last one final). Models 124M and 350M
#          (REFIT_MODELS), T 1024, micro_batch 4. Variants (REFIT_VARIANTS):
#            host        refit.path host: the fp32 vector through host memory
#                        (the policy's get_params, FNV-1a, NCCL through a
#                        device scratch buffer in 64 MiB chunks, the
#                        generation's set_params), bf16 training
#            device      refit.path device, bf16 training on both: the bf16
#                        weights by one ncclBroadcast, device to device
#            device_f32  refit.path device, fp32 training on both: the fp32
#                        master device to device (the bytes of the host path)
# Per variant: bytes, the broadcast's ms and GB/s (median over the refits
# after the first, which pays NCCL's first use of the buffers), the whole
# refit on each side (total_ms), the hash's cost (hash_ms), and whether the
# generation's hash equals policy rank 0's at every refit.
# Each stage runs under its own cap and the whole run under RUN_BUDGET_S
# (default 470 s, inside the 8 minutes the call is given).
# Results: $OUT/refit.txt (the table), $OUT/refit.json, $OUT/status.txt,
# $OUT/test.txt and $OUT/logs.tgz (every job's log), or ./bench-out-refit
# without $OUT. Exit status 1 when a stage failed.
#
# TROUPE_GPU_DRYRUN=1 (TROUPE_BIN=build dir) runs the bench stage's logic on
# a machine without GPUs: 2 simulated GPUs, troupe-train on the CPU with
# tiny models, and every variant through host memory over the CPU
# collective (the device path needs CUDA and NCCL): it checks the jobs, the
# log parsing and the table, not the figures.
set -u
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/../.."
if [ "${1:-}" = --jobs ]; then
    # the bench stage itself, in a child under the stage's cap
    RAW=$2
    DRY=${TROUPE_GPU_DRYRUN:-0}
    export TROUPE_SHARED_UID=true # agents run the workers as themselves (they write into $T)
    source tests/integration/lib.sh
    js() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
    jstate() { cli -o json job "$1" | js 'd["state"]'; }
    ended() { case "$(jstate "$1")" in SUCCEEDED | FAILED | STOPPED) return 0 ;; esac; return 1; }
    alive_one() { [ "$(cli -o json nodes --alive | js 'd["count"]')" = 1 ]; }
    start_head --heartbeat-ms 500 --suspect-after 10 --dead-after 60
    if [ "$DRY" = 1 ]; then
        start_node gpu0 "2xH200:141GB"
        "$TRAIN_BIN" --make-data "$T/data.tok" --tokens 262144 >/dev/null
        device=cpu
    else
        "$NODE_BIN" --head "$HEAD" --name gpu0 --state-dir "$T/node-gpu0" >>"$T/node-gpu0.log" 2>&1 &
        PIDS+=("$!")
        "$TRAIN_BIN" --make-data "$T/data.tok" --vocab 50257 --tokens 2000000 >/dev/null
        device=cuda
    fi
    wait_for 30 "the node agent to register" alive_one
    steps=${REFIT_STEPS:-5}
    for m in ${REFIT_MODELS:-124M 350M}; do
        case $m in
            124M) model="{layers: 12, width: 768, heads: 12, seq_len: 1024, vocab: 50257}" ;;
            350M) model="{layers: 24, width: 1024, heads: 16, seq_len: 1024, vocab: 50257}" ;;
            *) fail "unknown model $m (124M 350M)" ;;
        esac
        [ "$DRY" = 1 ] && model="{layers: 2, width: 64, heads: 4, seq_len: 64}"
        for v in ${REFIT_VARIANTS:-host device device_f32}; do
            case $v in
                host) path=host prec=bf16 ;;
                device) path=device prec=bf16 ;;
                device_f32) path=device prec=fp32 ;;
                *) fail "unknown variant $v (host device device_f32)" ;;
            esac
            [ "$DRY" = 1 ] && path=auto
            name=refit-$(echo "$m-$v" | tr 'A-Z_' 'a-z-')
            cat >"$T/$name.train.yaml" <<YAML
seed: 1
device: $device
model: $model
train: {steps: $steps, micro_batch: 4, warmup_steps: 2, precision: $prec}
data: {path: $T/data.tok, val_fraction: 0.1}
eval: {every: 0, batches: 1}
refit: {every: 1, path: $path, timeout_ms: 120000}
YAML
            cat >"$T/$name.yaml" <<YAML
name: $name
cluster: {nodes: [2]}
groups:
  - {name: policy, workers: 1, resources: {gpu: 1}, command: [$TRAIN_BIN, --config, $T/$name.train.yaml]}
  - {name: generation, workers: 1, resources: {gpu: 1}, command: [$TRAIN_BIN, --role, generation, --config, $T/$name.train.yaml]}
communicators: [{name: refit, groups: [policy, generation]}]
env: {NCCL_NVLS_ENABLE: "0"}
YAML
            id=$(submit "$T/$name.yaml")
            wait_for "${JOB_WAIT_S:-150}" "job $id ($name) to end" ended "$id"
            cli logs "$id" >"$RAW/$name.log" 2>&1 || true
            echo "$id $m $v" >"$RAW/$name.id"
            [ "$(jstate "$id")" = SUCCEEDED ] || fail "job $id ($name) $(jstate "$id"): $(tail -n 20 "$RAW/$name.log")"
            echo "$name: job $id SUCCEEDED"
        done
    done
    cp "$T/head.log" "$RAW/head.log"
    exit 0
fi

final=${OUT:-}
work=${REFIT_WORK:-$([ -n "$final" ] && echo /tmp/tr-refit-bench || echo "$PWD/bench-out-refit")}
rm -rf "$work"
mkdir -p "$work/raw"
export TROUPE_BIN=${TROUPE_BIN:-$PWD/.device/bin}
export LD_LIBRARY_PATH=$PWD/.device/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0
DRY=${TROUPE_GPU_DRYRUN:-0}
[ "$DRY" = 1 ] || export TROUPE_REQUIRE_GPU=1
budget=${RUN_BUDGET_S:-470}
t_start=$(date +%s)
left() { echo $((budget - ($(date +%s) - t_start))); }
status=0
G=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
[ "$DRY" = 1 ] && G=2
commit=$(cat .device/commit 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
echo "machine: $G x ${gpu:-no GPU}, commit $commit, $(date -u '+%Y-%m-%d %H:%M UTC')" | tee "$work/status.txt"
nvidia-smi topo -m >"$work/topo.txt" 2>&1
[ "$G" -ge 2 ] || { echo "refit_bench needs 2 GPUs, this machine has $G" | tee -a "$work/status.txt"; status=1; }

# stage NAME CAP_S COMMAND...: under min(CAP_S, what is left), output to
# $work/NAME.txt (and its tail here), one status line.
stage() {
    local name=$1 cap=$2 t rc t0
    shift 2
    t=$(left)
    t=$((t - 10 < cap ? t - 10 : cap))
    if [ "$t" -lt 20 ]; then
        echo "stage $name SKIPPED: $(left) s of RUN_BUDGET_S=$budget left" | tee -a "$work/status.txt"
        status=1
        return
    fi
    echo "=== $name (cap $t s)"
    t0=$(date +%s)
    TROUPE_TEST_DEADLINE_S=$((t - 8)) timeout -k 10 "$t" "$@" >"$work/$name.txt" 2>&1
    rc=$?
    grep -E '^(ok|FAIL|SKIP|note|refit-.*SUCCEEDED$)' "$work/$name.txt" | tail -n 20
    [ "$rc" = 0 ] || { tail -n 15 "$work/$name.txt"; status=1; }
    [ "$rc" = 124 ] && rc="124 (timed out after $t s)"
    echo "stage $name rc=$rc ($(($(date +%s) - t0)) s)" | tee -a "$work/status.txt"
}

if [ "$status" = 0 ]; then
    for s in ${@:-test bench}; do
        case $s in
            test) stage test 200 bash -c 'rc=0
                if [ -x "$TROUPE_BIN/tests/gpu/train/test_train_gpu" ]; then
                    "$TROUPE_BIN/tests/gpu/train/test_train_gpu" refit_ops && echo "ok: gpu.train.refit_ops" ||
                        { echo "FAIL: gpu.train.refit_ops"; rc=1; }
                else
                    echo "note: no test_train_gpu staged: gpu.train.refit_ops not run"
                fi
                GPU_OUT=$0 bash tests/gpu/runtime/refit.sh || rc=1
                exit $rc' "$work/test" ;;
            bench) stage bench 330 bash "$self" --jobs "$work/raw" ;;
            *) echo "unknown stage $s (test bench)" | tee -a "$work/status.txt"; status=1 ;;
        esac
    done
fi
python3 bench/mgpu/refit_summary.py "$work/raw" --json "$work/refit.json" --commit "$commit" --gpu "${gpu:-}" \
    >"$work/refit.txt" 2>&1 || status=1
cat "$work/refit.txt" "$work/status.txt"
if [ -n "$final" ]; then
    mkdir -p "$final"
    tar -czf "$final/logs.tgz" -C "$work" .
    for f in refit.txt refit.json status.txt test.txt; do
        [ -f "$work/$f" ] && cp "$work/$f" "$final/"
    done
fi
exit $status
