#!/usr/bin/env bash
# run_device.sh STAGE... - the GPU checks and benchmarks of troupe-train's CUDA
# backend, run on the lent H200 from the repository root with prebuilt
# binaries in .device/bin (see bench/RESULTS.md, "Training core").
#
# Stages: tests (gpu.train.* cases), memcheck (compute-sanitizer on the small
# case), ours (troupe-bench-train 124M and 350M), torch (PyTorch eager and
# compiled), profile (ncu per-kernel times of one step), summary (table of ours vs PyTorch from the JSON files).
# Logs and JSON are written to a work folder; at the end the summary, the
# test verdicts and a tarball of everything are copied to $OUT (the device
# tool returns at most 8 files), or everything stays in ./bench-out.
set -u
final=${OUT:-}
out=${OUT:+/tmp/tr-bench}
out=${out:-bench-out}
rm -rf "$out"
mkdir -p "$out"
bin=.device/bin
# On the lent GPU machines a missing or broken GPU fails the tests rather
# than skipping them (exit 77), and any failed test fails this script.
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 TROUPE_REQUIRE_GPU=1
status=0

stage_tests() {
    local c rc bad=0
    for c in parity_fp32 parity_bf16 learns smoke; do
        timeout 100 "$bin/test_train_gpu" "$c" 2>&1 | tee "$out/test_$c.log" | tail -40
        rc=${PIPESTATUS[0]}
        echo "gpu.train.$c rc=$rc" | tee -a "$out/tests.txt"
        [ "$rc" = 0 ] || bad=1
    done
    return $bad
}

stage_memcheck() {
    local cs=/usr/local/cuda/bin/compute-sanitizer
    if [ ! -x "$cs" ]; then cs=$(command -v compute-sanitizer || true); fi
    if [ -z "$cs" ]; then echo "memcheck: compute-sanitizer not found" | tee -a "$out/tests.txt"; return 1; fi
    echo "memcheck: using $cs ($("$cs" --version | tail -1))"
    timeout 300 "$cs" --tool memcheck --error-exitcode 1 "$bin/test_train_gpu" smoke >"$out/memcheck.log" 2>&1
    local rc=$?
    echo "gpu.train.memcheck rc=$rc" | tee -a "$out/tests.txt"
    tail -5 "$out/memcheck.log"
    return $rc
}

stage_ours() {
    timeout 150 "$bin/troupe-bench-train" --model 124M --batch "${OURS_B124:-16,32,64}" --json "$out/ours_124M.json" \
        2>&1 | tee "$out/ours_124M.log"
    if [ -n "${OURS_RECOMPUTE:-}" ]; then
        timeout 100 "$bin/troupe-bench-train" --model "${OURS_RECOMPUTE%%:*}" --batch "${OURS_RECOMPUTE#*:}" \
            --recompute 1 --no-ceiling --json "$out/ours_rc.json" 2>&1 | tee "$out/ours_rc.log"
    fi
    timeout 150 "$bin/troupe-bench-train" --model 350M --batch "${OURS_B350:-16,32}" --no-ceiling \
        --json "$out/ours_350M.json" 2>&1 | tee "$out/ours_350M.log"
}

stage_torch() {
    for m in 124M 350M; do
        local bl=${TORCH_B:-16}
        [ $m = 124M ] && bl=${TORCH_B124:-$bl}
        [ $m = 350M ] && bl=${TORCH_B350:-$bl}
        timeout 280 python3 bench/train/torch_gpt2.py --model $m --batch "$bl" --modes eager,compile \
            --json "$out/torch_$m.json" 2>&1 | grep -v Warning | tee "$out/torch_$m.log" | tail -5
    done
}

# profile: per-kernel GPU time of one 124M B=16 step under ncu (no nsys there).
stage_profile() {
    local ncu=/usr/local/cuda/bin/ncu
    [ -x "$ncu" ] || ncu=$(command -v ncu || true)
    if [ -z "$ncu" ]; then echo "profile: ncu not found"; return; fi
    timeout 240 "$ncu" --clock-control none --profile-from-start off --metrics gpu__time_duration.sum \
        --csv --print-summary per-kernel "$bin/troupe-bench-train" --model "${PROF_MODEL:-124M}" \
        --batch "${PROF_B:-16}" --steps 1 --warmup 2 --no-ceiling --profile >"$out/profile.csv" 2>"$out/profile.err"
    echo "profile rc=$?"
    python3 bench/train/kernels.py "$out/profile.csv" | tee "$out/profile.txt" | sed -n 1,40p # sed reads all: head would cut tee (and the file) short
}

stage_summary() {
    python3 bench/train/summarize.py "$out" | tee "$out/summary.txt"
}

for s in "$@"; do
    echo "=== $s"
    if ! "stage_$s"; then
        echo "=== stage $s FAILED"
        status=1
    fi
done
if [ -n "$final" ]; then
    tar -czf "$final/logs.tgz" -C "$out" .
    for f in summary.txt summary.json tests.txt profile.txt; do
        [ -f "$out/$f" ] && cp "$out/$f" "$final/"
    done
fi
exit $status
