#!/usr/bin/env bash
# Rendezvous: a job of 2 groups (policy 4 + generation 2) whose workers meet
# per group and on the cross-group communicator `refit`: every rank gets its
# rank 0's ID, barriers pass, the all-gather lists every worker in rank order.
source "$(dirname "$0")/../lib.sh"
: "${RT_WORKER:?}"
start_cluster
cat >"$T/job.yaml" <<YAML
name: rdzv
cluster: {nodes: [4, 8]}
groups:
  - {name: policy, workers: 4, resources: {gpu: 1}, command: [$RT_WORKER, run]}
  - {name: generation, workers: 2, resources: {gpu: 1}, command: [$RT_WORKER, run]}
communicators:
  - {name: refit, groups: [policy, generation]}
env: {RT_COMM: refit, RT_STEPS: "0"}
YAML
timeout 60 "$CLI_BIN" submit "$T/job.yaml" >"$T/out" 2>"$T/err" || fail "job failed: $(cat "$T/err"; cli logs "$(head -1 "$T/out")")"
id=$(head -1 "$T/out")
cli logs "$id" >"$T/logs"
for g in policy generation refit; do
    n=$(grep -c "rt: comm $g epoch 0 rank" "$T/logs" || true)
    want=4; [ $g = generation ] && want=2; [ $g = refit ] && want=6
    [ "$n" = $want ] || fail "$g: $n of $want ranks got IDs: $(cat "$T/logs")"
    ids=$(grep "rt: comm $g epoch 0" "$T/logs" | sed 's/.* id //' | sort -u | wc -l)
    [ "$ids" = 1 ] || fail "$g: ranks hold different IDs: $(grep "rt: comm $g " "$T/logs")"
done
pass "policy (4), generation (2) and refit (6) each share one ID from their rank 0"
# refit's ranks: policy 0..3, then generation 0..1 as 4..5.
grep -q "\[job$id-generation-1\] rt: comm refit epoch 0 rank 5/6" "$T/logs" || fail "refit rank of generation-1: $(grep refit "$T/logs")"
want="rt: allgather 6: job$id-policy-0 job$id-policy-1 job$id-policy-2 job$id-policy-3 job$id-generation-0 job$id-generation-1"
[ "$(grep -c "$want" "$T/logs")" = 6 ] || fail "allgather: $(grep allgather "$T/logs")"
pass "refit ranks are policy then generation; all-gather in rank order on all 6"
