#!/usr/bin/env bash
# examples/torch/rl.py (the RL pattern in PyTorch, gloo on CPU): the policy
# group (2 ranks, DDP) trains 20 steps; at steps 5, 10, 15 and 20 policy rank 0
# broadcasts its weights over the job's refit communicator, a process group of
# its own (troupe.torch.new_process_group) beside each group's default one.
# Both generation ranks, which started from other weights, then hold exactly
# the policy's parameters (same digest) and report the same validation loss
# the policy computes (to the printed digits), also to `troupe metrics`; the
# profile range (3:5 on *policy-0) gives a trace of steps 3 and 4 of that
# worker only. Exit 77 (skipped) without torch.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/py_lib.bash"
EX=$(cd "$(dirname "$0")/../../../examples/torch" && pwd)
need_torch_gloo
start_cluster
mkdir "$T/ex" && cp "$EX/rl.py" "$EX/rl.yaml" "$T/ex/"
sed -e "s|command: \[python3, rl.py, --steps, \"40\", --refit-every, \"10\"\]|command: [$PY_CMD, rl.py, --steps, \"20\", --refit-every, \"5\"]|" \
    -e "s|^# env: .*|env: {$PY_JOB_ENV, GLOO_SOCKET_IFNAME: lo}|" "$T/ex/rl.yaml" >"$T/ex/job.yaml"
[ "$(grep -c '"20", --refit-every, "5"' "$T/ex/job.yaml")" = 2 ] && grep -q "^env: " "$T/ex/job.yaml" ||
    fail "rl.yaml changed shape: $(cat "$T/ex/job.yaml")"
timeout 200 "$CLI_BIN" submit "$T/ex/job.yaml" >"$T/out" 2>"$T/err" || fail "rl job: $(cat "$T/err"; cli logs "$(head -1 "$T/out")")"
id=$(head -1 "$T/out")
cli logs "$id" >"$T/logs"
[ "$(grep -c "rl: job$id-.* refit rank [0-3]/4 group rank [01]/2 backend gloo on cpu" "$T/logs")" = 4 ] ||
    fail "ranks: $(grep 'rl:' "$T/logs")"
first=""
for s in 5 10 15 20; do
    p=$(grep "rl: policy refit step=$s " "$T/logs") || fail "no policy refit at $s: $(grep rl: "$T/logs")"
    params=$(sed 's/.* params=\([0-9a-f]*\) .*/\1/' <<<"$p")
    val=$(sed 's/.* val_loss=\([0-9.]*\) .*/\1/' <<<"$p")
    gen=$(sed 's/.*generation_val_loss=\([0-9.]*\)$/\1/' <<<"$p")
    [ "$val" = "$gen" ] || fail "step $s: policy val_loss $val, generation's $gen: $p"
    for r in 2 3; do
        grep -q "job$id-generation-$((r - 2))\] rl: generation refit step=$s rank=$r bytes=[0-9]* ms=[0-9.]* params=$params val_loss=$val$" "$T/logs" ||
            fail "generation rank $r at step $s (want params=$params val_loss=$val): $(grep "generation refit step=$s " "$T/logs")"
    done
    first=${first:-$val}
done
for r in 0 1; do
    b=$(grep "job$id-generation-$r\] rl: .* before any refit" "$T/logs") || fail "generation $r: no initial line"
    grep -q "params=$params" <<<"$b" && fail "generation $r started with the policy's weights: $b"
done
awk -v a="$first" -v b="$val" 'BEGIN { exit !(b < a) }' || fail "validation loss did not fall: $first -> $val"
pass "4 refits over the refit process group: both generation ranks hold the policy's parameters and report its validation loss ($first at step 5 -> $val at step 20): $(grep -m1 'rl: policy refit' "$T/logs")"
m=$(cli -o json metrics "$id" --name val_loss)
[ "$(jq -c '[.points[] | .step] | sort' <<<"$m")" = "[5,5,10,10,15,15,20,20]" ] || fail "val_loss metrics: $m"
[ "$(jq -c '[.points[] | .worker] | unique' <<<"$m")" = "[\"job$id-generation-0\",\"job$id-generation-1\"]" ] || fail "val_loss workers: $m"
[ "$(cli -o json metrics "$id" --name loss | jq '[.points[]] | length')" = 40 ] || fail "policy loss metrics"
pass "troupe metrics: val_loss of both generation ranks at each refit, the policy's loss for 2 x 20 steps"
cli trace "$id" --output "$T/trace.json" >/dev/null || fail "troupe trace"
got=$(jq -c '[.traceEvents[] | select(.ph == "X" and .cat == "step") | [.pid, .args.step]] | sort' "$T/trace.json")
[ "$got" = "[[0,3],[0,4]]" ] || fail "trace steps: $got"
pass "profile 3:5 on *policy-0: the trace holds steps 3 and 4 of rank 0 only"
