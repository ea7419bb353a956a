#!/usr/bin/env bash
# A head that dies between the answers of the rebuild's address exchange: 3
# ranks, min_workers 2, max_workers 2; rank 2 is SIGKILLed and the two
# survivors meet in epoch 1's exchange (the troupe.coll all-gather). The head
# (TROUPE_TEST_EXIT_AFTER_GATHER_REPLY=1) exits right after it answered the
# first of them. That rank goes on to build the ring; the other retries its
# call against the head started again on the state dir, which answers it
# from the job record (the completed exchange was saved before anyone was
# answered) instead of waiting for a peer that moved on. The ring of two
# stands and the job SUCCEEDS with the reference's weights.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/lib_elastic.bash"
: "${ELASTIC_WORKER:?}"
TROUPE_TEST_EXIT_AFTER_GATHER_REPLY=1 start_cluster

ref=$(ew_job ref 3 2 2 0 50)
wait_for 60 "reference job $ref to succeed" is_job_state "$ref" SUCCEEDED
id=$(EW_ENV="EW_TIMEOUT_MS: \"$((30000 * TROUPE_TEST_SLOWDOWN))\", EW_WAIT_MS: \"$((60000 * TROUPE_TEST_SLOWDOWN))\"" ew_job ans 3 2 2 100 50)
wait_for 60 "rank 2 of job $id at step 10" logs_grep "$id" "^\[job$id-dp-2\] ew: step 10 "
kill -9 "$(ew_pid "$id" 2)"
head_gone() { ! alive "$HEAD_PID"; }
wait_for 60 "the head to exit after its first answer of epoch 1's exchange" head_gone
grep -q "rdzv: exiting after the first answer of a kept all-gather at epoch 1" "$T/head.log" ||
    fail "the head did not exit where the test wants it: $(tail -5 "$T/head.log")"
mark=$(head_log_mark)
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50
wait_for 20 "agents to register with the new head" reregistered "$mark" na nb nc
ended() { is_job_state "$id" SUCCEEDED || is_job_state "$id" FAILED; }
wait_for 120 "job $id to end" ended
cli logs "$id" >"$T/logs"
is_job_state "$id" SUCCEEDED || fail "job $id $(job_state "$id"): $(job_reason "$id"); $(grep -E 'dp-[01]\] ew: (no new|epoch|rebuilt)' "$T/logs")"
for r in 0 1; do
    grep -q "^\[job$id-dp-$r\] ew: rebuilt rank $r/2 epoch 1 " "$T/logs" || fail "rank $r did not rebuild at epoch 1: $(grep "dp-$r\] ew: [^s]" "$T/logs")"
    ew_steps_once "$id" $r 50
done
grep -q "ew: epoch 1 did not stand" "$T/logs" && fail "epoch 1 did not stand for a rank: $(grep 'did not stand' "$T/logs")"
want=$(ew_final "$ref" 0 50)
for r in 0 1; do
    ew_same "$want" "$(ew_final "$id" $r 50)" || fail "rank $r's weights differ from the reference's"
done
pass "the head died between the answers of epoch 1's exchange: the other rank was answered by the restarted head from the record; SUCCEEDED with the reference's weights"
