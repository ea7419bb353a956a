#!/usr/bin/env bash
# troupe-train follows an elastic group (dp.elastic): 3 ranks on the CPU
# collective, `elastic: {min_workers: 2, max_workers: 2}` (no growing back),
# micro_batch 2 x accum_steps 2 x 3 ranks; rank 2 is SIGKILLed after 20
# steps. The survivors' collective fails, they drop the ring, wait for the
# head's new membership (SHRUNK policy 3 -> 2, epoch 1), join its ring, take
# the state of the rank that completed the most steps and redo the step in
# flight with 3 sequences each (a chunk of 2 and one of 1) of the same global
# micro-batch of 6. The job SUCCEEDS with 2, no restart used, and each
# survivor's loss and grad_norm curve equals a standalone run with
# micro_batch 6 within the DP tests' 1e-5, every step of it, before and after
# the shrink. A size that does not divide the global micro-batch is refused
# with the reason, as is dp.elastic with dp.zero 1.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/dp_lib.bash"
HERE=$(cd "$(dirname "$0")" && pwd)
start_cluster
elastic_train "steps: 150, micro_batch: 2, accum_steps: 2"
# elastic_job NAME WORKERS MIN MAX CONFIG METRICS
elastic_job() {
    cat >"$T/$1.yaml" <<YAML
name: $1
groups:
  - name: policy
    workers: $2
    resources: {gpu: 0, cpu: 0.1}
    strategy: SPREAD
    command: [bash, -c, 'exec "\$0" --config "\$1" --set metrics.json="\$2.\$RANK"', $TRAIN_BIN, $5, $6]
    elastic: {min_workers: $3, max_workers: $4}
YAML
    submit "$T/$1.yaml"
}
"$TRAIN_BIN" --config "$T/train.yaml" --set train.micro_batch=6 --set dp.mode=off --set dp.elastic=false \
    --metrics-json "$T/ref" >"$T/ref.log" 2>&1 || fail "reference run failed: $(tail -3 "$T/ref.log")"

id=$(elastic_job shrink 3 2 2 "$T/train.yaml" "$T/m")
wait_for 60 "rank 2 to finish 20 steps" lines_at_least "$T/m.2" 20
pid=$(train_pid "$id" policy-2) || fail "no troupe-train process for policy-2"
kill -9 "$pid"
killed_at=$(wc -l <"$T/m.2")
wait_for 120 "job $id to succeed with 2 ranks" is_job_state "$id" SUCCEEDED
cli job "$id" >"$T/job.txt"
cli -o json job "$id" >"$T/job.json"
grep -q "SHRUNK policy 3 -> 2 at step [0-9]*: rank 2 (job$id-policy-2 on n[abc]) killed by SIGKILL; epoch 1" "$T/job.txt" ||
    fail "troupe job shows no SHRUNK line: $(cat "$T/job.txt")"
[ "$(jqr '.restarts' "$T/job.json")" = 0 ] || fail "a restart was used"
cli logs "$id" >"$T/logs"
for r in 0 1; do
    grep -q "^\[job$id-policy-$r\] .*elastic: rank $r of 2 (was 3 ranks) at step [0-9]*, 3 sequences per micro-batch of 6" "$T/logs" ||
        fail "rank $r did not rebuild as rank $r of 2: $(grep "policy-$r\] .*elastic" "$T/logs")"
done
# Every step reported once (a failed step reports nothing, its redo does),
# except one that a rank did not complete while another did: it took that
# rank's state after the step and says so.
for r in 0 1; do
    for s in $(comm -13 <(jq -r .step "$T/m.$r" | sort -u) <(seq 1 150 | sort -u)); do
        grep -q "^\[job$id-policy-$r\] .*elastic: took the state after step $s from rank" "$T/logs" ||
            fail "rank $r reported no step $s and took no state after it"
    done
    [ "$(jq -r .step "$T/m.$r" | sort -n | uniq -d)" = "" ] || fail "rank $r reported a step twice"
done
python3 "$HERE/compare.py" "$T/ref" "$T/m.0" "$T/m.1" >"$T/cmp.txt" || fail "curves differ: $(cat "$T/cmp.txt")"
pass "3 -> 2 after step $killed_at of rank 2: SUCCEEDED with 2, steps 1..150 each once, curve equals micro_batch 6 alone ($(tail -1 "$T/cmp.txt")); $(grep -o 'SHRUNK.*' "$T/job.txt" | head -1)"

# micro_batch 2 x 3 placed ranks, min_workers 2 ... but with 4 placed ranks
# the global micro-batch 8 does not split over 3: the survivors refuse and
# say why, and the job fails.
sed 's/steps: 150/steps: 100000/' "$T/train.yaml" >"$T/long.yaml"
id=$(elastic_job odd 4 3 3 "$T/long.yaml" "$T/o")
wait_for 60 "rank 3 to finish 5 steps" lines_at_least "$T/o.3" 5
kill -9 "$(train_pid "$id" policy-3)"
wait_for 60 "job $id to fail" is_job_state "$id" FAILED
wait_for 10 "the refusal in the log" logs_grep "$id" "dp.elastic: 3 ranks cannot split the global micro-batch of 8 sequences (train.micro_batch 2 x 4 placed ranks) evenly"
pass "4 -> 3 with micro_batch 2: refused ($(job_reason "$id"))"

"$TRAIN_BIN" --config "$T/train.yaml" --set dp.zero=1 --check-config >"$T/zero.out" 2>&1 && fail "dp.elastic with dp.zero 1 accepted"
grep -q "dp.elastic with dp.zero 1: a lost rank takes its shard" "$T/zero.out" || fail "dp.zero refusal: $(cat "$T/zero.out")"
pass "dp.elastic with dp.zero 1 refused"

# Below min_workers: two of 3 ranks killed at once leave 1 < 2; the head's
# rules apply (no restarts: the job fails) and the survivor, waiting for a
# membership that will not come, ends with the job instead of hanging.
id=$(elastic_job below 3 2 2 "$T/long.yaml" "$T/b")
wait_for 60 "rank 2 to finish 5 steps" lines_at_least "$T/b.2" 5
p1=$(train_pid "$id" policy-1) && p2=$(train_pid "$id" policy-2) || fail "no troupe-train processes for policy-1/2"
kill -9 "$p1" "$p2"
wait_for 60 "job $id to fail" is_job_state "$id" FAILED
wait_for 20 "no worker process left" no_workers
pass "3 -> 1 below min_workers 2: FAILED ($(job_reason "$id")), no process left"
