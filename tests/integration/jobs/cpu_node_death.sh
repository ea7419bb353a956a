#!/usr/bin/env bash
# kill -9 of the agent of a GPU-less node running CPU-only workers
# (resources: {gpu: 0}): its workers die with it, a job without restarts
# FAILS naming the node, one with max_restarts is placed again on another
# node, the CPU-only job that was queued behind the full node runs there too,
# and the dead node's CPU slots leave the cluster's totals. The agent
# restarted registers its slots all free (nothing of its dead self holds
# them): a job that needs every slot of both nodes runs.
source "$(dirname "$0")/../lib.sh"
# A killed agent's connection closes: DEAD after disconnect_ms anyway; the
# 4 s window only gives the living agents a lease that rides out load.
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 40
# start_cpu_node NAME CPUS: an agent without GPUs (CUDA_VISIBLE_DEVICES=""
# hides any this machine has) and with CPUS CPU slots.
start_cpu_node() {
    CUDA_VISIBLE_DEVICES= "$NODE_BIN" --head "$HEAD" --name "$1" --cpus "$2" --stop-grace-ms 1000 \
        --state-dir "$T/node-$1" >>"$T/node-$1.log" 2>&1 &
    PIDS+=($!)
    eval "NODE_PID_$1=$!"
}
# cluster_cpus: troupe status's CPU slots, "total free".
cluster_cpus() { cli -o json status | jq -r '"\(.cpus.total) \(.cpus.free)"'; }
has_cpus() { [ "$(cluster_cpus)" = "$1" ]; }

start_cpu_node c1 3
wait_for 10 "c1 ALIVE" nodes_alive 1
mkdir -p "$T/pids"
cat >"$T/a.yaml" <<YAML
name: restarts
groups:
  - name: a
    workers: 2
    resources: {gpu: 0, cpu: 1}
    command: [sh, -c, 'echo \$\$ > $T/pids/a.\$RANK.\$TROUPE_ATTEMPT; [ \$TROUPE_ATTEMPT != 0 ] || exec sleep 300; echo "attempt \$TROUPE_ATTEMPT rank \$RANK on \$TROUPE_NODE"']
restart: {max_restarts: 1}
YAML
cat >"$T/c.yaml" <<YAML
name: fails
groups: [{name: c, workers: 1, resources: {gpu: 0}, command: [sh, -c, 'echo \$\$ > $T/pids/c; exec sleep 300']}]
YAML
cat >"$T/b.yaml" <<'YAML'
name: queued
groups: [{name: b, workers: 1, resources: {gpu: 0}, command: [sh, -c, 'echo "queued ran on $TROUPE_NODE"']}]
YAML
a=$(submit "$T/a.yaml")
c=$(submit "$T/c.yaml")
wait_for 20 "jobs $a and $c RUNNING, 3 workers started" bash -c "[ \$(cat $T/pids/* 2>/dev/null | wc -l) = 3 ]"
is_job_state "$a" RUNNING && is_job_state "$c" RUNNING || fail "jobs: $(cli jobs)"
wait_for 5 "c1's 3 slots taken" has_cpus "3 0"
b=$(submit "$T/b.yaml")
wait_for 10 "job $b to wait for CPU slots" bash -c "'$CLI_BIN' -o json job $b | jq -e '.reason | test(\"waiting for free CPU slots\")'"
pass "c1's 3 CPU slots held by jobs $a (2 workers) and $c; job $b queued: $(job_reason "$b")"

pids=$(cat "$T"/pids/*)
kill -9 "$NODE_PID_c1"
wait_for 10 "job $c FAILED" is_job_state "$c" FAILED
job_reason "$c" | grep_all "node c1 (id .*) died" || fail "job $c: $(job_reason "$c")"
all_gone() { for p in $pids; do if alive "$p"; then return 1; fi; done; }
wait_for 5 "the killed agent's workers gone" all_gone
wait_for 10 "c1 DEAD and its slots out of the totals" has_cpus "0 0"
[ "$(cli -o json nodes | jq -c '.nodes[] | select(.name == "c1") | [.state, .cpus, .cpus_free]')" = '["DEAD",3,0]' ] ||
    fail "c1 after its death: $(cli nodes)"
state=$(job_state "$a")
[ "$state" = PENDING ] || [ "$state" = RUNNING ] || fail "job $a (max_restarts 1) after c1 died: $(cli job "$a" | head -3)"
is_job_state "$b" PENDING || fail "job $b: $(cli job "$b" | head -3)"
pass "agent killed: job $c FAILED ($(job_reason "$c")), its workers gone, c1's slots out of the totals; job $a $state"

start_cpu_node c2 3
wait_for 20 "job $a SUCCEEDED on c2" is_job_state "$a" SUCCEEDED
wait_for 20 "job $b SUCCEEDED on c2" is_job_state "$b" SUCCEEDED
j=$(cli -o json job "$a")
[ "$(jq -c '[.restarts, [.workers[].node]]' <<<"$j")" = '[1,["c2","c2"]]' ] || fail "job $a: $(jq -c . <<<"$j")"
for r in 0 1; do
    logs_grep "$a" "attempt 1 rank $r on c2" || fail "job $a rank $r: $(cli logs "$a")"
done
logs_grep "$b" "queued ran on c2" || fail "job $b: $(cli logs "$b")"
wait_for 5 "c2's slots back once both ended" has_cpus "3 3"
pass "job $a restarted on c2 (restarts 1) and the queued job $b ran there; c2's slots all back"

start_cpu_node c1 3
wait_for 20 "c1 ALIVE again" is_state c1 ALIVE
wait_for 5 "the restarted c1's slots all free" has_cpus "6 6"
cat >"$T/all.yaml" <<'YAML'
name: all-slots
groups: [{name: d, workers: 6, resources: {gpu: 0, cpu: 1}, command: [sh, -c, 'echo "d on $TROUPE_NODE"']}]
YAML
d=$(submit "$T/all.yaml")
wait_for 20 "job $d (6 workers: every slot) SUCCEEDED" is_job_state "$d" SUCCEEDED
[ "$(cli -o json job "$d" | jq -c '[.workers[].node] | group_by(.) | map([.[0], length])')" = '[["c1",3],["c2",3]]' ] ||
    fail "job $d placement: $(cli -o json job "$d" | jq -c '[.workers[].node]')"
pass "the restarted agent registered c1's 3 slots free: a job of 6 workers took every slot of c1 and c2"
