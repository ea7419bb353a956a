#!/usr/bin/env bash
# bench/mgpu/dp_sweep.sh [VARIANT...] - what the data-parallel step costs at N
# GPUs under each setting, side by side in one run: for every variant, the
# weak stage of troupe_bench.sh (124M by default, WEAK_MODELS) at 1 GPU and at
# all the machine's GPUs (WEAK_SIZES), then one table of step time and
# efficiency per variant (summarize.py's weak table, one per variant).
# A variant is NAME=SETTINGS, SETTINGS a comma-separated list of
# dp_bucket_mb=N, grad=fp32|bf16, overlap=true|false, zero=0|1 (dp.zero) and
# any NCCL_*=V (put
# into the agent's environment, which the workers inherit). Default variants:
#   base       fp32 gradients, 25 MB buckets, overlap on (troupe-train's defaults)
#   no-overlap the same with dp.overlap false (all-reduce after the backward)
#   bf16       bf16 gradients
#   ctas8      fp32 with NCCL_MAX_CTAS=8 (fewer SMs taken from the backward)
#   ctas4      fp32 with NCCL_MAX_CTAS=4
#   bucket100  fp32 with 100 MB buckets
# (ZeRO-1 beside plain DP: dp_sweep.sh base= zero1=zero=1 zero1-bf16=zero=1,grad=bf16)
# Output: $OUT/sweep.txt (or ./bench-out-sweep), sweep.json, raw folders per
# variant. Run from the repository root with binaries in .device (see
# bench/mgpu/run_device.sh); TROUPE_GPU_DRYRUN=1 works as there.
set -u
cd "$(dirname "$0")/../.."
work=${OUT:-$PWD/bench-out-sweep}
mkdir -p "$work"
export TROUPE_BIN=${TROUPE_BIN:-$PWD/.device/bin}
export LD_LIBRARY_PATH=$PWD/.device/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0
if [ "${TROUPE_GPU_DRYRUN:-0}" = 1 ]; then
    G=${TROUPE_GPUS:-2}
else
    G=${TROUPE_GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')}
fi
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(base= no-overlap=overlap=false bf16=grad=bf16 ctas8=NCCL_MAX_CTAS=8
    ctas4=NCCL_MAX_CTAS=4 bucket100=dp_bucket_mb=100)
status=0
: >"$work/sweep.txt"
for v in "${variants[@]}"; do
    name=${v%%=*} settings=${v#*=}
    envs=(WEAK_MODELS="${WEAK_MODELS:-124M}" WEAK_SIZES="${WEAK_SIZES:-1 $G}" TROUPE_GPUS="$G")
    IFS=, read -ra kv <<<"$settings"
    for s in "${kv[@]}"; do
        case $s in
        "") ;;
        dp_bucket_mb=*) envs+=(DP_BUCKET_MB="${s#*=}") ;;
        grad=*) envs+=(DP_GRAD_DTYPE="${s#*=}") ;;
        overlap=*) envs+=(DP_OVERLAP="${s#*=}") ;;
        zero=*) envs+=(DP_ZERO="${s#*=}") ;;
        NCCL_*=*) envs+=("$s") ;;
        *) echo "dp_sweep: unknown setting '$s' in variant $name" >&2; exit 2 ;;
        esac
    done
    echo "=== variant $name: ${envs[*]}"
    rm -rf "$work/$name"
    mkdir -p "$work/$name/raw"
    if env "${envs[@]}" bash bench/mgpu/troupe_bench.sh "$work/$name/raw" weak >"$work/$name/bench.txt" 2>&1; then
        { echo "--- $name ($settings)"; python3 bench/mgpu/summarize.py "$work/$name" --json "$work/$name/weak.json" |
            sed -n '/^weak scaling/,/^goal/p'; } | tee -a "$work/sweep.txt"
    else
        status=1
        echo "--- $name: FAILED" | tee -a "$work/sweep.txt"
        tail -n 20 "$work/$name/bench.txt"
    fi
done
python3 - "$work" "${variants[@]}" <<'PY'
import json, os, sys
work, out = sys.argv[1], {}
for v in sys.argv[2:]:
    name = v.split("=", 1)[0]
    f = os.path.join(work, name, "weak.json")
    if os.path.exists(f):
        out[name] = {"settings": v.split("=", 1)[1], "weak": json.load(open(f)).get("weak", [])}
json.dump(out, open(os.path.join(work, "sweep.json"), "w"), indent=1)
PY
exit $status
