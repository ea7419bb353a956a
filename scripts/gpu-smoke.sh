#!/usr/bin/env bash
# gpu-smoke.sh BIN_DIR - on a machine with GPUs: troupe-node discovers the real
# GPUs, registers them, and runs the example job on them (troupe-train on CUDA).
# Used on the lent GPU machines with prebuilt binaries (no packages needed).
set -u
BIN=${1:?usage: gpu-smoke.sh BIN_DIR}
OUTDIR=${OUT:-/tmp}
export PATH=$BIN:$PATH NCCL_NVLS_ENABLE=0
T=$(mktemp -d /tmp/troupe-gpu.XXXXXX)
export TROUPE_HEAD=tcp://127.0.0.1:7770
nvidia-smi -L || true
troupe-node --check-config | tail -1
troupe-head --listen "$TROUPE_HEAD" --state-dir "$T/head" >"$T/head.log" 2>&1 &
HP=$!
# --shared-uid: the smoke job's workers write into $T, this script's own.
troupe-node --name gpu-node --state-dir "$T/node" --shared-uid >"$T/node.log" 2>&1 &
NP=$!
for _ in $(seq 50); do [ "$(troupe -o json nodes --alive 2>/dev/null | grep -o '"count":1')" ] && break; sleep 0.1; done
troupe nodes
troupe -o json nodes >"$OUTDIR/gpu-nodes.json"
gpus=$(troupe -o json status | sed 's/.*"total":\([0-9]*\).*/\1/')
mkdir -p "$T/job"
cp "$(dirname "$0")/../examples/demo/job.yaml" "$(dirname "$0")/../examples/demo/train.yaml" "$T/job/"
"$(dirname "$0")/../examples/demo/fit.sh" "$gpus" "$T/job/job.yaml"
troupe-train --make-data "$T/job/data.tok" >/dev/null
timeout 300 troupe submit "$T/job/job.yaml" 2>&1 | tee "$OUTDIR/gpu-job.log"
rc=${PIPESTATUS[0]}
troupe job 1
troupe -o json job 1 >"$OUTDIR/gpu-job.json"
kill -TERM $NP; wait $NP; kill -TERM $HP; wait $HP
echo "gpu-smoke: job exit status $rc"
exit $rc
