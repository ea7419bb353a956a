#!/usr/bin/env bash
# metrics_keep bounds a job's points on the head: past it the oldest go, the
# newest stay in order, and `troupe metrics` says how many were trimmed
# (which is not counted as dropped: the worker lost nothing).
source "$(dirname "$0")/../lib.sh"
: "${MX_WORKER:?}"
start_cluster --metrics-keep 500
cat >"$T/a.yaml" <<YAML
name: keep
cluster: {nodes: [4]}
groups: [{name: policy, workers: 1, resources: {gpu: 1}, command: [$MX_WORKER]}]
env: {MX_POINTS: "2000", MX_NAMES: "loss"}
YAML
id=$(submit "$T/a.yaml")
wait_for 60 "job $id to succeed" is_job_state "$id" SUCCEEDED
cli -o json metrics "$id" >"$T/all.json"
jq -e '.kept == 500 and .trimmed == 1500 and .streams[0].stored == 2000 and .streams[0].dropped == 0
    and [.points[].seq] == [range(1501; 2001)]' "$T/all.json" >/dev/null \
    || fail "retention: kept $(jq .kept "$T/all.json") trimmed $(jq .trimmed "$T/all.json") first seq $(jq '.points[0].seq' "$T/all.json")"
cli metrics "$id" 2>&1 >/dev/null | grep_all "1500 older points removed by the head's retention" || fail "table: $(cli metrics "$id" 2>&1 >/dev/null)"
pass "metrics_keep 500: the newest 500 of 2000 kept in order, 1500 trimmed and said so, 0 dropped"
