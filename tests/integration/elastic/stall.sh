#!/usr/bin/env bash
# A stalled rank under health: {on_stall: fail} goes through the shrink, not
# a restart: 3 ranks, min_workers 2, max_workers 2, no restarts; rank 2
# stops stepping at step 15 before its all-reduce (it hangs without ending).
# Its peers completed step 14 with it and wait in the all-reduce until their
# collective's deadline (EW_TIMEOUT_MS), then wait for a new membership: by
# stall_after all three made no step since 14. The head takes out the rank
# that is not waiting on its peers: SHRUNK dp 3 -> 2 naming rank 2's stall,
# its agent ends the hung process, the survivors go on and the job SUCCEEDS
# with 2 and the weights of a reference run with nothing stalled.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/lib_elastic.bash"
: "${ELASTIC_WORKER:?}"
start_cluster
job() { # job NAME STEP_MS
    EW_ENV="EW_TIMEOUT_MS: \"$((1000 * TROUPE_TEST_SLOWDOWN))\", EW_STALL_RANK: \"2\", EW_STALL_STEP: \"15\"" \
        EW_YAML="health: {stall_after: $((3 * TROUPE_TEST_SLOWDOWN))s, on_stall: fail}" ew_job "$1" 3 2 2 "$2" 40
}
ref=$(ew_job ref 3 2 2 0 40)
wait_for 60 "reference job $ref to succeed" is_job_state "$ref" SUCCEEDED
id=$(job stall 100)
wait_for 60 "rank 2 of job $id to stop stepping" logs_grep "$id" "^\[job$id-dp-2\] ew: rank 2 stops stepping at step 15"
p2=$(ew_pid "$id" 2)
gone() { ! alive "$p2"; }
ended() { is_job_state "$id" SUCCEEDED || is_job_state "$id" FAILED; }
wait_for 60 "job $id to end" ended
is_job_state "$id" SUCCEEDED || fail "job $id $(job_state "$id"): $(job_reason "$id"); $(cli -o json job "$id" | jq -c '[.membership[].text]')"
wait_for 20 "the hung rank 2 ($p2) to be gone" gone
cli -o json job "$id" >"$T/job.json"
cli job "$id" >"$T/job.txt"
[ "$(jqr '[.membership[] | "\(.kind) \(.from)->\(.to) \(.worker)"] | join(",")' "$T/job.json")" = "SHRUNK 3->2 job$id-dp-2" ] ||
    fail "membership: $(jq -c '[.membership[].text]' "$T/job.json")"
jq -e '.membership[0].text | test("^SHRUNK dp 3 -> 2 at step 1[45]: rank 2 \\(job'"$id"'-dp-2 on n[abc]\\) health: rank 2 \\(job'"$id"'-dp-2 on n[abc]\\) made no step for [0-9.]+ s \\(stall_after [0-9.]+ s, health.on_stall: fail\\); epoch 1$")' \
    "$T/job.json" >/dev/null || fail "the change does not name the stall: $(jqr '.membership[0].text' "$T/job.json")"
grep -q "SHRUNK dp 3 -> 2 .*made no step for" "$T/job.txt" || fail "troupe job: $(cat "$T/job.txt")"
[ "$(jqr '[.workers[] | select(.removed) | .name] | join(",")' "$T/job.json")" = "job$id-dp-2" ] || fail "removed: $(jq -c '[.workers[] | [.name, .removed, .state]]' "$T/job.json")"
[ "$(jqr .restarts "$T/job.json")" = 0 ] || fail "a restart was used"
for r in 0 1; do ew_steps_once "$id" $r 40; done
want=$(ew_final "$ref" 0 40)
for r in 0 1; do
    got=$(ew_final "$id" $r 40)
    ew_same "$want" "$got" || fail "rank $r's weights $got differ from the reference's $want"
done
grep -q "ew: rank [01]/3 epoch 0: collective failed" <(cli logs "$id") || fail "the peers did not wait on rank 2"
pass "the stalled rank 2 was taken out (SHRUNK 3 -> 2 naming the stall); the survivors SUCCEEDED with the reference's weights"
