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

job=$(cli -o json job "$id")
[ "$(jqr '.workers | length' <<<"$job")" = 6 ] || fail "expected 6 workers"
# PACK keeps the 4x2 policy group on one node (NVLink); SPREAD puts gen on 2.
[ "$(jqr '[.workers[] | select(.group=="policy") | .node] | unique | length' <<<"$job")" = 1 ] || fail "policy not packed"
[ "$(jqr '[.workers[] | select(.group=="generation") | .node] | unique | length' <<<"$job")" = 2 ] || fail "gen not spread"
ports=$(jqr '[.groups[] | "\(.master_addr):\(.master_port)"] | unique | length' <<<"$job")
[ "$ports" = 2 ] || fail "master addr:port not unique per group"
for w in $(jqr '.workers[].name' <<<"$job"); do
    f="$T/out/$w.env"; [ -f "$f" ] || fail "$w wrote no env"
    wj=$(jq --arg n "$w" '.workers[] | select(.name==$n)' <<<"$job")
    g=$(jqr .group <<<"$wj")
    want_cvd=$(jqr '.gpus | map(tostring) | join(",")' <<<"$wj")
    grep -qx "RANK=$(jqr .rank <<<"$wj")" "$f" || fail "$w RANK"
    grep -qx "LOCAL_RANK=$(jqr .local_rank <<<"$wj")" "$f" || fail "$w LOCAL_RANK"
    grep -qx "NODE_RANK=$(jqr .node_rank <<<"$wj")" "$f" || fail "$w NODE_RANK"
    grep -qx "CUDA_VISIBLE_DEVICES=$want_cvd" "$f" || fail "$w CUDA_VISIBLE_DEVICES (want $want_cvd)"
    grep -qx "WORLD_SIZE=$([ "$g" = policy ] && echo 4 || echo 2)" "$f" || fail "$w WORLD_SIZE"
    grep -qx "TROUPE_WORKER=$w" "$f" && grep -qx "TROUPE_GROUP=$g" "$f" && grep -qx "TROUPE_JOB=$id" "$f" || fail "$w TROUPE_*"
    grep -qx "MASTER_PORT=$(jq -r --arg g "$g" '.groups[] | select(.name==$g) | .master_port' <<<"$job")" "$f" || fail "$w MASTER_PORT"
    grep -qx "NCCL_NVLS_ENABLE=0" "$f" && grep -qx "SHARED=yes" "$f" || fail "$w job env"
    [ "$g" != policy ] || grep -qx "ROLE=trainer" "$f" || fail "$w group env"
done
pass "RANK, WORLD_SIZE, LOCAL_RANK, NODE_RANK, CUDA_VISIBLE_DEVICES, MASTER_PORT, env layers per worker"
[ "$(cli -o json status | jqr .gpus.free)" = 28 ] || fail "GPUs not released after the job"
pass "all 28 GPUs free again"
