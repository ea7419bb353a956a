#!/usr/bin/env bash
# bench.mgpu.smoke: bench/mgpu/troupe_bench.sh's allreduce stage at 2 ranks
# (troupe-train's gradient all-reduce beside plain all-reduces, one job of 2
# workers under a real head and agent): every model row timed both. With 2
# GPUs it runs on NCCL (GPT-2 124M, 3 iterations); in a build without CUDA it
# runs as the dry run (simulated GPUs, the CPU collective, a tiny model). A
# CUDA build without 2 GPUs cannot run it: skipped (77), saying why.
source "$(dirname "$0")/../smoke.bash"
ar=$TROUPE_BIN/bench/mgpu/troupe-bench-allreduce
[ -x "$ar" ] || fail "no $ar (build target troupe-bench-allreduce)"
if nvidia-smi -L >/dev/null 2>&1 || [ "${TROUPE_REQUIRE_GPU:-0}" = 1 ]; then
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
    [ "$gpus" -ge 2 ] || skip_test "$gpus GPU(s) here: the all-reduce stage needs 2"
    export AR_MODELS=124M AR_ITERS=3
elif grep -q cudaSetDevice "$ar"; then
    # The binary is the NCCL/CUDA program, which cannot run on simulated GPUs.
    skip_test "troupe-bench-allreduce is built for CUDA and there is no GPU here (nvidia-smi -L fails)"
else
    export TROUPE_GPU_DRYRUN=1
fi
mkdir -p "$T/raw"
TROUPE_GPUS=2 run_logged mgpu bash "$BENCH/mgpu/troupe_bench.sh" "$T/raw" allreduce
measured "$T/raw/allreduce-2.json" "the gradient all-reduce and the plain one were timed at 2 ranks" \
    '.ranks == 2 and (.rows | length) > 0 and all(.rows[]; .troupe_over_plain_bucketed > 0)'
