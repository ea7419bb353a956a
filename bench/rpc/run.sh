#!/bin/sh
# run.sh - run bench/rpc from an existing build tree; builds nothing.
#
#   bench/rpc/run.sh BUILD_DIR [OUT.json] [extra troupe-bench-rpc flags...]
#
# Build first, e.g.
#   cmake -S . -B build-bench -G Ninja -DTROUPE_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Release
#   cmake --build build-bench --target troupe-bench-rpc
# The defaults measure 64 B and 4 KiB echoes at 1, 16 and 64 clients (about 1.5 min on the 2-core VM).
# Without the gRPC peer (no g++/grpc++ at build time) it measures troupe and nng only.
set -eu

if [ $# -lt 1 ] || [ ! -d "$1" ]; then
    echo "usage: $0 BUILD_DIR [OUT.json] [troupe-bench-rpc flags...]" >&2
    exit 2
fi
build=$(cd "$1" && pwd)
shift
out=${1:-rpc-bench.json}
[ $# -gt 0 ] && shift

bin="$build/bench/rpc/troupe-bench-rpc"
for f in "$bin" "$build/server/troupe-head" "$build/bench/rpc/rpc-bench-nng-echo"; do
    if [ ! -x "$f" ]; then
        echo "$0: $f is missing; build the troupe-bench-rpc target first" >&2
        exit 1
    fi
done
systems=troupe,nng,grpc
if [ ! -x "$build/bench/rpc/rpc-bench-grpc" ]; then
    echo "$0: no gRPC peer in $build (built without C++/gRPC); measuring troupe and nng" >&2
    systems=troupe,nng
fi

echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(uname -n) $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
exec "$bin" --build "$build" --systems "$systems" --sizes 64,4096 --clients 1,16,64 --json "$out" "$@"
