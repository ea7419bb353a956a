#!/usr/bin/env bash
# env_style: torchrun. A group that opts in gets, beside troupe's variables
# (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR/PORT), what
# torchrun gives its workers (GROUP_RANK and GROUP_WORLD_SIZE for its nodes,
# ROLE_*, TORCHELASTIC_*, OMP_NUM_THREADS=1 with several workers on a node),
# and an unmodified torchrun program (env:// rendezvous, gloo) runs on 4
# workers over 2 nodes. A group that does not opt in gets none of them, and a
# job's own OMP_NUM_THREADS wins. Exit 77 (skipped) without torch.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/py_lib.bash"
D=$(cd "$(dirname "$0")" && pwd)
need_torch_gloo
start_cluster
cat >"$T/job.yaml" <<YAML
name: trun
cluster: {nodes: [8, 16]}   # the 16 only fits nc, so the 8 lands on nb
groups:
  - {name: trainer, workers: 4, resources: {gpu: 4}, strategy: SPREAD, env_style: torchrun, command: [$PY_CMD, $D/torchrun_prog.py, dist]}
  - {name: plain, workers: 1, resources: {gpu: 1}, command: [$PY_CMD, $D/torchrun_prog.py]}
  - {name: own, workers: 2, resources: {gpu: 1}, env_style: torchrun, env: {OMP_NUM_THREADS: "3"},
     command: [$PY_CMD, $D/torchrun_prog.py]}
env: {GLOO_SOCKET_IFNAME: lo}
restart: {max_restarts: 2}
YAML
timeout 150 "$CLI_BIN" submit "$T/job.yaml" >"$T/out" 2>"$T/err" || fail "job failed: $(cat "$T/err"; cli logs "$(head -1 "$T/out")")"
id=$(head -1 "$T/out")
cli logs "$id" >"$T/logs"
j=$(cli -o json job "$id")
# Where troupe placed the trainers: nodes in the order of their first rank.
mapfile -t tnode < <(jq -r '[.workers[] | select(.group == "trainer")] | sort_by(.rank) | .[].node' <<<"$j")
nodes=($(printf '%s\n' "${tnode[@]}" | awk '!seen[$0]++'))
[ "${#nodes[@]}" -ge 2 ] || fail "trainers on one node: ${tnode[*]}"
for r in 0 1 2 3; do
    node_rank=0 local=0 lws=0
    for k in "${!nodes[@]}"; do [ "${nodes[$k]}" != "${tnode[$r]}" ] || node_rank=$k; done
    for q in 0 1 2 3; do
        [ "${tnode[$q]}" = "${tnode[$r]}" ] || continue
        lws=$((lws + 1)); [ "$q" -ge "$r" ] || local=$((local + 1))
    done
    line=$(grep "job$id-trainer-$r\] trun: env" "$T/logs") || fail "trainer $r: no env line: $(cat "$T/logs")"
    want="RANK=$r WORLD_SIZE=4 LOCAL_RANK=$local LOCAL_WORLD_SIZE=$lws GROUP_RANK=$node_rank GROUP_WORLD_SIZE=${#nodes[@]} ROLE_NAME=trainer ROLE_RANK=$r ROLE_WORLD_SIZE=4 MASTER_ADDR="
    grep -qF "$want" <<<"$line" || fail "trainer $r on ${tnode[$r]}: $line, want $want"
    omp=-; [ "$lws" = 1 ] || omp=1
    grep -q "TORCHELASTIC_RUN_ID=troupe-job$id-trainer TORCHELASTIC_RESTART_COUNT=0 TORCHELASTIC_MAX_RESTARTS=2 TORCHELASTIC_USE_AGENT_STORE=False OMP_NUM_THREADS=$omp\$" <<<"$line" ||
        fail "trainer $r torchelastic: $line"
    grep -q "job$id-trainer-$r\] trun: rank $r/4 local $local node $node_rank threads [0-9]* sum 6\$" "$T/logs" ||
        fail "trainer $r process group: $(grep "trainer-$r\] trun: rank" "$T/logs")"
done
pass "env_style torchrun: 4 ranks on ${#nodes[@]} nodes (${tnode[*]}) see torchrun's variables and meet over env:// (sum of ranks 6): $(grep -m1 -o 'trun: env.*' "$T/logs")"
line=$(grep "job$id-plain-0\] trun: env" "$T/logs") || fail "plain: no env line"
grep -q "RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 GROUP_RANK=- GROUP_WORLD_SIZE=- ROLE_NAME=- ROLE_RANK=- ROLE_WORLD_SIZE=- MASTER_ADDR=[^-]" <<<"$line" &&
    grep -q "TORCHELASTIC_RUN_ID=- TORCHELASTIC_RESTART_COUNT=- TORCHELASTIC_MAX_RESTARTS=- TORCHELASTIC_USE_AGENT_STORE=- OMP_NUM_THREADS=-$" <<<"$line" ||
    fail "plain group: $line"
pass "a group without env_style gets troupe's variables only: $line"
for r in 0 1; do
    grep -q "job$id-own-$r\] trun: env.*ROLE_NAME=own .*OMP_NUM_THREADS=3$" "$T/logs" || fail "own $r: $(grep "own-$r\] trun" "$T/logs")"
done
pass "the group's own OMP_NUM_THREADS=3 wins over torchrun's 1"
sed 's/env_style: torchrun, command/env_style: torch-run, command/' "$T/job.yaml" >"$T/bad.yaml"
out=$("$CLI_BIN" submit --no-wait "$T/bad.yaml" 2>&1) && fail "env_style torch-run accepted: $out"
grep -q "unknown env_style 'torch-run' (use torchrun" <<<"$out" || fail "bad env_style: $out"
pass "a bad env_style is refused at submit: $out"
