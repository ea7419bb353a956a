#!/usr/bin/env bash
# A job past timeout_s is stopped and FAILED with the reason.
source "$(dirname "$0")/../lib.sh"
start_cluster
cat >"$T/t.yaml" <<YAML
name: slow
cluster: {nodes: [4]}
timeout_s: 1
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sleep, "60"]}]
YAML
set +e; timeout 30 "$CLI_BIN" submit "$T/t.yaml" >"$T/out" 2>&1; rc=$?; set -e
id=$(head -1 "$T/out")
[ $rc = 1 ] && [ "$(job_state "$id")" = FAILED ] || fail "rc=$rc state=$(job_state "$id")"
cli -o json job "$id" | jqr .reason | grep_all "timed out after 1 s" || fail "reason"
wait_for 10 "worker gone" bash -c "'$CLI_BIN' -o json job $id | jq -e '.workers[0].state != \"RUNNING\"'"
pass "timeout_s 1: FAILED 'timed out after 1 s', worker stopped"
