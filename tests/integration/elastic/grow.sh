#!/usr/bin/env bash
# Grow-back: 3 ranks, min_workers 2 (max_workers defaults to 3); rank 2 is
# SIGKILLed at step 15. The group shrinks to 2, then, once the back-off
# (restart_backoff_ms) has passed and its node takes work, the head starts
# the lost worker again in its own slot at a new attempt: GREW 2 -> 3. The
# survivors leave their ring at the next step boundary, meet the replacement
# in the new epoch, and it takes the weights from them; the job SUCCEEDS with
# 3, every survivor completed each step once, and all three end with the
# weights of a reference run with nothing killed.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/lib_elastic.bash"
: "${ELASTIC_WORKER:?}"
start_cluster --restart-backoff-ms 500

# 60 x slowdown steps: on a loaded machine a shorter run could end before the kill.
steps=$((60 * TROUPE_TEST_SLOWDOWN))
ref=$(ew_job ref 3 2 3 0 "$steps")
wait_for 60 "reference job $ref to succeed" is_job_state "$ref" SUCCEEDED
id=$(ew_job grow 3 2 3 100 "$steps")
wait_for 60 "rank 2 of job $id at step 15" logs_grep "$id" "^\[job$id-dp-2\] ew: step 15 "
kill -9 "$(ew_pid "$id" 2)"
wait_for 60 "job $id to grow back" bash -c "'$CLI_BIN' -o json job $id | jq -e '[.membership[].kind] == [\"SHRUNK\", \"GREW\"]' >/dev/null"
wait_for 60 "job $id to succeed with 3 ranks" is_job_state "$id" SUCCEEDED
cli -o json job "$id" >"$T/job.json"
cli job "$id" >"$T/job.txt"
grep -q "GREW dp 2 -> 3 .*rank 2 (job$id-dp-2 on n[abc]) started again, attempt 1; epoch 3" "$T/job.txt" ||
    fail "no GREW line: $(cat "$T/job.txt")"
[ "$(jqr '.groups[0] | "\(.world_size) \(.elastic.epoch)"' "$T/job.json")" = "3 3" ] || fail "group: $(jq .groups "$T/job.json")"
[ "$(jqr '.workers[] | select(.name=="job'"$id"'-dp-2") | "\(.attempt) \(.removed) \(.state)"' "$T/job.json")" = "1 false EXITED" ] ||
    fail "replacement: $(jq '.workers[2]' "$T/job.json")"
[ "$(jqr .restarts "$T/job.json")" = 0 ] || fail "a restart was used"
cli logs "$id" >"$T/logs"
grep -q "^\[job$id-dp-2\] ew: joined rank 2/3 epoch 3 at step [1-9][0-9]* wall " "$T/logs" ||
    fail "the replacement did not join mid-run: $(grep 'dp-2\] ew: joined' "$T/logs")"
joined=$(sed -n "s/^\[job$id-dp-2\] ew: joined rank 2\/3 epoch 3 at step \([0-9]*\) .*/\1/p" "$T/logs")
[ "$joined" -gt 16 ] || fail "the replacement joined at step $joined, before the loss"
grep -q "^\[job$id-dp-2\] ew: rank 2 took step $((joined - 1))'s state from rank [01]" "$T/logs" ||
    fail "the replacement did not take the state: $(grep 'dp-2\] ew: rank' "$T/logs")"
for r in 0 1; do ew_steps_once "$id" $r "$steps"; done
want=$(ew_final "$ref" 0 "$steps")
for r in 0 1 2; do
    got=$(ew_final "$id" $r "$steps")
    ew_same "$want" "$got" || fail "rank $r's weights $got differ from the reference's $want"
done
pass "2 -> 3: the replacement joined at step $joined with a survivor's state; SUCCEEDED with 3, weights equal the reference's"
