#!/usr/bin/env bash
# A stall that spans a head restart is still seen: rank 1 is SIGSTOPped, the
# head is killed (-9) and started again; the new head knows the running job's
# workers from their last stored step (metrics.db) and marks the job STALLED
# within stall_after of its start, naming rank 1 with that step; rank 0,
# which steps on, is not named. Then SIGCONT: OK again.
source "$(dirname "$0")/../lib.sh"
: "${HL_WORKER:?}"
args=(--heartbeat-ms 100 --suspect-after 3 --dead-after 50)
start_cluster "${args[@]:2}" # lib's start_cluster sets the heartbeat; a long dead window survives the restart
cat >"$T/a.yaml" <<YAML
name: across
cluster: {nodes: [4]}
groups: [{name: policy, workers: 2, resources: {gpu: 1}, command: [$HL_WORKER]}]
env: {HL_STEP_MS: "50"}
health: {stall_after: 3s}
YAML
id=$(submit "$T/a.yaml")
is_health() { [ "$(cli -o json job "$id" 2>/dev/null | jqr .health.state)" = "$1" ]; }
wait_for 60 "job $id judged OK" is_health OK
sup=$(cli -o json job "$id" | jqr '.workers[] | select(.rank==1) | .pid')
pid=$(pgrep -P "$sup") || fail "no process for rank 1"
kill -STOP "$pid"
stop_pid -9 "$HEAD_PID"
start_head "${args[@]}"
back=$(date +%s%N)
# Rank 1's last stored step, as the new head finds it in metrics.db (what
# it seeds health from): read after the restart, so that no report still
# in flight at the SIGSTOP can change it.
stored=$(cli -o json metrics "$id" --worker "job$id-policy-1" --name step_ms --last 1 | jqr '.points[0].step')
[ "$stored" -ge 1 ] || fail "no stored step for rank 1: $stored"
wait_for 20 "job $id STALLED after the head restart" is_health STALLED
took=$(( ($(date +%s%N) - back) / 1000000 ))
[ "$took" -le 8000 ] || fail "STALLED only $took ms after the new head served (stall_after 3 s)"
cli -o json job "$id" >"$T/j.json"
jq -e --argjson s "$stored" '.health.stalled | length == 1 and .[0].rank == 1 and .[0].last_step == $s' "$T/j.json" \
    >/dev/null || fail "stalled after restart (stored step $stored): $(jq -c .health "$T/j.json")"
grep -q "health: 2 workers of 1 running jobs resume from their last stored step" "$T/head.log" \
    || fail "no seeding logged: $(grep health "$T/head.log")"
pass "stall across a head restart: STALLED ${took} ms after the new head served, rank 1 at its stored step $stored"
kill -CONT "$pid"
wait_for 20 "job $id OK again" is_health OK
cli stop "$id" >/dev/null
pass "SIGCONT after the restart: OK again"
