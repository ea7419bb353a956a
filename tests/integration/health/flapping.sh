#!/usr/bin/env bash
# A rank that flaps around the straggler threshold (slow for 24 steps, fast
# for 24, ...; with 12 the fast spell, 12 x 30 ms less the 3-step window,
# was shorter than a `troupe job` poll under load and the test failed now
# and then waiting for "no longer named") is named while it is slow and not while it is fast, but said
# in the history once a minute at most: one STRAGGLER event for several
# flaps, so the job's history and the event table do not fill up.
source "$(dirname "$0")/../lib.sh"
: "${HL_WORKER:?}"
start_cluster
cat >"$T/a.yaml" <<YAML
name: flap
cluster: {nodes: [4]}
groups: [{name: policy, workers: 3, resources: {gpu: 1}, command: [$HL_WORKER]}]
env: {HL_STEP_MS: "30", HL_SLOW_RANK: "2", HL_SLOW_MS: "120", HL_FLAP: "24"}
health: {straggler_window: 3}
YAML
id=$(submit "$T/a.yaml")
named() { [ "$(cli -o json job "$id" | jq -c '[.health.stragglers[].rank]')" = "[2]" ]; }
clear() { [ "$(cli -o json job "$id" | jq -c '[.health.stragglers[].rank]')" = "[]" ]; }
wait_for 60 "rank 2 named a straggler (slow half)" named
wait_for 30 "rank 2 no longer named (fast half)" clear
wait_for 30 "rank 2 named again (slow half)" named
wait_for 30 "rank 2 no longer named again" clear
wait_for 30 "rank 2 named a third time" named
# Rank 2's events only: under load another rank may be slow for a moment
# too (rank 0 at 1.41x once), and that is an event of its own.
n=$(cli -o json job "$id" | jq '[.events[] | select(.kind == "STRAGGLER" and (.message | startswith("rank 2 ")))] | length')
[ "$n" = 1 ] || fail "$n STRAGGLER events of rank 2 for three slow spells within a minute: $(cli -o json job "$id" | jq -c .events)"
cli stop "$id" >/dev/null
pass "a flapping straggler: named and cleared three times, one STRAGGLER event"
