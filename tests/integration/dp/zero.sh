#!/usr/bin/env bash
# ZeRO-1 (dp.zero 1) on the CPU collective under a real head and agents: 2
# and 3 troupe-train ranks (3: uneven shards, tensors with tails every rank
# updates) follow dp.zero 0's curve step by step (loss, grad_norm, val_loss
# within 1e-5, every rank alike); then a dp.zero 1 checkpoint written by 2
# ranks (micro_batch 3) resumes on 3 ranks with dp.zero 0 (micro_batch 2: the
# same global batch) along the curve of 2 dp.zero 0 ranks resumed alike.
source "$(dirname "$0")/../lib.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
start_cluster --dead-after 50
"$TRAIN_BIN" --make-data "$T/data.tok" --tokens 16384 >/dev/null
cat >"$T/train.yaml" <<YAML
seed: 5
device: cpu
model: {layers: 2, width: 32, heads: 2, seq_len: 16}
train: {steps: 16, micro_batch: 2, accum_steps: 2, warmup_steps: 3, lr: 3e-3, grad_clip: 0.5}
data: {path: $T/data.tok, val_fraction: 0.1}
eval: {every: 4, batches: 3}
dp: {timeout_ms: 60000, mode: on}
YAML
# job NAME N SETS...: N ranks with --set SETS, metrics to $T/NAME.RANK
job() {
    local name=$1 n=$2 sets="" s
    shift 2
    for s in "$@"; do sets="$sets --set $s"; done
    cat >"$T/$name.yaml" <<YAML
name: $name
cluster: {nodes: [4]}
groups:
  - name: policy
    workers: $n
    resources: {gpu: 1}
    command: [bash, -c, 'exec "\$0" --config "\$1" --set metrics.json="\$2.\$RANK"$sets', $TRAIN_BIN, $T/train.yaml, $T/$name]
YAML
    submit "$T/$name.yaml"
}
ranks() { local r; for ((r = 0; r < $2; r++)); do echo "$T/$1.$r"; done; }
wait_ok() { wait_for 150 "job $1 ($2) to succeed" is_job_state "$1" SUCCEEDED; }

for n in 2 3; do
    a=$(job "plain$n" "$n" dp.zero=0)
    b=$(job "zero$n" "$n" dp.zero=1)
    wait_ok "$a" "plain$n"
    wait_ok "$b" "zero$n"
    out=$(python3 "$HERE/compare.py" "$T/plain$n.0" $(ranks "zero$n" "$n") --tol 1e-5) || fail "N=$n dp.zero 1 vs 0: $out"
    echo "N=$n: $out"
done

# checkpoints across dp.zero and world size (the global batch stays 6)
# train.steps 8 ends the first run's schedule early: the reference for the
# resumed steps is the same two runs with dp.zero 0 on 2 ranks both times
first=$(job first 2 dp.zero=1 train.micro_batch=3 train.steps=8 checkpoint.dir="$T/ck" checkpoint.every=4)
ref1=$(job refa 2 dp.zero=0 train.micro_batch=3 train.steps=8 checkpoint.dir="$T/ckref" checkpoint.every=4)
wait_ok "$first" first
wait_ok "$ref1" refa
ref2=$(job refb 2 dp.zero=0 train.micro_batch=3 checkpoint.dir="$T/ckref" checkpoint.every=4)
second=$(job second 3 dp.zero=0 train.micro_batch=2 checkpoint.dir="$T/ck" checkpoint.every=4)
wait_ok "$ref2" refb
wait_ok "$second" second
cli logs "$second" >"$T/second.log"
grep -q "resumed rank=2 of 3 step=8" "$T/second.log" || fail "rank 2 of 3 did not resume at step 8: $(grep -v step= "$T/second.log" | tail -5)"
out=$(python3 "$HERE/compare.py" "$T/refb.0" $(ranks second 3) --tol 1e-5 --from 9) || fail "zero 1 at 2 ranks -> zero 0 at 3 ranks: $out"
pass "dp.zero 1 follows dp.zero 0 at 2 and 3 ranks; a dp.zero 1 checkpoint of 2 ranks resumes on 3 plain ranks ($out)"
