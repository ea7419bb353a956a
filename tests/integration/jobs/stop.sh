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
wait_for 10 "3 pid files" bash -c "[ \$(ls $T/pids | wc -l) = 3 ]"
wait_for 10 "job RUNNING" is_job_state "$id" RUNNING
sleep 0.3
pids=$(cat "$T"/pids/*)
t0=$(date +%s%N)
cli stop "$id" 2>"$T/stop.err" || fail "stop failed: $(cat "$T/stop.err")"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
for p in $pids; do
    if alive "$p"; then fail "process $p survived troupe stop"; fi
done
[ "$(job_state "$id")" = STOPPED ] || fail "state $(job_state "$id")"
cli -o json job "$id" | jq -e '[.workers[] | select(.state=="RUNNING")] | length == 0' >/dev/null || fail "workers still RUNNING"
pass "stop took ${ms} ms (grace 1000 ms for the SIGTERM-ignoring worker); no process left: $(echo $pids)"
