#!/usr/bin/env bash
# kill -9 of the head mid-job: restarted on the same state dir it shows the
# same job, the workers kept running, and the job ends with the right state.
source "$(dirname "$0")/../lib.sh"
# Workers outlive a head outage within their agent's lease (README, fencing):
# DEAD after 4 s, lease 3 s, so a slow restart on a busy machine is covered.
start_cluster --dead-after 40
mkdir -p "$T/go"
cat >"$T/long.yaml" <<YAML
name: survives
cluster: {nodes: [8]}
groups: [{name: g, workers: 2, resources: {gpu: 2}, command: [sh, -c, 'echo \$\$ > $T/go/\$TROUPE_WORKER.pid; while [ ! -f $T/go/finish ]; do sleep 0.1; done; echo done \$RANK']}]
YAML
id=$(submit "$T/long.yaml")
wait_for 10 "job RUNNING with 2 workers started" bash -c "[ \$(ls $T/go/*.pid 2>/dev/null | wc -l) = 2 ]"
wait_for 10 "workers RUNNING" bash -c "'$CLI_BIN' -o json job $id | jq -e '[.workers[] | select(.state==\"RUNNING\")] | length == 2'"
before=$(cli -o json job "$id" | jq -c '[.workers[] | {name, node, gpus, pid}]')
pids=$(cat "$T"/go/*.pid)

stop_pid -9 "$HEAD_PID"
for p in $pids; do alive "$p" || fail "worker $p died with the head"; done
pass "head killed; workers still running"
mark=$(head_log_mark)
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 40
wait_for 10 "na, nb and nc to register again with the new head (ALIVE, logged)" reregistered "$mark" na nb nc
[ "$(job_state "$id")" = RUNNING ] || fail "job not RUNNING after restart: $(job_state "$id")"
after=$(cli -o json job "$id" | jq -c '[.workers[] | {name, node, gpus, pid}]')
[ "$before" = "$after" ] || fail "placement changed: $before vs $after"
[ "$(cli -o json status | jqr .gpus.free)" = 20 ] || fail "the restored job should hold its 8-GPU virtual node: free=$(cli -o json status | jqr .gpus.free)"
pass "same job, same placement after restart"
touch "$T/go/finish"
wait_for 15 "job SUCCEEDED" is_job_state "$id" SUCCEEDED
logs_grep "$id" "done 1" || fail "log lines after restart missing"
pass "job finished SUCCEEDED after the head restart"
