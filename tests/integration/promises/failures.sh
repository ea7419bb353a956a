#!/usr/bin/env bash
# README, "What happens when things fail". Promises (PROMISES.md): a node seen
# SUSPECT end to end and back, workers of a dead node marked LOST, TROUPE_ATTEMPT
# + 1 after a restart, GPUs given to other jobs only once every worker is gone.
source "$(dirname "$0")/../lib.sh"
# dead_after 40 x 100 ms = 4 s: room to see SUSPECT and come back before DEAD.
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 40
start_node fa 4xH100:80GB --stop-grace-ms 1500
start_node fb 4xH100:80GB --stop-grace-ms 1500
wait_for 10 "2 nodes ALIVE" nodes_alive 2
mkdir -p "$T/out"

# SUSPECT after suspect_after (3) missed heartbeats of 100 ms, ALIVE again when
# they resume; the CLI shows it.
kill -STOP "$NODE_PID_fa"
t0=$(date +%s%N)
wait_for 5 "fa SUSPECT" is_state fa SUSPECT
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ $ms -le 2000 ] || fail "fa took ${ms} ms to be SUSPECT (window 300 ms)"
cli nodes | grep_all -E "^ *[0-9]+ +fa .*SUSPECT" || fail "troupe nodes does not show fa SUSPECT: $(cli nodes)"
[ "$(node_state fa)" = SUSPECT ] || fail "fa went DEAD too early: $(node_state fa)"
kill -CONT "$NODE_PID_fa"
wait_for 5 "fa ALIVE again" is_state fa ALIVE
pass "SUSPECT after ${ms} ms without heartbeats (window 300 ms), ALIVE again when they resume"

# TROUPE_ATTEMPT: a group that fails once restarts whole with attempt + 1.
cat >"$T/retry.yaml" <<YAML
name: retry
cluster: {nodes: [4]}
groups: [{name: g, workers: 2, resources: {gpu: 1}, command: [sh, -c, 'echo \$TROUPE_ATTEMPT >> $T/out/\$TROUPE_WORKER.attempts; [ \$TROUPE_ATTEMPT = 1 ] || [ \$RANK = 1 ]']}]
restart: {max_restarts: 1}
YAML
id=$(submit "$T/retry.yaml")
wait_for 20 "retry SUCCEEDED" is_job_state "$id" SUCCEEDED
for w in 0 1; do
    [ "$(tr '\n' ' ' <"$T/out/job$id-g-$w.attempts")" = "0 1 " ] ||
        fail "job$id-g-$w saw attempts: $(tr '\n' ' ' <"$T/out/job$id-g-$w.attempts")"
done
[ "$(cli -o json job "$id" | jqr .restarts)" = 1 ] || fail "restarts: $(cli -o json job "$id" | jqr .restarts)"
pass "a failed group restarted whole with TROUPE_ATTEMPT 0 then 1"

# GPUs are reused only once every worker is gone: a worker that ignores
# SIGTERM keeps its GPUs for the grace period; the job waiting for them starts
# only after its process has ended (a zombie that nobody reaped counts as
# ended: it holds no GPU).
cat >"$T/hold.yaml" <<YAML
name: hold
cluster: {nodes: [4], labels: {}}
groups: [{name: g, workers: 1, resources: {gpu: 4}, command: [sh, -c, 'trap "" TERM; echo \$\$ > $T/out/hold.pid; while true; do sleep 0.1; done']}]
YAML
cat >"$T/next.yaml" <<YAML
name: next
cluster: {nodes: [4]}
groups: [{name: g, workers: 1, resources: {gpu: 4}, command: [sh, -c, 'if awk "{ exit (\\\$3 == \\"Z\\") }" /proc/\$(cat $T/out/hold.pid)/stat 2>/dev/null; then echo overlap > $T/out/next.result; else echo clean > $T/out/next.result; fi']}]
YAML
cat >"$T/other.yaml" <<YAML
name: other
cluster: {nodes: [4]}
groups: [{name: g, workers: 1, resources: {gpu: 4}, command: [sleep, "60"]}]
YAML
h=$(submit "$T/hold.yaml"); o=$(submit "$T/other.yaml")
wait_for 10 "hold and other RUNNING" bash -c "[ -s $T/out/hold.pid ] && [ \$('$CLI_BIN' -o json job $o | jq -r .state) = RUNNING ]"
n=$(submit "$T/next.yaml")
wait_for 10 "next PENDING with a reason" bash -c "[ -n \"\$('$CLI_BIN' -o json job $n | jq -r '.reason // empty')\" ]"
cli stop --no-wait "$h" >/dev/null
wait_for 15 "next SUCCEEDED" is_job_state "$n" SUCCEEDED
[ "$(cat "$T/out/next.result")" = clean ] || fail "next started while hold's worker still ran"
alive "$(cat "$T/out/hold.pid")" && fail "hold's worker survived the stop"
cli stop "$o" >/dev/null
pass "the waiting job got the GPUs only after the SIGTERM-ignoring worker was gone"

# A node that dies: its job FAILS and its workers are LOST.
cat >"$T/lost.yaml" <<YAML
name: lost
cluster: {nodes: [4]}
groups: [{name: g, workers: 2, resources: {gpu: 2}, command: [sleep, "60"]}]
YAML
id=$(submit "$T/lost.yaml")
wait_for 10 "lost RUNNING" is_job_state "$id" RUNNING
node=$(cli -o json job "$id" | jqr '.workers[0].node')
pid_var=NODE_PID_$node
kill -9 "${!pid_var}"
wait_for 10 "lost FAILED" is_job_state "$id" FAILED
states=$(cli -o json job "$id" | jqr '[.workers[].state] | unique | join(",")')
[ "$states" = LOST ] || fail "workers of the dead node should be LOST, are: $states"
pass "agent $node killed: job FAILED, its workers LOST"
