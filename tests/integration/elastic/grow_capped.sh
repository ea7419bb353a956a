#!/usr/bin/env bash
# A replacement that keeps crashing is capped like a crash-looping restart:
# 3 ranks, min_workers 2, restart.max_restarts 1, and every replacement
# exits 7 before it joins. Rank 2 is SIGKILLed; the group shrinks and grows
# back after restart_backoff_ms; the replacement fails, the slot is grown
# again after the doubled back-off (one failed replacement in a row); the
# second replacement fails too, which is more than max_restarts allows: the
# slot stays empty (SHRUNK text and the worker's regrow_stopped say why),
# the group goes on at 2 and the job SUCCEEDS without a group restart.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/lib_elastic.bash"
: "${ELASTIC_WORKER:?}"
backoff=400
start_cluster --restart-backoff-ms $backoff --restart-backoff-max-ms 60000

# The collectives' deadline (how long survivors wait for a replacement that
# died) grows with the load: under ASan at load 25 a fixed 5 s ran out on a
# healthy rank, and the group restarted whole instead.
id=$(EW_ENV="EW_REPLACEMENT_EXIT: \"7\", EW_TIMEOUT_MS: \"$((5000 * TROUPE_TEST_SLOWDOWN))\"" ew_job capped 3 2 3 100 80 1)
wait_for 60 "rank 2 of job $id at step 10" logs_grep "$id" "^\[job$id-dp-2\] ew: step 10 "
kill -9 "$(ew_pid "$id" 2)"
stopped() { cli -o json job "$id" | jq -e '.workers[] | select(.name=="job'"$id"'-dp-2") | .regrow_stopped' >/dev/null; }
wait_for 90 "job $id to stop growing rank 2 back" stopped
wait_for 120 "job $id to succeed with 2 ranks" is_job_state "$id" SUCCEEDED
cli -o json job "$id" >"$T/job.json"
cli job "$id" >"$T/job.txt"
[ "$(jqr '[.membership[] | "\(.kind) \(.from)->\(.to)"] | join(",")' "$T/job.json")" = \
    "SHRUNK 3->2,GREW 2->3,SHRUNK 3->2,GREW 2->3,SHRUNK 3->2" ] || fail "membership: $(jq -c '[.membership[].text]' "$T/job.json")"
jq -e '.membership[4].text | test("^SHRUNK dp 3 -> 2( at step [0-9]+)?: rank 2 \\(job'"$id"'-dp-2 on n[abc]\\) exited with code 7; not grown back: 2 replacements failed in a row \\(restart.max_restarts 1\\), the group goes on without this slot; epoch 7$")' \
    "$T/job.json" >/dev/null || fail "last change: $(jqr '.membership[4].text' "$T/job.json")"
jq -e '[.events[] | select(.kind == "SHRUNK") | .message] | last | test("not grown back: 2 replacements failed")' "$T/job.json" >/dev/null ||
    fail "no event names the cap: $(jq -c '[.events[] | [.kind, .message]]' "$T/job.json")"
# The grow-backs wait the crash-loop back-off of their slot: restart_backoff_ms
# after the loss, twice that after one failed replacement.
gap1=$(jqr '.membership[1].ts_ms - .membership[0].ts_ms' "$T/job.json")
gap2=$(jqr '.membership[3].ts_ms - .membership[2].ts_ms' "$T/job.json")
[ "$gap1" -ge $backoff ] && [ "$gap2" -ge $((2 * backoff)) ] || fail "back-offs ${gap1} ms, ${gap2} ms; want >= $backoff, >= $((2 * backoff))"
[ "$(jqr '.workers[] | select(.name=="job'"$id"'-dp-2") | "\(.removed) \(.regrown) \(.regrow_stopped) \(.exit_code)"' "$T/job.json")" = "true 2 true 7" ] ||
    fail "rank 2: $(jq -c '.workers[2]' "$T/job.json")"
[ "$(jqr '.groups[0] | "\(.world_size) \(.elastic.epoch)"' "$T/job.json")" = "2 7" ] || fail "group: $(jq -c .groups "$T/job.json")"
[ "$(jqr .restarts "$T/job.json")" = 0 ] || fail "a group restart was used"
grep -q "^job$id-dp-2 .*(left its elastic group; not grown back: its replacements failed)$" "$T/job.txt" ||
    fail "troupe job does not show the empty slot: $(cat "$T/job.txt")"
grep -q "not grown back: 2 replacements failed in a row (restart.max_restarts 1)" "$T/job.txt" || fail "troupe job: no history line"
for r in 0 1; do ew_steps_once "$id" $r 80; done
pass "rank 2's replacements failed twice (max_restarts 1): the slot stays empty after back-offs of $gap1 and $gap2 ms; SUCCEEDED with 2"
