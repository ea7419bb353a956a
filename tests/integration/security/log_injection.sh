#!/usr/bin/env bash
# A string from a client carrying a newline cannot forge a line in the head's
# log: control bytes in log messages are escaped (\n, \xNN), so each event
# stays one line. Since the head enforces the name rules (name_rules.sh) such
# a name is refused, and the refusal itself is what gets logged: escaped, on
# one line. The agent refuses it before sending (exit 2).
source "$(dirname "$0")/../lib.sh"
RAW=${RAWCALL:?}
start_head --heartbeat-ms 100 --dead-after 50 # liveness is not under test: a 3.75 s lease, not 400 ms
EVIL=$'evil\n2026-01-01T00:00:00.000Z troupe-head[1] notice: FORGED'
out=$("$RAW" "$HEAD" register-name "$EVIL")
grep -q "(INVALID_ARGUMENT)" <<<"$out" || fail "a node name with a newline was not refused: $out"
! grep -q "^2026-01-01T00:00:00.000Z troupe-head\[1\] notice: FORGED" "$T/head.log" || fail "forged log line: $(cat "$T/head.log")"
grep -q "refused registration: register: node name 'evil\\\\n2026-01-01T00:00:00.000Z troupe-head\[1\] notice: FORGED' is not valid" \
    "$T/head.log" || fail "escaped name not in the log: $(cat "$T/head.log")"
set +e
out=$(timeout 10 "$NODE_BIN" --head "$HEAD" --name "$EVIL" --fake-gpus 1 --state-dir "$T/n" 2>&1); rc=$?
set -e
[ $rc = 2 ] && grep -q "name 'evil" <<<"$out" || fail "the agent sent a name with a newline: rc=$rc $out"
pass "a node name with a newline is refused and logged escaped on one line, not as a forged line"
