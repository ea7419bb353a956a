#!/usr/bin/env bash
# troupe stop leaves no process behind, even a worker that ignores SIGTERM.
source "$(dirname "$0")/../lib.sh"
start_cluster
mkdir -p "$T/pids"
cat >"$T/stop.yaml" <<YAML
name: stoppable
cluster: {nodes: [4]}
groups:
  - {name: polite, workers: 2, resources: {gpu: 1}, command: [sh, -c, 'echo \$\$ > $T/pids/\$TROUPE_WORKER; sleep 300 & echo \$! >> $T/pids/\$TROUPE_WORKER; wait']}
  - {name: stubborn, workers: 1, resources: {gpu: 2}, command: [sh, -c, 'trap "" TERM; echo \$\$ > $T/pids/\$TROUPE_WORKER; while true; do sleep 0.2; done']}
YAML
id=$(submit "$T/stop.yaml")
# Each polite worker writes its pid and its child's; the stubborn one writes
# its pid once its TERM trap is set: 5 pids in all.
wait_for 10 "5 worker pids written" bash -c "[ \$(cat $T/pids/* 2>/dev/null | wc -l) = 5 ]"
wait_for 10 "job RUNNING" is_job_state "$id" RUNNING
pids=$(cat "$T"/pids/*)
t0=$(date +%s%N)
cli stop "$id" 2>"$T/stop.err" || fail "stop failed: $(cat "$T/stop.err")"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
for p in $pids; do
    if alive "$p"; then fail "process $p survived troupe stop"; fi
done
[ "$(job_state "$id")" = STOPPED ] || fail "state $(job_state "$id")"
cli -o json job "$id" | jq -e '[.workers[] | select(.state=="RUNNING")] | length == 0' >/dev/null || fail "workers still RUNNING"
# README: SIGTERM, then SIGKILL after stop_grace_ms (1000 here). The stubborn
# worker ignores SIGTERM, so the stop cannot end sooner than the grace, and
# should not take much longer (allowance: 2 s for the agent's poll and RPCs).
[ $ms -ge 1000 ] && [ $ms -le 3000 ] || fail "stop took ${ms} ms; expected 1000..3000 (grace 1000 ms)"
pass "stop took ${ms} ms (grace 1000 ms for the SIGTERM-ignoring worker); no process left: $(echo $pids)"
