#!/usr/bin/env bash
# A job waits PENDING (with its reason) while GPUs are busy and starts when they free.
source "$(dirname "$0")/../lib.sh"
start_cluster
cat >"$T/hog.yaml" <<YAML
name: hog
cluster: {nodes: [16]}
groups: [{name: g, workers: 1, resources: {gpu: 16}, command: [sleep, "60"]}]
YAML
cat >"$T/next.yaml" <<YAML
name: next
cluster: {nodes: [16]}
groups: [{name: g, workers: 2, resources: {gpu: 8}, strategy: STRICT_PACK, command: [sh, -c, "echo got \$CUDA_VISIBLE_DEVICES"]}]
YAML
hog=$(submit "$T/hog.yaml")
wait_for 10 "hog RUNNING" is_job_state "$hog" RUNNING
nxt=$(submit "$T/next.yaml")
# The hog holds the 16-GPU node; of the others (4 and 8) the most free is 8.
reason="waiting for 16 free GPUs on one node (virtual node 0); most free on a node is 8"
wait_for 10 "next PENDING with reason '$reason'" has_reason "$nxt" "$reason"
[ "$(job_state "$nxt")" = PENDING ] || fail "next should wait, is $(job_state "$nxt")"
pass "second job PENDING: $reason"
cli stop "$hog" 2>/dev/null
wait_for 15 "next SUCCEEDED" is_job_state "$nxt" SUCCEEDED
[ "$(job_state "$hog")" = STOPPED ] || fail "hog should be STOPPED"
pass "after stopping the first job the second ran to SUCCEEDED"
