#!/bin/sh
# run.sh - bench/metrics: W simulated workers x N scalars at H Hz into one
# troupe-head (metrics_bench.c says what is measured). Builds nothing.
#
#   bench/metrics/run.sh BUILD_DIR [OUT_DIR] [WORKERS] [SECS] [NAMES] [HZ]
#
# Build first (a Release tree for published figures):
#   cmake -S . -B build-bench -G Ninja -DTROUPE_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Release
#   cmake --build build-bench --target troupe-head troupe-cli metrics_bench
# WORKERS is a comma list (default 1000), one fresh head per size; SECS of
# load per size (default 30); NAMES 10 and HZ 10 by default. HEAD_ARGS: more
# troupe-head flags (e.g. "--sync-full false" to see what the fsyncs cost).
# HEAD_CPUS: pin the head alone to these CPUs (taskset -c), e.g. HEAD_CPUS=0,1
# with the script itself under taskset -c 2-5, so that the simulated workers
# do not share the head's cores (as on a real cluster).
# IDLE_MS: how long Ping is timed alone before the load (default 5000).
set -eu
if [ $# -lt 1 ] || [ ! -d "$1" ]; then
    echo "usage: $0 BUILD_DIR [OUT_DIR] [WORKERS] [SECS] [NAMES] [HZ]" >&2
    exit 2
fi
build=$(cd "$1" && pwd)
out=${2:-.}
sizes=${3:-1000}
secs=${4:-30}
names=${5:-10}
hz=${6:-10}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
commit=$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')
echo "troupe-head $commit, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for w in $(echo "$sizes" | tr , ' '); do
    state=$(mktemp -d /tmp/metrics-bench.XXXXXX)
    port=$((20000 + ($$ + w) % 10000))
    # A long heartbeat: the bench registers simulated nodes itself, without agents.
    ${HEAD_CPUS:+taskset -c "$HEAD_CPUS"} "$build/server/troupe-head" --listen "tcp://127.0.0.1:$port" --state-dir "$state" --heartbeat-ms 600000 \
        --http off --log-level warning ${HEAD_ARGS:-} >"$state/head.log" 2>&1 &
    head_pid=$!
    trap 'kill $head_pid 2>/dev/null; wait $head_pid 2>/dev/null; rm -rf "$state"' EXIT
    sleep 1
    rc=0
    "$build/bench/metrics/metrics_bench" --head "tcp://127.0.0.1:$port" --head-pid "$head_pid" \
        --cli "$build/client/troupe" --workers "$w" --names "$names" --hz "$hz" --secs "$secs" \
        --idle-ms "${IDLE_MS:-5000}" --json "$out/metrics-$commit-w$w.json" || rc=$?
    du -sh "$state/metrics.db" 2>/dev/null | sed 's/^/  metrics.db /' || true
    kill $head_pid 2>/dev/null; wait $head_pid 2>/dev/null || true
    rm -rf "$state"
    trap - EXIT
    [ $rc = 0 ] || exit $rc
done
