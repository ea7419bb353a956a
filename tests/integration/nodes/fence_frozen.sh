#!/usr/bin/env bash
# A frozen agent (SIGSTOP) cannot act, but its lease still runs out: the
# worker shims kill its workers before the head declares the node DEAD.
# Stopping a job meanwhile reports its end only once no worker can run. When
# the agent continues it comes back as a new node and the first job placed on
# it runs (it was FAILED as "lost" before).
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/nodes_lib.bash"
# DEAD after 1 s, lease 600 ms (times the slowdown: at load 30 in a chroot a
# 1 s DEAD failed the job before the agent was frozen); reports logged.
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after $((10 * TROUPE_TEST_SLOWDOWN)) --log-level debug
start_node na 4xH100:80GB --stop-grace-ms 5000
wait_for 10 "na ALIVE" nodes_alive 1
mkdir -p "$T/pids"
cat >"$T/a.yaml" <<YAML
name: a
cluster: {nodes: [4]}
groups: [{name: g, workers: 2, resources: {gpu: 2}, command: $(beat_cmd)}]
YAML
a=$(submit "$T/a.yaml")
wait_for 10 "a's workers started" bash -c "[ \$(ls $T/pids | wc -l) = 2 ]"
wait_for 10 "a RUNNING" bash -c "'$CLI_BIN' -o json job $a | jq -e '[.workers[] | select(.state==\"RUNNING\")] | length == 2'"
na_id=$(node_id na)

t0=$(ms_now)
kill -STOP "$NODE_PID_na"
# troupe stop while the agent is frozen: it may say no worker runs only once
# that is true.
cli stop "$a" >"$T/stop.out" 2>&1 &
stop_pid=$!
await_end 20 "troupe stop $a to return (once na's lease has run out)" "$stop_pid"
[ "$END_RC" = 0 ] || fail "troupe stop exited $END_RC: $(cat "$T/stop.out")"
t_stop=$(ms_now)
pids_gone "$T"/pids/* || fail "troupe stop returned at +$((t_stop - t0)) ms while workers still ran: $(cat "$T/stop.out")"
grep -q "STOPPED" "$T/stop.out" || fail "troupe stop said: $(cat "$T/stop.out")"
pass "agent frozen at 0; troupe stop returned at +$((t_stop - t0)) ms with the workers gone (fenced by the lease): $(tr '\n' ' ' <"$T/stop.out")"
is_state na DEAD || wait_for 5 "na DEAD" is_state na DEAD

# A job that waits while na is away is placed on it the moment it registers
# again, before the agent has applied anything of its new node. The agent's
# first report must not carry its old node's assignment version (as high as
# the new placement's), or the head takes the new workers for lost (as it once did:
# "the first job placed on that re-registered agent FAILS at once as lost").
start_node nc 4xH100:80GB --stop-grace-ms 1000
wait_for 10 "nc ALIVE" nodes_alive 1
sed 's/^name: a/name: hold/; s/command: .*/command: [sleep, "300"]}]/' "$T/a.yaml" >"$T/hold.yaml"
hold=$(submit "$T/hold.yaml")
wait_for 10 "hold RUNNING on nc" is_job_state "$hold" RUNNING
rm -f "$T"/pids/*
sed 's/^name: a/name: b/' "$T/a.yaml" >"$T/b.yaml"
b=$(submit "$T/b.yaml")
[ "$(job_state "$b")" = PENDING ] || fail "b should wait for GPUs while na is away: $(job_state "$b")"

kill -CONT "$NODE_PID_na"
wait_for 10 "na came back" bash -c "[ \"\$('$CLI_BIN' -o json nodes | jq -r '[.nodes[] | select(.name==\"na\")] | last | .state')\" = ALIVE ] && [ \$('$CLI_BIN' -o json nodes | jq -r '[.nodes[] | select(.name==\"na\")] | last | .id') != $na_id ]"
pass "na came back as node $(node_id na): $(node_field na reason)"
wait_for 10 "b placed once na is back" bash -c "[ \"\$('$CLI_BIN' -o json job $b | jq -r .state)\" != PENDING ]"
[ "$(job_state "$b")" = RUNNING ] || fail "b is $(job_state "$b") once placed on the returned agent: $(cli -o json job "$b" | jqr .reason)"
wait_for 10 "b's workers started" bash -c "[ \$(ls $T/pids | wc -l) = 2 ]"
wait_for 10 "b RUNNING" bash -c "'$CLI_BIN' -o json job $b | jq -e '[.workers[] | select(.state==\"RUNNING\")] | length == 2'"
# Taken for lost would be at a report from na listing its workers: wait for two.
mark=$(head_log_mark)
wait_for 10 "two reports from na (node $(node_id na)) while b runs" reports_after "$mark" "$(node_id na)" 2
[ "$(job_state "$b")" = RUNNING ] || fail "b is $(job_state "$b"): $(cli -o json job "$b" | jqr .reason)"
[ "$(cli -o json job "$b" | jqr '[.workers[].node] | unique | join(",")')" = na ] || fail "b not on na: $(cli -o json job "$b")"
pass "the job waiting for na's return was placed on it at once and runs: $(cli -o json job "$b" | jqr .reason)"
