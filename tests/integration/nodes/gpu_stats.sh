#!/usr/bin/env bash
# Node and GPU figures ride on the agents' heartbeats (simulated here:
# --fake-gpus): `troupe nodes` shows UTIL, GPU MEM and LOAD, -o json per GPU
# memory used, utilisation, temperature and power, and per node the source,
# load and memory. The simulated GPUs follow their workers: the two a job
# holds run busy, the others idle, and they go idle again when it ends.
source "$(dirname "$0")/../lib.sh"
start_cluster
na() { cli -o json nodes | jq -c '.nodes[] | select(.name == "na")'; }
has_stats() { na | jq -e '.stats != null and ([.gpus[].stats] | all(. != null))' >/dev/null; }
wait_for 10 "na's first heartbeat figures" has_stats
na | jq -e '.stats.gpu_source == "simulated" and .stats.load1 >= 0 and .stats.mem_total_bytes > 0
            and .stats.mem_available_bytes > 0 and .stats.mem_available_bytes <= .stats.mem_total_bytes
            and ([.gpus[].stats.utilization_pct] | all(. == 0))' >/dev/null || fail "idle figures: $(na)"
cli nodes | grep_all -E "^ *[0-9]+ +na +ALIVE +4 +4 +[0-9.]+/[0-9]+ +NVIDIA H100 80GB \(sim\) +0% +0/320G +[0-9.]+ " \
    || fail "troupe nodes, idle: $(cli nodes)"
pass "idle: each GPU at 0 %, 0 of 320 GB in use on na; load and memory of the node; source simulated"

cat >"$T/a.yaml" <<YAML
name: busy
cluster: {nodes: [4]}
groups: [{name: g, workers: 1, resources: {gpu: 2}, command: [sleep, "30"]}]
YAML
id=$(submit "$T/a.yaml")
wait_for 30 "job $id RUNNING" is_job_state "$id" RUNNING
gpus=$(cli -o json job "$id" | jq -c '.workers[0].gpus')
busy() { na | jq -e --argjson b "$gpus" '[.gpus[] | select(.index as $i | $b | index($i))] | length == 2
    and all(.stats.utilization_pct >= 70 and .stats.utilization_pct <= 94
            and .stats.memory_used_bytes == 36000000000 and .stats.temperature_c > 50 and .stats.power_mw > 400000)' >/dev/null; }
wait_for 10 "GPUs $gpus of na busy in the heartbeat figures" busy
na | jq -e --argjson b "$gpus" '[.gpus[] | select((.index as $i | $b | index($i)) | not) | .stats.utilization_pct] == [0, 0]' \
    >/dev/null || fail "the other two: $(na)"
cli nodes | grep_all -E "^ *[0-9]+ +na +ALIVE +4 +0 +[0-9.]+/[0-9]+ +NVIDIA H100 80GB \(sim\) +[0-9]+% +72/320G " || fail "troupe nodes, busy: $(cli nodes)"
cli stop "$id" >/dev/null
idle() { na | jq -e '[.gpus[].stats.utilization_pct] | all(. == 0)' >/dev/null; }
wait_for 20 "na's GPUs idle again after the job" idle
pass "a job on GPUs $gpus: they show busy (70-94 %, 36 GB of 80), the other two idle, all idle after it ends"
