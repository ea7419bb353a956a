#!/usr/bin/env bash
# Split brain under a network cut: an agent cut off from the head (a silent
# partition: its connection stays open, nothing passes) kills its workers
# when its lease runs out, before the head declares its node DEAD and places
# the job again elsewhere (max_restarts: 1): no rank ever runs twice at once.
# When the cut heals, the agent comes back as a new node of the same name.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/nodes_lib.bash"
# DEAD after 10 x 200 ms = 2 s; the agents' lease is 1.5 s.
start_head --heartbeat-ms 200 --suspect-after 3 --dead-after 10
start_proxy
NODE_HEAD=$PROXY start_node na 4xH100:80GB --stop-grace-ms 1000
wait_for 10 "na ALIVE" nodes_alive 1
grep -q "lease_ms=1500" "$T/head.log" || fail "head does not grant a 1500 ms lease: $(grep listening "$T/head.log")"
mkdir -p "$T/pids"
cat >"$T/j.yaml" <<YAML
name: twice
cluster: {nodes: [4]}
restart: {max_restarts: 1}
groups: [{name: g, workers: 2, resources: {gpu: 2}, command: $(beat_cmd)}]
YAML
job=$(submit "$T/j.yaml")
wait_for 10 "attempt 0 running on na" bash -c "[ \$(ls $T/pids | wc -l) = 2 ]"
start_node nb 4xH100:80GB --stop-grace-ms 1000
wait_for 10 "nb ALIVE" nodes_alive 2
na_id=$(node_id na)

t0=$(ms_now)
kill -USR1 "$PROXY_PID"
wait_for 10 "attempt 0's workers killed by the lease" pids_gone "$T"/pids/*.0
t_fenced=$(ms_now)
wait_for 10 "na DEAD" bash -c "'$CLI_BIN' -o json nodes | jq -e '.nodes[] | select(.id==$na_id) | .state == \"DEAD\"'"
t_dead=$(ms_now)
pass "cut at 0: workers fenced by +$((t_fenced - t0)) ms, node DEAD seen at +$((t_dead - t0)) ms"
wait_for 15 "attempt 1 running on nb" bash -c "[ \$(ls $T/pids/*.1 2>/dev/null | wc -l) = 2 ]"
wait_for 10 "attempt 1's first beats" grep -q '^1 ' "$T/beats"
[ "$(cli -o json job "$job" | jqr '[.workers[].node] | unique | join(",")')" = nb ] || fail "placement: $(cli -o json job "$job")"
no_overlap || fail "a rank ran twice at once"
pass "restarted on nb; attempt 0 had stopped before attempt 1 began (no rank ran twice)"
grep -q "lease ran out" "$T/node-na.log" || fail "the agent did not log its lease running out"
grep -q "lease ran out (no contact with the head)" "$T"/node-na/logs/*.0.log || fail "the worker logs do not say why they were killed"
# and the agent's record of their end says it was troupe's fencing, not
# "out of memory, or killed by hand?" as for a SIGKILL from outside.
grep "worker ended job=$job .* attempt=0 .*SIGKILL" "$T/node-na.log" | grep_all "fenced by troupe-node: its lease ran out" ||
    fail "the agent's record of the fenced workers does not say why: $(grep "worker ended" "$T/node-na.log")"

# Heal: the agent finds its node DEAD and comes back as a new one.
kill -USR2 "$PROXY_PID"
wait_for 15 "na back" bash -c "[ \"\$('$CLI_BIN' -o json nodes | jq -r '[.nodes[] | select(.name==\"na\")] | last | .state')\" = ALIVE ]"
[ "$(node_field na replaces)" = "$na_id" ] || fail "replaces=$(node_field na replaces)"
pass "after the cut healed, na came back as node $(node_id na): $(node_field na reason)"
[ "$(job_state "$job")" = RUNNING ] || fail "job $(job_state "$job")"
