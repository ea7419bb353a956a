#!/usr/bin/env bash
# README, "Worker environment": what every worker finds in its environment.
# Promises (PROMISES.md): LOCAL_WORLD_SIZE, LOCAL_RANK in GPU order, MASTER_ADDR, TROUPE_NODE,
# TROUPE_JOB_NAME, TROUPE_HEAD, troupe's variables override the job's own,
# NCCL_NVLS_ENABLE=0 unless the job sets it.
source "$(dirname "$0")/../lib.sh"
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50
# --address differs from the hostname, so MASTER_ADDR must come from it.
start_node ea 4xH100:80GB --address 127.0.0.7 --stop-grace-ms 1000
start_node eb 2xH100:80GB --address 127.0.0.8 --stop-grace-ms 1000
wait_for 10 "2 nodes ALIVE" nodes_alive 2
mkdir -p "$T/out"
cat >"$T/env.yaml" <<YAML
name: env-promises
cluster: {nodes: [4, 2]}
groups:
  - name: g
    workers: 5
    resources: {gpu: 1}
    strategy: SPREAD
    command: [sh, -c, 'env > $T/out/\$TROUPE_WORKER.env']
    env: {LOCAL_RANK: "42", TROUPE_GROUP: mine}
env: {RANK: "99", WORLD_SIZE: "1", TROUPE_NODE: bogus, TROUPE_HEAD: "tcp://bogus:1", MASTER_PORT: "1",
      MASTER_ADDR: bogus, CUDA_VISIBLE_DEVICES: "7", LOCAL_WORLD_SIZE: "9", TROUPE_JOB_NAME: other,
      TROUPE_ATTEMPT: "5", MINE: kept}
