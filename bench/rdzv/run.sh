#!/bin/sh
# run.sh - bench/rdzv: troupe's NCCL-ID rendezvous and its job store beside
# PyTorch's TCPStore, in the same run. Builds nothing.
#
#   bench/rdzv/run.sh BUILD_DIR [OUT_DIR] [RANKS]
#
# Build first (a Release tree for published figures):
#   cmake -S . -B build-bench -G Ninja -DTROUPE_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Release
#   cmake --build build-bench --target troupe-head rdzv_bench
# RANKS defaults to 2,16,128,512,1024,2048,4096. TCPStore needs python3 with
# torch (Debian: apt-get install python3-torch); without it only troupe runs.
# TCPSTORE_TIMEOUT_S (default 100) bounds each TCPStore size; past it: HANG.
# CONTROL_RANKS (default 2,128,1024): sizes of the profile-change fan-out.
set -eu
if [ $# -lt 1 ] || [ ! -d "$1" ]; then
    echo "usage: $0 BUILD_DIR [OUT_DIR] [RANKS]" >&2
    exit 2
fi
build=$(cd "$1" && pwd)
out=${2:-.}
ranks=${3:-2,16,128,512,1024,2048,4096}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
state=$(mktemp -d /tmp/rdzv-bench.XXXXXX)
port=$((20000 + $$ % 10000))
# A long heartbeat: the bench registers simulated nodes itself, without agents.
"$build/server/troupe-head" --listen "tcp://127.0.0.1:$port" --state-dir "$state" --heartbeat-ms 600000 \
    --log-level warning >"$state/head.log" 2>&1 &
head_pid=$!
trap 'kill $head_pid 2>/dev/null; wait $head_pid 2>/dev/null; rm -rf "$state"' EXIT
sleep 1
echo "troupe-head $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores"
"$build/bench/rdzv/rdzv_bench" --head "tcp://127.0.0.1:$port" --ranks "$ranks" --json "$out/rdzv-troupe.json"
# The job store (troupe.torch's Store): rank 0's set answering N-1 blocked gets.
"$build/bench/rdzv/rdzv_bench" --store --head "tcp://127.0.0.1:$port" --ranks "$ranks" --json "$out/rdzv-store.json"
# A run-time profile change (troupe profile) reaching N workers' control polls.
"$build/bench/rdzv/rdzv_bench" --control --head "tcp://127.0.0.1:$port" --ranks "${CONTROL_RANKS:-2,128,1024}" \
    --json "$out/rdzv-control.json"
py=
for p in /usr/bin/python3 python3; do  # Debian's python3-torch lives with /usr/bin/python3
    if "$p" -c 'import torch' 2>/dev/null; then py=$p; break; fi
done
if [ -n "$py" ]; then
    "$py" "$here/tcpstore.py" --ranks "$ranks" --timeout-s "${TCPSTORE_TIMEOUT_S:-100}" --json "$out/rdzv-tcpstore.json"
else
    echo "TCPStore: skipped (no python3 torch; apt-get install python3-torch)"
fi
