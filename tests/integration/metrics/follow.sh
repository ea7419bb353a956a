#!/usr/bin/env bash
# `troupe metrics -f` follows a running job: it prints points as they arrive
# (one JSON object per line with -o json), and ends by itself once the job
# ended and the workers' last points are read: every point exactly once.
source "$(dirname "$0")/../lib.sh"
: "${MX_WORKER:?}"
start_cluster
# 3 s of points at idle, longer under load: at load 40 a 3 s job had ended
# before the follower printed its first lines.
cat >"$T/a.yaml" <<YAML
name: follow
cluster: {nodes: [4]}
groups: [{name: policy, workers: 2, resources: {gpu: 1}, command: [$MX_WORKER]}]
env: {MX_POINTS: "1500", MX_EVERY_US: "$((2000 * TROUPE_TEST_SLOWDOWN))", MX_NAMES: "loss,tok_s"}
YAML
id=$(submit "$T/a.yaml")
wait_for 20 "job $id running" is_job_state "$id" RUNNING
cli -o json metrics "$id" -f >"$T/follow.jsonl" 2>"$T/follow.err" &
fpid=$!
PIDS+=("$fpid")
grew() { [ "$(wc -l <"$T/follow.jsonl")" -gt 10 ] && ! is_job_state "$id" SUCCEEDED; }
wait_for 30 "points printed while the job runs" grew
wait_for 60 "job $id to succeed" is_job_state "$id" SUCCEEDED
await_end 20 "troupe metrics -f to end after the job ended" "$fpid"
[ "$END_RC" = 0 ] || fail "troupe metrics -f exited $END_RC: $(cat "$T/follow.err")"
for r in 0 1; do
    jq -s -e --arg w "job$id-policy-$r" '[.[] | select(.worker==$w) | .seq] == [range(1; 1501)]' "$T/follow.jsonl" \
        >/dev/null || fail "job$id-policy-$r: $(jq -s --arg w "job$id-policy-$r" '[.[] | select(.worker==$w)] | length' "$T/follow.jsonl") points followed"
done
pass "metrics -f printed points while the job ran and ended with it: 2 x 1500 points, each once, in order"
