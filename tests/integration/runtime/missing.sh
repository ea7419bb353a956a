#!/usr/bin/env bash
# A rank that never arrives: the others fail within their deadline with that
# rank named (worker and node), and `troupe job` shows who is missing while
# they wait. A group restart meets in a new epoch with a new ID.
source "$(dirname "$0")/../lib.sh"
: "${RT_WORKER:?}"
start_cluster
cat >"$T/hang.yaml" <<YAML
name: hang
cluster: {nodes: [4]}
groups:
  - {name: policy, workers: 4, resources: {gpu: 1}, command: [$RT_WORKER, run]}
env: {RT_WAIT_MS: "3000"}
YAML
# Worker names are job<ID>-policy-<rank>; the next job id is 1.
sed -i "s/^env: {/env: {RT_HANG: job1-policy-2, /" "$T/hang.yaml"
id=$(submit "$T/hang.yaml")
[ "$id" = 1 ] || fail "expected job 1, got $id"
# Rank 0 publishes the IDs, so the ranks meet the missing one at the barrier.
waiting() { cli -o json job "$id" | jq -e '.rendezvous[]? | select(.what=="barrier:ready" and .arrived==3)' ; }
wait_for 10 "troupe job to show the ranks waiting at the barrier" waiting
j=$(cli -o json job "$id")
jq -e '.rendezvous[0].missing | any(test("job1-policy-2 on na"))' <<<"$j" >/dev/null || fail "troupe job: $(jq -c .rendezvous <<<"$j")"
cli job "$id" | grep_all "waiting   policy epoch 0 barrier:ready: 3/4 ranks arrived; missing: 2 job1-policy-2 on na" || fail "troupe job text: $(cli job "$id")"
pass "troupe job shows the wait: $(jq -c '.rendezvous[0]' <<<"$j")"
wait_for 15 "the job to fail" is_job_state "$id" FAILED
cli logs "$id" >"$T/logs"
grep -q "rt: barrier: DEADLINE_EXCEEDED: barrier:ready number 1 of communicator policy epoch 0: 1 of 4 ranks never arrived: 2 job1-policy-2 on na" "$T/logs" || fail "no deadline naming rank 2: $(cat "$T/logs")"
pass "waiting ranks failed naming the missing one: $(grep -m1 DEADLINE "$T/logs")"
# Rank 0 never arrives either when it hangs: the waiters say it never published.
# Job 1's workers may still hold na while it winds down, so any node may host it.
t0=$(date +%s%N)
sed -e "s/job1-policy-2/job2-policy-0/" -e "s/name: hang/name: hang0/" "$T/hang.yaml" >"$T/hang0.yaml"
id=$(submit "$T/hang0.yaml")
wait_for 15 "job $id to fail" is_job_state "$id" FAILED
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
logs_grep "$id" "rank 0 never published.*0 job2-policy-0 on n[abc]" || fail "rank 0 not named: $(cli logs "$id")"
pass "rank 0 that never publishes is named; the job failed ${ms} ms after submit (deadline 3000 ms)"

# A group restart: attempt 0's rank 1 fails after its IDs; attempt 1 meets in
# epoch 1 with a new ID.
cat >"$T/restart.yaml" <<YAML
name: restart
cluster: {nodes: [4]}
groups:
  - {name: policy, workers: 2, resources: {gpu: 1}, command: [$RT_WORKER, run]}
restart: {max_restarts: 1}
env: {RT_FAIL_ATTEMPT0: job3-policy-1}
YAML
timeout 60 "$CLI_BIN" submit "$T/restart.yaml" >"$T/out" 2>"$T/err" || fail "restart job: $(cat "$T/err")"
id=$(head -1 "$T/out")
[ "$id" = 3 ] || fail "expected job 3"
cli logs "$id" >"$T/logs3"
e0=$(grep "policy-0\] rt: comm policy epoch 0" "$T/logs3" | sed 's/.* id //')
e1=$(grep "policy-0\] rt: comm policy epoch 1" "$T/logs3" | sed 's/.* id //')
e1b=$(grep "policy-1\] rt: comm policy epoch 1" "$T/logs3" | sed 's/.* id //')
[ -n "$e0" ] && [ -n "$e1" ] && [ "$e1" = "$e1b" ] && [ "$e0" != "$e1" ] || fail "epochs: $(grep 'rt:' "$T/logs3")"
pass "group restart: epoch 0 id $e0, epoch 1 id $e1 shared by both ranks"
