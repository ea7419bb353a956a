#!/usr/bin/env bash
# demo.sh - the README's main command: install what is missing, build, start a
# local troupe-head and one troupe-node (real GPUs when present, simulated ones
# otherwise), submit the example job, follow its progress and metrics, then
# shut everything down cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=${JOBS:-$(nproc)}

scripts/setup.sh

echo "== build"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$JOBS" --target troupe-head troupe-node troupe-cli troupe-train

RUN=$(mktemp -d /tmp/troupe-demo.XXXXXX)
PORT=${TROUPE_DEMO_PORT:-7770}
# Port taken: pick one below the kernel's ephemeral range (32768+), where no
# outgoing connection can hold it.
if (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null; then PORT=$((20000 + RANDOM % 12000)); fi
export TROUPE_HEAD=tcp://127.0.0.1:$PORT
export PATH=$ROOT/build/client:$ROOT/build/worker/train:$PATH
PIDS=()
stop_all() {
    # Agents first (they stop their workers), then the head; SIGTERM each and
    # wait, so every process shuts down the way it would in production.
    for ((i=${#PIDS[@]}-1; i>=0; i--)); do kill -TERM "${PIDS[$i]}" 2>/dev/null || true; wait "${PIDS[$i]}" 2>/dev/null || true; done
    echo "== stopped head and node; logs and state kept in $RUN"
}
trap stop_all EXIT

echo "== troupe-head on $TROUPE_HEAD (state in $RUN/head)"
build/server/troupe-head --listen "$TROUPE_HEAD" --state-dir "$RUN/head" >"$RUN/head.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do troupe status >/dev/null 2>&1 && break; sleep 0.1; done
troupe status >/dev/null || { cat "$RUN/head.log"; exit 1; }

gpus=$(build/worker/node/troupe-node --check-config | sed -n 's/^# gpus: \([0-9]*\).*/\1/p')
NODE_ARGS=(--name demo-node --state-dir "$RUN/node")
if [ "${gpus:-0}" -gt 0 ] && [ "${TROUPE_DEMO_FAKE:-0}" != 1 ]; then
    echo "== troupe-node with the $gpus real GPU(s) of this machine"
else
    echo "== troupe-node with 8 simulated GPUs (no GPU found here)"
    NODE_ARGS+=(--fake-gpus 8xH200:141GB)
fi
build/worker/node/troupe-node "${NODE_ARGS[@]}" >"$RUN/node.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do [ "$(troupe -o json nodes --alive | jq .count)" = 1 ] && break; sleep 0.1; done
troupe nodes

# The job runs in its own directory with its config and generated data.
mkdir -p "$RUN/job"
cp examples/demo/job.yaml examples/demo/train.yaml "$RUN/job/"
if [ "${gpus:-0}" -gt 0 ] && [ "${TROUPE_DEMO_FAKE:-0}" != 1 ]; then
    examples/demo/fit.sh "$gpus" "$RUN/job/job.yaml" # fewer than 8 real GPUs: shrink to fit
fi
build/worker/train/troupe-train --make-data "$RUN/job/data.tok" >/dev/null

echo "== troupe submit (progress and per-step metrics follow; Ctrl-C detaches)"
set +e
troupe submit "$RUN/job/job.yaml"
rc=$?
set -e
echo "== troupe job (placement, exit codes)"
troupe job "$(troupe -o json jobs | jq '.jobs[-1].id')"
exit $rc
