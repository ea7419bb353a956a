#!/usr/bin/env bash
# The membership is saved with the job: after a shrink, the head is killed
# (SIGKILL) and started again on its state dir while the survivors train on.
# The new head shows the same membership and history (2 of 3, epoch 1, one
# SHRUNK), the survivors' control polls and rendezvous carry on against it,
# the removed worker is not started again, and the job SUCCEEDS with two.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/lib_elastic.bash"
: "${ELASTIC_WORKER:?}"
start_cluster

# Long enough that the survivors still train when the new head is up: with
# 70 steps (7 s) a loaded run's agents re-registered after the job's end.
steps=$((150 * TROUPE_TEST_SLOWDOWN))
id=$(ew_job persist 3 2 2 100 "$steps")
wait_for 60 "rank 2 of job $id at step 10" logs_grep "$id" "^\[job$id-dp-2\] ew: step 10 "
kill -9 "$(ew_pid "$id" 2)"
wait_for 30 "job $id to shrink" bash -c "'$CLI_BIN' -o json job $id | jq -e '.membership | length == 1' >/dev/null"
for r in 0 1; do
    wait_for 30 "rank $r to rebuild" logs_grep "$id" "^\[job$id-dp-$r\] ew: rebuilt rank $r/2 epoch 1"
done
before=$(cli -o json job "$id" | jq -c '{m: .membership, g: [.groups[] | {world_size, elastic}], w: [.workers[] | {name, removed, member_rank}]}')
mark=$(head_log_mark)
stop_pid -KILL "$HEAD_PID"
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50
wait_for 20 "agents to register with the new head" reregistered "$mark" na nb nc
after=$(cli -o json job "$id" | jq -c '{m: .membership, g: [.groups[] | {world_size, elastic}], w: [.workers[] | {name, removed, member_rank}]}')
[ "$before" = "$after" ] || fail "membership changed across the head restart: before $before, after $after"
is_job_state "$id" RUNNING || fail "job $id is $(job_state "$id") after the head restart: $(job_reason "$id")"
wait_for $((60 + steps / 10)) "job $id to succeed after the head restart" is_job_state "$id" SUCCEEDED
cli job "$id" >"$T/job.txt"
grep -q "SHRUNK dp 3 -> 2 .*rank 2 (job$id-dp-2 on n[abc]) killed by SIGKILL; epoch 1" "$T/job.txt" ||
    fail "history after the restart: $(cat "$T/job.txt")"
[ "$(cli logs "$id" | grep -c "^\[job$id-dp-2\] ew: step 1 ")" = 1 ] || fail "the removed worker was started again"
for r in 0 1; do ew_steps_once "$id" $r "$steps"; done
pass "membership 2 of 3, epoch 1, and its history survive a head restart; the job SUCCEEDED with two"
