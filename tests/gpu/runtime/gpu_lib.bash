# gpu_lib.bash - what the gpu.runtime tests share; sourced after
# ../../integration/lib.sh. Skips (exit 77) without a usable GPU, or fails
# under TROUPE_REQUIRE_GPU=1 so that a lent machine never skips silently.

# skip WHY: exit 77 (ctest SKIP_RETURN_CODE) through lib.sh's cleanup, which
# stops what the test started; a failure under TROUPE_REQUIRE_GPU=1.
skip() {
    if [ "${TROUPE_REQUIRE_GPU:-0}" = 1 ]; then fail "TROUPE_REQUIRE_GPU=1 but: $*"; fi
    skip_test "$@"
}

# gpu_require [nccl]: a GPU and a troupe-train that runs (with nccl: one built
# with CUDA+NCCL); then the settings every GPU test uses.
gpu_require() {
    nvidia-smi -L >/dev/null 2>&1 || skip "no GPU here (nvidia-smi -L fails)"
    "$TRAIN_BIN" --help >/dev/null 2>&1 || skip "troupe-train does not run (missing libraries?)"
    if [ "${1:-}" = nccl ]; then
        ldd "$TRAIN_BIN" | grep libtroupe_nccl >/dev/null || skip "troupe-train was built without CUDA+NCCL (no libtroupe_nccl)"
    fi
    export NCCL_NVLS_ENABLE=0 # never NVLink multicast on the lent machines
    OUTDIR=${GPU_OUT:-$T/out}
    mkdir -p "$OUTDIR"
}

# No jq on the GPU machines: JSON through python3.
js() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
job_state_py() { cli -o json job "$1" | js 'd["state"]'; }
ended() { case "$(job_state_py "$1")" in SUCCEEDED|FAILED|STOPPED) return 0 ;; esac; return 1; }
alive_count() { [ "$(cli -o json nodes --alive | js 'd["count"]')" = 1 ]; }
