#!/usr/bin/env bash
# A rank that leaves early: rank 2 opens the collective and exits at once,
# without closing it. The other three fail UNAVAILABLE naming rank 2 (worker
# and node), within the operation's deadline (20 s) — in practice at once.
source "$(dirname "$0")/../lib.sh"
: "${COLL_WORKER:?}"
start_cluster
cat >"$T/job.yaml" <<YAML
name: early
cluster: {nodes: [4]}
groups:
  - {name: dp, workers: 4, resources: {gpu: 1}, command: [$COLL_WORKER]}
env: {CW_EXIT: job1-dp-2, CW_TIMEOUT_MS: "20000"}
YAML
id=$(submit "$T/job.yaml")
[ "$id" = 1 ] || fail "expected job 1, got $id"
wait_for 60 "job $id to fail" is_job_state "$id" FAILED
cli logs "$id" >"$T/logs"
grep -q "\[job1-dp-2\] cw: job1-dp-2 leaves early" "$T/logs" || fail "rank 2 did not leave: $(cat "$T/logs")"
for r in 0 1 3; do
    line=$(grep "\[job1-dp-$r\] cw: allreduce: " "$T/logs") || fail "rank $r: no failure: $(cat "$T/logs")"
    grep -q "UNAVAILABLE: all-reduce: rank 2 (job1-dp-2 on na) went away" <<<"$line" || fail "rank $r: $line"
    ms=$(sed 's/.*(after \([0-9]*\) ms)$/\1/' <<<"$line")
    [ "$ms" -lt 20000 ] || fail "rank $r failed after $ms ms, past the deadline"
    pass "rank $r: $(sed 's/.*cw: //' <<<"$line")"
done
# The collective reported the failure to the head itself (troupe_worker_fail):
# the job's reason names the first reporting rank and the peer that left.
cli -o json job "$id" >"$T/job.json"
reason=$(jq -r .reason "$T/job.json")
[[ "$reason" =~ ^rank\ [013]\ of\ group\ dp\ \(job1-dp-[013]\ on\ na,\ attempt\ 0\)\ failed\ first:\ UNAVAILABLE:\ CPU\ collective:\ all-reduce:\ rank\ 2\ \(job1-dp-2\ on\ na\)\ went\ away ]] ||
    fail "job reason does not name the first failure: $reason"
pass "job reason: $reason"
jq -e '.failures | length >= 1 and all(.[]; .code == "UNAVAILABLE" and (.reason | contains("rank 2 (job1-dp-2 on na) went away")) and .worker != "job1-dp-2")' \
    "$T/job.json" >/dev/null || fail "failures: $(jq -c .failures "$T/job.json")"
pass "$(jq '.failures | length' "$T/job.json") rank(s) reported, all naming rank 2"
