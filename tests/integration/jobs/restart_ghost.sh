#!/usr/bin/env bash
# After a head restart, a node recovered from the state dir is placeable only
# once its agent registered again. A node whose agent never comes back goes
# DEAD by the normal liveness rules and nothing is placed on it meanwhile; a
# PENDING job that only that node could hold waits out the restart grace
# (restart_grace_ms) for agents to come back, then FAILS with the reason.
# (Before, the dead agent's node became ALIVE at once and got new work.)
source "$(dirname "$0")/../lib.sh"
GRACE_MS=${GRACE_MS:-6000}
HB=(--heartbeat-ms 100 --suspect-after 3 --dead-after 25)
start_head "${HB[@]}"
start_node gone 2 --stop-grace-ms 1000
start_node stay 1 --stop-grace-ms 1000
wait_for 10 "2 nodes ALIVE" nodes_alive 2
mkdir -p "$T/go"
cat >"$T/two.yaml" <<YAML
name: two
cluster: {nodes: [2]}
groups: [{name: g, workers: 1, resources: {gpu: 2}, command: [sh, -c, 'while [ ! -f $T/go/\$TROUPE_JOB ]; do sleep 0.1; done']}]
YAML
cat >"$T/one.yaml" <<YAML
name: one
cluster: {nodes: [1]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sh, -c, 'while [ ! -f $T/go/\$TROUPE_JOB ]; do sleep 0.1; done']}]
YAML
# judged_pending ID: job ID is PENDING with the scheduler's own reason (its
# submit ran a scheduling pass; "waiting to be placed" is only the record's
# first word, before any pass).
judged_pending() {
    local j; j=$(cli -o json job "$1")
    [ "$(jqr .state <<<"$j")" = PENDING ] && [ -n "$(jqr .reason <<<"$j")" ] && [ "$(jqr .reason <<<"$j")" != "waiting to be placed" ]
}
hog=$(submit "$T/two.yaml")
wait_for 10 "hog RUNNING" is_job_state "$hog" RUNNING
big=$(submit "$T/two.yaml")
judged_pending "$big" || fail "second 2-GPU job should wait: $(cli -o json job "$big" | jqr '.state + ": " + .reason')"

# The agent of node 'gone' dies, then the head restarts.
stop_pid -9 "$NODE_PID_gone"
stop_pid -9 "$HEAD_PID"
t0=$(date +%s%N)
start_head "${HB[@]}" ${GRACE_MS:+--restart-grace-ms "$GRACE_MS"}
wait_for 10 "agent 'stay' registers again" is_state stay ALIVE
st=$(node_state gone)
# SUSPECT until it goes DEAD 2.5 s after the start (DEAD already on a slow machine).
[ "$st" != ALIVE ] || fail "node 'gone' must not be placeable before its agent registers again: $st"
# Fill 'stay', then one more 1-GPU job: it must wait, not land on 'gone'.
a=$(submit "$T/one.yaml")
b=$(submit "$T/one.yaml")
wait_for 10 "job $a RUNNING" is_job_state "$a" RUNNING
[ "$(cli -o json job "$a" | jqr '.workers[0].node')" = stay ] || fail "job $a was placed on $(cli -o json job "$a" | jqr '.workers[0].node')"
judged_pending "$b" || fail "job $b should wait for a GPU, not run on the recovered node: $(cli -o json job "$b" | jqr '.state + " on " + (.workers[0].node // "-") + ": " + .reason')"
pass "recovered node without its agent got no work: $(cli -o json nodes | jqr '.nodes[] | select(.name=="gone") | .state + " (" + .reason + ")"')"

wait_for 10 "node 'gone' DEAD" is_state gone DEAD
wait_for 10 "hog FAILED (its node died)" is_job_state "$hog" FAILED
grep -q "gone" <<<"$(cli -o json job "$hog" | jqr .reason)" || fail "hog's reason should name the node: $(cli -o json job "$hog" | jqr .reason)"
el=$(( ($(date +%s%N) - t0) / 1000000 ))
if [ "$el" -lt $((GRACE_MS - 500)) ]; then
    r=$(cli -o json job "$big" | jqr '.state + ": " + .reason')
    [ "$(job_state "$big")" = PENDING ] || fail "job $big must wait out the restart grace (${el} ms after start): $r"
    grep -q restart_grace_ms <<<"$r" || fail "the reason should name the restart grace: $r"
    pass "job $big waits during the restart grace: $r"
fi
wait_for 15 "job $big FAILED after the grace" is_job_state "$big" FAILED
el=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$el" -ge "$GRACE_MS" ] || fail "job $big failed ${el} ms after the head start, inside the ${GRACE_MS} ms grace"
r=$(cli -o json job "$big" | jqr .reason)
grep -q "2" <<<"$r" || fail "the failure should name the numbers: $r"
pass "job $big FAILED ${el} ms after the restart: $r"
[ "$(job_state "$b")" = PENDING ] || fail "job $b should still wait for 'stay': $(job_state "$b")"
touch "$T/go/$a"
wait_for 15 "job $b RUNNING on stay" is_job_state "$b" RUNNING
[ "$(cli -o json job "$b" | jqr '.workers[0].node')" = stay ] || fail "job $b placed on $(cli -o json job "$b" | jqr '.workers[0].node')"
pass "job $b ran on 'stay' once its GPU was free"
