#!/usr/bin/env bash
# GPU-memory trend: rank 1's reported allocated memory grows 4 MiB per step
# (health: {memory_window: 10}): a warning names job-grow-1 (rank 1 of group grow) and the growth
# per step (the fit gives 4.00 MiB); rank 0 holds 78 of its 80 GiB flat: a
# near-capacity warning names it (98 %), not a growth one; the flat rank of
# the growing group is not named. MEMORY events.
source "$(dirname "$0")/../lib.sh"
: "${HL_WORKER:?}"
start_cluster
cat >"$T/a.yaml" <<YAML
name: leak
cluster: {nodes: [4]}
env: {HL_STEP_MS: "30", HL_MEM_RANK: "1", HL_MEM_GROW: "4194304", HL_MEM_TOTAL: "85899345920"}
groups:
  - {name: policy, workers: 1, resources: {gpu: 1}, command: [$HL_WORKER], env: {HL_MEM_BASE: "83751862272"}}
  - {name: grow, workers: 2, resources: {gpu: 1}, command: [$HL_WORKER]}
health: {memory_window: 10}
YAML
id=$(submit "$T/a.yaml")
memory() { cli -o json job "$id" | jq -c '[.health.memory[] | [.worker, .memory_growing, .memory_near]]'; }
want='[["job'"$id"'-policy-0",false,true],["job'"$id"'-grow-1",true,false]]'
has_both() { [ "$(memory)" = "$want" ]; }
wait_for 60 "memory warnings for job$id-policy-0 (near) and job$id-grow-1 (growing)" has_both
cli -o json job "$id" >"$T/j.json"
jq -e '.health.memory[1] | (.memory_slope / 1048576 * 100 | round) == 400 and .memory_total == 85899345920' \
    "$T/j.json" >/dev/null || fail "slope: $(jq -c .health.memory "$T/j.json")"
jq -e '[.events[] | select(.kind == "MEMORY") | .message] | length == 2
       and any(test("^rank 1 \\(job'"$id"'-grow-1 on na, GPU [0-9]+\\): allocated GPU memory grows 4.00 MiB per step over the last 10 steps \\([0-9.]+ GiB now\\)$"))
       and any(test("^rank 0 \\(job'"$id"'-policy-0 on na, GPU [0-9]+\\): allocated GPU memory at 98% of the GPU.s 80.00 GiB$"))' \
    "$T/j.json" >/dev/null || fail "events: $(jq -c '[.events[] | select(.kind == "MEMORY")]' "$T/j.json")"
cli job "$id" | grep_all -E "^memory    rank 1 job$id-grow-1 on na GPU [0-9]+: allocated GPU memory grows 4.00 MiB per step" \
    || fail "troupe job: $(cli job "$id")"
cli job "$id" | grep_all -E "^memory    rank 0 job$id-policy-0 on na GPU [0-9]+: allocated GPU memory at 98% of 80.00 GiB" \
    || fail "troupe job: $(cli job "$id")"
[ "$(cli -o json job "$id" | jq '[.health.memory[].worker] | index("job'"$id"'-grow-0")')" = null ] \
    || fail "grow-0 (flat) named: $(memory)"
cli stop "$id" >/dev/null
pass "growing memory warned (4.00 MiB per step, job$id-grow-1), memory at 98% of capacity warned (job$id-policy-0), a flat rank not"
