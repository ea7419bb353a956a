#!/usr/bin/env bash
# Failure detection in seconds with the head's DEFAULT liveness settings
# (the promise: "agent process death -> job FAILED within 2 s; a network cut ->
# within 5 s by default", measured by a test; bench/liveness measures the same
# over rounds for bench/RESULTS.md). Defaults: heartbeat 500 ms, DEAD after 8
# missed (4 s), lease 3 s, disconnect_ms 1000. Each time is the job's
# ended_ms (the head's clock) less the moment of the fault (this host's clock:
# the same one). Before the disconnect detection a killed agent's job failed
# after 10-11 s.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/nodes_lib.bash"
start_head # no liveness flags: the defaults are what is measured
grep -q "lease_ms=3000" "$T/head.log" || fail "the head's defaults changed (want a 3000 ms lease): $(grep listening "$T/head.log")"
start_node na 1xH100:80GB --labels role=a
start_proxy
NODE_HEAD=$PROXY start_node nb 1xH100:80GB --labels role=b
wait_for 10 "na and nb ALIVE" nodes_alive 2
job_yaml() { # NAME COMMAND CLUSTER
    printf 'name: %s\ncluster: %s\ngroups: [{name: g, workers: 1, resources: {gpu: 1}, command: %s}]\n' "$1" "$3" "$2"
}
job_yaml a "[sleep, '300']" "{nodes: [1], labels: {role: a}}" >"$T/a.yaml"
job_yaml b "[sleep, '300']" "{nodes: [1], labels: {role: b}}" >"$T/b.yaml"
a=$(submit "$T/a.yaml")
b=$(submit "$T/b.yaml")
wait_for 10 "jobs $a and $b RUNNING" bash -c "[ \"\$('$CLI_BIN' -o json job $a | jq -r .state)\$('$CLI_BIN' -o json job $b | jq -r .state)\" = RUNNINGRUNNING ]"

# Agent process death: its connection closes, the node is DEAD after disconnect_ms.
t0=$(ms_now)
kill -9 "$NODE_PID_na"
wait_for 10 "job $a FAILED after its agent was killed" is_job_state "$a" FAILED
kill_ms=$(($(cli -o json job "$a" | jqr .ended_ms) - t0))
reason=$(cli -o json job "$a" | jqr .reason)
grep -q "node na" <<<"$reason" || fail "job $a failed for another reason: $reason"
[ "$kill_ms" -le 2000 ] || fail "agent kill -9 -> job FAILED took $kill_ms ms; the goal is 2000 (load: $(cut -d' ' -f1-3 /proc/loadavg))"
pass "agent kill -9 -> job FAILED in $kill_ms ms (goal 2000): $reason"

# A silent network cut: the connection stays open and nothing passes; the
# heartbeats find it.
t0=$(ms_now)
kill -USR1 "$PROXY_PID"
wait_for 15 "job $b FAILED after its agent was cut off" is_job_state "$b" FAILED
cut_ms=$(($(cli -o json job "$b" | jqr .ended_ms) - t0))
reason=$(cli -o json job "$b" | jqr .reason)
grep -q "node nb" <<<"$reason" || fail "job $b failed for another reason: $reason"
[ "$cut_ms" -le 5000 ] || fail "network cut -> job FAILED took $cut_ms ms; the goal is 5000 (load: $(cut -d' ' -f1-3 /proc/loadavg))"
pass "network cut -> job FAILED in $cut_ms ms (goal 5000): $reason"
# nb's workers end by the lease (the agent cannot reach the head); let them go
# before cleanup counts leftovers.
wait_for 10 "nb's agent to log its lease running out" grep -q "lease ran out" "$T/node-nb.log"
