#!/usr/bin/env bash
# bench.train.smoke: troupe-bench-train (the CUDA training core) on GPT-2
# 124M, batch 4, 3 timed steps after 1 warm-up, without the GEMM ceiling:
# a step was timed and tokens/s measured. Needs the CUDA build and a GPU:
# skipped (77), saying which is missing, elsewhere.
source "$(dirname "$0")/../smoke.bash"
bin=$TROUPE_BIN/bench/train/troupe-bench-train
[ -x "$bin" ] || skip_test "no $bin: this build has no CUDA backend (configure with a CUDA toolkit)"
if [ "${TROUPE_REQUIRE_GPU:-0}" != 1 ] && ! nvidia-smi -L >/dev/null 2>&1; then
    skip_test "no GPU here (nvidia-smi -L fails): troupe-bench-train runs on the CUDA backend only"
fi
run_logged train "$bin" --model 124M --batch 4 --steps 3 --warmup 1 --no-ceiling --json "$T/train.json"
measured "$T/train.json" "a 124M training step was timed" \
    '(.results | length) == 1 and all(.results[]; .step_ms > 0 and .tok_s > 0)'
