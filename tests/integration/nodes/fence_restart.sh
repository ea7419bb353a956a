#!/usr/bin/env bash
# The head-side fence: a job restarted elsewhere after its node was lost
# waits until that node's lease has run out. A closed connection makes the
# node DEAD after --disconnect-ms (300 ms), long before its agent, alive
# behind the cut, kills its workers at the end of its lease (6 s here); were
# the job placed again at once (max_restarts: 1), attempt 1 would run on nb
# beside attempt 0 still running on na: one rank twice.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/nodes_lib.bash"
# Heartbeat timeout 8 s, lease 6 s (the default: the timeout less a quarter).
start_head --heartbeat-ms 200 --suspect-after 3 --dead-after 40 --disconnect-ms 300
start_proxy
NODE_HEAD=$PROXY start_node na 4xH100:80GB --stop-grace-ms 500
wait_for 10 "na ALIVE" nodes_alive 1
mkdir -p "$T/pids"
printf 'name: fenced\nrestart: {max_restarts: 1}\ncluster: {nodes: [4]}\ngroups: [{name: g, workers: 1, resources: {gpu: 4}, command: %s}]\n' \
    "$(beat_cmd)" >"$T/job.yaml"
j=$(submit "$T/job.yaml")
wait_for 15 "attempt 0 beating on na" test -s "$T/beats"
[ "$(cli -o json job "$j" | jqr '.workers[0].node')" = na ] || fail "attempt 0 not on na: $(cli -o json job "$j" | jq -c .workers)"
start_node nb 4xH100:80GB --stop-grace-ms 500
wait_for 10 "na, nb ALIVE" nodes_alive 2
na_id=$(node_id na)
pass "job $j attempt 0 RUNNING on na (through the proxy); nb ALIVE and free"

t0=$(ms_now)
cut_and_drop
wait_for 5 "na DEAD" bash -c "'$CLI_BIN' -o json nodes | jq -e '.nodes[] | select(.id==$na_id) | .state == \"DEAD\"'"
t_dead=$(ms_now)
[ $((t_dead - t0)) -lt 2500 ] || fail "na DEAD only after $((t_dead - t0)) ms: the closed connection was not noticed (the timeout is 8000)"
wait_for 5 "job $j placed again (restart 1)" bash -c "'$CLI_BIN' -o json job $j | jq -e '.restarts == 1'"
reason=$(grep -o "job=$j .*RESTARTING: .*" "$T/head.log" | tail -1)
grep -q "once the lost node's lease has ended" <<<"$reason" || fail "the restart does not say it waits for the lease: $reason"
pass "connection closed: na DEAD after $((t_dead - t0)) ms, job $j placed again: $reason"

# Attempt 0, cut off from the head, beats until its agent's lease ends.
wait_for 20 "attempt 1 beating on nb" grep -q '^1 ' "$T/beats"
[ "$(cli -o json job "$j" | jqr '.workers[0].node')" = nb ] || fail "attempt 1 not on nb: $(cli -o json job "$j" | jq -c .workers)"
wait_for 15 "attempt 0's worker killed by na's lease" pids_gone "$T"/pids/*.0
last0=$(awk '$1 == 0 { if ($3 > m) m = $3 } END { print m }' "$T/beats")
first1=$(awk '$1 == 1 { if (m == "" || $3 < m) m = $3 } END { print m }' "$T/beats")
[ $((last0 - t_dead)) -ge 3000 ] || fail "attempt 0 stopped beating $((last0 - t_dead)) ms after na was DEAD: the window under test (its lease) never opened"
no_overlap || fail "attempt 1 began while attempt 0 still ran (no fence): $(no_overlap)"
pass "attempt 0 ran until $((last0 - t_dead)) ms after na DEAD (its lease); attempt 1 began $((first1 - t_dead)) ms after, $((first1 - last0)) ms after attempt 0's last beat"
wait_for 10 "job $j RUNNING" is_job_state "$j" RUNNING
[ "$(cli -o json job "$j" | jqr .restarts)" = 1 ] || fail "restarts: $(cli -o json job "$j" | jqr .restarts)"
pass "job $j RUNNING on nb after 1 restart"
