#!/usr/bin/env bash
# traces.db at its bound (traces_max_bytes, here the smallest, 64 KiB): a
# traced job's spans past it are refused RESOURCE_EXHAUSTED, and what the
# worker is told - and `troupe logs` shows - names the file, its bound and
# what to do; the head says so in its log, and the job itself runs on. The
# same error path (series.c) as metrics.db, whose bound
# integration.metrics.disk_full checks. Under the sanitizers it also found
# the worker library offsetting a NULL span array when only a dropped count
# was left to send at close.
source "$(dirname "$0")/../lib.sh"
: "${RT_WORKER:?}"
BOUND=65536
start_cluster --traces-max-bytes $BOUND
cat >"$T/job.yaml" <<YAML
name: traced
cluster: {nodes: [4]}
groups: [{name: policy, workers: 1, resources: {gpu: 1}, command: [$RT_WORKER, run]}]
profile: {steps: "1:400", workers: "*"}
env: {RT_STEPS: "401", RT_STEP_MS: "2", RT_TRACE: "1"}
YAML
id=$(submit "$T/job.yaml")
state() { cli -o json job "$id" | jq -r .state; }
ended() { [[ "$(state)" =~ ^(SUCCEEDED|FAILED|STOPPED)$ ]]; }
wait_for 120 "job $id to end" ended
[ "$(state)" = SUCCEEDED ] || fail "job $id $(state), not SUCCEEDED (a worker that cannot ship its trace runs on): $(cli logs "$id" | tail -5)"
refused() { cli logs "$id" >"$T/logs"; grep -q "spans not sent" "$T/logs"; }
for _ in $(seq 50); do refused && break; sleep 0.1; done
refused || fail "the worker was not told its spans were refused: $(grep 'rt: step' "$T/logs")"
line=$(grep -m1 "spans not sent" "$T/logs")
[[ "$line" == *"spans not sent: RESOURCE_EXHAUSTED: "*"database or disk is full (traces.db is bounded by traces_max_bytes=$BOUND; free space on its disk, delete finished jobs (troupe delete) or raise the bound)"* ]] ||
    fail "the refusal should name traces.db, its bound and what to do: $line"
grep -q "trace store cannot write.*traces.db is bounded by traces_max_bytes=$BOUND; free space on its disk, delete finished jobs (troupe delete) or raise the bound" "$T/head.log" ||
    fail "the head did not say traces.db is full: $(grep 'trace store' "$T/head.log")"
size=$(stat -c %s "$T/state/traces.db")
[ "$size" -le $BOUND ] || fail "traces.db is $size bytes, over its bound $BOUND"
pass "traces.db held at $size bytes (bound $BOUND); the worker was told: $line"
