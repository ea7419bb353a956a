#!/usr/bin/env bash
# bench/preauth/run.sh BUILD_DIR OUT_DIR [HEAD_BIN]
#
# The pre-authentication attack against a real troupe-head on
# loopback (HEAD_BIN, default BUILD_DIR/server/troupe-head; give an older
# build's head for "before" figures). Four cells, each against a fresh head:
#   frames   400 connections, each all but the last byte of a 4 MiB frame
#   small    1000 connections, each all but the last byte of a 60 KiB frame
#            (under the 64 KiB floor of the per-frame limit: the bound's worst case)
#   idle     1,100 idle connections (SP handshake done) under `ulimit -n 1024`
#   raw      1,100 bare TCP connections (no SP handshake) under `ulimit -n 1024`
# For each: head RSS before and at its peak (sampled every 20 ms), and
# `troupe status` (fresh connection + GetCluster, as the CLI does) p50/p99
# while the connections are held. Writes OUT_DIR/preauth-CELL.json; prints a table.
# CELLS: which cells to run (default "frames small idle raw"); SAMPLES: status
# calls per cell (default 200 for the frame cells, 50 for the others).
set -euo pipefail
source "$(dirname "$0")/../../tests/integration/free_port.bash"
BUILD=$(cd "${1:?usage: bench/preauth/run.sh BUILD_DIR OUT_DIR [HEAD_BIN]}" && pwd)
OUT=${2:?usage: bench/preauth/run.sh BUILD_DIR OUT_DIR [HEAD_BIN]}
HEAD_BIN=${3:-$BUILD/server/troupe-head}
FLOOD=$BUILD/bench/preauth/troupe-bench-preauth
CLI=$BUILD/client/troupe
mkdir -p "$OUT"
T=$(mktemp -d /tmp/troupe-preauth.XXXXXX)
HEAD_PID=
trap '[ -z "$HEAD_PID" ] || kill "$HEAD_PID" 2>/dev/null; rm -rf "$T"' EXIT
umask 077
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/token"

# cell NAME NOFILE FLOOD_ARGS...: a fresh head (ulimit -n NOFILE, 0 = as is), the attack, stop.
cell() {
    local name=$1 nofile=$2 port i; shift 2
    port=$(free_port)
    rm -rf "$T/state"
    ( [ "$nofile" = 0 ] || ulimit -n "$nofile"
      exec "$HEAD_BIN" --listen "tcp://127.0.0.1:$port" --state-dir "$T/state" --token-file "$T/token" \
          >"$T/head-$name.log" 2>&1 ) &
    HEAD_PID=$!
    for i in $(seq 100); do
        TROUPE_TOKEN_FILE=$T/token "$CLI" --head "tcp://127.0.0.1:$port" status >/dev/null 2>&1 && break
        [ "$i" -lt 100 ] || { echo "head did not answer within 10 s: $(cat "$T/head-$name.log")" >&2; exit 1; }
        sleep 0.1
    done
    "$FLOOD" --head "tcp://127.0.0.1:$port" --head-pid "$HEAD_PID" --token-file "$T/token" --label "$name" \
        --json "$OUT/preauth-$name.json" "$@" | tail -n +2
    echo "   head log: $(grep -c 'rpc:' "$T/head-$name.log") rpc lines; first: $(grep -m1 'rpc:' "$T/head-$name.log" | cut -c1-160)"
    kill "$HEAD_PID"; wait "$HEAD_PID" 2>/dev/null || true; HEAD_PID=
}

echo "head: $HEAD_BIN"
printf '%-8s %-6s %5s %9s %8s %8s %8s %9s %9s %9s %9s %9s %5s\n' label mode conns frame opened closed open \
    MB_sent rss0_MB rssmax_MB p50_ms p99_ms fail
for c in ${CELLS:-frames small idle raw}; do
    case $c in
    frames) cell frames 0 --mode frames --conns 400 --frame-bytes 4194304 --samples "${SAMPLES:-200}" ;;
    small) cell small 0 --mode frames --conns 1000 --frame-bytes 61440 --samples "${SAMPLES:-200}" ;;
    idle) cell idle 1024 --mode idle --conns 1100 --samples "${SAMPLES:-50}" ;;
    raw) cell raw 1024 --mode idle --raw --conns 1100 --samples "${SAMPLES:-50}" ;;
    *) echo "unknown cell $c (frames small idle raw)" >&2; exit 2 ;;
    esac
done
