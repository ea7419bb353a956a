#!/usr/bin/env bash
# The head bounds a job's store: store_max_keys refuses the key past it,
# store_max_bytes the bytes past it, both RESOURCE_EXHAUSTED with the numbers.
source "$(dirname "$0")/../lib.sh"
: "${ST_WORKER:?}"
start_cluster --store-max-keys 5
cat >"$T/job.yaml" <<YAML
name: bounds
cluster: {nodes: [4]}
groups:
  - {name: policy, workers: 1, resources: {gpu: 1}, command: [$ST_WORKER, bounds]}
YAML
timeout 60 "$CLI_BIN" submit "$T/job.yaml" >"$T/out" 2>"$T/err" || fail "job failed: $(cat "$T/err"; cli logs "$(head -1 "$T/out")")"
line=$(cli logs "$(head -1 "$T/out")" | grep "st: refused")
echo "$line" | grep -q "st: refused at k5: ERR RESOURCE_EXHAUSTED the job's store holds 5 keys, its most (head store_max_keys=5)" ||
    fail "key bound: $line"
pass "store_max_keys=5: the 6th key is refused: $line"
stop_pid "$HEAD_PID"
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50 --store-max-bytes 1024
wait_for 10 "3 nodes ALIVE" nodes_alive 3
timeout 60 "$CLI_BIN" submit "$T/job.yaml" >"$T/out" 2>"$T/err" || fail "job failed: $(cat "$T/err"; cli logs "$(head -1 "$T/out")")"
line=$(cli logs "$(head -1 "$T/out")" | grep "st: refused")
# bytes are key + value: k0..k9 take 12 each (120), k10.. 13 each: k10..k78 bring it to 1017, k79 would make 1030
echo "$line" | grep -q "st: refused at k79: ERR RESOURCE_EXHAUSTED setting 'k79' (10 bytes) would bring the job's store to 1030 bytes, over store_max_bytes=1024 (now 1017)" ||
    fail "byte bound: $line"
pass "store_max_bytes=1024: refused with the numbers: $line"
