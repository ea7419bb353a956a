#!/usr/bin/env bash
# An agent stopped with SIGTERM deregisters: its node is LEFT at once (not
# SUSPECT, then DEAD), its job ends with the reason; the same agent started
# again is shown as the node that came back; a second agent under a live
# node's name is refused (ALREADY_EXISTS naming it) and changes nothing.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/nodes_lib.bash"
# A slow DEAD timeout (30 s): anything faster than that is the deregistration.
start_head --heartbeat-ms 1000 --suspect-after 10 --dead-after 30
start_node na 4xH100:80GB --stop-grace-ms 2000
wait_for 10 "na ALIVE" nodes_alive 1
id_before=$(node_id na)
cat >"$T/j.yaml" <<YAML
name: on-na
cluster: {nodes: [4]}
groups: [{name: g, workers: 1, resources: {gpu: 4}, command: [sleep, '300']}]
YAML
job=$(submit "$T/j.yaml")
wait_for 10 "job RUNNING" bash -c "'$CLI_BIN' -o json job $job | jq -e '.workers[0].state == \"RUNNING\"'"

t0=$(ms_now)
kill -TERM "$NODE_PID_na"
wait_for 10 "na LEFT" is_state na LEFT
t1=$(ms_now)
await_end 10 "agent na to exit after SIGTERM" "$NODE_PID_na"
[ "$END_RC" = 0 ] || fail "agent exited with status $END_RC"
[ $((t1 - t0)) -lt 5000 ] || fail "LEFT only after $((t1 - t0)) ms"
reason=$(node_field na reason)
[[ "$reason" == "agent stopped"* ]] || fail "reason: $reason"
pass "SIGTERM -> node LEFT after $((t1 - t0)) ms (stop grace included): $reason"
wait_for 10 "job FAILED" is_job_state "$job" FAILED
# The agent stops its workers and reports how they ended before it leaves.
cli -o json job "$job" | jqr .reason | grep_all -E "on node na .*(signal 15|SIGTERM)|node na \(id $id_before\) left" ||
    fail "job reason: $(cli -o json job "$job" | jqr .reason)"
pass "its job FAILED: $(cli -o json job "$job" | jqr .reason)"
cli nodes | grep_all "LEFT" || fail "troupe nodes does not show LEFT: $(cli nodes)"
[ "$(cli -o json status | jqr '.nodes.alive')" = 0 ] || fail "status still counts na alive"
[ "$(cli -o json status | jqr '[.nodes.left, .nodes.dead] | @tsv')" = "1	0" ] || fail "status: a LEFT node is not counted as left (and not dead): $(cli -o json status | jq -c .nodes)"
cli status | grep_all "0 dead, 1 left" || fail "status table: $(cli status | grep nodes)"

# The same agent (same state dir) starts again: a new node that says it came back.
start_node na 4xH100:80GB --stop-grace-ms 2000
wait_for 10 "na ALIVE again" is_state na ALIVE
[ "$(node_field na replaces)" = "$id_before" ] || fail "replaces=$(node_field na replaces), want $id_before"
node_field na reason | grep_all "came back (was node $id_before, LEFT)" || fail "reason: $(node_field na reason)"
pass "na came back as node $(node_id na): $(node_field na reason)"

# Another agent (its own state dir) under the live name is refused.
id_live=$(node_id na)
set +e
out=$(timeout 20 "$NODE_BIN" --head "$HEAD" --name na --fake-gpus 2xH100:80GB --state-dir "$T/impostor" 2>&1)
rc=$?
set -e
[ $rc -eq 1 ] || fail "second agent named na: exit $rc: $out"
grep -q "ALREADY_EXISTS" <<<"$out" && grep -q "node na (id $id_live) is ALIVE and registered by another agent" <<<"$out" ||
    fail "refusal: $out"
pass "second agent under the name na refused: $out"
# The refusal is the head's answer to the impostor's registration: decided.
[ "$(node_id na)" = "$id_live" ] && is_state na ALIVE || fail "the live na changed: $(cli -o json nodes)"
[ "$(cli -o json nodes | jqr '[.nodes[] | select(.name=="na")] | length')" = 2 ] || fail "extra na nodes: $(cli -o json nodes)"
pass "the live na (node $id_live) is untouched"

# Two agents on one state dir: the second refuses to start.
set +e
out=$(timeout 20 "$NODE_BIN" --head "$HEAD" --name nz --fake-gpus 1 --state-dir "$T/node-na" 2>&1)
rc=$?
set -e
[ $rc -ne 0 ] && grep -q "in use by another troupe-node (pid $NODE_PID_na)" <<<"$out" || fail "shared state dir: rc=$rc $out"
pass "a second agent on the same state dir refused: $out"
