#!/usr/bin/env bash
# An agent's NodeSync long poll waits up to 50 s at the head. An idle agent
# cut off silently goes DEAD; its poll stays parked at the head under the old
# node id (no assignment of that node changes, so nothing answers it). When
# the cut heals and the agent registers again as a new node, it cancels that
# stale poll and asks again under the new id: work placed on the new node
# starts at once, not when the old poll times out. The same after a head
# restart (SIGTERM and kill -9) with the idle agent's poll parked at the old
# head: nng re-sends the poll to the new head, and new work starts at once.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/nodes_lib.bash"
# DEAD after 10 x 200 ms = 2 s. The head logs each poll it parks (debug).
head_args=(--heartbeat-ms 200 --suspect-after 3 --dead-after 10 --log-level debug)
start_head "${head_args[@]}"
start_proxy
NODE_HEAD=$PROXY start_node na 4xH100:80GB --stop-grace-ms 1000
wait_for 10 "na ALIVE" nodes_alive 1
na_id=$(node_id na)
# parked MARK ID: the head's last word on node ID's polls after MARK is that
# it parked one (not that it answered it).
parked() {
    tail -c +$(($1 + 1)) "$T/head.log" | grep -E "node sync (answered|parked) node=$2 " | tail -1 | grep_all parked
}
wait_for 10 "na's poll parked at the head" parked 0 "$na_id"

kill -USR1 "$PROXY_PID"
wait_for 10 "na DEAD" bash -c "'$CLI_BIN' -o json nodes | jq -e '.nodes[] | select(.id==$na_id) | .state == \"DEAD\"'"
kill -USR2 "$PROXY_PID"
wait_for 15 "na back as a new node" bash -c \
    "[ \"\$('$CLI_BIN' -o json nodes | jq -r '[.nodes[] | select(.name==\"na\" and .state==\"ALIVE\")] | last | .id // 0')\" -gt $na_id ]"
pass "na came back as node $(node_id na) (was $na_id)"

cat >"$T/j.yaml" <<YAML
name: after-heal
cluster: {nodes: [4]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sh, -c, 'echo started; sleep 30']}]
YAML
# submit_started WHAT: submit j.yaml; its worker starts within 8 s.
submit_started() {
    local t0 job took
    t0=$(ms_now)
    job=$(submit "$T/j.yaml")
    wait_for 15 "job $job's worker started ($1)" logs_grep "$job" "started"
    took=$(( $(ms_now) - t0 ))
    [ "$took" -le 8000 ] || fail "the worker started $took ms after submit ($1): a parked poll held the work back"
    pass "$1: the worker started $took ms after submit (a parked poll would hold it up to 50 s)"
    cli stop "$job" >/dev/null
    wait_for 15 "job $job stopped" is_job_state "$job" STOPPED
}
submit_started "on the new node after the cut"

for sig in TERM KILL; do
    id=$(node_id na)
    wait_for 10 "the idle agent's poll parked at the head" parked 0 "$id"
    stop_pid "-$sig" "$HEAD_PID"
    mark=$(head_log_mark)
    start_head "${head_args[@]}"
    wait_for 15 "na ALIVE after the head's SIG$sig" bash -c \
        "'$CLI_BIN' -o json nodes | jq -e '[.nodes[] | select(.name==\"na\" and .state==\"ALIVE\")] | length == 1'"
    wait_for 15 "na's poll parked at the new head (re-sent, or asked afresh)" parked "$mark" "$(node_id na)"
    submit_started "after a head restart by SIG$sig"
done
