#!/usr/bin/env bash
# Synchronous data parallelism: every rank's step lasts as long as the slow
# one's (150 ms; the others wait, as in an all-reduce), so whole steps name
# nobody; the ranks report their phase times (compute 40 ms, rank 1 150 ms),
# and the head names rank 1 a straggler by its compute, saying so.
source "$(dirname "$0")/../lib.sh"
: "${HL_WORKER:?}"
start_cluster
cat >"$T/a.yaml" <<YAML
name: dp
cluster: {nodes: [4]}
groups: [{name: dp, workers: 4, resources: {gpu: 1}, command: [$HL_WORKER]}]
env: {HL_SYNC: "1", HL_STEP_MS: "40", HL_SLOW_RANK: "1", HL_SLOW_MS: "150"}
health: {straggler_window: 5}
YAML
id=$(submit "$T/a.yaml")
named() { [ "$(cli -o json job "$id" | jq -c '[.health.stragglers[].rank]')" = "[1]" ]; }
wait_for 60 "rank 1 named a straggler by its compute" named
cli -o json job "$id" >"$T/j.json"
jq -e '.health.stragglers[0] | .by_compute and .ratio > 3 and .ratio < 4.5 and .step_ms > 140 and .step_ms < 160
       and .group_step_ms > 35 and .group_step_ms < 45' "$T/j.json" >/dev/null \
    || fail "straggler: $(jq -c .health.stragglers "$T/j.json")"
# Rank 1's event, among any others: under load another rank, starved for a
# moment, can be named first (health.straggler saw it happen).
jq -e '[.events[] | select(.kind == "STRAGGLER") | .message]
       | any(test("^rank 1 \\(job'"$id"'-dp-1 on na, GPU [0-9]+\\): median compute \\(forward\\+backward\\+optimizer\\) 150 ms over the last 5 steps, [0-9.]+x the group.s 40 ms$"))' \
    "$T/j.json" >/dev/null || fail "event: $(jq -c '[.events[] | select(.kind == "STRAGGLER")]' "$T/j.json")"
cli job "$id" | grep_all -E "^straggler rank 1 job$id-dp-1 on na GPU [0-9]+: 150 ms of compute per step, [0-9.]+x the group's 40 ms" \
    || fail "troupe job: $(cli job "$id")"
# Whole steps are equal: at least 6 of the last 8 lie within 60 ms of their
# median (a loaded machine may stretch one or two steps of every rank alike;
# an unsynchronised group would spread its steps between 40 and 150 ms).
cli -o json metrics "$id" --name step_ms --last 8 >"$T/steps.json"
jq -e --argjson tol "$(scaled 60)" '[.points[].value] as $v | ($v | sort | .[length / 2 | floor]) as $m
       | ($v | length) == 8 and ([$v[] | select(. - $m | fabs < $tol)] | length) >= 6' "$T/steps.json" >/dev/null ||
    fail "whole steps differ more than expected: $(jq -c '[.points[].value]' "$T/steps.json")"
cli stop "$id" >/dev/null
pass "synchronous DP: equal whole steps, rank 1 named a straggler by its compute (150 ms vs the group's 40 ms)"
