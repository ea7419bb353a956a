#!/usr/bin/env bash
# A job with two groups runs to SUCCEEDED; every worker saw the right environment.
source "$(dirname "$0")/../lib.sh"
start_cluster
mkdir -p "$T/out"
cat >"$T/job.yaml" <<YAML
name: two-groups
cluster: {nodes: [4, 8, 16]}
groups:
  - name: policy
    workers: 4
    resources: {gpu: 2}
    strategy: PACK
    command: [sh, -c, 'env > $T/out/\$TROUPE_WORKER.env; echo hello from \$RANK']
    env: {ROLE: trainer}
  - name: generation
    workers: 2
    resources: {gpu: 1}
    strategy: SPREAD
    command: [sh, -c, 'env > $T/out/\$TROUPE_WORKER.env']
env: {SHARED: yes}
YAML
out=$(timeout 60 "$CLI_BIN" submit "$T/job.yaml" 2>"$T/submit.err") || fail "submit exited non-zero: $(cat "$T/submit.err")"
id=$(head -1 <<<"$out")
grep -q "hello from 3" <<<"$out" || fail "worker output not followed: $out"
grep -q "SUCCEEDED" "$T/submit.err" || fail "no SUCCEEDED line"
pass "submit followed job $id to SUCCEEDED (exit 0)"

# The rules are checked on what the workers saw (their env files), computed
# here from the README, not taken from the head's own view of the job.
for f in "$T"/out/*.env; do
    jq -Rn '[inputs | capture("^(?<key>[A-Za-z_][A-Za-z0-9_]*)=(?<value>.*)$")] | from_entries' "$f"
done | jq -s . >"$T/envs.json"
[ "$(jq length "$T/envs.json")" = 6 ] || fail "expected 6 env files, got $(ls "$T/out")"
# check RULE JQ: JQ, run on the workers' environments, yields true.
check() { jq -e "$2" "$T/envs.json" >/dev/null || fail "$1: $(jq -c "[.[] | {TROUPE_WORKER, TROUPE_NODE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, CUDA_VISIBLE_DEVICES, MASTER_ADDR, MASTER_PORT}]" "$T/envs.json")"; }
# groups: each group's workers sorted by RANK.
G='def groups: group_by(.TROUPE_GROUP) | map(sort_by(.RANK | tonumber));
   def gpus: .CUDA_VISIBLE_DEVICES | split(",") | map(tonumber);'
check "RANK is 0..W-1 and WORLD_SIZE is W in each group" \
    "$G groups | all(. as \$g | (map(.RANK | tonumber) == [range(\$g | length)]) and all(.WORLD_SIZE == (\$g | length | tostring)))"
check "group sizes: policy 4, generation 2" \
    '(map(select(.TROUPE_GROUP == "policy")) | length) == 4 and (map(select(.TROUPE_GROUP == "generation")) | length) == 2'
check "ranks contiguous per node (a node's ranks form one run)" \
    "$G groups | all(map(.TROUPE_NODE) as \$n | [range(\$n | length) | select(. == 0 or \$n[.] != \$n[. - 1])] | length == (\$n | unique | length))"
check "NODE_RANK is the node's index among the group's nodes, in rank order" \
    "$G groups | all((reduce .[].TROUPE_NODE as \$n ([]; if index([\$n]) then . else . + [\$n] end)) as \$order | all(.TROUPE_NODE as \$m | .NODE_RANK == (\$order | index([\$m]) | tostring)))"
check "LOCAL_RANK is 0..k-1 on each node in rank order and in GPU order; LOCAL_WORLD_SIZE is k" \
    "$G groups | all(group_by(.TROUPE_NODE) | all(. as \$on | (map(.LOCAL_RANK | tonumber) == [range(\$on | length)]) and (sort_by(gpus[0]) == \$on) and all(.LOCAL_WORLD_SIZE == (\$on | length | tostring))))"
check "each worker has its group's GPU count: policy 2, generation 1" \
    "$G all((gpus | length) == (if .TROUPE_GROUP == \"policy\" then 2 else 1 end))"
# CUDA_VISIBLE_DEVICES is exactly what the head assigned the worker (its
# record in the job), on the node the record names.
cli -o json job "$id" | jq -c '[.workers[] | {key: .name, value: {node, gpus: (.gpus | map(tostring) | join(","))}}] | from_entries' >"$T/assigned.json"
check "CUDA_VISIBLE_DEVICES and TROUPE_NODE are the GPUs and node of the worker's record" \
    "all(.TROUPE_WORKER as \$w | ($(cat "$T/assigned.json"))[\$w] as \$a | \$a != null and .CUDA_VISIBLE_DEVICES == \$a.gpus and .TROUPE_NODE == \$a.node)"
check "no GPU given twice (node, index), indices within the node's GPUs" \
    "$G [.[] | .TROUPE_NODE as \$n | gpus[] | [\$n, .]] | (length == 10) and (unique | length == 10) and all(.[1] < ({na: 4, nb: 8, nc: 16}[.[0]]))"
check "one MASTER_ADDR:MASTER_PORT per group, ports from the band and distinct per host" \
    "$G groups | all(map(.MASTER_ADDR + \":\" + .MASTER_PORT) | unique | length == 1) and (map(.[0].MASTER_PORT | tonumber) | all(. >= 29500 and . <= 29999) and (unique | length == 2))"
# MASTER_ADDR is the address the agent of rank 0's node registered with.
addrs=$(cli -o json nodes | jq -c '[.nodes[] | {key: .name, value: .address}] | from_entries')
check "MASTER_ADDR is the address of rank 0's node" \
    "$G groups | all(.[0].TROUPE_NODE as \$n0 | all(.MASTER_ADDR == ($addrs)[\$n0]))"
check "PACK keeps policy on one node; SPREAD puts generation on two" \
    '(map(select(.TROUPE_GROUP == "policy") | .TROUPE_NODE) | unique | length) == 1 and (map(select(.TROUPE_GROUP == "generation") | .TROUPE_NODE) | unique | length) == 2'
check "TROUPE_* name the job, group and worker" \
    "all(.TROUPE_JOB == \"$id\" and .TROUPE_JOB_NAME == \"two-groups\" and (.TROUPE_GROUP as \$g | .TROUPE_WORKER | startswith(\"job$id-\" + \$g + \"-\")) and .TROUPE_ATTEMPT == \"0\")"
check "job env and group env layers" \
    'all(.NCCL_NVLS_ENABLE == "0" and .SHARED == "yes" and ((.TROUPE_GROUP != "policy") or .ROLE == "trainer") and ((.TROUPE_GROUP == "policy") or .ROLE == null))'
pass "RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, CUDA_VISIBLE_DEVICES, MASTER_ADDR/PORT, env layers: README's rules hold"

# And the head reports what the workers saw.
job=$(cli -o json job "$id")
for w in $(jqr '.workers[].name' <<<"$job"); do
    wj=$(jq -c --arg n "$w" '.workers[] | select(.name==$n) | {rank: (.rank | tostring), node, gpus: (.gpus | map(tostring) | join(","))}' <<<"$job")
    [ "$(jq -c --arg n "$w" '.[] | select(.TROUPE_WORKER==$n) | {rank: .RANK, node: .TROUPE_NODE, gpus: .CUDA_VISIBLE_DEVICES}' "$T/envs.json")" = "$wj" ] ||
        fail "$w: the head reports $wj"
done
pass "troupe job -o json agrees with the workers' environment"
[ "$(cli -o json status | jqr .gpus.free)" = 28 ] || fail "GPUs not released after the job"
pass "all 28 GPUs free again"
