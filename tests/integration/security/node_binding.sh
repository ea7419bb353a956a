#!/usr/bin/env bash
# Node-credential binding survives a head crash: a node registered
# by one node credential is bound to it in the head's state store, so after a
# kill -9 and restart, another node credential still cannot take that node
# over — not by its name, and not with a copy of its agent's state dir (its
# node id and instance id) — while the rightful agent registers again. A
# revoked credential stays revoked across the restart.
source "$(dirname "$0")/../lib.sh"

umask 077
printf 'adm-%s\n' "$RANDOM$RANDOM" >"$T/admin.tok"
unset TROUPE_TOKEN
export TROUPE_TOKEN_FILE=$T/admin.tok # lib.sh's helpers (node_id, reregistered) speak as admin
admin() { "$CLI_BIN" --token-file "$T/admin.tok" "$@"; }
# Nodes must not time out to DEAD while their agents are frozen (a DEAD
# node's name is free to take): 200 ms x 300 = 60 s.
run_head() {
    "$HEAD_BIN" --listen "$HEAD" --state-dir "$T/state" --token-file "$T/admin.tok" --heartbeat-ms 200 \
        --suspect-after 3 --dead-after 300 >>"$T/head.log" 2>&1 &
    HEAD_PID=$!
    PIDS+=("$HEAD_PID")
    wait_for 10 "troupe-head to answer on $HEAD" admin status
}
run_head
for c in a b r; do admin -o json token create --scope node >"$T/$c.json"; jq -r .token "$T/$c.json" >"$T/$c.tok"; done
agent() { # agent NAME STATE_DIR TOKEN [extra args]: execs (only in a subshell)
    local name=$1 dir=$2 tok=$3; shift 3
    exec "$NODE_BIN" --head "$HEAD" --name "$name" --fake-gpus 2 --state-dir "$dir" --token-file "$T/$tok.tok" \
        --stop-grace-ms 500 "$@"
}
agent n1 "$T/n1" a >>"$T/node-n1.log" 2>&1 &
N1=$!; PIDS+=("$N1")
agent n2 "$T/n2" b >>"$T/node-n2.log" 2>&1 &
N2=$!; PIDS+=("$N2")
wait_for 15 "n1 and n2 ALIVE" bash -c "'$CLI_BIN' --token-file '$T/admin.tok' -o json nodes --alive | jq -e '.count == 2'"
id1=$(admin -o json nodes | jq -r '.nodes[] | select(.name=="n1") | .id')
id2=$(admin -o json nodes | jq -r '.nodes[] | select(.name=="n2") | .id')
admin token revoke "$(jq -r .id "$T/r.json")" >/dev/null
pass "n1 ($id1) registered by credential a, n2 ($id2) by b; credential r revoked"

# expect_refused WHAT CODE TEXT agent ARGS...: the agent exits 1 within 15 s
# naming CODE/TEXT (one that is accepted keeps running and is cut off: 124).
expect_refused() {
    local what=$1 code=$2 text=$3 out rc; shift 4
    set +e; out=$(export -f agent; export NODE_BIN HEAD T; timeout 15 bash -c 'agent "$@"' agent "$@" 2>&1); rc=$?; set -e
    [ $rc -eq 1 ] && grep -q "$code" <<<"$out" && grep -qF "$text" <<<"$out" ||
        fail "$what: expected exit 1 with $code '$text', got rc=$rc: $(tail -n 3 <<<"$out")"
}

# Freeze both agents (so they cannot re-register first), crash the head, and
# give "thieves" copies of their state dirs: same node ids, same instance ids.
kill -STOP "$N1" "$N2"
stop_pid -9 "$HEAD_PID"
cp -a "$T/n1" "$T/steal-n1"
cp -a "$T/n2" "$T/steal-n2"
mark=$(head_log_mark)
run_head
[ "$(admin -o json nodes | jq -r --arg id "$id1" '.nodes[] | select(.id == ($id | tonumber)) | .state')" = SUSPECT ] ||
    fail "n1 not recovered SUSPECT: $(admin -o json nodes)"

expect_refused "credential b takes n1 with n1's state dir" PERMISSION_DENIED "registered by another credential" \
    agent n1 "$T/steal-n1" b
expect_refused "credential a takes n2 with n2's state dir" PERMISSION_DENIED "registered by another credential" \
    agent n2 "$T/steal-n2" a
expect_refused "credential a takes the name n2" PERMISSION_DENIED "registered by another credential" \
    agent n2 "$T/fresh-n2" a
grep -q "permission denied method=troupe.v1.Head/RegisterNode scope=node cred=$(jq -r .id "$T/b.json") node=$id1" \
    "$T/head.log" || fail "no refusal line naming credential b and node $id1 in the head log"
pass "after kill -9 and restart: credential b cannot take n1, a cannot take n2 (by state dir or by name)"

expect_refused "revoked credential r after the restart" UNAUTHENTICATED "wrong or expired credential" \
    agent n3 "$T/n3" r
set +e; out=$("$CLI_BIN" --token-file "$T/r.tok" ping 2>&1); rc=$?; set -e
[ $rc -ne 0 ] && grep -q UNAUTHENTICATED <<<"$out" || fail "revoked credential answered after restart: $out"
pass "revocation survives the restart: credential r refused (agent and CLI)"

# The rightful agents come back with their own credentials and keep their ids.
kill -CONT "$N1" "$N2"
wait_for 20 "n1 and n2 registered again with their old ids" reregistered "$mark" n1 n2
[ "$(node_id n1)" = "$id1" ] && [ "$(node_id n2)" = "$id2" ] || fail "ids changed: $(admin -o json nodes)"
admin -o json nodes | jq -e '[.nodes[] | select(.name=="n3")] | length == 0' >/dev/null ||
    fail "a node n3 exists: $(admin -o json nodes)"
pass "after the restart n1 and n2 re-registered with their own credentials and kept ids $id1/$id2"

# One more crash after those re-registrations: the binding written by them
# (not only the first one) is what the next head reads.
kill -STOP "$N1"
stop_pid -9 "$HEAD_PID"
rm -rf "$T/steal-n1"
cp -a "$T/n1" "$T/steal-n1"
run_head
expect_refused "credential b takes n1 after a second crash" PERMISSION_DENIED "registered by another credential" \
    agent n1 "$T/steal-n1" b
kill -CONT "$N1"
pass "second kill -9: binding still held"
