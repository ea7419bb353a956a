#!/usr/bin/env bash
# An artificially slowed rank (rank 2 of 3 takes 150 ms per step, the others
# 40 ms) is named a straggler: rank, worker, node, GPU and by how much, in
# `troupe job` (line and -o json) and `troupe jobs`, with a STRAGGLER event;
# the two others are not named, and nothing is STALLED. health:
# {straggler_window: 5} makes it quick.
source "$(dirname "$0")/../lib.sh"
: "${HL_WORKER:?}"
start_cluster
cat >"$T/a.yaml" <<YAML
name: slow
cluster: {nodes: [4]}
groups: [{name: policy, workers: 3, resources: {gpu: 1}, command: [$HL_WORKER]}]
env: {HL_STEP_MS: "40", HL_SLOW_RANK: "2", HL_SLOW_MS: "150"}
health: {straggler_window: 5}
YAML
id=$(submit "$T/a.yaml")
stragglers() { cli -o json job "$id" | jq -c '[.health.stragglers[].rank]'; }
has_straggler() { [ "$(stragglers)" = "[2]" ]; }
wait_for 60 "rank 2 of job $id named a straggler" has_straggler
cli -o json job "$id" >"$T/j.json"
jq -e '.health.state == "OK" and (.health.stalled | length) == 0' "$T/j.json" >/dev/null \
    || fail "state: $(jq -c .health "$T/j.json")"
jq -e '.health.stragglers[0] | .worker == "job'"$id"'-policy-2" and .node == "na" and (.gpus | length) == 1
       and .ratio > 2.5 and .ratio < 5 and .step_ms > 140 and .group_step_ms >= 40 and .group_step_ms < 60' \
    "$T/j.json" >/dev/null || fail "straggler: $(jq -c .health.stragglers "$T/j.json")"
gpu=$(jqr '.health.stragglers[0].gpus[0]' "$T/j.json")
ratio=$(jqr '.health.stragglers[0].ratio' "$T/j.json")
# Rank 2's event: under load another rank, starved for a moment, can be
# named first (an honest event; the state above names rank 2 only).
msg=$(jqr '[.events[] | select(.kind == "STRAGGLER") | .message | select(startswith("rank 2 "))][0]' "$T/j.json")
[[ "$msg" =~ ^rank\ 2\ \(job$id-policy-2\ on\ na,\ GPU\ $gpu\):\ median\ step\ 1[0-9][0-9]\ ms\ over\ the\ last\ 5\ steps,\ [0-9.]+x\ the\ group\'s\ [0-9]+\ ms$ ]] \
    || fail "event: $msg"
cli job "$id" | grep_all -E "^straggler rank 2 job$id-policy-2 on na GPU $gpu: 1[0-9][0-9] ms per step, [0-9.]+x the group's [0-9]+ ms" \
    || fail "troupe job: $(cli job "$id")"
cli jobs | grep_all -E "^$id +slow +RUNNING .*straggler rank 2 [0-9.]+x" || fail "troupe jobs: $(cli jobs)"
cli stop "$id" >/dev/null
pass "rank 2 at 150 ms/step among 40 ms ranks: named a straggler (${ratio}x, GPU $gpu on na), the others not"
