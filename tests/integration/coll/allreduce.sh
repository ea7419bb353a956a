#!/usr/bin/env bash
# The CPU collective in a real job: 4 workers on two nodes open the
# collective on their group (addresses through the rendezvous), all-reduce
# 1,000,003 float32 and float64 values each and check every element exactly,
# reduce-scatter and all-gather the float32 values (uneven segments) likewise,
# broadcast from the last rank, and pass a barrier. A group of 3 (odd) too.
source "$(dirname "$0")/../lib.sh"
: "${COLL_WORKER:?}"
start_cluster
cat >"$T/job.yaml" <<YAML
name: coll
cluster: {nodes: [4, 8]}
groups:
  - {name: dp, workers: 4, resources: {gpu: 2}, command: [$COLL_WORKER]}
  - {name: odd, workers: 3, resources: {gpu: 1}, command: [$COLL_WORKER]}
YAML
timeout 120 "$CLI_BIN" submit "$T/job.yaml" >"$T/out" 2>"$T/err" || fail "job failed: $(cat "$T/err"; cli logs "$(head -1 "$T/out")")"
id=$(head -1 "$T/out")
cli logs "$id" >"$T/logs"
for g in dp odd; do
    n=4; [ $g = odd ] && n=3
    for dt in f32 f64; do
        got=$(grep -c "\[job$id-$g-[0-9]\] cw: rank [0-9]/$n allreduce $dt 1000003 exact" "$T/logs" || true)
        [ "$got" = $n ] || fail "$g $dt: $got of $n ranks exact: $(cat "$T/logs")"
    done
    got=$(grep -c "\[job$id-$g-[0-9]\] cw: rank [0-9]/$n reduce-scatter+all-gather f32 1000003 exact" "$T/logs" || true)
    [ "$got" = $n ] || fail "$g: $got of $n ranks exact after reduce-scatter and all-gather: $(grep cw: "$T/logs")"
    got=$(grep -c "\[job$id-$g-[0-9]\] cw: rank [0-9] ok" "$T/logs" || true)
    [ "$got" = $n ] || fail "$g: $got of $n ranks passed broadcast and barrier: $(cat "$T/logs")"
done
# rank r contributes i%4099 + 7r + 1 at element i: over 4 ranks element 0 sums
# to 42+4 = 46, the last (1000002 % 4099 = 3945) to 4*3945+46 = 15826.
grep -q "\[job$id-dp-0\] cw: rank 0/4 allreduce f32 1000003 exact, \[0\]=46 \[last\]=15826" "$T/logs" ||
    fail "sums: $(grep allreduce "$T/logs")"
nodes=$(cli -o json job "$id" | jq -r '[.workers[] | select(.group=="dp") | .node] | unique | length')
pass "dp (4 ranks on $nodes nodes) and odd (3 ranks): all-reduce f32/f64, reduce-scatter + all-gather of 1000003 exact, broadcast, barrier"