YAML
cat >"$T/nccl.yaml" <<YAML
name: nccl-override
cluster: {nodes: [1]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sh, -c, 'env > $T/out/nccl.env']}]
env: {NCCL_NVLS_ENABLE: "1"}
YAML
id=$(submit "$T/env.yaml")
wait_for 20 "env-promises SUCCEEDED" is_job_state "$id" SUCCEEDED
val() { sed -n "s/^$2=//p" "$T/out/$1.env"; }
ws=$(ls "$T"/out/*.env | wc -l)
[ "$ws" = 5 ] || fail "expected 5 env files, got $ws"

# Where each worker ran, from its own TROUPE_NODE; counts per node.
declare -A per_node
for f in "$T"/out/*.env; do w=$(basename "$f" .env); n=$(val "$w" TROUPE_NODE); per_node[$n]=$(( ${per_node[$n]:-0} + 1 )); done
[ "${per_node[ea]:-0}" -ge 1 ] && [ "${per_node[eb]:-0}" -ge 1 ] && [ $(( per_node[ea] + per_node[eb] )) = 5 ] ||
    fail "TROUPE_NODE: workers per node ${per_node[*]} (keys ${!per_node[*]})"
pass "TROUPE_NODE names the agent each worker runs on (ea: ${per_node[ea]}, eb: ${per_node[eb]})"

for f in "$T"/out/*.env; do
    w=$(basename "$f" .env); n=$(val "$w" TROUPE_NODE)
    [ "$(val "$w" LOCAL_WORLD_SIZE)" = "${per_node[$n]}" ] || fail "$w: LOCAL_WORLD_SIZE=$(val "$w" LOCAL_WORLD_SIZE), $n runs ${per_node[$n]}"
done
pass "LOCAL_WORLD_SIZE is the number of the group's workers on that node"

# LOCAL_RANK follows GPU order: on each node, the workers taken by LOCAL_RANK
# hold increasing GPUs, and LOCAL_RANK runs 0..k-1 (ea holds 3 or 4 of them,
# so a reversed or shuffled order shows).
seen=""
for n in ea eb; do
    order=$(for f in "$T"/out/job*.env; do
        w=$(basename "$f" .env)
        if [ "$(val "$w" TROUPE_NODE)" = "$n" ]; then echo "$(val "$w" LOCAL_RANK) $(val "$w" CUDA_VISIBLE_DEVICES)"; fi
    done | sort -n)
    lrs=$(awk '{ printf "%s%s", sep, $1; sep = "," }' <<<"$order")
    want=$(seq -s, 0 $((per_node[$n] - 1)))
    [ "$lrs" = "$want" ] || fail "$n: LOCAL_RANKs $lrs, want $want"
    awk 'NR > 1 && $2 <= prev { exit 1 } { prev = $2 }' <<<"$order" ||
        fail "$n: LOCAL_RANK does not follow GPU order (LOCAL_RANK GPU): $(tr '\n' ';' <<<"$order")"
    seen="$seen $n: $(tr ' \n' ':,' <<<"$order")"
done
pass "LOCAL_RANK follows GPU order on each node (LOCAL_RANK:GPU)$seen"

r0=$(grep -lx "RANK=0" "$T"/out/job*.env) || fail "no worker with RANK=0"
n0=$(sed -n 's/^TROUPE_NODE=//p' "$r0"); want=$([ "$n0" = ea ] && echo 127.0.0.7 || echo 127.0.0.8)
for f in "$T"/out/*.env; do w=$(basename "$f" .env); [ "$(val "$w" MASTER_ADDR)" = "$want" ] || fail "$w: MASTER_ADDR=$(val "$w" MASTER_ADDR), want $want"; done
pass "MASTER_ADDR is the address of rank 0's node ($n0, $want)"

for f in "$T"/out/*.env; do
    w=$(basename "$f" .env)
    [ "$(val "$w" TROUPE_JOB_NAME)" = env-promises ] || fail "$w: TROUPE_JOB_NAME=$(val "$w" TROUPE_JOB_NAME)"
    [ "$(val "$w" TROUPE_HEAD)" = "$HEAD" ] || fail "$w: TROUPE_HEAD=$(val "$w" TROUPE_HEAD), want $HEAD"
done
pass "TROUPE_JOB_NAME is the job's name; TROUPE_HEAD is the head ($HEAD)"

for f in "$T"/out/*.env; do
    w=$(basename "$f" .env)
    r=$(val "$w" RANK); lr=$(val "$w" LOCAL_RANK)
    [ "$r" != 99 ] && [ "$r" -ge 0 ] && [ "$r" -lt 5 ] || fail "$w: RANK=$r (the job's RANK=99 won)"
    [ "$lr" != 42 ] && [ "$lr" -lt "$(val "$w" LOCAL_WORLD_SIZE)" ] || fail "$w: LOCAL_RANK=$lr (the group's 42 won)"
    [ "$(val "$w" WORLD_SIZE)" = 5 ] && [ "$(val "$w" TROUPE_GROUP)" = g ] && [ "$(val "$w" TROUPE_ATTEMPT)" = 0 ] ||
        fail "$w: WORLD_SIZE/TROUPE_GROUP/TROUPE_ATTEMPT overridden by the job"
    [ "$(val "$w" MASTER_PORT)" != 1 ] && [ "$(val "$w" MASTER_ADDR)" != bogus ] || fail "$w: MASTER_* overridden"
    cvd=$(val "$w" CUDA_VISIBLE_DEVICES)
    [[ "$cvd" =~ ^[0-3]$ ]] || fail "$w: CUDA_VISIBLE_DEVICES=$cvd (the job's 7 won?)"
    [ "$(val "$w" MINE)" = kept ] || fail "$w: the job's own MINE is missing"
done
pass "troupe's variables override the job's and group's own (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_*, CUDA_VISIBLE_DEVICES, TROUPE_*); other job variables kept"

for f in "$T"/out/job*.env; do grep -qx "NCCL_NVLS_ENABLE=0" "$f" || fail "$(basename "$f"): NCCL_NVLS_ENABLE default missing"; done
id2=$(submit "$T/nccl.yaml")
wait_for 20 "nccl-override SUCCEEDED" is_job_state "$id2" SUCCEEDED
grep -qx "NCCL_NVLS_ENABLE=1" "$T/out/nccl.env" || fail "the job's NCCL_NVLS_ENABLE=1 was not kept"
pass "NCCL_NVLS_ENABLE=0 by default, the job's own value kept"
