#!/bin/sh
# run.sh - bench/coll: troupe's CPU collective all-reduce beside PyTorch's gloo,
# in the same run, then one side-by-side table (and JSON). Builds nothing.
#
#   bench/coll/run.sh BUILD_DIR [OUT_DIR] [RANKS] [SIZES]
#
# Build first (a Release tree for published figures):
#   cmake -S . -B build-bench -G Ninja -DTROUPE_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Release
#   cmake --build build-bench --target coll_ring_bench
# gloo needs python3 with torch (Debian: apt-get install python3-torch, or
# TROUPE_SETUP_BENCH=1 scripts/setup.sh); without it only troupe runs.
# RANKS defaults to 2,4,8; SIZES (bytes) to 4 B .. 256 MiB.
set -eu
if [ $# -lt 1 ] || [ ! -x "$1/bench/coll/coll_ring_bench" ]; then
    echo "usage: $0 BUILD_DIR [OUT_DIR] [RANKS] [SIZES]   (BUILD_DIR/bench/coll/coll_ring_bench must exist)" >&2
    exit 2
fi
build=$(cd "$1" && pwd)
out=${2:-.}
ranks=${3:-2,4,8}
sizes=${4:-4,1024,65536,1048576,4194304,16777216,67108864,268435456}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
echo "troupe $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
"$build/bench/coll/coll_ring_bench" --ranks "$ranks" --sizes "$sizes" --json "$out/coll-troupe.json"
py=
for p in /usr/bin/python3 python3; do  # Debian's python3-torch lives with /usr/bin/python3
    if "$p" -c 'import torch' 2>/dev/null; then py=$p; break; fi
done
if [ -z "$py" ]; then
    echo "gloo: skipped (no python3 torch; apt-get install python3-torch)"
    exit 0
fi
"$py" "$here/gloo_bench.py" --ranks "$ranks" --sizes "$sizes" --json "$out/coll-gloo.json"
"$py" - "$out/coll-troupe.json" "$out/coll-gloo.json" "$out/coll.json" <<'PY'
import json, sys
t = {(r["ranks"], r["bytes"]): r for r in json.load(open(sys.argv[1]))["results"]}
g = {(r["ranks"], r["bytes"]): r for r in json.load(open(sys.argv[2]))["results"]}
h = lambda b: f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB" if b >= 1024 else f"{b} B"
rows = []
print("\nside by side (median of rank 0's timed all-reduces; busbw = algbw * 2(n-1)/n)")
print(f"{'ranks':>5} {'size':>8} {'troupe_us':>11} {'gloo_us':>11} {'troupe_busbw':>13} {'gloo_busbw':>11} {'troupe/gloo':>12}")
for k in sorted(t):
    if k not in g:
        continue
    a, b = t[k], g[k]
    ratio = b["median_us"] / a["median_us"] if a["median_us"] > 0 else 0
    rows.append({"ranks": k[0], "bytes": k[1], "troupe_us": a["median_us"], "gloo_us": b["median_us"],
                 "troupe_busbw_gbs": a["busbw_gbs"], "gloo_busbw_gbs": b["busbw_gbs"], "speedup": round(ratio, 2)})
    print(f"{k[0]:>5} {h(k[1]):>8} {a['median_us']:>11.1f} {b['median_us']:>11.1f} {a['busbw_gbs']:>13.3f} "
          f"{b['busbw_gbs']:>11.3f} {ratio:>11.2f}x")
json.dump({"rows": rows}, open(sys.argv[3], "w"), indent=1)
print(f"(troupe/gloo > 1: troupe faster) JSON: {sys.argv[3]}")
PY
