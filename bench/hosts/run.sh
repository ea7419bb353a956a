#!/usr/bin/env bash
# bench/hosts/run.sh BUILD_DIR [OUT.json] [NODES] [EXTRA BENCH ARGS...]
#
# Many hosts: NODES (default 10,000) simulated agents, each on its
# own connection, heartbeating at the period the head asks for with its
# default settings (500 ms up to 5,000 agents; beyond, longer so that all
# send at most max_heartbeats_per_s = 10,000 a second: 1 s at 10,000; each
# simulated agent follows every reply's period, as troupe-node does; pass
# HEAD_ARGS="--max-heartbeats-per-s 0" for 500 ms regardless) with a NodeSync
# long poll always open, against one troupe-head with default
# settings and auth on (one minted node credential for all agents, as the
# Slurm script does; the admin credential for `troupe status`). Measures head
# CPU (/proc/PID/stat) and RSS, `troupe status` p50/p99, heartbeat RTT, then
# the time to see 100 silent node deaths and 100 closed connections as DEAD.
# Prints a table (bench/hosts/hosts_bench.c says what each column is) and
# writes JSON. HEAD_BIN=... picks another head binary (before/after figures).
set -euo pipefail
source "$(dirname "$0")/../../tests/integration/free_port.bash"
BUILD=$(cd "${1:?usage: bench/hosts/run.sh BUILD_DIR [OUT.json] [NODES] [ARGS...]}" && pwd)
OUT=${2:-}
NODES=${3:-10000}
shift $(( $# < 3 ? $# : 3 ))
HEAD_BIN=${HEAD_BIN:-$BUILD/server/troupe-head}
CLI=$BUILD/client/troupe
T=$(mktemp -d /tmp/troupe-hosts.XXXXXX)
HEAD_PID=
# KEEP_LOG=FILE keeps the head's log.
trap '[ -z "$HEAD_PID" ] || kill "$HEAD_PID" 2>/dev/null; wait 2>/dev/null; [ -z "${KEEP_LOG:-}" ] || cp "$T/head.log" "$KEEP_LOG"; rm -rf "$T"' EXIT
umask 077
# 10,000 agents = 10,000 connections on each side (and a few more).
ulimit -n "$(ulimit -Hn)"
[ "$(ulimit -n)" -gt $((NODES + 200)) ] || { echo "ulimit -n $(ulimit -n) is too low for $NODES connections" >&2; exit 1; }
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/admin.tok"
port=$(free_port)
URL=tcp://127.0.0.1:$port
# HEAD_CPUS: pin the head alone to these CPUs (taskset -c), e.g. HEAD_CPUS=0,1
# with this script under taskset -c 2-5: the simulated agents then do not
# share the head's cores, as on a real cluster.
# shellcheck disable=SC2086 # HEAD_ARGS: more head flags, split on purpose
${HEAD_CPUS:+taskset -c "$HEAD_CPUS"} "$HEAD_BIN" --listen "$URL" --state-dir "$T/state" --token-file "$T/admin.tok" ${HEAD_ARGS:-} >"$T/head.log" 2>&1 &
HEAD_PID=$!
for i in $(seq 100); do
    "$CLI" --head "$URL" --token-file "$T/admin.tok" status >/dev/null 2>&1 && break
    [ "$i" -lt 100 ] || { echo "head did not answer within 10 s: $(cat "$T/head.log")" >&2; exit 1; }
    sleep 0.1
done
"$CLI" --head "$URL" --token-file "$T/admin.tok" token create --scope node --max-nodes "$NODES" >"$T/node.tok"
echo "head: $HEAD_BIN ($(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo '?')), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
"$BUILD/bench/hosts/troupe-bench-hosts" --head "$URL" --head-pid "$HEAD_PID" --nodes "$NODES" \
    --token-file "$T/node.tok" --admin-token-file "$T/admin.tok" --kill 100 --kill-closed \
    ${OUT:+--json "$OUT"} "$@"
echo "head log: $(grep -c . "$T/head.log") lines, $(grep -c 'warning\|err' "$T/head.log") warnings/errors; last: $(grep 'warning\|err' "$T/head.log" | tail -n 1 | cut -c1-200)"
