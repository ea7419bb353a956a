#!/usr/bin/env bash
# CPU-only workers (resources: {gpu: 0}) on an agent that has no GPU at all:
# no --fake-gpus, and CUDA_VISIBLE_DEVICES="" hides whatever GPUs this machine
# has from the agent's discovery. The node registers its CPU slots (--cpus),
# a CPU-only job runs there to SUCCEEDED with CUDA_VISIBLE_DEVICES set empty,
# the slots are a limit (refused when it could never fit, PENDING while they
# are held), and a job mixing a GPU group and a CPU-only group is placed as
# one gang across a GPU node and the CPU node. A head restart keeps a running
# CPU-only job's slots taken (restored from its stored placement).
source "$(dirname "$0")/../lib.sh"
start_head
CUDA_VISIBLE_DEVICES= "$NODE_BIN" --head "$HEAD" --name cpu0 --cpus 2 --stop-grace-ms 1000 \
    --state-dir "$T/node-cpu0" >>"$T/node-cpu0.log" 2>&1 &
PIDS+=($!)
wait_for 10 "cpu0 ALIVE" nodes_alive 1
node=$(cli -o json nodes | jq -c '.nodes[0] | {gpus: (.gpus | length), cpus, cpus_free}')
[ "$node" = '{"gpus":0,"cpus":2,"cpus_free":2}' ] || fail "cpu0 as registered: $node"
cli nodes | grep_all -E "^ *[0-9]+ +cpu0 +ALIVE +0 +0 +2/2 " || fail "troupe nodes: $(cli nodes)"
pass "an agent without GPUs registers 2 CPU slots: $node"
# cluster_cpus: troupe status's CPU slots, "total free" from -o json, and the
# text line must say the same.
cluster_cpus() {
    local js txt
    js=$(cli -o json status | jq -r '"\(.cpus.total) \(.cpus.free)"')
    txt=$(cli status | sed -n 's/^cpus      \([0-9]*\) total, \([0-9.]*\) free (slots for CPU-only workers.*/\1 \2/p')
    [ "$js" = "$txt" ] || fail "troupe status: -o json says '$js', the text '$txt': $(cli status)"
    echo "$js"
}
[ "$(cluster_cpus)" = "2 2" ] || fail "troupe status CPU slots: $(cli status)"
pass "troupe status counts the 2 CPU slots, all free"

cat >"$T/cpu.yaml" <<'YAML'
name: cpu
groups:
  - name: c
    workers: 2
    resources: {gpu: 0}
    command: [sh, -c, 'echo "visible=[${CUDA_VISIBLE_DEVICES-unset}] rank=$RANK of $WORLD_SIZE on $TROUPE_NODE"']
YAML
id=$(submit "$T/cpu.yaml")
wait_for 20 "CPU-only job $id SUCCEEDED" is_job_state "$id" SUCCEEDED
for r in 0 1; do
    logs_grep "$id" "visible=\[\] rank=$r of 2 on cpu0" || fail "worker $r: $(cli logs "$id")"
done
[ "$(cli -o json job "$id" | jq -c '[.workers[] | [.node, (.gpus | length)]]')" = '[["cpu0",0],["cpu0",0]]' ] ||
    fail "placement: $(cli -o json job "$id" | jq -c .workers)"
pass "a CPU-only job ran on the GPU-less node to SUCCEEDED, CUDA_VISIBLE_DEVICES empty"

# Could never fit: 3 workers on 2 slots; a GPU group on a cluster without GPUs.
sed 's/workers: 2/workers: 3/' "$T/cpu.yaml" >"$T/three.yaml"
set +e; out=$(cli submit "$T/three.yaml" 2>&1); rc=$?; set -e
[ $rc = 1 ] && grep -qF "FAILED_PRECONDITION: CPU-only group c needs 3 workers x 1 CPU on nodes with CPU slots; alive nodes have room for 2 such workers" <<<"$out" ||
    fail "3 workers on 2 slots: rc=$rc $out"
pass "refused at submit: $out"
cat >"$T/gpu.yaml" <<'YAML'
name: gpu
cluster: {nodes: [1]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [true]}]
YAML
set +e; out=$(cli submit "$T/gpu.yaml" 2>&1); rc=$?; set -e
[ $rc = 1 ] && grep -qF "group g needs 1 node with 1 free GPUs; largest node has 0" <<<"$out" ||
    fail "GPU job on a cluster without GPUs: rc=$rc $out"
