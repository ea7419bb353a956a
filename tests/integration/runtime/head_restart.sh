#!/usr/bin/env bash
# A head restart while ranks wait: they carry on. Waits in flight reach the
# restarted head (the calls are idempotent), and IDs published before the
# restart are on the job record, so a rank that asks afterwards gets them.
source "$(dirname "$0")/../lib.sh"
: "${RT_WORKER:?}"
# Ranks outlive a head outage only within their agent's lease (README,
# fencing): DEAD after 4 s, lease 3 s, so a slow restart on a busy machine
# is covered.
start_cluster --dead-after 40
restart_head() {
    stop_pid -9 "$HEAD_PID"
    start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 40
}
# 1. Ranks 1 and 2 wait; the head dies and comes back; then rank 0 publishes.
cat >"$T/a.yaml" <<YAML
name: waiting
cluster: {nodes: [4]}
groups: [{name: policy, workers: 3, resources: {gpu: 1}, command: [$RT_WORKER, run]}]
env: {RT_PUBLISH_DELAY_MS: "4000", RT_WAIT_MS: "30000"}
YAML
id=$(submit "$T/a.yaml")
waiting() { cli -o json job "$id" | jq -e '.rendezvous[]? | select(.what=="ids" and .arrived==2)'; }
wait_for 10 "ranks 1 and 2 waiting for IDs" waiting
restart_head
wait_for 30 "job $id to succeed" is_job_state "$id" SUCCEEDED
[ "$(cli logs "$id" | grep "rt: comm policy epoch 0" | sed 's/.* id //' | sort -u | wc -l)" = 1 ] \
    || fail "IDs differ: $(cli logs "$id" | grep 'rt: comm')"
pass "waiting ranks carried on across a head restart: $(cli logs "$id" | grep -c 'rt: comm policy epoch 0') ranks, one ID"
# 2. Rank 0 publishes, the head restarts, then rank 2 asks: it gets the same ID.
cat >"$T/b.yaml" <<YAML
name: late
cluster: {nodes: [4]}
groups: [{name: policy, workers: 3, resources: {gpu: 1}, command: [$RT_WORKER, run]}]
env: {RT_LATE: job2-policy-2, RT_LATE_MS: "5000", RT_WAIT_MS: "30000"}
YAML
id=$(submit "$T/b.yaml")
[ "$id" = 2 ] || fail "expected job 2"
published() { logs_grep "$id" "policy-0\] rt: comm policy epoch 0 rank 0/3"; }
wait_for 10 "rank 0 to publish" published
restart_head
wait_for 30 "job $id to succeed" is_job_state "$id" SUCCEEDED
cli logs "$id" >"$T/logs"
[ "$(grep "rt: comm policy epoch 0" "$T/logs" | sed 's/.* id //' | sort -u | wc -l)" = 1 ] && \
    grep -q "policy-2\] rt: comm policy epoch 0 rank 2/3" "$T/logs" || fail "late rank: $(grep 'rt:' "$T/logs")"
pass "a rank asking after the restart got the ID published before it (from the job record)"
