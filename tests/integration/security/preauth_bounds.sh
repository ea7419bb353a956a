#!/usr/bin/env bash
# Bounded resources before authentication, through a real head and real
# sockets (bench/preauth's attack client): 400 connections that never show a
# credential, each sending all but the last byte of a 4 MiB frame, keep the
# head far below the 1.6 GB the old head reached, and `troupe status` answers
# while they hold on; under `ulimit -n 1024`, 1,100 idle connections do not
# lock clients out (the oldest strangers are displaced, logged), and strangers
# are closed after preauth_timeout_ms. Margins are generous (a shared, loaded
# machine); bench/RESULTS.md has the measured figures.
source "$(dirname "$0")/../lib.sh"

FLOOD=$TROUPE_BIN/bench/preauth/troupe-bench-preauth
[ -x "$FLOOD" ] || fail "$FLOOD missing: build with -DTROUPE_BENCHMARKS=ON (the default)"
umask 077
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/admin.tok"
unset TROUPE_TOKEN
export TROUPE_TOKEN_FILE=$T/admin.tok

# start_limited_head ULIMIT ARGS...: a head under `ulimit -n ULIMIT` (0: as is).
start_limited_head() {
    local nofile=$1; shift
    ( [ "$nofile" = 0 ] || ulimit -n "$nofile"
      exec "$HEAD_BIN" --listen "$HEAD" --state-dir "$T/state" --token-file "$T/admin.tok" "$@" \
          >>"$T/head.log" 2>&1 ) &
    HEAD_PID=$!
    PIDS+=("$HEAD_PID")
    wait_for 10 "troupe-head to answer on $HEAD" "$CLI_BIN" status
}
# field FILE KEY: a number from the attack client's JSON.
field() { jq -r ".$2" "$1"; }

# 1. 400 x unfinished 4 MiB frames.
start_limited_head 0 --preauth-timeout-ms 60000
"$FLOOD" --head "$HEAD" --head-pid "$HEAD_PID" --token-file "$T/admin.tok" --mode frames --conns 400 \
    --frame-bytes 4194304 --samples 60 --json "$T/frames.json" >"$T/frames.out" 2>&1 ||
    fail "attack client: $(cat "$T/frames.out")"
cat "$T/frames.out"
peak=$(field "$T/frames.json" rss_peak_kb)
[ "$peak" -lt $((256 * 1024)) ] || fail "head RSS peaked at $peak KiB under 400 unfinished 4 MiB frames (goal < 256 MB)"
[ "$(field "$T/frames.json" status_failed)" = 0 ] || fail "troupe status failed under the attack: $(cat "$T/frames.out")"
p99=$(field "$T/frames.json" status_p99_ms)
awk -v p="$p99" 'BEGIN { exit !(p < 1000) }' || fail "troupe status p99 $p99 ms under the attack (generous bound 1000 ms)"
[ "$(field "$T/frames.json" closed_by_head)" -ge 300 ] || fail "the head kept most oversized strangers: $(cat "$T/frames.out")"
grep -q "rpc: frames over [0-9]* bytes now close their connection ([0-9]* unauthenticated connections share inflight_budget_bytes=67108864)" \
    "$T/head.log" || fail "no log line for the lowered frame limit"
pass "400 unfinished 4 MiB frames: head RSS peak $((peak / 1024)) MB, status p99 $p99 ms, frame limit logged"
stop_pid "$HEAD_PID"

# 2. 1,100 idle connections against a head under ulimit -n 1024.
start_limited_head 1024 --preauth-timeout-ms 3000
grep -q "rpc: at most [0-9]* connections: the descriptor limit 1024 less [0-9]* open and fd_reserve=128" "$T/head.log" ||
    fail "the head did not size its cap to the descriptor limit"
"$FLOOD" --head "$HEAD" --head-pid "$HEAD_PID" --token-file "$T/admin.tok" --mode idle --conns 1100 \
    --samples 40 --hold-ms 500 --json "$T/idle.json" >"$T/idle.out" 2>&1 || fail "attack client: $(cat "$T/idle.out")"
cat "$T/idle.out"
[ "$(field "$T/idle.json" status_failed)" = 0 ] || fail "troupe status failed under 1,100 idle connections: $(cat "$T/idle.out")"
grep -Eq "rpc: (at [0-9]* connections \(max_connections\): closed the oldest one that never authenticated|inflight_budget_bytes=[0-9]* is held by connections that never authenticated: closed the oldest)" \
    "$T/head.log" || fail "no log line for displaced connections"
cli -o json status >"$T/status.json"
[ "$(jq .connections.displaced "$T/status.json")" -gt 0 ] || fail "displaced not counted: $(cat "$T/status.json")"
pass "1,100 idle connections under ulimit -n 1024: status answered $(field "$T/idle.json" status_ok)/40, displacement logged and counted"

# 3. Strangers that hold on are closed after preauth_timeout_ms (3 s here);
# the first of them may be displaced instead (they were charged the large
# frames they could have started while the head was quiet): counted either way.
cli -o json status >"$T/before.json"
"$FLOOD" --head "$HEAD" --head-pid "$HEAD_PID" --token-file "$T/admin.tok" --mode idle --conns 50 \
    --samples 1 --hold-ms 4500 --json "$T/late.json" >"$T/late.out" 2>&1 || fail "attack client: $(cat "$T/late.out")"
[ "$(field "$T/late.json" closed_by_head)" = 50 ] || fail "strangers outlived preauth_timeout_ms: $(cat "$T/late.out")"
wait_for 5 "the pre-authentication timeout logged" grep -q "made no authenticated call within preauth_timeout_ms=3000" "$T/head.log"
cli -o json status >"$T/after.json"
gone=$(jq -s '(.[1].connections.closed_idle + .[1].connections.displaced) - (.[0].connections.closed_idle + .[0].connections.displaced)' \
    "$T/before.json" "$T/after.json")
[ "$gone" -ge 50 ] || fail "closed strangers not counted: $gone of 50 ($(cat "$T/after.json"))"
pass "strangers closed after preauth_timeout_ms, logged and counted"
