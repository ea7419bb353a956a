#!/usr/bin/env bash
# Legitimate clients arriving in a burst are not reset, with or without
# credentials, while the bound on strangers' memory stays (stranger_flood,
# preauth_bounds). Real head, real sockets (bench/preauth's --mode burst):
# 200 connections complete nng's handshake at once, as ranks of a rendezvous
# do, and only then does each send its first call (a Ping); every one must be
# answered, none closed by the head, and the head must count no connection
# displaced or refused.
# The old head charged each connection that had not yet made its first call
# the largest frame (8 MiB) until the 64 MiB budget was full, so the ninth
# displaced the first and ~8-16 of the 200 were reset.
# Re-plant: make above_floor_room (common/rpc_conns.c) return
# budget - charged, i.e. let charges above the floor take the whole budget.
source "$(dirname "$0")/../lib.sh"

FLOOD=$TROUPE_BIN/bench/preauth/troupe-bench-preauth
[ -x "$FLOOD" ] || fail "$FLOOD missing: build with -DTROUPE_BENCHMARKS=ON (the default)"
umask 077
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/admin.tok"
unset TROUPE_TOKEN TROUPE_TOKEN_FILE
field() { jq -r ".$2" "$1"; }

# burst LABEL ARGS...: a head (ARGS), 200 clients at once, the checks.
burst() {
    local label=$1; shift
    rm -rf "$T/state"
    "$HEAD_BIN" --listen "$HEAD" --state-dir "$T/state" "$@" >>"$T/head.log" 2>&1 &
    HEAD_PID=$!
    PIDS+=("$HEAD_PID")
    wait_for 10 "troupe-head to answer on $HEAD" "$CLI_BIN" status
    "$FLOOD" --head "$HEAD" --head-pid "$HEAD_PID" ${TROUPE_TOKEN_FILE:+--token-file "$TROUPE_TOKEN_FILE"} \
        --mode burst --conns 200 --hold-ms 300 --label "$label" --json "$T/$label.json" >"$T/$label.out" 2>&1 ||
        fail "burst client ($label): $(cat "$T/$label.out")"
    cat "$T/$label.out"
    [ "$(field "$T/$label.json" handshaken)" = 200 ] || fail "$label: not all 200 handshakes answered: $(cat "$T/$label.out")"
    [ "$(field "$T/$label.json" closed_by_head)" = 0 ] ||
        fail "$label: the head reset $(field "$T/$label.json" closed_by_head) of 200 clients arriving at once: $(cat "$T/$label.out")"
    [ "$(field "$T/$label.json" replied)" = 200 ] || fail "$label: not every first call answered: $(cat "$T/$label.out")"
    cli -o json status >"$T/$label.status.json"
    [ "$(jq '.connections.displaced + .connections.refused' "$T/$label.status.json")" = 0 ] ||
        fail "$label: the head displaced or refused connections: $(jq -c .connections "$T/$label.status.json")"
    ! grep -q "closed the oldest\|closed the one idle longest\|refused:" "$T/head.log" ||
        fail "$label: the head logged a displacement: $(grep "closed the oldest\|refused:" "$T/head.log" | head -3)"
    kill "$HEAD_PID"; wait "$HEAD_PID" 2>/dev/null || true
    pass "$label: 200 clients connecting at once, each first call answered, none reset"
}

export TROUPE_TOKEN_FILE=$T/admin.tok
burst token --token-file "$T/admin.tok"
unset TROUPE_TOKEN_FILE
burst open
