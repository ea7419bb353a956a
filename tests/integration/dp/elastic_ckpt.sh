#!/usr/bin/env bash
# A loss during the last checkpoint (dp.elastic): 3 ranks on the CPU
# collective, elastic {min_workers: 2, max_workers: 2}, 40 steps, a checkpoint
# only at the last step. Rank 2 hangs while it writes its data position for
# it (its temporary file is a FIFO nobody reads) and is SIGKILLed there; the
# survivors' agreement on the checkpoint (or on the stop before it, which
# rank 2 may leave first) fails, they rebuild at 2 ranks and write the
# checkpoint of step 40 in the new membership (before, they left it
# unwritten and SUCCEEDED without it). The job SUCCEEDS with 2, a
# run resumed from the checkpoint finds it at step 40, and the survivors'
# curves equal a standalone run with the same global batch.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/dp_lib.bash"
HERE=$(cd "$(dirname "$0")" && pwd)
start_cluster
elastic_train "steps: 40, micro_batch: 2, accum_steps: 2" "checkpoint: {dir: $T/ckpt, every: 1000}"
cat >"$T/ck.yaml" <<YAML
name: ck
groups:
  - name: policy
    workers: 3
    resources: {gpu: 0, cpu: 0.1}
    strategy: SPREAD
    command: [bash, -c, 'exec "\$0" --config "\$1" --set metrics.json="\$2.\$RANK"', $TRAIN_BIN, $T/train.yaml, $T/m]
    elastic: {min_workers: 2, max_workers: 2}
YAML
"$TRAIN_BIN" --config "$T/train.yaml" --set train.micro_batch=6 --set dp.mode=off --set dp.elastic=false \
    --set checkpoint.dir="$T/refckpt" --metrics-json "$T/ref" >"$T/ref.log" 2>&1 || fail "reference run failed: $(tail -3 "$T/ref.log")"

id=$(submit "$T/ck.yaml")
wait_for 60 "rank 2 to finish 2 steps" lines_at_least "$T/m.2" 2
pid=$(train_pid "$id" policy-2) || fail "no troupe-train process for policy-2"
mkfifo "$T/ckpt/data-rank-2.pos.tmp.$pid"
hung() { grep -qx wait_for_partner /proc/"$pid"/task/*/wchan 2>/dev/null; }
wait_for 60 "rank 2 ($pid) to hang writing its data position for step 40" hung
kill -9 "$pid"
ended() { is_job_state "$id" SUCCEEDED || is_job_state "$id" FAILED; }
wait_for 120 "job $id to end" ended
is_job_state "$id" SUCCEEDED || fail "job $id $(job_state "$id"): $(job_reason "$id")"
cli job "$id" >"$T/job.txt"
grep -q "SHRUNK policy 3 -> 2 at step [0-9]*: rank 2 (job$id-policy-2 on n[abc]) killed by SIGKILL; epoch 1" "$T/job.txt" ||
    fail "troupe job shows no SHRUNK line: $(cat "$T/job.txt")"
cli logs "$id" >"$T/logs"
# The loss meets the survivors in the checkpoint's agreement (they write it
# again), or, when rank 2 left the stop agreement before them, in that one
# (they write it after the loop): either way in the new membership.
for r in 0 1; do
    grep -Eq "^\[job$id-policy-$r\] .*elastic: (writing the checkpoint of step 40 again|the checkpoint of step 40 was not written before the loss; writing it) as rank $r of 2" "$T/logs" ||
        fail "rank $r did not write the checkpoint in the new membership: $(grep "policy-$r\] .*elastic" "$T/logs")"
done
"$TRAIN_BIN" --config "$T/train.yaml" --set dp.mode=off --set dp.elastic=false >"$T/resume.log" 2>&1 ||
    fail "resume failed: $(tail -3 "$T/resume.log")"
grep -q "nothing to do: the checkpoint is at step 40 of 40" "$T/resume.log" ||
    fail "the checkpoint does not hold step 40: $(grep -i 'checkpoint\|resum' "$T/resume.log" | head -5)"
python3 "$HERE/compare.py" "$T/ref" "$T/m.0" "$T/m.1" >"$T/cmp.txt" || fail "curves differ: $(cat "$T/cmp.txt")"
cmp -s "$T/ckpt/ckpt.bin" "$T/refckpt/ckpt.bin" && ckeq="byte-equal to the reference's" ||
    ckeq="not byte-equal to the reference's: another reduction order"
grep -q "writing the checkpoint of step 40 again" "$T/logs" && where="the checkpoint's agreement" || where="the stop agreement"
pass "rank 2 lost while writing the last checkpoint (the survivors met it in $where): they wrote it at step 40 ($ckeq); SUCCEEDED with 2; $(tail -1 "$T/cmp.txt")"
