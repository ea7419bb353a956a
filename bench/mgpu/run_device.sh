#!/usr/bin/env bash
# bench/mgpu/run_device.sh [STAGE...] - the multi-GPU checks and
# benchmarks in ONE device call on a machine of several GPUs (nvidia-h200-x8,
# or -x2/-x4: everything adapts to the GPU count), from the repository root,
# with binaries staged by tests/gpu/runtime/stage.sh into .device (see
# bench/RESULTS.md, "Multi-GPU", for the exact device call).
#
# Stages (default: all, in this order, most important first):
#   dp         tests/gpu/dp.sh on all N GPUs (placement, communicators from
#              the head, loss curve vs 1 GPU x N batch, profiling 2:4 on
#              *policy-1 + troupe trace, kill, restart from checkpoint)
#   weak       troupe-train weak scaling, 124M and 350M at 1, 2, 4, 8 GPUs
#   allreduce  troupe-bench-allreduce: gradient buckets vs plain NCCL
#   ddp        PyTorch DDP (torchrun) at 2, 4, 8 GPUs, same models and batch
#   startup    troupe submit -> communicators ready -> first step, by phase
# Each stage runs under its own cap and the whole run under RUN_BUDGET_S
# (default 560 s: the lent machine's runner stops a command at 600 s); a stage that no
# longer fits is skipped and says so (run it in a second call by name).
# Results: $OUT/summary.txt (tables), $OUT/mgpu.json (all figures + machine
# + commit), $OUT/status.txt (each stage's exit status and time),
# $OUT/dp.txt (the test's output) and $OUT/logs.tgz (everything), or all of
# it in ./bench-out-mgpu without $OUT. Exit status 1 when a stage failed.
#
# TROUPE_GPU_DRYRUN=1 (with TROUPE_GPUS=N, TROUPE_BIN=build dir) runs every
# stage's logic on a machine without GPUs: simulated GPUs, troupe-train and the
# all-reduce benchmark on the CPU collective, DDP on gloo, tiny models.
set -u
cd "$(dirname "$0")/../.."
DRY=${TROUPE_GPU_DRYRUN:-0}
final=${OUT:-}
work=${MGPU_WORK:-$([ -n "$final" ] && echo /tmp/tr-mgpu || echo "$PWD/bench-out-mgpu")}
rm -rf "$work"
mkdir -p "$work/raw"
export TROUPE_BIN=${TROUPE_BIN:-$PWD/.device/bin}
export LD_LIBRARY_PATH=$PWD/.device/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
[ "$DRY" = 1 ] || export TROUPE_REQUIRE_GPU=1
budget=${RUN_BUDGET_S:-560}
t_start=$(date +%s)
left() { echo $((budget - ($(date +%s) - t_start))); }
status=0

if [ "$DRY" = 1 ]; then
    G=${TROUPE_GPUS:-2}
    PY=python3
    python3 -c 'import torch' 2>/dev/null || PY=/usr/bin/python3 # Debian's python3-torch
else
    G=${TROUPE_GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')}
    PY=${MGPU_PYTHON:-python3}
    nvidia-smi >"$work/nvidia-smi.txt" 2>&1
    nvidia-smi topo -m >"$work/topo.txt" 2>&1
fi
commit=$(cat .device/commit 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)
python3 - "$work/machine.json" "$G" "$DRY" "$commit" <<'PY'
import json, os, platform, subprocess, sys, time
out, g, dry, commit = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
m = {"gpus": g, "dry_run": dry, "commit": commit, "host": platform.node(), "cpus": os.cpu_count(),
     "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE")}
if not dry:
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30).stdout.splitlines()
        m["gpu"], m["driver"], m["gpu_memory"] = [s.strip() for s in q[0].split(",")]
    except Exception as e:  # the tables still come out
        m["gpu"] = f"unknown ({e})"
else:
    m["gpu"], m["driver"] = "simulated H200 (dry run)", "none"
json.dump(m, open(out, "w"), indent=1)
print(f"machine: {g} x {m['gpu']}, commit {commit}, {m['date']}")
PY
[ "$G" -ge 1 ] 2>/dev/null || { echo "no GPU found (nvidia-smi -L); TROUPE_GPU_DRYRUN=1 runs without" | tee "$work/status.txt"; status=1; }

