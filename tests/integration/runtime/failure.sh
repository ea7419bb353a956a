#!/usr/bin/env bash
# Failure reports (troupe_worker_fail): a worker tells the head why it fails;
# the head keeps one report per worker attempt with rank, group, node and
# attempt, shows them in `troupe job` (table, -o json "failures", a
# WORKER_FAILED event), and the job that then fails names the FIRST reporting
# rank and its reason before the exit that ended it. Bad reports are refused
# with a code and a reason, with no effect.
source "$(dirname "$0")/../lib.sh"
: "${RT_WORKER:?}"
start_cluster
# The workers wait for $T/go, then exit 1: the reports come first.
cat >"$T/a.yaml" <<YAML
name: a
cluster: {nodes: [4]}
groups:
  - {name: policy, workers: 2, resources: {gpu: 1}, command: [bash, -c, "while [ ! -e $T/go ]; do sleep 0.05; done; exit 1"]}
YAML
sed -e 's/name: a$/name: b/' "$T/a.yaml" >"$T/b.yaml"
a=$(submit "$T/a.yaml"); b=$(submit "$T/b.yaml")
wait_for 10 "jobs running" bash -c "'$CLI_BIN' -o json job $a | jq -e '.state==\"RUNNING\"' && '$CLI_BIN' -o json job $b | jq -e '.state==\"RUNNING\"'"

# as JOB GROUP RANK ATTEMPT -- rt_worker call ... (the environment troupe-node sets)
as() {
    local job=$1 group=$2 rank=$3 attempt=$4; shift 4
    env TROUPE_JOB="$job" TROUPE_GROUP="$group" TROUPE_WORKER="job$job-$group-$rank" TROUPE_ATTEMPT="$attempt" \
        RANK="$rank" WORLD_SIZE=2 "$RT_WORKER" call "$@" || true
}
expect() { # expect OUTPUT CODE TEXT
    grep -q "^ERR $2 .*$3" <<<"$1" || fail "expected $2 '$3', got: $1"
    pass "$2: ${1#ERR $2 }"
}

# Refused, no effect (14 = UNAVAILABLE, 4 = DEADLINE_EXCEEDED, 13 = INTERNAL).
expect "$(as "$a" policy 1 0 fail 0 'nothing wrong')" INVALID_ARGUMENT "code 0 is not a failure status"
expect "$(as "$a" policy 1 0 fail 14 '')" INVALID_ARGUMENT "give a reason"
out=$(env TROUPE_JOB="$b" TROUPE_GROUP=policy TROUPE_WORKER="job$a-policy-1" TROUPE_ATTEMPT=0 RANK=1 WORLD_SIZE=2 \
      "$RT_WORKER" call fail 14 "not mine" || true)
expect "$out" PERMISSION_DENIED "worker job$a-policy-1 is not part of job $b: a worker reports failures for itself only"
expect "$(as "$a" policy 1 3 fail 14 'stale')" FAILED_PRECONDITION "worker job$a-policy-1 attempt 3 is not current (the head has attempt 0"
expect "$(as 999 policy 1 0 fail 14 'no such job')" NOT_FOUND "no job 999"
n=$(cli -o json job "$a" | jq '.failures | length')
[ "$n" = 0 ] || fail "refused reports left $n failures"
pass "refused reports recorded nothing"

# Rank 1 reports first, rank 0 second; rank 1 again (a new process, so a new
# handle): the head keeps its first reason.
out=$(as "$a" policy 1 0 fail 14 'all-reduce: rank 0 went away'); [ "$out" = "OK reported" ] || fail "rank 1: $out"
out=$(as "$a" policy 0 0 fail 4 'barrier: deadline'); [ "$out" = "OK reported" ] || fail "rank 0: $out"
out=$(as "$a" policy 1 0 fail 13 'a second reason'); [ "$out" = "OK reported" ] || fail "rank 1 again: $out"
cli -o json job "$a" >"$T/a.json"
jq -e '.failures | length == 2' "$T/a.json" >/dev/null || fail "expected 2 failures: $(jq -c .failures "$T/a.json")"
jq -e --arg w "job$a-policy-1" '.failures[0] | .worker == $w and .group == "policy" and .rank == 1 and .node == "na"
    and .attempt == 0 and .code == "UNAVAILABLE" and .reason == "all-reduce: rank 0 went away" and .ts_ms > 0' \
    "$T/a.json" >/dev/null || fail "first failure: $(jq -c '.failures[0]' "$T/a.json")"
jq -e --arg w "job$a-policy-0" '.failures[1] | .worker == $w and .code == "DEADLINE_EXCEEDED" and .reason == "barrier: deadline"' \
    "$T/a.json" >/dev/null || fail "second failure: $(jq -c '.failures[1]' "$T/a.json")"
pass "-o json failures: $(jq -c '[.failures[] | [.worker, .code, .reason]]' "$T/a.json")"
jq -e --arg w "job$a-policy-1" '[.events[] | select(.kind == "WORKER_FAILED")] | length == 2 and
    (.[0].message == "rank 1 of group policy (\($w) on na, attempt 0) failed first: UNAVAILABLE: all-reduce: rank 0 went away")' \
    "$T/a.json" >/dev/null || fail "events: $(jq -c '.events' "$T/a.json")"
pass "WORKER_FAILED events, the first marked 'failed first'"
cli job "$a" >"$T/a.txt"
grep -q "^failure   rank 1 of policy (job$a-policy-1 on na, attempt 0): UNAVAILABLE: all-reduce: rank 0 went away$" "$T/a.txt" ||
    fail "troupe job: $(cat "$T/a.txt")"
pass "troupe job lists the failures"

# The workers exit 1 now: the job's reason names rank 1's report first.
touch "$T/go"
wait_for 20 "job $a to fail" is_job_state "$a" FAILED
reason=$(cli -o json job "$a" | jq -r .reason)
want="rank 1 of group policy (job$a-policy-1 on na, attempt 0) failed first: UNAVAILABLE: all-reduce: rank 0 went away; then worker job$a-policy-"
[[ "$reason" == "$want"[01]" on node na exited with code 1" ]] || fail "reason: $reason"
pass "job reason: $reason"
# Job b's workers exited 1 without reports: its reason is the exit alone.
wait_for 20 "job $b to fail" is_job_state "$b" FAILED
reason=$(cli -o json job "$b" | jq -r .reason)
[[ "$reason" == "worker job$b-policy-"[01]" on node n"[abc]" exited with code 1" ]] || fail "job b reason: $reason"
pass "without reports the reason is the exit: $reason"
expect "$(as "$a" policy 0 0 fail 14 'too late')" FAILED_PRECONDITION "job $a already ended"
