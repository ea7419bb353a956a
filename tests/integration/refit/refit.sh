#!/usr/bin/env bash
# Weight refit end to end: a policy group of 2 troupe-train ranks training
# data-parallel on the CPU collective and a generation group of 2
# `troupe-train --role generation` workers, joined by the job's refit
# communicator. Every 10 steps and at the end (step 30) policy rank 0
# broadcasts its weights; after each refit every generation worker holds
# exactly rank 0's weights (same FNV-1a hash of the parameter bytes) and its
# validation loss equals the policy's own at that step (relative 1e-5), the
# refit's size, time and bandwidth are reported as metrics, and the job
# SUCCEEDS. Then a generation worker whose refit.every differs from the
# policy's fails the job FAILED_PRECONDITION naming the setting.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/refit_lib.bash"
HERE=$(cd "$(dirname "$0")" && pwd)
start_cluster --dead-after 50 # node liveness is not under test; at load 20+ a 1 s lease killed workers (2dd76ed)
"$TRAIN_BIN" --make-data "$T/data.tok" --tokens 16384 >/dev/null
cat >"$T/train.yaml" <<YAML
seed: 5
device: cpu
model: {layers: 2, width: 32, heads: 2, seq_len: 16}
train: {steps: 30, micro_batch: 2, warmup_steps: 3, lr: 3e-3}
data: {path: $T/data.tok, val_fraction: 0.1}
eval: {every: 10, batches: 3}
dp: {timeout_ms: 60000}
refit: {every: 10, timeout_ms: 60000}
YAML
refit_job rl 2 2 "$T/train.yaml"
id=$(submit "$T/rl.yaml")
wait_for 150 "job $id to succeed" is_job_state "$id" SUCCEEDED
cli logs "$id" >"$T/logs"
grep -q "\[job$id-policy-0\].*refit: rank 0 of 4 of communicator refit over cpu-coll" "$T/logs" ||
    fail "policy-0 did not join the refit communicator: $(grep policy-0 "$T/logs" | head -5)"
out=$(python3 "$HERE/check.py" "$T/logs" "$T/rl.m.0" "job$id-policy-0" "job$id-generation-0" "job$id-generation-1" \
    --steps 10,20,30 --tol 1e-5) || fail "$out"
echo "$out"
# Policy rank 0 also heard the generation workers' losses in the refit's report.
grep -q "\[job$id-policy-0\].*refit step=30 final=1 .*generation_ranks=2 generation_val_loss=[0-9.]*,[0-9.]*" "$T/logs" ||
    fail "policy-0's last refit line lacks the generation losses: $(grep 'policy-0.*refit step=30' "$T/logs")"
# The figures went through the metrics path.
for name in refit_bytes refit_ms refit_mb_per_s val_loss; do
    n=$(cli -o json metrics "$id" --name "$name" | jq --arg w "job$id-generation-1" '[.. | objects | select(.worker? == $w)] | length')
    [ "$n" -ge 1 ] || fail "no $name metric from generation-1: $(cli metrics "$id" --name "$name" | head -5)"
done
n=$(cli -o json metrics "$id" --name refit_mb_per_s | jq --arg w "job$id-policy-0" '[.. | objects | select(.worker? == $w)] | length')
[ "$n" -ge 1 ] || fail "no refit_mb_per_s metric from policy-0"
pass "refits at steps 10, 20, 30 reached both generation workers bit for bit; metrics reported"

# Both sides must agree on refit.every: the generation's 5 is refused.
refit_job mismatch 2 1 "$T/train.yaml" 0 "--set refit.every=5"
id=$(submit "$T/mismatch.yaml")
wait_for 60 "job $id to fail" is_job_state "$id" FAILED
reason=$(job_reason "$id")
[[ "$reason" == *"failed first: FAILED_PRECONDITION: refit.every is 5 on rank 2, 10 on rank 0: the refit needs the same settings"* ]] ||
    fail "the reason does not name refit.every: $reason"
pass "a generation worker with another refit.every: $reason"