pass "refused at submit: $out"

# The slots are held while workers run: the next CPU job waits, saying why.
cat >"$T/hold.yaml" <<'YAML'
name: hold
groups: [{name: h, workers: 2, resources: {gpu: 0, cpu: 1}, command: [sleep, '300']}]
YAML
hold=$(submit "$T/hold.yaml")
wait_for 20 "job $hold RUNNING" is_job_state "$hold" RUNNING
[ "$(cli -o json nodes | jq '.nodes[0].cpus_free')" = 0 ] || fail "slots held: $(cli nodes)"
[ "$(cluster_cpus)" = "2 0" ] || fail "troupe status while the slots are held: $(cli status)"
id=$(submit "$T/cpu.yaml")
wait_for 10 "job $id to wait for CPU slots" bash -c "'$CLI_BIN' -o json job $id | jq -e '.reason | test(\"waiting for free CPU slots: CPU-only group c needs 2 workers x 1 CPU\")'"
is_job_state "$id" PENDING || fail "job $id: $(cli job "$id" | head -3)"
cli stop "$hold" >/dev/null
wait_for 20 "job $id SUCCEEDED once the slots are back" is_job_state "$id" SUCCEEDED
pass "a CPU job waited PENDING for the held slots, then ran"

# A mixed job: a GPU group on the GPU node (which gives no CPU slots) and a
# CPU-only group on cpu0, placed together.
start_node g1 1xH200:141GB --cpus 0 --stop-grace-ms 1000
wait_for 10 "2 nodes ALIVE" nodes_alive 2
cat >"$T/mixed.yaml" <<'YAML'
name: mixed
cluster: {nodes: [1]}
groups:
  - name: train
    workers: 1
    resources: {gpu: 1}
    command: [sh, -c, 'echo "train visible=[$CUDA_VISIBLE_DEVICES] on $TROUPE_NODE"']
  - name: rollout
    workers: 2
    resources: {gpu: 0, cpu: 0.5}
    strategy: SPREAD
    command: [sh, -c, 'echo "rollout visible=[${CUDA_VISIBLE_DEVICES-unset}] rank=$RANK on $TROUPE_NODE"']
YAML
id=$(submit "$T/mixed.yaml")
wait_for 20 "mixed job $id SUCCEEDED" is_job_state "$id" SUCCEEDED
logs_grep "$id" "train visible=\[0\] on g1" || fail "train: $(cli logs "$id")"
for r in 0 1; do
    logs_grep "$id" "rollout visible=\[\] rank=$r on cpu0" || fail "rollout $r: $(cli logs "$id")"
done
pass "a mixed job ran its GPU group on g1 and its CPU-only group on cpu0"
[ "$(cli -o json nodes | jq -c '[.nodes[] | .cpus_free]')" = '[2,0]' ] || fail "slots given back: $(cli nodes)"
[ "$(cluster_cpus)" = "2 2" ] || fail "troupe status after the mixed job (g1 has --cpus 0): $(cli status)"
pass "every CPU slot came back"

# kill -9 of the head while a CPU-only job holds both slots: the restarted
# head restores the placement, slots included, so the next CPU job waits.
hold=$(submit "$T/hold.yaml")
wait_for 20 "job $hold RUNNING" is_job_state "$hold" RUNNING
kill -9 "$HEAD_PID"; wait "$HEAD_PID" 2>/dev/null || true
mark=$(head_log_mark)
start_head
wait_for 20 "cpu0 and g1 to register again with the new head" reregistered "$mark" cpu0 g1
is_job_state "$hold" RUNNING || fail "job $hold after the restart: $(cli job "$hold" | head -3)"
[ "$(cli -o json nodes | jq -c '[.nodes[] | .cpus_free]')" = '[0,0]' ] || fail "restored slots: $(cli nodes)"
id=$(submit "$T/cpu.yaml")
wait_for 10 "job $id to wait for the restored job's slots" bash -c "'$CLI_BIN' -o json job $id | jq -e '.reason | test(\"waiting for free CPU slots\")'"
cli stop "$hold" >/dev/null
wait_for 20 "job $id SUCCEEDED" is_job_state "$id" SUCCEEDED
pass "a head restart kept the running CPU-only job's slots taken; the next CPU job ran once they came back"