# stage NAME CAP_S COMMAND: run under min(CAP_S, what is left), output to
# $work/NAME.txt (and the tail here), one status line.
stage() {
    local name=$1 cap=$2 t rc t0
    shift 2
    t=$(left)
    t=$((t - 10 < cap ? t - 10 : cap))
    if [ "$t" -lt 20 ]; then
        echo "stage $name SKIPPED: $(left) s of RUN_BUDGET_S=$budget left (run it in another call: run_device.sh $name)" | tee -a "$work/status.txt"
        return
    fi
    echo "=== $name (cap ${t} s)"
    t0=$(date +%s)
    # lib.sh's watchdog says what a stage waited on before the cap kills it
    TROUPE_TEST_DEADLINE_S=$((t - 8)) timeout -k 10 "$t" bash -c "$*" >"$work/$name.txt" 2>&1
    rc=$?
    grep -E '^(ok|FAIL|SKIP|note|===|.*SUCCEEDED$)' "$work/$name.txt" | grep -v '^20' | tail -n 25
    [ "$rc" = 0 ] || { tail -n 15 "$work/$name.txt"; status=1; }
    [ "$rc" = 124 ] && rc="124 (timed out after $t s)"
    echo "stage $name rc=$rc ($(($(date +%s) - t0)) s)" | tee -a "$work/status.txt"
}

stage_dp() { GPU_OUT=$work/dp TROUPE_GPUS=$G bash tests/gpu/dp.sh; }
stage_weak() { TROUPE_GPUS=$G bash bench/mgpu/troupe_bench.sh "$work/raw" weak; }
stage_allreduce() { TROUPE_GPUS=$G bash bench/mgpu/troupe_bench.sh "$work/raw" allreduce; }
stage_startup() { TROUPE_GPUS=$G bash bench/mgpu/troupe_bench.sh "$work/raw" startup; }
# launch N ARGS...: torch_ddp.py in N processes with the environment torchrun
# gives (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT): the dry run's
# Debian torch 1.13 has a torchrun that fails on Python 3.11 before starting
# anything (elastic's to_map on None).
launch() {
    local n=$1 r pids=() rc=0 port=$((20000 + RANDOM % 10000))
    shift
    for ((r = 0; r < n; r++)); do
        RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            "$PY" bench/mgpu/torch_ddp.py "$@" &
        pids+=($!)
    done
    for r in "${pids[@]}"; do wait "$r" || rc=1; done
    return $rc
}
stage_ddp() {
    local n args=(--models "${DDP_MODELS:-124M,350M}" --batch "${WEAK_B:-16}")
    [ "$DRY" = 1 ] && args=(--models 124M,350M --shrink --batch 4 --steps 3 --warmup 1 --device cpu)
    for n in 2 4 8; do
        [ "$n" -le "$G" ] || continue
        echo "=== PyTorch DDP, $n processes"
        if [ "$DRY" = 1 ]; then
            launch "$n" "${args[@]}" --json "$work/raw/ddp-$n.json" || return 1
        else
            "$PY" -m torch.distributed.run --standalone --nproc_per_node "$n" bench/mgpu/torch_ddp.py "${args[@]}" \
                --json "$work/raw/ddp-$n.json" || return 1
        fi
    done
}

# the stages run in a child bash (timeout cannot run a function)
export work G DRY PY
export -f stage_dp stage_weak stage_allreduce stage_startup stage_ddp launch
if [ "$status" = 0 ]; then
    for s in ${@:-dp weak allreduce ddp startup}; do
        case $s in
            dp) stage dp 170 stage_dp ;;
            weak) stage weak 170 stage_weak ;;
            allreduce) stage allreduce 80 stage_allreduce ;;
            ddp) stage ddp 180 stage_ddp ;;
            startup) stage startup 90 stage_startup ;;
            *) echo "unknown stage $s (dp weak allreduce ddp startup)" | tee -a "$work/status.txt"; status=1 ;;
        esac
    done
fi
python3 bench/mgpu/summarize.py "$work" --json "$work/mgpu.json" >"$work/summary.txt" 2>&1 || status=1
cat "$work/summary.txt" "$work/status.txt"
if [ -n "$final" ]; then
    mkdir -p "$final"
    tar -czf "$final/logs.tgz" -C "$work" .
    for f in summary.txt mgpu.json status.txt dp.txt; do
        [ -f "$work/$f" ] && cp "$work/$f" "$final/"
    done
fi
exit $status
