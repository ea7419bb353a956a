#!/usr/bin/env bash
# The queue survives head restarts: PENDING jobs stay PENDING (with their
# reason) across SIGTERM and kill -9 of the head, and start once GPUs free up.
# A PENDING job that needs a node which is only SUSPECT for a moment keeps
# waiting too. (Both used to FAIL with "no alive node at all".)
source "$(dirname "$0")/../lib.sh"
HB=(--heartbeat-ms 100 --suspect-after 3 --dead-after 100)
start_head "${HB[@]}"
start_node solo 1 --stop-grace-ms 1000
wait_for 10 "1 node ALIVE" nodes_alive 1
mkdir -p "$T/go"
cat >"$T/hold.yaml" <<YAML
name: hold
cluster: {nodes: [1]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sh, -c, 'while [ ! -f $T/go/\$TROUPE_JOB ]; do sleep 0.1; done; echo done \$TROUPE_JOB']}]
YAML
ids=()
for _ in 1 2 3 4; do ids+=("$(submit "$T/hold.yaml")"); done
wait_for 10 "first job RUNNING" is_job_state "${ids[0]}" RUNNING
for i in 1 2 3; do is_job_state "${ids[$i]}" PENDING || fail "job ${ids[$i]} should wait: $(job_state "${ids[$i]}")"; done

# all_pending: jobs 2..4 are PENDING, say what they wait for, and the first runs.
all_pending() {
    is_job_state "${ids[0]}" RUNNING || fail "job ${ids[0]} is $(job_state "${ids[0]}") after $1"
    for i in 1 2 3; do
        local j; j=$(cli -o json job "${ids[$i]}")
        [ "$(jqr .state <<<"$j")" = PENDING ] || fail "job ${ids[$i]} is $(jqr .state <<<"$j") after $1: $(jqr .reason <<<"$j")"
        [ -n "$(jqr .reason <<<"$j")" ] || fail "job ${ids[$i]} waits without a reason"
    done
}
# judged_pending ID: job ID is PENDING with the scheduler's own reason (its
# submit ran a scheduling pass; "waiting to be placed" is only the record's
# first word, before any pass).
judged_pending() {
    local j; j=$(cli -o json job "$1")
    [ "$(jqr .state <<<"$j")" = PENDING ] && [ -n "$(jqr .reason <<<"$j")" ] && [ "$(jqr .reason <<<"$j")" != "waiting to be placed" ]
}
restart_head() { # SIGNAL
    stop_pid "-$1" "$HEAD_PID"
    local mark; mark=$(head_log_mark)
    start_head "${HB[@]}"
    # Scheduling passes run at start and when the agent registers again; the
    # old head failed the queue in the first of them, before any agent came back.
    all_pending "a head restart by SIG$1 (at start)"
    # Its registration runs a scheduling pass with the node placeable again.
    wait_for 10 "the agent registers again (ALIVE, logged again=1)" reregistered "$mark" solo
    all_pending "a head restart by SIG$1"
    pass "SIG$1: 3 PENDING jobs still PENDING after the head restart: $(cli -o json job "${ids[1]}" | jqr .reason)"
}
restart_head TERM
restart_head KILL

for i in 0 1 2 3; do
    touch "$T/go/${ids[$i]}"
    wait_for 15 "job ${ids[$i]} SUCCEEDED" is_job_state "${ids[$i]}" SUCCEEDED
done
pass "the queue drained in order after two head restarts"

# A 2-node job waits for a node that is SUSPECT for a moment.
start_node duo 1 --stop-grace-ms 1000
wait_for 10 "2 nodes ALIVE" nodes_alive 2
cat >"$T/pair.yaml" <<YAML
name: pair
cluster: {nodes: [1, 1]}
groups: [{name: g, workers: 2, resources: {gpu: 1}, strategy: STRICT_SPREAD, command: [sh, -c, 'while [ ! -f $T/go/\$TROUPE_JOB ]; do sleep 0.1; done']}]
YAML
hold=$(submit "$T/hold.yaml")
wait_for 10 "holder RUNNING" is_job_state "$hold" RUNNING
pair=$(submit "$T/pair.yaml")
judged_pending "$pair" || fail "pair should wait for the busy GPU: $(job_state "$pair")"
# Freeze whichever agent is idle, so its node goes SUSPECT for ~3 s.
busy=$(cli -o json job "$hold" | jqr '.workers[0].node')
idle=solo; [ "$busy" = solo ] && idle=duo
idle_pid=$NODE_PID_solo; [ "$idle" = duo ] && idle_pid=$NODE_PID_duo
kill -STOP "$idle_pid"
wait_for 10 "node $idle SUSPECT" is_state "$idle" SUSPECT
# A submit in that window is admitted and waits: refusing it would refuse
# the job for a missed heartbeat, not for its shape (the same holds right after
# a head restart, when every node is SUSPECT until its agent registers again).
late=$(submit "$T/pair.yaml") || fail "a 2-node job submitted while a node is SUSPECT was refused"
# That submit ran a scheduling pass over both pairs while $idle is SUSPECT.
judged_pending "$late" || fail "late pair: $(cli -o json job "$late" | jqr '.state + ": " + .reason')"
judged_pending "$pair" || fail "pair while $idle is SUSPECT: $(cli -o json job "$pair" | jqr '.state + ": " + .reason')"
is_state "$idle" SUSPECT || fail "node $idle should still be SUSPECT: $(node_state "$idle")"
kill -CONT "$idle_pid"
wait_for 10 "node $idle ALIVE again" is_state "$idle" ALIVE
is_job_state "$pair" PENDING || fail "the 2-node job should still wait after a SUSPECT spell: $(cli -o json job "$pair" | jqr '.state + ": " + .reason')"
pass "2-node jobs stayed PENDING through a scheduling pass while a node was SUSPECT, and after"
touch "$T/go/$hold"
wait_for 15 "pair RUNNING" is_job_state "$pair" RUNNING
touch "$T/go/$pair"
wait_for 15 "pair SUCCEEDED" is_job_state "$pair" SUCCEEDED
pass "2-node job ran once the GPU was free"
touch "$T/go/$late"
wait_for 15 "the pair submitted while a node was SUSPECT SUCCEEDED" is_job_state "$late" SUCCEEDED
pass "a 2-node job submitted while a node was SUSPECT was admitted, waited, and ran"
