#!/usr/bin/env bash
# A rank lost with its node: the agent running rank 2 of an elastic group of
# 3 (one rank per node, SPREAD) is killed with SIGKILL. Its worker's
# supervisor kills the worker once the agent's lease has run out (fencing),
# the survivors' ring breaks, and when the head declares the node DEAD it
# shrinks the group (SHRUNK dp 3 -> 2: rank 2 ... lost: its node died)
# instead of placing the whole job again. The job SUCCEEDS with two, with the
# weights of a reference run (max_workers 2: the slot is not grown back;
# lost_node_grow places it on another node).
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/lib_elastic.bash"
: "${ELASTIC_WORKER:?}"
start_cluster

# 60 x slowdown steps: on a loaded machine a shorter run could end before the kill.
steps=$((60 * TROUPE_TEST_SLOWDOWN))
ref=$(ew_job ref 3 2 2 0 "$steps")
wait_for 60 "reference job $ref to succeed" is_job_state "$ref" SUCCEEDED
id=$(ew_job lost 3 2 2 100 "$steps")
wait_for 60 "rank 2 of job $id at step 10" logs_grep "$id" "^\[job$id-dp-2\] ew: step 10 "
node=$(cli -o json job "$id" | jqr ".workers[] | select(.name==\"job$id-dp-2\") | .node")
pid_var=NODE_PID_$node
kill -9 "${!pid_var}"
wait_for 60 "job $id to succeed with 2 ranks" is_job_state "$id" SUCCEEDED
cli -o json job "$id" >"$T/job.json"
[ "$(jqr '[.membership[] | .kind] | join(",")' "$T/job.json")" = "SHRUNK" ] || fail "membership: $(jq .membership "$T/job.json")"
jqr '.membership[0].text' "$T/job.json" | grep_all "SHRUNK dp 3 -> 2 .*rank 2 (job$id-dp-2 on $node) lost: its node died" ||
    fail "change: $(jqr '.membership[0].text' "$T/job.json")"
[ "$(jqr .restarts "$T/job.json")" = 0 ] || fail "the job was placed again"
[ "$(jqr '.workers[] | select(.name=="job'"$id"'-dp-2") | "\(.state) \(.removed)"' "$T/job.json")" = "LOST true" ] ||
    fail "rank 2: $(jq '.workers[2]' "$T/job.json")"
want=$(ew_final "$ref" 0 "$steps")
for r in 0 1; do
    ew_steps_once "$id" $r "$steps"
    ew_same "$want" "$(ew_final "$id" $r "$steps")" || fail "rank $r's weights differ from the reference's"
done
pass "node $node died with rank 2: SHRUNK 3 -> 2 (no re-placement), SUCCEEDED with the reference's weights"
