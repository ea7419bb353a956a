#!/usr/bin/env bash
# examples/torch/dp.py (PyTorch DDP over gloo through troupe.torch): two ranks
# train what one rank trains with the same global batch (parameter sums equal
# to 1e-5), the loss falls, every rank's step figures reach the head, and the
# job's profile range (steps 3:5 on *dp-0) gives a trace of exactly steps 3
# and 4 of that worker, with its forward/backward/optimizer spans. Exit 77
# (skipped) without torch.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/py_lib.bash"
EX=$(cd "$(dirname "$0")/../../../examples/torch" && pwd)
need_torch_gloo
start_cluster
# A copy of the example: its workers start in the job file's folder.
mkdir "$T/ex" && cp "$EX/dp.py" "$EX/dp.yaml" "$T/ex/"
run() { # run WORKERS: the example on WORKERS ranks; prints the job id
    sed -e "s|^name: torch-dp|name: dp$1|" -e "s|workers: 2|workers: $1|" -e "s|nodes: \[8\]|nodes: [4]|" \
        -e "s|command: \[python3, dp.py, --steps, \"50\", --global-batch, \"64\"\]|command: [$PY_CMD, dp.py, --steps, \"30\", --global-batch, \"32\"]|" \
        -e "s|^# env: .*|env: {$PY_JOB_ENV, GLOO_SOCKET_IFNAME: lo}|" "$T/ex/dp.yaml" >"$T/ex/dp$1.yaml"
    grep -q "workers: $1" "$T/ex/dp$1.yaml" && grep -q "^env: " "$T/ex/dp$1.yaml" && grep -q '"30"' "$T/ex/dp$1.yaml" ||
        fail "dp.yaml changed shape: $(cat "$T/ex/dp$1.yaml")"
    timeout 150 "$CLI_BIN" submit "$T/ex/dp$1.yaml" >"$T/out$1" 2>"$T/err$1" || fail "dp on $1 ranks: $(cat "$T/err$1"; cli logs "$(head -1 "$T/out$1")")"
    head -1 "$T/out$1"
}
id2=$(run 2)
id1=$(run 1)
sum() { cli logs "$1" | grep "dp: rank 0/$2 done" | sed 's/.*parameter sum //'; }
s2=$(sum "$id2" 2); s1=$(sum "$id1" 1)
[ -n "$s2" ] && [ -n "$s1" ] || fail "no result: $(cli logs "$id2"; cli logs "$id1")"
awk -v a="$s2" -v b="$s1" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(d <= 1e-5 * m + 1e-9) }' ||
    fail "2 ranks ($s2) and 1 rank ($s1) trained different models"
[ "$(cli logs "$id2" | grep -c "dp: rank [01]/2 done: backend gloo on cpu")" = 2 ] || fail "ranks: $(cli logs "$id2")"
first=$(cli logs "$id2" | grep "dp: step 1 loss" | sed 's/.* loss //'); last=$(cli logs "$id2" | grep "dp: step 30 loss" | sed 's/.* loss //')
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a / 2) }' || fail "the loss did not fall: $first -> $last"
pass "DDP on 2 ranks through troupe.torch = 1 rank with the same global batch (parameter sums $s2 vs $s1); loss $first -> $last"
n=$(cli -o json metrics "$id2" --name loss | jq '[.points[] | .worker] | group_by(.) | map(length) | join(",")' -r)
[ "$n" = "30,30" ] || fail "loss points per rank: $n"
pass "30 steps' loss from each rank at the head"
cli trace "$id2" --output "$T/trace.json" >/dev/null || fail "trace"
got=$(jq -c '[.traceEvents[] | select(.ph == "X" and (.name | startswith("step"))) | .name] | sort' "$T/trace.json")
[ "$got" = '["step 3","step 4"]' ] || fail "profiled steps: $got"
[ "$(jq '[.traceEvents[] | select(.ph == "X") | .pid] | unique | length' "$T/trace.json")" = 1 ] || fail "more than one worker traced"
[ "$(jq -c '[.traceEvents[] | select(.ph == "X" and .name == "forward")] | length' "$T/trace.json")" = 2 ] || fail "phases: $(jq -c . "$T/trace.json" | head -c 600)"
pass "profile steps 3:5 on *dp-0: the trace holds steps 3 and 4 of that worker only, with their phases"
