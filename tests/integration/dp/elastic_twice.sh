#!/usr/bin/env bash
# A second loss during troupe-train's change (dp.elastic): 4 ranks on the CPU
# collective, `elastic: {min_workers: 2, max_workers: 2}`, micro_batch 3 (a
# global micro-batch of 12, which 4, 3 and 2 ranks divide); rank 3 and, 50 ms
# later, rank 2 are SIGKILLed, so the survivors are still meeting for the
# first loss when the second comes (or have just met). They abandon whatever
# epoch did not stand and meet again in the next: two SHRUNK changes,
# 4 -> 3 -> 2, the job SUCCEEDS with 2, and both survivors' curves equal a
# standalone run with micro_batch 12 within the DP tests' 1e-5.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/dp_lib.bash"
HERE=$(cd "$(dirname "$0")" && pwd)
start_cluster
elastic_train "steps: 150, micro_batch: 3"
cat >"$T/twice.yaml" <<YAML
name: twice
groups:
  - name: policy
    workers: 4
    resources: {gpu: 0, cpu: 0.1}
    strategy: SPREAD
    command: [bash, -c, 'exec "\$0" --config "\$1" --set metrics.json="\$2.\$RANK"', $TRAIN_BIN, $T/train.yaml, $T/m]
    elastic: {min_workers: 2, max_workers: 2}
YAML
"$TRAIN_BIN" --config "$T/train.yaml" --set train.micro_batch=12 --set dp.mode=off --set dp.elastic=false \
    --metrics-json "$T/ref" >"$T/ref.log" 2>&1 || fail "reference run failed: $(tail -3 "$T/ref.log")"
id=$(submit "$T/twice.yaml")
wait_for 60 "rank 3 to finish 20 steps" lines_at_least "$T/m.3" 20
p3=$(train_pid "$id" policy-3) && p2=$(train_pid "$id" policy-2) || fail "no troupe-train processes for policy-2/3"
kill -9 "$p3"
sleep 0.05
kill -9 "$p2"
job_ended() { is_job_state "$1" SUCCEEDED || is_job_state "$1" FAILED; }
wait_for 120 "job $id to end" job_ended "$id"
is_job_state "$id" SUCCEEDED ||
    fail "job $id did not succeed: $(job_reason "$id"); $(cli logs "$id" | grep -v step= | grep 'elastic\|troupe-train:' | tail -20)"
cli -o json job "$id" >"$T/job.json"
[ "$(jqr '[.membership[] | "\(.kind) \(.from)->\(.to)"] | join(",")' "$T/job.json")" = "SHRUNK 4->3,SHRUNK 3->2" ] ||
    fail "membership: $(jq .membership "$T/job.json")"
cli logs "$id" >"$T/logs"
for r in 0 1; do
    grep -q "^\[job$id-policy-$r\] .*elastic: rank $r of 2 (was [34] ranks) at step [0-9]*, 6 sequences per micro-batch of 12" "$T/logs" ||
        fail "rank $r did not end as rank $r of 2: $(grep "policy-$r\] .*elastic" "$T/logs")"
    [ "$(jq -r .step "$T/m.$r" | sort -n | uniq -d)" = "" ] || fail "rank $r reported a step twice"
done
python3 "$HERE/compare.py" "$T/ref" "$T/m.0" "$T/m.1" >"$T/cmp.txt" || fail "curves differ: $(cat "$T/cmp.txt")"
pass "4 -> 3 -> 2 with the second loss 50 ms after the first: SUCCEEDED with 2, curve equals micro_batch 12 alone ($(tail -1 "$T/cmp.txt")); $(grep -c 'did not stand' "$T/logs" || true) epoch(s) abandoned"
