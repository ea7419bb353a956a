#!/usr/bin/env bash
# health: {on_stall: fail}: a stall fails the stalled group and the restart
# rules apply. With max_restarts 1, the first stall (rank 1 SIGSTOPped)
# restarts the group after the crash-loop back-off (BACKOFF naming the rank
# and the health rule, then RESTARTING), the new attempt steps again; the second stall fails the job with
# that reason. The stopped processes do not outlive their attempt.
source "$(dirname "$0")/../lib.sh"
: "${HL_WORKER:?}"
start_cluster
cat >"$T/a.yaml" <<YAML
name: failstall
cluster: {nodes: [4]}
groups: [{name: policy, workers: 2, resources: {gpu: 1}, command: [$HL_WORKER]}]
env: {HL_STEP_MS: "50"}
restart: {max_restarts: 1}
health: {stall_after: 2s, on_stall: fail}
YAML
id=$(submit "$T/a.yaml")
rank_proc() {
    local sup
    sup=$(cli -o json job "$id" | jqr --argjson r "$1" '.workers[] | select(.rank==$r and .state=="RUNNING") | .pid')
    [ -n "$sup" ] && [ "$sup" != 0 ] && pgrep -P "$sup"
}
judged_ok_at() { cli -o json job "$id" | jq -e --argjson a "$1" '.health.state == "OK" and .health.on_stall == "fail"
    and ([.workers[].attempt] | all(. == $a))' >/dev/null; }
wait_for 60 "job $id judged OK at attempt 0" judged_ok_at 0
p1=$(rank_proc 1) || fail "no process for rank 1"
kill -STOP "$p1"
restarted() { [ "$(cli -o json job "$id" | jqr .restarts)" = 1 ]; }
wait_for 20 "job $id to restart its group after the stall" restarted
cli -o json job "$id" >"$T/j.json"
# the restart rules apply: the crash-loop back-off first (1 s by default), then the restart
jq -e '([.events[] | select(.kind == "BACKOFF") | .message][0]
        | test("^health: rank 1 \\(job'"$id"'-policy-1 on na, GPU [0-9]+\\) made no step for [0-9.]+ s \\(stall_after 2.0 s, health.on_stall: fail\\); restarting group policy at .*restart 1 of 1\\)$"))
       and ([.events[] | select(.kind == "RESTARTING")] | length == 1)
       and ([.events[] | .kind] | index("STALLED") < index("BACKOFF"))' \
    "$T/j.json" >/dev/null || fail "restart: $(jq -c '[.reason, .events]' "$T/j.json")"
gone() { ! alive "$p1"; }
wait_for 20 "the stopped process $p1 of attempt 0 to be gone" gone
pass "first stall: group policy restarted (restart 1 of 1), the reason names rank 1 and the rule; the stopped process is gone"

wait_for 60 "job $id judged OK at attempt 1" judged_ok_at 1
p1=$(rank_proc 1) || fail "no process for rank 1 of attempt 1"
kill -STOP "$p1"
wait_for 20 "job $id FAILED after the second stall" is_job_state "$id" FAILED
reason=$(job_reason "$id")
[[ "$reason" =~ ^health:\ rank\ 1\ \(job$id-policy-1\ on\ na,\ GPU\ [0-9]+\)\ made\ no\ step\ for\ [0-9.]+\ s\ \(stall_after\ 2.0\ s,\ health.on_stall:\ fail\)$ ]] \
    || fail "reason: $reason"
wait_for 20 "the stopped process $p1 of attempt 1 to be gone" gone
# The judgement that failed it stays on the ended job (health.ended: not
# judged again): the stall that failed it is still named.
cli -o json job "$id" | jq -e '.health.state == "STALLED" and .health.ended == true
    and (.health.stalled | length == 1 and .[0].rank == 1)' >/dev/null ||
    fail "the ended job's health: $(cli -o json job "$id" | jq -c .health)"
cli job "$id" | grep_all -E "^health +STALLED \(stall_after 2.0 s, on_stall: fail\), as judged last while the job ran$" &&
    cli job "$id" | grep_all -E "^stalled +rank 1 job$id-policy-1 on na" || fail "troupe job: $(cli job "$id")"
pass "second stall, no restart left: FAILED, '$reason'; its health still names the stall (ended)"
