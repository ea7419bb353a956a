#!/usr/bin/env bash
# A second failure during the change: 3 ranks, min_workers 1; rank 2 and,
# right after it, rank 1 are SIGKILLed, so rank 0 is still rebuilding for the
# first loss when the second comes. The group ends with one rank (two SHRUNK
# changes, 3 -> 2 -> 1), and the job SUCCEEDS with the weights of a
# reference run with nothing killed (same global batch).
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/lib_elastic.bash"
: "${ELASTIC_WORKER:?}"
start_cluster

# 40 x slowdown steps: on a loaded machine a shorter run could end before the kill.
steps=$((40 * TROUPE_TEST_SLOWDOWN))
ref=$(ew_job ref 3 1 1 0 "$steps")
wait_for 60 "reference job $ref to succeed" is_job_state "$ref" SUCCEEDED
id=$(ew_job twice 3 1 1 100 "$steps")
wait_for 60 "rank 2 of job $id at step 15" logs_grep "$id" "^\[job$id-dp-2\] ew: step 15 "
p2=$(ew_pid "$id" 2)
p1=$(ew_pid "$id" 1)
kill -9 "$p2"
sleep 0.05
kill -9 "$p1"
wait_for 60 "job $id to succeed with 1 rank" is_job_state "$id" SUCCEEDED
cli -o json job "$id" >"$T/job.json"
[ "$(jqr '[.membership[] | "\(.kind) \(.from)->\(.to)"] | join(",")' "$T/job.json")" = "SHRUNK 3->2,SHRUNK 2->1" ] ||
    fail "membership: $(jq .membership "$T/job.json")"
[ "$(jqr '.groups[0] | "\(.world_size) \(.elastic.epoch)"' "$T/job.json")" = "1 2" ] || fail "group: $(jq .groups "$T/job.json")"
ew_steps_once "$id" 0 "$steps"
want=$(ew_final "$ref" 0 "$steps")
got=$(ew_final "$id" 0 "$steps")
ew_same "$want" "$got" || fail "rank 0's weights $got differ from the reference's $want"
pass "3 -> 2 -> 1 with the second loss during the first change: SUCCEEDED, steps once each, weights equal the reference's; $(cli logs "$id" | grep -c 'ew: epoch .* did not stand' || true) epoch(s) abandoned by rank 0"
