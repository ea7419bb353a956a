#!/usr/bin/env bash
# Checkpoint and resume with N ranks continue the same curve, and a killed
# rank under `max_restarts: 1` costs a restart, not the job: 2 troupe-train
# ranks on the CPU collective checkpoint every 20 steps (rank 0 the model,
# each rank its data position); rank 1 is SIGKILLed after 50 steps; the group
# restarts, both ranks resume from the last checkpoint and the job SUCCEEDS.
# Every step either attempt reported (loss, grad_norm, val_loss) equals the
# uninterrupted standalone run with micro_batch 2N within 1e-5.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/dp_lib.bash"
HERE=$(cd "$(dirname "$0")" && pwd)
start_cluster --dead-after 50 # node liveness is not under test; at load 20+ a 1 s lease SIGKILLed (fenced) the workers
"$TRAIN_BIN" --make-data "$T/data.tok" --tokens 16384 >/dev/null
cat >"$T/train.yaml" <<YAML
seed: 9
device: cpu
model: {layers: 2, width: 32, heads: 2, seq_len: 16}
train: {steps: 400, micro_batch: 2, accum_steps: 2, warmup_steps: 5, lr: 3e-3, grad_clip: 0.5}
data: {path: $T/data.tok, val_fraction: 0.1}
eval: {every: 25, batches: 2}
checkpoint: {dir: $T/ckpt, every: 20}
dp: {timeout_ms: 20000}
YAML
dp_job restart 2 "$T/train.yaml" "$T/m" 1
id=$(submit "$T/restart.yaml")
wait_for 60 "rank 1 to finish 50 steps" lines_at_least "$T/m.1" 50
lines_at_least "$T/m.1" 400 && fail "rank 1 finished before it could be killed (machine too fast for this test?)"
pid=$(train_pid "$id" policy-1) || fail "no troupe-train process for policy-1"
kill -9 "$pid"
# The reference only now: run before the kill it would slow the job down
# past the point where the kill means anything.
"$TRAIN_BIN" --config "$T/train.yaml" --set train.micro_batch=4 --set checkpoint.dir="$T/refckpt" \
    --metrics-json "$T/ref" >"$T/ref.log" 2>&1 || fail "reference run failed: $(tail -3 "$T/ref.log")"
wait_for 150 "job $id to succeed after its restart" is_job_state "$id" SUCCEEDED
[ "$(cli -o json job "$id" | jqr .restarts)" = 1 ] || fail "restarts: $(cli -o json job "$id" | jqr .restarts), want 1"
cli logs "$id" >"$T/logs"
for r in 0 1; do
    line=$(grep -o "\[job$id-policy-$r\].*resumed rank=$r of 2 step=[0-9]*" "$T/logs") \
        || fail "policy-$r did not resume: $(grep "policy-$r" "$T/logs" | grep -v step= | tail -5)"
    step=${line##*step=}
    [ $((step % 20)) = 0 ] && [ "$step" -ge 40 ] && [ "$step" -lt 400 ] || fail "policy-$r resumed at step $step"
    [ -f "$T/ckpt/data-rank-$r.pos" ] || fail "no data position of rank $r"
    tail -1 "$T/m.$r" | grep_all '"step":400,' || fail "rank $r did not reach step 400: $(tail -1 "$T/m.$r")"
done
out=$(python3 "$HERE/compare.py" "$T/ref" "$T/m.0" "$T/m.1" --tol 1e-5) || fail "$out"
pass "rank 1 killed at step >= 50, group restarted, both ranks resumed at step $step and matched the uninterrupted curve: $out"
