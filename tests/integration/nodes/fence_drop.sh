#!/usr/bin/env bash
# A connection that closes is noticed at once: the node is DEAD after
# --disconnect-ms, not after the heartbeat timeout. The agent may still be
# alive behind the cut, so its job's GPUs are given out again only once its
# workers are gone: a node that comes back (same agent, new node id) while
# workers of its old self still run takes no new work until it reports them
# gone (no GPU is double-booked), and the first job placed on it then runs
# (it is not taken for lost).
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/nodes_lib.bash"
# Heartbeat timeout 8 s (lease 6 s); a closed connection: DEAD after 300 ms.
# The long lease keeps a's old workers alive well past na's return however
# slow the machine, so the double-booking window below always opens (with a
# 3 s lease they were sometimes gone before na registered again, and a
# scheduler that ignored fenced workers passed).
start_head --heartbeat-ms 200 --suspect-after 3 --dead-after 40 --disconnect-ms 300 --log-level debug
start_proxy
NODE_HEAD=$PROXY start_node na 4xH100:80GB --stop-grace-ms 3000
start_node nc 4xH100:80GB --stop-grace-ms 1000 --labels role=hold
wait_for 10 "na, nc ALIVE" nodes_alive 2
job_yaml() { # NAME COMMAND [CLUSTER]
    printf 'name: %s\ncluster: %s\ngroups: [{name: g, workers: 2, resources: {gpu: 2}, command: %s}]\n' "$1" "${3:-{nodes: [4]\}}" "$2"
}
job_yaml hold "[sleep, '300']" "{nodes: [4], labels: {role: hold}}" >"$T/hold.yaml"
job_yaml a "[sh, $(beat_script beatsA)]" >"$T/a.yaml"
job_yaml b "[sh, $(beat_script beatsB)]" >"$T/b.yaml"
# nc is taken by 'hold' and na by 'a'; 'b' waits for GPUs.
hold=$(submit "$T/hold.yaml")
wait_for 10 "hold RUNNING" is_job_state "$hold" RUNNING
[ "$(cli -o json job "$hold" | jqr '.workers[0].node')" = nc ] || fail "hold not on nc"
a=$(submit "$T/a.yaml")
wait_for 10 "a's workers started" bash -c "[ \$(ls $T/pids | wc -l) = 2 ]"
b=$(submit "$T/b.yaml")
# its submit ran a scheduling pass: the scheduler's reason, not the record's first
[ "$(job_state "$b")" = PENDING ] && [ "$(job_reason "$b")" != "waiting to be placed" ] || fail "b should wait: $(job_state "$b")"
na_id=$(node_id na)

t0=$(ms_now)
cut_and_drop
wait_for 5 "na DEAD" bash -c "'$CLI_BIN' -o json nodes | jq -e '.nodes[] | select(.id==$na_id) | .state == \"DEAD\"'"
t_dead=$(ms_now)
[ $((t_dead - t0)) -lt 2500 ] || fail "DEAD only after $((t_dead - t0)) ms (heartbeat timeout is 4000)"
wait_for 5 "a FAILED" is_job_state "$a" FAILED
pass "connection closed -> na DEAD after $((t_dead - t0)) ms; job a FAILED: $(cli -o json job "$a" | jqr .reason)"

# The cut heals while a's workers still run (their lease has not ended).
kill -USR2 "$PROXY_PID"
wait_for 10 "na back" bash -c "[ \"\$('$CLI_BIN' -o json nodes | jq -r '[.nodes[] | select(.name==\"na\")] | last | .id')\" != $na_id ]"
fenced=$(grep -o "node registered node=[0-9]* name=na .*replaces=$na_id fenced_workers=[0-9]*" "$T/head.log" | tail -1 | sed 's/.*fenced_workers=//')
[ "${fenced:-0}" -ge 1 ] || fail "na registered again with no old worker running (fenced_workers=${fenced:-?}): the window under test never opened"
pass "na came back as node $(node_id na) with $fenced workers of its old self running: $(node_field na reason)"
wait_for 15 "b RUNNING on na" bash -c "'$CLI_BIN' -o json job $b | jq -e '[.workers[] | select(.state==\"RUNNING\")] | length == 2'"
[ "$(cli -o json job "$b" | jqr '.workers[0].node')" = na ] || fail "b placed on $(cli -o json job "$b" | jqr '.workers[0].node')"
pids_gone "$T"/pids/job${a}-*.0 || fail "a's workers still alive while b runs"
last_a=$(awk '{ if ($3 > m) m = $3 } END { print m }' "$T/beatsA")
wait_for 5 "b's first beat" test -s "$T/beatsB"
first_b=$(sort -k3 -n "$T/beatsB" | awk 'NR == 1 { print $3 }')
[ "$first_b" -gt "$last_a" ] || fail "b began at $first_b while a's workers ran until $last_a: GPUs double-booked"
pass "b placed on na only after a's old workers were gone (last beat of a $last_a, first of b $first_b)"
# Taken for lost would be at a report from na listing its workers: wait for two.
mark=$(head_log_mark)
wait_for 10 "two reports from na (node $(node_id na)) while b runs" reports_after "$mark" "$(node_id na)" 2
[ "$(job_state "$b")" = RUNNING ] || fail "b is $(job_state "$b"): $(cli -o json job "$b" | jqr .reason)"
pass "the first job on the re-registered agent runs (not taken for lost)"
