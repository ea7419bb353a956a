#!/usr/bin/env bash
# troupe drain NODE: no new placements there at once, its running job goes on,
# and drain waits (with a deadline) until that job has ended; -o json says so;
# troupe undrain lets it take work again.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/nodes_lib.bash"
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50 --log-level debug # logs drain answers
start_node na 4xH100:80GB --stop-grace-ms 1000
start_node nb 4xH100:80GB --stop-grace-ms 1000
wait_for 10 "2 nodes ALIVE" nodes_alive 2
mkdir -p "$T/go"
cat >"$T/hold.yaml" <<YAML
name: hold
cluster: {nodes: [4]}
groups: [{name: g, workers: 1, resources: {gpu: 4}, command: [sh, -c, 'while [ ! -f $T/go/\$TROUPE_JOB ]; do sleep 0.1; done']}]
YAML
h=$(submit "$T/hold.yaml")
wait_for 10 "hold RUNNING" is_job_state "$h" RUNNING
node=$(cli -o json job "$h" | jqr '.workers[0].node')
other=$([ "$node" = na ] && echo nb || echo na)

# A deadline that passes: exit 1, the node stays draining.
set +e
out=$(cli drain "$node" --max-wait 1 2>&1)
rc=$?
set -e
[ $rc -eq 1 ] && grep -q "still runs 1 job after 1 s; it stays draining" <<<"$out" || fail "drain --max-wait 1: rc=$rc $out"
[ "$(node_field "$node" draining)" = true ] || fail "not draining"
cli nodes | grep "$node" | grep_all "ALIVE,DRAINING" || fail "troupe nodes: $(cli nodes)"
pass "drain with a deadline that passes: rc=1, $out"

# New work goes elsewhere, then waits rather than land on the drained node.
o=$(submit "$T/hold.yaml")
wait_for 10 "second job RUNNING" is_job_state "$o" RUNNING
[ "$(cli -o json job "$o" | jqr '.workers[0].node')" = "$other" ] || fail "placed on the draining node"
w=$(submit "$T/hold.yaml")
# its submit ran a scheduling pass: the scheduler's own reason, not the record's first
[ "$(job_state "$w")" = PENDING ] && [ "$(job_reason "$w")" != "waiting to be placed" ] || fail "third job $(job_state "$w"), want PENDING (only the draining node has room... none)"
pass "new jobs avoid the draining node $node"

# drain waits for the job there to end, then reports it drained.
mark=$(head_log_mark)
cli -o json drain "$node" --max-wait 30 >"$T/drain.json" 2>"$T/drain.err" &
dp=$!
# drain asked twice and was told twice that a job still runs there.
told_running() { [ "$(tail -c +$((mark + 1)) "$T/head.log" | grep -c "drain answered node=[0-9]* name=$node running_jobs=1$")" -ge 2 ]; }
wait_for 10 "the head to tell drain twice that a job still runs on $node" told_running
alive "$dp" || fail "drain returned while a job still runs: $(cat "$T/drain.json" "$T/drain.err")"
touch "$T/go/$h"
await_end 40 "troupe drain --max-wait 30 to return once job $h ended" "$dp"
[ "$END_RC" = 0 ] || fail "drain exited $END_RC: $(cat "$T/drain.err")"
jq -e --arg n "$node" '.name == $n and .draining and .drained and .running_jobs == 0' "$T/drain.json" >/dev/null ||
    fail "drain -o json: $(cat "$T/drain.json")"
pass "drain waited for job $h, then: $(cat "$T/drain.json")"
# Job $h's end released its GPUs, and that release ran a scheduling pass
# (with the node drained): the waiting job had its chance then.
wait_for 10 "job $h SUCCEEDED" is_job_state "$h" SUCCEEDED
[ "$(job_state "$w")" = PENDING ] || fail "the waiting job went to the drained node"

cli undrain "$node" | grep_all "takes new work again" || fail "undrain"
wait_for 10 "the waiting job placed on $node after undrain" is_job_state "$w" RUNNING
[ "$(cli -o json job "$w" | jqr '.workers[0].node')" = "$node" ] || fail "placed on $(cli -o json job "$w" | jqr '.workers[0].node')"
[ "$(node_field "$node" draining)" = false ] || fail "still draining"
pass "undrain: the waiting job now runs on $node"
set +e
out=$(cli drain nosuch 2>&1); rc=$?
set -e
[ $rc -eq 1 ] && grep -q "NOT_FOUND" <<<"$out" || fail "drain nosuch: rc=$rc $out"
touch "$T/go/$o" "$T/go/$w"
