#!/usr/bin/env bash
# troupe-train grows back with its elastic group (dp.elastic): 3 ranks on the
# CPU collective, `elastic: {min_workers: 2}` (max_workers defaults to 3);
# rank 2 is SIGKILLed after 20 steps. The group shrinks to 2 and goes on;
# after restart_backoff_ms the head starts rank 2 again in its slot (GREW
# 2 -> 3). The survivors see the new epoch at their next step boundary, leave
# their ring and meet the replacement in the new one; it takes the model and
# optimiser state from them and all three go on with 2 sequences each of the
# global micro-batch of 6. The job SUCCEEDS with 3, and every rank's curve
# (the replacement's from where it joined) equals a standalone run with
# micro_batch 6 within the DP tests' 1e-5.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/dp_lib.bash"
HERE=$(cd "$(dirname "$0")" && pwd)
# A back-off that lets the survivors rebuild at 2 first, as a rule (under
# ASan at load 34 they took longer than 500 ms; at load 40 in a chroot 4 s).
start_cluster --restart-backoff-ms $((1000 * TROUPE_TEST_SLOWDOWN))
elastic_train "steps: 300, micro_batch: 2, accum_steps: 2"
cat >"$T/grow.yaml" <<YAML
name: grow
groups:
  - name: policy
    workers: 3
    resources: {gpu: 0, cpu: 0.1}
    strategy: SPREAD
    command: [bash, -c, 'exec "\$0" --config "\$1" --set metrics.json="\$2.\$RANK"', $TRAIN_BIN, $T/train.yaml, $T/m]
    elastic: {min_workers: 2}
YAML
"$TRAIN_BIN" --config "$T/train.yaml" --set train.micro_batch=6 --set dp.mode=off --set dp.elastic=false \
    --metrics-json "$T/ref" >"$T/ref.log" 2>&1 || fail "reference run failed: $(tail -3 "$T/ref.log")"
id=$(submit "$T/grow.yaml")
wait_for 60 "rank 2 to finish 20 steps" lines_at_least "$T/m.2" 20
kill -9 "$(train_pid "$id" policy-2)"
wait_for 60 "job $id to grow back" bash -c "'$CLI_BIN' -o json job $id | jq -e '[.membership[].kind] == [\"SHRUNK\", \"GREW\"]' >/dev/null"
wait_for 120 "job $id to succeed with 3 ranks" is_job_state "$id" SUCCEEDED
cli job "$id" >"$T/job.txt"
grep -q "GREW policy 2 -> 3 .*rank 2 (job$id-policy-2 on n[abc]) started again, attempt 1; epoch 3" "$T/job.txt" ||
    fail "no GREW line: $(cat "$T/job.txt")"
cli logs "$id" >"$T/logs"
joined=$(sed -n "s/^\[job$id-policy-2\] .*elastic: joined the group as rank 2 of 3 at step \([0-9]*\) .*/\1/p" "$T/logs")
[ -n "$joined" ] && [ "$joined" -gt 20 ] || fail "the replacement did not join mid-run: $(grep 'policy-2\] .*elastic' "$T/logs")"
[ "$joined" -lt 300 ] || fail "the replacement joined after the last step"
for r in 0 1; do
    # (was 2 ranks): they had rebuilt at 2 first; (was 3 ranks): on a loaded
    # machine the grow-back came before the epoch of 2 stood, and they met the
    # replacement straight from the 3 they started as. Both are the product's.
    grep -qE "^\[job$id-policy-$r\] .*elastic: rank $r of 3 \(was [23] ranks\) at step $((joined + 1)), 2 sequences per micro-batch of 6" "$T/logs" ||
        fail "rank $r did not meet the replacement: $(grep "policy-$r\] .*elastic" "$T/logs")"
    # each step reported once, but one this rank took another's state after
    for s in $(comm -13 <(jq -r .step "$T/m.$r" | sort -u) <(seq 1 300 | sort -u)); do
        grep -q "^\[job$id-policy-$r\] .*elastic: took the state after step $s from rank" "$T/logs" ||
            fail "rank $r reported no step $s and took no state after it"
    done
    [ "$(jq -r .step "$T/m.$r" | sort -n | uniq -d)" = "" ] || fail "rank $r reported a step twice"
done
# m.2 holds the killed rank's steps, then the replacement's from joined + 1.
[ "$(jq -r .step "$T/m.2" | tail -1)" = 300 ] || fail "the replacement did not train to the end"
python3 "$HERE/compare.py" "$T/ref" "$T/m.0" "$T/m.1" "$T/m.2" >"$T/cmp.txt" || fail "curves differ: $(cat "$T/cmp.txt")"
pass "2 -> 3: the replacement joined after step $joined with the survivors' state; SUCCEEDED with 3, curves equal micro_batch 6 alone ($(tail -1 "$T/cmp.txt"))"
