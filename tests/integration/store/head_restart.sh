#!/usr/bin/env bash
# A head restart while a rank waits in the store: the store is in memory, so
# the stopping head answers the wait UNAVAILABLE; the client resends it (an
# idempotent call) to the restarted head, where it waits again, and a set
# made after the restart answers it.
source "$(dirname "$0")/../lib.sh"
: "${ST_WORKER:?}"
# Ranks outlive a head outage only within their agent's lease (README, fencing).
start_cluster --dead-after 40
cat >"$T/job.yaml" <<YAML
name: late
cluster: {nodes: [4]}
groups: [{name: policy, workers: 2, resources: {gpu: 1}, command: [$ST_WORKER, late]}]
env: {ST_GO: "$T/go"}
YAML
id=$(submit "$T/job.yaml")
wait_for 15 "rank 1 to wait for the key" logs_grep "$id" "st: rank 1 waiting for late"
sleep 0.5
stop_pid "$HEAD_PID"
rc=$STOP_RC
# A clean stop with a store wait parked (under ASan: no leak, no bad access).
[ $rc = 0 ] || fail "the head stopped with status $rc: $(tail -20 "$T/head.log")"
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 40
touch "$T/go"
wait_for 30 "job $id to succeed" is_job_state "$id" SUCCEEDED
logs_grep "$id" "st: rank 1 got late = after-restart" || fail "the waiter: $(cli logs "$id")"
pass "a store wait in flight across a head restart is answered by the set made after it"
