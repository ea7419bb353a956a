#!/usr/bin/env bash
# What the CLI says about why and how long: a job waiting on a drained node
# names the node as drained (not as a SUSPECT node that must report again);
# a stopped job "ran" until its last worker was gone (the stop's grace
# included), as its workers' own times say; an agent that finds no GPU warns
# at start that only CPU-only workers can run there, and troupe nodes says so.
source "$(dirname "$0")/../lib.sh"
start_head
start_node n1 4xH200:141GB --stop-grace-ms 2000
wait_for 10 "1 node ALIVE" nodes_alive 1

cat >"$T/ok.yaml" <<YAML
name: ok
cluster: {nodes: [1]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [true]}]
YAML
cli drain n1 --no-wait >/dev/null
id=$(submit "$T/ok.yaml")
want='waiting: no node takes new work now: n1 (DRAINING: `troupe undrain n1` gives it work again)'
wait_for 10 "job $id's reason to name the drained node" has_reason "$id" "$want"
cli job "$id" | grep_all -F "PENDING: $want" || fail "troupe job: $(cli job "$id" | head -3)"
cli undrain n1 >/dev/null
wait_for 20 "job $id SUCCEEDED once n1 is undrained" is_job_state "$id" SUCCEEDED
pass "a job waiting on a drained node says so, with the undrain command"

# Ignores SIGTERM (sleep inherits that): the workers run through the 2 s grace.
cat >"$T/stubborn.yaml" <<YAML
name: stubborn
cluster: {nodes: [2]}
groups: [{name: g, workers: 2, resources: {gpu: 1}, command: [sh, -c, 'trap "" TERM; sleep 300']}]
YAML
id=$(submit "$T/stubborn.yaml")
wait_for 10 "stubborn RUNNING" bash -c "'$CLI_BIN' -o json job $id | jq -e '[.workers[] | select(.state==\"RUNNING\")] | length == 2'"
sleep 0.5
cli stop "$id" >/dev/null 2>&1
cli job "$id" >"$T/job.txt"
ran=$(sed -n 's/^time .*, ran \([0-9.]*\) s.*/\1/p' "$T/job.txt")
worker=$(cli -o json job "$id" | jq '[.workers[] | (.ended_ms - .started_ms)] | max / 1000')
awk -v r="$ran" -v w="$worker" 'BEGIN { exit !(r >= 2.0 && r + 0.15 >= w) }' ||
    fail "the stopped job ran $ran s, its longest worker $worker s: $(cat "$T/job.txt")"
pass "a stopped job ran $ran s: until its last worker was gone (longest worker $worker s, grace 2 s)"

# An agent without --fake-gpus on a machine where it finds no GPU.
gpus=$("$NODE_BIN" --check-config | sed -n 's/^# gpus: \([0-9]*\).*/\1/p')
if [ "${gpus:-0}" != 0 ]; then
    echo "SKIP (this part): this machine has $gpus GPU(s); the no-GPU warning needs a machine without"
    exit 0
fi
"$NODE_BIN" --check-config | grep_all "^# gpus: 0 (none found: only CPU-only workers, resources: {gpu: 0}, run here)" ||
    fail "--check-config: $("$NODE_BIN" --check-config | grep "^# gpus")"
"$NODE_BIN" --head "$HEAD" --name cpu1 --cpus 3 --state-dir "$T/node-cpu1" >>"$T/node-cpu1.log" 2>&1 &
PIDS+=($!)
wait_for 10 "2 nodes ALIVE" nodes_alive 2
grep -q "warning: no GPU found (no CUDA driver, or it sees no device): only CPU-only workers (resources: {gpu: 0}) can run on this node, in its 3 CPU slots (--cpus)" \
    "$T/node-cpu1.log" || fail "agent log: $(cat "$T/node-cpu1.log")"
cli nodes | grep -E "^[0-9]+ +cpu1 +ALIVE +0 +0 +3/3 .*no GPU found: only CPU-only workers \(resources: \{gpu: 0\}\) run here" >/dev/null ||
    fail "troupe nodes: $(cli nodes)"
pass "an agent that finds no GPU warns at start that only CPU-only workers run there; troupe nodes says so in REASON"
