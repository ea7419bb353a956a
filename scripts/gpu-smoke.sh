#!/usr/bin/env bash
# gpu-smoke.sh BIN_DIR - on a machine with GPUs: troupe-node discovers the real
# GPUs, registers them, and runs the example job on them (troupe-train on CUDA).
# Used on the lent GPU machines with prebuilt binaries (no packages needed).
# GPU_SMOKE_ISOLATED=1 (as root): the agent runs each worker under a uid of its
# own, as it does by default, instead of --shared-uid; the job's directory is
# made 1777 (README, "Isolation") and each worker's uid is checked.
set -u
BIN=${1:?usage: gpu-smoke.sh BIN_DIR}
# Absolute: the agent starts workers in their own directories, where a
# relative PATH entry names nothing.
BIN=$(cd "$BIN" && pwd) || { echo "gpu-smoke: no folder $1" >&2; exit 2; }
OUTDIR=${OUT:-/tmp}
# A folder of the four programs, or a build tree (or tests/gpu/runtime/stage.sh's
# .device/bin), where each lives in its own subfolder.
export PATH=$BIN:$BIN/client:$BIN/server:$BIN/worker/node:$BIN/worker/train:$PATH NCCL_NVLS_ENABLE=0
T=$(mktemp -d /tmp/troupe-gpu.XXXXXX)
export TROUPE_HEAD=tcp://127.0.0.1:7770
nvidia-smi -L || true
troupe-node --check-config | tail -1
troupe-head --listen "$TROUPE_HEAD" --state-dir "$T/head" >"$T/head.log" 2>&1 &
HP=$!
ISO=${GPU_SMOKE_ISOLATED:-0}
if [ "$ISO" = 1 ]; then
    chmod 711 "$T" # workers under their own uids reach $T/job, nothing else of ours
    troupe-node --name gpu-node --state-dir "$T/node" >"$T/node.log" 2>&1 &
else
    # --shared-uid: the smoke job's workers write into $T, this script's own.
    troupe-node --name gpu-node --state-dir "$T/node" --shared-uid >"$T/node.log" 2>&1 &
fi
NP=$!
for _ in $(seq 50); do [ "$(troupe -o json nodes --alive 2>/dev/null | grep -o '"count":1')" ] && break; sleep 0.1; done
troupe nodes
troupe -o json nodes >"$OUTDIR/gpu-nodes.json"
gpus=$(troupe -o json status | sed -n 's/.*"gpus":{"total":\([0-9]*\).*/\1/p')
mkdir -p "$T/job"
cp "$(dirname "$0")/../examples/demo/job.yaml" "$(dirname "$0")/../examples/demo/train.yaml" "$T/job/"
"$(dirname "$0")/../examples/demo/fit.sh" "$gpus" "$T/job/job.yaml"
troupe-train --make-data "$T/job/data.tok" >/dev/null
if [ "$ISO" = 1 ]; then
    chmod 1777 "$T/job"
    chmod 644 "$T/job/"*
    # Each worker says who it runs as; the check below wants a uid per worker, none root.
    sed -i 's/exec troupe-train/echo "uid: $TROUPE_WORKER $(id -u)" >\&2; exec troupe-train/' "$T/job/job.yaml"
fi
timeout 300 troupe submit "$T/job/job.yaml" 2>&1 | tee "$OUTDIR/gpu-job.log"
rc=${PIPESTATUS[0]}
troupe job 1
troupe -o json job 1 >"$OUTDIR/gpu-job.json"
if [ "$ISO" = 1 ]; then
    troupe logs 1 | grep "uid: " | sort -u >"$OUTDIR/gpu-uids.txt"
    cat "$OUTDIR/gpu-uids.txt"
    uids=$(awk '{print $NF}' "$OUTDIR/gpu-uids.txt" | sort -u)
    n_workers=$(awk '{print $(NF-1)}' "$OUTDIR/gpu-uids.txt" | sort -u | wc -l)
    if [ "$(wc -w <<<"$uids")" -lt "$n_workers" ] || grep -qx 0 <<<"$uids" || [ "$n_workers" = 0 ]; then
        echo "gpu-smoke: workers did not each run under a uid of their own (not root): $uids" >&2
        rc=1
    fi
fi
kill -TERM $NP; wait $NP; kill -TERM $HP; wait $HP
echo "gpu-smoke: job exit status $rc"
exit $rc
