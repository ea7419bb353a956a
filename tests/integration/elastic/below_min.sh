#!/usr/bin/env bash
# Below min_workers today's rules apply. A group of 3 with min_workers 3
# whose rank 2 is SIGKILLed: no SHRUNK; without restarts the job FAILS naming
# the killed worker; with restart.max_restarts 1 the group restarts whole
# (3 members again, epoch of attempt 1) and SUCCEEDS.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/lib_elastic.bash"
: "${ELASTIC_WORKER:?}"
start_cluster

# Steps enough that rank 2 still runs when it is killed after step 5 (at load
# 40 a run of 40 had ended by then).
steps=$((40 * TROUPE_TEST_SLOWDOWN))
id=$(ew_job fails 3 3 3 100 "$steps" 0)
wait_for 60 "rank 2 of job $id stepping" logs_grep "$id" "^\[job$id-dp-2\] ew: step 5 "
kill -9 "$(ew_pid "$id" 2)"
wait_for 60 "job $id to fail" is_job_state "$id" FAILED
cli -o json job "$id" >"$T/fails.json"
jqr .reason "$T/fails.json" | grep_all "worker job$id-dp-2 on node n[abc] .*killed by signal SIGKILL\|worker job$id-dp-2 on node n[abc] was killed by signal 9" ||
    fail "reason does not name the killed worker: $(jqr .reason "$T/fails.json")"
[ "$(jqr '.membership | length' "$T/fails.json")" = 0 ] || fail "a group below min_workers shrank: $(jq .membership "$T/fails.json")"

id2=$(ew_job restarts 3 3 3 100 "$steps" 1)
wait_for 60 "rank 2 of job $id2 stepping" logs_grep "$id2" "^\[job$id2-dp-2\] ew: step 5 "
kill -9 "$(ew_pid "$id2" 2)"
wait_for 90 "job $id2 to succeed after its restart" is_job_state "$id2" SUCCEEDED
cli -o json job "$id2" >"$T/restarts.json"
[ "$(jqr '.restarts' "$T/restarts.json")" = 1 ] || fail "restarts: $(jqr .restarts "$T/restarts.json")"
[ "$(jqr '.membership | length' "$T/restarts.json")" = 0 ] || fail "shrank: $(jq .membership "$T/restarts.json")"
[ "$(jqr '.groups[0] | "\(.world_size) \(.elastic.epoch)"' "$T/restarts.json")" = "3 1" ] ||
    fail "group after the restart: $(jq .groups "$T/restarts.json")"
[ "$(jqr '[.workers[] | select(.removed | not) | select(.attempt == 1)] | length' "$T/restarts.json")" = 3 ] ||
    fail "workers after the restart: $(jq '[.workers[] | {name, attempt, removed}]' "$T/restarts.json")"
pass "min_workers 3 of 3: a killed rank FAILS the job without restarts, restarts the group whole with one"
