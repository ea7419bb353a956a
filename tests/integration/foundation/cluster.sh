#!/usr/bin/env bash
# Head + three agents with simulated GPUs (4, 8, 16); liveness; head restart.
source "$(dirname "$0")/../lib.sh"

start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 10
start_node node-a 4xH100:80GB --labels gpu=H100
start_node node-b 8xH200:141GB --labels gpu=H200
start_node node-c 16xB200:192GB --labels gpu=B200
wait_for 10 "3 nodes ALIVE" nodes_alive 3

out=$(cli -o json nodes)
[ "$(jqr .count <<<"$out")" = 3 ] || fail "expected 3 nodes: $out"
[ "$(jqr .gpus_total <<<"$out")" = 28 ] || fail "expected 28 GPUs: $out"
[ "$(jqr '[.nodes[].gpus | length] | add' <<<"$out")" = 28 ] || fail "GPU lists do not add to 28"
[ "$(jqr '.nodes[] | select(.name=="node-b") | .gpus[0].model' <<<"$out")" = "NVIDIA H200" ] || fail "model"
[ "$(jqr '.nodes[] | select(.name=="node-b") | .labels.gpu' <<<"$out")" = "H200" ] || fail "labels"
[ "$(cli -o json status | jqr .gpus.total)" = 28 ] || fail "status gpus total"
pass "3 nodes, 28 GPUs, models and labels"

id_a=$(node_id node-a); id_c=$(node_id node-c)
kill -9 "$NODE_PID_node_b"
t0=$(date +%s%N)
wait_for 5 "node-b DEAD after kill -9" is_state node-b DEAD
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
# Window: dead_after (10) x heartbeat (100 ms) = 1 s, plus one reaper tick.
[ $ms -le 2500 ] || fail "node-b took ${ms} ms to be declared DEAD (window 1000 ms)"
cli nodes | grep_all -E "node-b.*DEAD.*(no heartbeat|connection to its agent closed)" || fail "DEAD reason not shown: $(cli nodes)"
pass "kill -9 of an agent: DEAD after ${ms} ms (window 1000 ms)"

stop_pid -9 "$HEAD_PID"
mark=$(head_log_mark)
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 10
wait_for 10 "node-a and node-c to register again with the new head (ALIVE, logged)" reregistered "$mark" node-a node-c
[ "$(node_id node-a)" = "$id_a" ] && [ "$(node_id node-c)" = "$id_c" ] || fail "node ids changed on re-register"
[ "$(node_state node-b)" = DEAD ] || fail "node-b should stay DEAD after head restart"
grep -q "registering again" "$T/node-node-a.log" || fail "node-a did not log that it registers again"
pass "head kill -9 + restart: agents re-registered with their ids, dead node stays DEAD"

# A node that comes back after being declared DEAD gets a new id.
old_b=$(node_id node-b)
start_node node-b 8xH200:141GB
wait_for 10 "node-b back" nodes_alive 3
new_b=$(node_id node-b)
[ "$new_b" != "$old_b" ] && [ "$new_b" -gt "$id_c" ] || fail "dead id reused: old=$old_b new=$new_b"
pass "a returning node registers as a new node ($old_b -> $new_b)"
