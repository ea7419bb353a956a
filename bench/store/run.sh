#!/bin/sh
# run.sh - bench/store: troupe's job store (what troupe.torch's Store does)
# beside PyTorch's TCPStore at scale, in the same run, alternated, median of
# ROUNDS runs each. Builds nothing.
#
#   bench/store/run.sh BUILD_DIR [OUT_DIR] [RANKS] [ROUNDS]
#
# Build first (a Release tree for published figures):
#   cmake -S . -B build-bench -G Ninja -DTROUPE_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Release
#   cmake --build build-bench --target troupe-head rdzv_bench
# RANKS defaults to 1024,4096, ROUNDS to 3. Each round runs every size on both
# sides, troupe first in odd rounds and TCPStore first in even ones, a fresh
# head (with an admin token, so every call is authenticated) per size.
# Figures per size and side: connection set-up (each rank's connection and
# its first call answered: StoreCheck, or TCPStore's constructor, which
# connects and makes one round trip), the fan-out (rank 0's set of a 128-byte
# key until the last of the other ranks' blocked gets is answered), and the
# whole path (the two added). CONNECT=seq (default): the ranks connect one
# after the other; CONNECT=burst: all at once, each from its own thread.
# TCPStore needs python3 with torch (Debian: apt-get install python3-torch);
# without it, or with TCPSTORE=0, only troupe runs. TCPSTORE_TIMEOUT_S
# (default 200) bounds each TCPStore size; past it the size is a hang.
set -eu
if [ $# -lt 1 ] || [ ! -d "$1" ]; then
    echo "usage: $0 BUILD_DIR [OUT_DIR] [RANKS] [ROUNDS]" >&2
    exit 2
fi
build=$(cd "$1" && pwd)
out=${2:-.}
ranks=${3:-1024,4096}
rounds=${4:-3}
connect=${CONNECT:-seq}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
state=$(mktemp -d /tmp/store-bench.XXXXXX)
head_pid=
trap 'if [ -n "$head_pid" ]; then kill $head_pid 2>/dev/null; wait $head_pid 2>/dev/null; fi; rm -rf "$state"' EXIT
py=
[ "${TCPSTORE:-1}" = 0 ] || for p in /usr/bin/python3 python3; do # Debian's python3-torch lives with /usr/bin/python3
    if "$p" -c 'import torch' 2>/dev/null; then py=$p; break; fi
done
[ -n "$py" ] || echo "TCPStore: skipped (no python3 torch; apt-get install python3-torch)"
(umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$state/token")

troupe_one() { # N ROUND
    port=$((20000 + ($$ + $1 + $2) % 10000))
    rm -rf "$state/head"
    "$build/server/troupe-head" --listen "tcp://127.0.0.1:$port" --state-dir "$state/head" \
        --token-file "$state/token" --heartbeat-ms 600000 --log-level warning >>"$state/head.log" 2>&1 &
    head_pid=$!
    i=0
    until "$build/client/troupe" --head "tcp://127.0.0.1:$port" --token-file "$state/token" status >/dev/null 2>&1; do
        i=$((i + 1))
        if [ $i -ge 100 ]; then echo "troupe-head did not answer in 10 s:" >&2; tail "$state/head.log" >&2; exit 1; fi
        sleep 0.1
    done
    "$build/bench/rdzv/rdzv_bench" --store --connect "$connect" --head "tcp://127.0.0.1:$port" \
        --token-file "$state/token" --ranks "$1" --json "$out/store-troupe-$1-r$2.json" >/dev/null
    # The head's CPU time over the size (its start is a few ms): what the
    # ranks cost it, less noisy than wall times on a loaded machine.
    awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.3f\n", ($12 + $13) / hz }' \
        "/proc/$head_pid/stat" >"$out/store-troupe-$1-r$2.head_cpu_s"
    kill $head_pid
    wait $head_pid 2>/dev/null || true
    head_pid=
    echo "round $2: troupe   $1 ranks: $(cat "$out/store-troupe-$1-r$2.json"), head CPU $(cat "$out/store-troupe-$1-r$2.head_cpu_s") s"
}

tcpstore_one() { # N ROUND
    [ -n "$py" ] || return 0
    if ! timeout "${TCPSTORE_TIMEOUT_S:-200}" "$py" "$here/tcpstore_scale.py" --ranks "$1" --connect "$connect" \
        --timeout-s 100 >"$out/store-tcpstore-$1-r$2.json"; then
        echo "{\"ranks\":$1,\"hang\":true,\"why\":[\"no result within ${TCPSTORE_TIMEOUT_S:-200} s\"]}" \
            >"$out/store-tcpstore-$1-r$2.json"
    fi
    echo "round $2: TCPStore $1 ranks: $(cat "$out/store-tcpstore-$1-r$2.json")"
}

echo "bench/store at $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores," \
    "load $(cut -d' ' -f1-3 /proc/loadavg), connect=$connect, $rounds rounds"
r=1
while [ $r -le "$rounds" ]; do
    for n in $(echo "$ranks" | tr ',' ' '); do
        if [ $((r % 2)) -eq 1 ]; then
            troupe_one "$n" $r
            tcpstore_one "$n" $r
        else
            tcpstore_one "$n" $r
            troupe_one "$n" $r
        fi
    done
    r=$((r + 1))
done
python3 "$here/summary.py" --out "$out" --ranks "$ranks" --rounds "$rounds" --connect "$connect" \
    --json "$out/store-summary.json"
