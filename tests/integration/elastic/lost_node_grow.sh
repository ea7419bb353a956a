#!/usr/bin/env bash
# A rank whose node is gone is placed on another node: two agents, an
# elastic group of 2 (min_workers 1, SPREAD: one rank per node). The agent
# running rank 1 is SIGKILLed; its worker's supervisor kills the worker at
# the lease's end, the head declares the node DEAD and shrinks the group
# (SHRUNK dp 2 -> 1). Once the lost node's lease has run out (fencing) and
# the back-off passed, the scheduler places rank 1 again on the node that is
# left (GREW dp 1 -> 2 ... placed again away from the lost node), the
# replacement takes the state from rank 0 and the job SUCCEEDS whole, with
# the weights of a reference run.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/lib_elastic.bash"
: "${ELASTIC_WORKER:?}"
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50 --restart-backoff-ms 300
start_node na 4xH100:80GB --stop-grace-ms 1000
start_node nb 4xH100:80GB --stop-grace-ms 1000
wait_for 10 "2 nodes ALIVE" nodes_alive 2

# 60 x slowdown steps: on a loaded machine a shorter run could end before the kill.
steps=$((60 * TROUPE_TEST_SLOWDOWN))
ref=$(ew_job ref 2 1 2 0 "$steps")
wait_for 60 "reference job $ref to succeed" is_job_state "$ref" SUCCEEDED
id=$(ew_job moved 2 1 2 100 "$steps")
wait_for 60 "rank 1 of job $id at step 10" logs_grep "$id" "^\[job$id-dp-1\] ew: step 10 "
lost=$(cli -o json job "$id" | jqr ".workers[] | select(.name==\"job$id-dp-1\") | .node")
other=$(cli -o json job "$id" | jqr ".workers[] | select(.name==\"job$id-dp-0\") | .node")
[ "$lost" != "$other" ] || fail "SPREAD put both ranks on $lost"
pid_var=NODE_PID_$lost
kill -9 "${!pid_var}"
ended() { is_job_state "$id" SUCCEEDED || is_job_state "$id" FAILED; }
wait_for 120 "job $id to end" ended
cli -o json job "$id" >"$T/job.json"
cli job "$id" >"$T/job.txt"
is_job_state "$id" SUCCEEDED || fail "job $id $(job_state "$id"): $(job_reason "$id"); $(jq -c '[.membership[].text]' "$T/job.json")"
[ "$(jqr '[.membership[] | "\(.kind) \(.from)->\(.to)"] | join(",")' "$T/job.json")" = "SHRUNK 2->1,GREW 1->2" ] ||
    fail "membership: $(jq -c '[.membership[].text]' "$T/job.json")"
jqr '.membership[0].text' "$T/job.json" | grep_all "SHRUNK dp 2 -> 1 .*rank 1 (job$id-dp-1 on $lost) lost: its node died" ||
    fail "shrink: $(jqr '.membership[0].text' "$T/job.json")"
jqr '.membership[1].text' "$T/job.json" |
    grep_all "GREW dp 1 -> 2 .*rank 1 (job$id-dp-1 on $other) started again, placed again away from $lost (its node is gone), attempt 1; epoch 3" ||
    fail "grow: $(jqr '.membership[1].text' "$T/job.json")"
[ "$(jqr '.workers[] | select(.name=="job'"$id"'-dp-1") | "\(.node) \(.removed) \(.state) \(.attempt)"' "$T/job.json")" = "$other false EXITED 1" ] ||
    fail "rank 1: $(jq -c '.workers[1]' "$T/job.json")"
[ "$(jqr '.groups[0].world_size' "$T/job.json")" = 2 ] || fail "group: $(jq -c .groups "$T/job.json")"
[ "$(jqr .restarts "$T/job.json")" = 0 ] || fail "the job was placed again whole"
cli logs "$id" >"$T/logs"
grep -q "^\[job$id-dp-1\] ew: rank 1 took step [0-9]*'s state from rank 0" "$T/logs" ||
    fail "the replacement did not take the state: $(grep 'dp-1\] ew: [^s]' "$T/logs")"
ew_steps_once "$id" 0 "$steps"
want=$(ew_final "$ref" 0 "$steps")
for r in 0 1; do
    ew_same "$want" "$(ew_final "$id" $r "$steps")" || fail "rank $r's weights differ from the reference's"
done
pass "node $lost died with rank 1: SHRUNK 2 -> 1, then rank 1 placed again on $other after the lease: GREW 1 -> 2; SUCCEEDED whole with the reference's weights"
