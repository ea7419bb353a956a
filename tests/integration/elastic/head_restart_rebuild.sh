#!/usr/bin/env bash
# A head restart in the middle of a rebuild's address exchange: 3 ranks,
# min_workers 2, max_workers 2. Rank 1 is held (SIGSTOP) and rank 2
# SIGKILLed: rank 0 rebuilds at epoch 1 and publishes its address in the
# exchange (an all-gather on the head), where it waits for rank 1. The head
# is then killed (SIGKILL) and started again on its state dir, and rank 1 is
# let go: it meets rank 0 in the exchange on the new head (rank 0's waiting
# call is retried there with its address, and the membership is saved with
# the job), the ring of two stands, and the job SUCCEEDS with the
# reference's weights.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/lib_elastic.bash"
: "${ELASTIC_WORKER:?}"
start_cluster

# 50 x slowdown steps: on a loaded machine a shorter run could end before the kill.
steps=$((50 * TROUPE_TEST_SLOWDOWN))
ref=$(ew_job ref 3 2 2 0 "$steps")
wait_for 60 "reference job $ref to succeed" is_job_state "$ref" SUCCEEDED
id=$(ew_job midx 3 2 2 100 "$steps")
wait_for 60 "rank 2 of job $id at step 10" logs_grep "$id" "^\[job$id-dp-2\] ew: step 10 "
p1=$(ew_pid "$id" 1)
kill -STOP "$p1"
at_cleanup "kill -CONT $p1 2>/dev/null"
kill -9 "$(ew_pid "$id" 2)"
wait_for 30 "job $id to shrink" bash -c "'$CLI_BIN' -o json job $id | jq -e '.membership | length == 1' >/dev/null"
waiting_in_exchange() {
    cli -o json job "$id" | jq -e '[.rendezvous[]? | select((.what | test("troupe.coll")) and .epoch == 1 and .arrived == 1)] | length == 1' >/dev/null
}
wait_for 30 "rank 0 to wait in epoch 1's address exchange" waiting_in_exchange
mark=$(head_log_mark)
stop_pid -KILL "$HEAD_PID"
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50
wait_for 20 "agents to register with the new head" reregistered "$mark" na nb nc
kill -CONT "$p1"
ended() { is_job_state "$id" SUCCEEDED || is_job_state "$id" FAILED; }
wait_for 90 "job $id to end" ended
is_job_state "$id" SUCCEEDED || fail "job $id $(job_state "$id"): $(job_reason "$id"); $(cli logs "$id" | grep -E 'dp-[01]\] ew: (no new|epoch|rebuilt)')"
cli logs "$id" >"$T/logs"
for r in 0 1; do
    grep -q "^\[job$id-dp-$r\] ew: rebuilt rank $r/2 epoch 1 " "$T/logs" || fail "rank $r did not rebuild at epoch 1: $(grep "dp-$r\] ew: [^s]" "$T/logs")"
done
for r in 0 1; do ew_steps_once "$id" $r "$steps"; done
want=$(ew_final "$ref" 0 "$steps")
for r in 0 1; do
    got=$(ew_final "$id" $r "$steps")
    ew_same "$want" "$got" || fail "rank $r's weights $got differ from the reference's $want"
done
pass "a head restart during epoch 1's address exchange: the survivors met on the new head; SUCCEEDED with the reference's weights"
