#!/usr/bin/env bash
# Token auth: wrong/missing tokens are refused, the right one works, the token
# never shows in logs or --check-config.
source "$(dirname "$0")/../lib.sh"

SECRET=s3cr3t-$RANDOM
TROUPE_TOKEN=$SECRET "$HEAD_BIN" --listen "$HEAD" --state-dir "$T/state" >>"$T/head.log" 2>&1 &
PIDS+=($!)
wait_for 10 "head with token" env TROUPE_TOKEN=$SECRET "$CLI_BIN" status

mark=$(head_log_mark)
set +e
out=$(cli --token wrong status 2>&1); rc=$?
set -e
[ $rc -ne 0 ] || fail "wrong token accepted"
grep -q UNAUTHENTICATED <<<"$out" || fail "wrong token: expected UNAUTHENTICATED, got: $out"
# README: bad input gets one log line (the head logs before it replies).
logged=$(tail -c +$((mark + 1)) "$T/head.log" | grep -c " warning: rpc: unauthenticated call method=troupe\.v1\.Head/[A-Za-z]* id=[0-9]*$" || true)
[ "$logged" = 1 ] || fail "wrong token: expected one log line, got $logged: $(tail -c +$((mark + 1)) "$T/head.log")"
set +e
out=$(env -u TROUPE_TOKEN "$CLI_BIN" nodes 2>&1); rc=$?
set -e
[ $rc -ne 0 ] && grep -q UNAUTHENTICATED <<<"$out" || fail "missing token: $out"
cli --token "$SECRET" status >/dev/null || fail "right token refused"
pass "wrong and missing tokens refused with UNAUTHENTICATED; right token works"

# An agent with the wrong token exits non-zero with a clear message.
set +e
out=$(timeout 10 "$NODE_BIN" --head "$HEAD" --name bad --fake-gpus 2 --token nope --state-dir "$T/node-bad" 2>&1); rc=$?
set -e
[ $rc -eq 1 ] && grep -q UNAUTHENTICATED <<<"$out" || fail "agent with wrong token: rc=$rc out=$out"
TROUPE_TOKEN=$SECRET start_node good 2
wait_for 10 "agent with token registers" env TROUPE_TOKEN=$SECRET bash -c \
    "'$CLI_BIN' -o json nodes | jq -e '.count == 1' "
pass "agents: wrong token exits 1, right token registers"

! grep -q "$SECRET" "$T"/*.log || fail "token leaked into a log"
cfg=$(TROUPE_TOKEN=$SECRET "$HEAD_BIN" --state-dir "$T/x" --check-config)
grep -q "token: <redacted>" <<<"$cfg" && ! grep -q "$SECRET" <<<"$cfg" || fail "check-config shows token: $cfg"
pass "token absent from logs and --check-config"
