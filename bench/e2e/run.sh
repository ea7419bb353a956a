#!/bin/sh
# run.sh - run bench/e2e from an existing build tree; builds nothing.
#
#   bench/e2e/run.sh BUILD_DIR [OUT.json] [extra troupe-bench-e2e flags...]
#
# Build first, e.g.
#   cmake -S . -B build-e2e -G Ninja -DTROUPE_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Release -DTROUPE_BENCH_GRPC=OFF
#   cmake --build build-e2e --target troupe-bench-e2e troupe-head troupe-node
# The defaults measure sync_full true and false x 1, 8 and 64 workers per group x
# batches of 1, 10 and 100 groups per call x 1, 8 and 32 clients on 1,000 simulated
# nodes (3 s per cell; cells whose groups in flight would not fit the cluster are
# skipped), then submit -> 64 workers RUNNING with 4 real agents (5 runs): about
# 3 minutes. State dirs go to $TMPDIR or
# /var/tmp (must be a disk, not a tmpfs, for the fsyncs to be real).
set -eu
# Agents here run workers as themselves, as every figure before isolation was
# measured (the workers write into this script's temp dir).
export TROUPE_SHARED_UID=true

if [ $# -lt 1 ] || [ ! -d "$1" ]; then
    echo "usage: $0 BUILD_DIR [OUT.json] [troupe-bench-e2e flags...]" >&2
    exit 2
fi
build=$(cd "$1" && pwd)
shift
out=${1:-e2e-bench.json}
[ $# -gt 0 ] && shift

bin="$build/bench/e2e/troupe-bench-e2e"
head="$build/server/troupe-head"
node="$build/worker/node/troupe-node"
for f in "$bin" "$head" "$node"; do
    if [ ! -x "$f" ]; then
        echo "$0: $f is missing; build troupe-bench-e2e, troupe-head and troupe-node first" >&2
        exit 1
    fi
done

echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(uname -n) $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)," \
     "head at $(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo '?')" >&2
exec "$bin" --head "$head" --node "$node" --workers 1,8,64 --batch 1,10,100 --clients 1,8,32 --sync true,false \
    --seconds 3 --startup-reps 5 --json "$out" "$@"
