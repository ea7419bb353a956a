#!/usr/bin/env bash
# An agent restart keeps the queue. A PENDING job that needs every node
# (three 1-GPU nodes, one held by another job) must not fail when one agent
# is restarted as in a rolling upgrade: SIGTERM (it deregisters: LEFT) or
# kill -9 (its next self replaces the node) and started again within a
# second, or frozen 6 s (DEAD, then back as a new node); SIGUSR2 is SIGTERM
# for a restart, and the node's LEFT reason says so. A node that leaves
# opens a grace (restart_grace_ms, as after a head restart): a job that no
# alive or suspect node could hold waits for it, saying so, and fails only
# once the grace is over with the node still gone. (These failed at once:
# "the virtual cluster needs 3 GPUs; alive nodes have 2 in total", or
# "replaced by node 4 (the same agent registered again)".)
source "$(dirname "$0")/../lib.sh"
GRACE_MS=8000
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 40 --restart-grace-ms $GRACE_MS --http off
for n in r1 r2 r3; do start_node $n 1 --stop-grace-ms 500; done
wait_for 10 "3 nodes ALIVE" nodes_alive 3
sleep $((GRACE_MS / 1000)) # past the head's own start grace: what follows is the node's

mkdir -p "$T/go"
cat >"$T/hold.yaml" <<YAML
name: hold
cluster: {nodes: [1]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sh, -c, 'while [ ! -f $T/go/\$TROUPE_JOB ]; do sleep 0.1; done']}]
YAML
cat >"$T/all3.yaml" <<YAML
name: all3
cluster: {nodes: [1, 1, 1]}
groups: [{name: g, workers: 3, resources: {gpu: 1}, strategy: STRICT_SPREAD, command: [sh, -c, 'echo ran on \$TROUPE_NODE']}]
YAML

# restart_agent NAME HOW: stop r-agent NAME (TERM, KILL or STOP) and start it
# again within a second (STOP: resumed after 6 s, past its DEAD timeout).
restart_agent() {
    local name=$1 how=$2 pid
    pid=$(eval echo "\$NODE_PID_$name")
    case $how in
    STOP)
        kill -STOP "$pid"
        wait_for 10 "node $name DEAD" is_state "$name" DEAD
        sleep 1
        kill -CONT "$pid"
        ;;
    *)
        stop_pid "-$how" "$pid"
        start_node "$name" 1 --stop-grace-ms 500
        ;;
    esac
}

# one_round HOW: a holder on one node, the 3-node job queued behind it; the
# agent of an idle node restarts; the queued job waits, then runs.
one_round() {
    local how=$1 hold all3 idle j
    hold=$(submit "$T/hold.yaml")
    wait_for 10 "holder RUNNING" is_job_state "$hold" RUNNING
    all3=$(submit "$T/all3.yaml")
    sleep 0.3
    is_job_state "$all3" PENDING || fail "the 3-node job should wait for the held GPU: $(job_state "$all3")"
    idle=r1; [ "$(cli -o json job "$hold" | jqr '.workers[0].node')" = r1 ] && idle=r2
    restart_agent "$idle" "$how"
    wait_for 15 "node $idle ALIVE again" is_state "$idle" ALIVE
    sleep 1 # scheduling passes and liveness ticks
    j=$(cli -o json job "$all3")
    [ "$(jqr .state <<<"$j")" = PENDING ] ||
        fail "SIG$how: the queued job should still wait after its node's agent restarted: $(jqr '.state + ": " + .reason' <<<"$j")"
    touch "$T/go/$hold"
    wait_for 20 "the queued job SUCCEEDED after SIG$how" is_job_state "$all3" SUCCEEDED
    pass "SIG$how of agent $idle: the queued 3-node job waited and ran"
}
one_round TERM
one_round KILL
one_round STOP
# SIGUSR2: the agent stops for a restart and says so when it deregisters.
one_round USR2
grep -q 'to=LEFT reason="agent stopped for a restart: troupe-node stopped for a restart (SIGUSR2)"' "$T/head.log" ||
    fail "the node's LEFT reason should say it left for a restart: $(grep 'to=LEFT' "$T/head.log" | tail -1)"

# While a node is gone the job waits and says for what; once the grace is
# over with the node still gone, it fails.
hold=$(submit "$T/hold.yaml")
wait_for 10 "holder RUNNING" is_job_state "$hold" RUNNING
all3=$(submit "$T/all3.yaml")
idle=r1; [ "$(cli -o json job "$hold" | jqr '.workers[0].node')" = r1 ] && idle=r2
kill -TERM "$(eval echo "\$NODE_PID_$idle")"
wait_for 10 "node $idle LEFT" is_state "$idle" LEFT
sleep 1
[ "$(job_state "$all3")" = PENDING ] || fail "the job should wait for the node that left: $(cli -o json job "$all3" | jqr '.state + ": " + .reason')"
job_reason "$all3" | grep_all "for node $idle" || fail "the reason should name the node it waits for: $(job_reason "$all3")"
pass "waiting: $(job_reason "$all3")"
wait_for $((GRACE_MS / 1000 + 10)) "the job FAILED after the grace" is_job_state "$all3" FAILED
pass "after the grace: $(job_reason "$all3")"
touch "$T/go/$hold"
