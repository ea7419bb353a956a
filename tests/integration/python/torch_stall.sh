#!/usr/bin/env bash
# A PyTorch rank that stops stepping is named by `troupe job`: two ranks step
# under troupe.torch.step (gloo process group through troupe.torch); rank 1
# stops after its step 8 (the worker waits for a file). Within the job's
# stall_after (2 s) the job is STALLED in `troupe job -o json`, naming rank 1
# (its worker, node, last step 8 and since when) and not rank 0, which still
# steps; the text view says the same. Once rank 1 steps again the job is OK
# with a PROGRESS event. Exit 77 (skipped) without torch.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/py_lib.bash"
D=$(cd "$(dirname "$0")" && pwd)
need_torch_gloo
start_cluster
cat >"$T/job.yaml" <<YAML
name: ptstall
cluster: {nodes: [4]}
groups:
  - {name: policy, workers: 2, resources: {gpu: 1}, command: [$PY_CMD, $D/torch_stall_worker.py]}
env: {$PY_JOB_ENV, GLOO_SOCKET_IFNAME: lo, PT_STALL_RANK: "1", PT_STALL_AFTER: "8", PT_RESUME: "$T/resume"}
health: {stall_after: 2s}
YAML
id=$(submit "$T/job.yaml")
is_health() { [ "$(cli -o json job "$id" | jqr .health.state)" = "$1" ]; }
stopped_logged() { cli logs "$id" 2>/dev/null | grep -q "ptstall: rank 1 stops stepping after step 8"; }
wait_for 120 "rank 1 of job $id to stop stepping after step 8" stopped_logged
wait_for 20 "job $id STALLED after rank 1 stopped stepping" is_health STALLED
cli -o json job "$id" >"$T/j.json"
jq -e '.health.stalled | length == 1 and .[0].rank == 1 and .[0].worker == "job'"$id"'-policy-1"
       and .[0].node == "na" and .[0].last_step == 8 and .[0].since_ms > 0' "$T/j.json" >/dev/null \
    || fail "stalled ranks: $(jq -c .health "$T/j.json")"
jq -e '.state == "RUNNING" and ([.events[] | select(.kind == "STALLED")] | length >= 1)' "$T/j.json" >/dev/null \
    || fail "state/events: $(jq -c '[.state, .events]' "$T/j.json")"
msg=$(jqr '[.events[] | select(.kind == "STALLED")] | last | .message' "$T/j.json")
[[ "$msg" == "rank 1 (job$id-policy-1 on na, GPU "*") made no step for "*" s (last step 8) (stall_after 2.0 s)" ]] \
    || fail "STALLED event: $msg"
cli job "$id" >"$T/j.txt"
grep -qE "^stalled   rank 1 job$id-policy-1 on na GPU [0-9]+: last step 8 at [0-9:]+, no step for [0-9.]+ s" \
    "$T/j.txt" || fail "troupe job stalled line: $(cat "$T/j.txt")"
# rank 0 went on stepping meanwhile: the head has steps of it past 8.
m=$(cli -o json metrics "$id" --name step_ms)
jq -e --arg w "job$id-policy-0" '[.points[] | select(.worker == $w) | .step] | max > 8' <<<"$m" >/dev/null \
    || fail "rank 0 did not step on: $(jq -c '[.points[] | [.worker, .step]]' <<<"$m")"
pass "rank 1 of a PyTorch job stopped stepping: STALLED naming rank 1, last step 8; $msg"
touch "$T/resume"
wait_for 20 "job $id back to OK once rank 1 steps again" is_health OK
cli -o json job "$id" | jq -e '[.events[] | select(.kind == "PROGRESS") | .message][0]
    | test("^rank 1 \\(job'"$id"'-policy-1 on na, GPU [0-9]+\\) steps again \\(step [0-9]+\\)$")' >/dev/null \
    || fail "no PROGRESS event: $(cli -o json job "$id" | jq -c .events)"
cli stop "$id" >/dev/null
pass "rank 1 steps again: the job is OK, with a PROGRESS event"
