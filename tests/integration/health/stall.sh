#!/usr/bin/env bash
# A worker that stops stepping (SIGSTOP) makes its job STALLED within the
# configured time (health: {stall_after: 2s}), naming its rank, its last step
# and since when, in `troupe job`, `troupe jobs` and both -o json; a STALLED
# event is in the history; the other rank is not named. SIGCONT: it steps
# again, the job is back to OK with a PROGRESS event. Then both stop: both
# are named. A job that reports no steps is never judged (health NONE).
source "$(dirname "$0")/../lib.sh"
: "${HL_WORKER:?}"
start_cluster
cat >"$T/a.yaml" <<YAML
name: stall
cluster: {nodes: [4]}
groups: [{name: policy, workers: 2, resources: {gpu: 1}, command: [$HL_WORKER]}]
env: {HL_STEP_MS: "50"}
health: {stall_after: 2s}
YAML
id=$(submit "$T/a.yaml")
health() { cli -o json job "$id" | jq -c .health; }
# rank_proc R: the process of rank R (WorkerInfo.pid is its supervisor's).
rank_proc() {
    local sup
    sup=$(cli -o json job "$id" | jqr --argjson r "$1" '.workers[] | select(.rank==$r) | .pid')
    [ -n "$sup" ] && [ "$sup" != 0 ] && pgrep -P "$sup"
}
is_health() { [ "$(cli -o json job "$id" | jqr .health.state)" = "$1" ]; }
wait_for 60 "job $id to be judged OK" is_health OK
[ "$(cli -o json job "$id" | jqr .health.stall_after_ms)" = 2000 ] || fail "stall_after: $(health)"
pid=$(rank_proc 1) || fail "no process for rank 1: $(cli -o json job "$id")"
kill -STOP "$pid"
stopped=$(date +%s%N)
wait_for 15 "job $id STALLED after rank 1 was stopped" is_health STALLED
took=$(( ($(date +%s%N) - stopped) / 1000000 ))
[ "$took" -ge 1500 ] || fail "STALLED after only $took ms (stall_after 2 s)"
[ "$took" -le 6000 ] || fail "STALLED only after $took ms (stall_after 2 s, judged every 500 ms)"
cli -o json job "$id" >"$T/j.json"
jq -e '.health.stalled | length == 1 and .[0].rank == 1 and .[0].worker == "job'"$id"'-policy-1"
       and .[0].node == "na" and .[0].last_step > 0 and .[0].since_ms > 0' "$T/j.json" >/dev/null \
    || fail "stalled ranks: $(jq -c .health "$T/j.json")"
since=$(jqr '.health.stalled[0].since_ms' "$T/j.json")
now_ms=$(( $(date +%s%N) / 1000000 ))
[ $(( now_ms - since )) -ge 2000 ] && [ $(( now_ms - since )) -le 9000 ] \
    || fail "since_ms $since is $(( now_ms - since )) ms ago"
last=$(jqr '.health.stalled[0].last_step' "$T/j.json")
jq -e '.state == "RUNNING" and ([.events[] | select(.kind == "STALLED")] | length == 1)' "$T/j.json" >/dev/null \
    || fail "state/events: $(jq -c '[.state, .events]' "$T/j.json")"
msg=$(jqr '.events[] | select(.kind == "STALLED") | .message' "$T/j.json")
[[ "$msg" == "rank 1 (job$id-policy-1 on na, GPU "*") made no step for "*" s (last step $last) (stall_after 2.0 s)" ]] \
    || fail "event: $msg"
cli job "$id" >"$T/j.txt"
grep -q "^health    STALLED (stall_after 2.0 s)" "$T/j.txt" || fail "troupe job: $(cat "$T/j.txt")"
grep -qE "^stalled   rank 1 job$id-policy-1 on na GPU [0-9]+: last step $last at [0-9:]+, no step for [0-9.]+ s" \
    "$T/j.txt" || fail "troupe job stalled line: $(cat "$T/j.txt")"
cli jobs >"$T/jobs.txt"
grep -qE "^$id +stall +STALLED .*stalled: rank 1 \(job$id-policy-1\) no step for [0-9]+ s since step $last" \
    "$T/jobs.txt" || fail "troupe jobs: $(cat "$T/jobs.txt")"
cli -o json jobs | jq -e --argjson id "$id" '.jobs[] | select(.id == $id) | .health.state == "STALLED"
    and (.health.stalled | map(.rank)) == [1]' >/dev/null || fail "jobs -o json: $(cli -o json jobs)"
pass "SIGSTOP rank 1: STALLED after $took ms (stall_after 2 s), rank 1 named with its last step $last and since when"

kill -CONT "$pid"
wait_for 15 "job $id back to OK after SIGCONT" is_health OK
# Rank 1's PROGRESS event, not necessarily the first one: under load rank 0
# can miss stall_after too meanwhile, be judged stalled and step again first.
cli -o json job "$id" | jq -e '[.events[] | select(.kind == "PROGRESS") | .message]
    | any(test("^rank 1 \\(job'"$id"'-policy-1 on na, GPU [0-9]+\\) steps again \\(step [0-9]+\\)$"))' >/dev/null \
    || fail "no PROGRESS event for rank 1: $(cli -o json job "$id" | jq -c .events)"
pass "SIGCONT: the job is OK again, with a PROGRESS event"

pid0=$(rank_proc 0) || fail "no process for rank 0"
kill -STOP "$pid0" "$pid"
wait_for 15 "both ranks stalled" eval '[ "$(cli -o json job "$id" | jq -c "[.health.stalled[].rank]")" = "[0,1]" ]'
# The newest STALLED event (under load, rank 1 resumed after SIGCONT can be
# judged stalled once more before both are stopped: an honest event too).
cli -o json job "$id" | jqr '[.events[] | select(.kind == "STALLED")] | last | .message' | grep_all "^no rank of the group made progress: " \
    || fail "second STALLED event: $(cli -o json job "$id" | jq -c .events)"
kill -CONT "$pid0" "$pid"
cli stop "$id" >/dev/null
pass "both stopped: both named, 'no rank of the group made progress'"

cat >"$T/b.yaml" <<YAML
name: quiet
cluster: {nodes: [4]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sleep, "30"]}]
health: {stall_after: 200ms}
YAML
id=$(submit "$T/b.yaml")
wait_for 30 "job $id RUNNING" is_job_state "$id" RUNNING
# The judge had its chance: it judged another job (one that steps) when
# job $id had been running for 3 stall_after (600 ms).
cat >"$T/w.yaml" <<YAML
name: witness
cluster: {nodes: [4]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [$HL_WORKER]}]
YAML
wit=$(submit "$T/w.yaml")
started=$(cli -o json job "$id" | jqr .started_ms)
judged_late() { [ "$(cli -o json job "$wit" | jqr '.health.judged_ms // 0')" -gt $((started + 600)) ]; }
wait_for 30 "a health judgement (of job $wit) 600 ms after job $id started" judged_late
[ "$(cli -o json job "$id" | jqr .health.state)" = NONE ] || fail "a job without steps judged: $(health)"
cli stop "$id" "$wit" >/dev/null
pass "a job whose workers report no steps is not judged (NONE), even with stall_after 200 ms"
