#!/usr/bin/env bash
# troupe-train under troupe (CPU path): it opens the worker API, calls
# step_begin/_end around each step (1-based), and with `profile: {steps:
# "2:4"}` on one worker exactly that worker profiles steps 2 and 3, with one
# cudaProfilerStart (step 2) and one cudaProfilerStop (step 4) through the
# dlopen'ed libcudart (a stand-in here); the other worker profiles nothing.
# (Run-time changes through `troupe profile` are integration.runtime.profile's,
# on the same step_begin.) The two ranks train data-parallel on the CPU
# collective (integration.dp.* checks the numbers). Standalone it runs as
# before (integration.train.*).
source "$(dirname "$0")/../lib.sh"
: "${FAKE_CUDART:?}"
start_cluster
"$TRAIN_BIN" --make-data "$T/data.tok" --tokens 8192 >/dev/null
cat >"$T/train.yaml" <<YAML
seed: 3
device: cpu
model: {layers: 1, width: 16, heads: 2, seq_len: 8}
train: {steps: 60, micro_batch: 1, warmup_steps: 1}
data: {path: $T/data.tok, val_fraction: 0}
eval: {every: 0}
YAML
cat >"$T/job.yaml" <<YAML
name: train
cluster: {nodes: [4]}
groups:
  - {name: policy, workers: 2, resources: {gpu: 1}, command: [$TRAIN_BIN, --config, $T/train.yaml]}
profile: {steps: "2:4", workers: "*policy-0"}
env: {TROUPE_CUDART: "$FAKE_CUDART"}
YAML
id=$(submit "$T/job.yaml")
wait_for 120 "the job to end" is_job_state "$id" SUCCEEDED
cli logs "$id" >"$T/logs"
for w in policy-0 policy-1; do
    grep -q "\[job$id-$w\].*under troupe: job $id worker job$id-$w group policy rank [01] of 2 attempt 0" "$T/logs" \
        || fail "$w: no 'under troupe' line"
    grep -q "\[job$id-$w\].*data parallel: rank [01] of 2 over cpu-coll" "$T/logs" \
        || fail "$w: no 'data parallel' line"
    [ "$(grep -c "\[job$id-$w\] step=" "$T/logs")" = 60 ] || fail "$w: not 60 step lines"
done
p0=$(grep -o "\[job$id-policy-0\].*profiling step [0-9]*" "$T/logs" | awk '{print $NF}' | tr '\n' ' ')
[ "$p0" = "2 3 " ] || fail "policy-0 profiled steps '$p0', want '2 3 '"
grep -q "\[job$id-policy-0\].*profiler: cudaProfilerStart at step 2\$" "$T/logs" || fail "policy-0: no start at 2: $(grep "policy-0.*profil" "$T/logs")"
grep -q "\[job$id-policy-0\].*profiler: cudaProfilerStop at step 4\$" "$T/logs" || fail "policy-0: no stop at 4: $(grep "policy-0.*profil" "$T/logs")"
! grep -q "\[job$id-policy-1\].*profil" "$T/logs" || fail "policy-1 profiled: $(grep "policy-1.*profil" "$T/logs")"
n=$(grep -c "\[job$id-policy-0\] fake_cudart: cudaProfilerStart" "$T/logs" || true)
m=$(grep -c "\[job$id-policy-0\] fake_cudart: cudaProfilerStop" "$T/logs" || true)
[ "$n" = 1 ] && [ "$m" = 1 ] || fail "policy-0: $n cudaProfilerStart, $m cudaProfilerStop"
! grep -q "\[job$id-policy-1\] fake_cudart" "$T/logs" || fail "policy-1 called the profiler"
pass "troupe-train under troupe: policy-0 profiled steps 2 3 (spec 2:4) with one cudaProfilerStart/Stop pair, policy-1 none"

# Every per-step figure it prints goes through the worker API
# (troupe_worker_step_end + troupe_worker_metric): 60 points of each, one per
# step 1..60, and the loss stored is the loss printed.
cli -o json metrics "$id" --worker "job$id-policy-0" >"$T/m.json" || fail "troupe metrics failed"
for n in step_ms loss tokens_per_s forward_ms backward_ms optimizer_ms grad_norm lr tokens mem_in_use_bytes \
    mem_peak_bytes; do
    jq -e --arg n "$n" '[.points[] | select(.name==$n) | .step] == [range(1; 61)]' "$T/m.json" >/dev/null \
        || fail "$n: steps $(jq -c --arg n "$n" '[.points[] | select(.name==$n) | .step]' "$T/m.json")"
done
for n in mfu gpu_mem_in_use_bytes val_loss; do # not measured on the CPU / no evaluation: not reported
    [ "$(jq --arg n "$n" '[.points[] | select(.name==$n)] | length' "$T/m.json")" = 0 ] || fail "$n reported"
done
for s in 1 30 60; do
    printed=$(grep -o "\[job$id-policy-0\] step=$s/60 loss=[0-9.]*" "$T/logs" | sed 's/.*loss=//')
    stored=$(jq -r --argjson s "$s" '.points[] | select(.name=="loss" and .step==$s) | .value * 10000 | round / 10000' "$T/m.json")
    awk -v a="$printed" -v b="$stored" 'BEGIN { d = a - b; exit !(d < 0.00015 && d > -0.00015) }' \
        || fail "step $s: printed loss $printed, stored $stored"
done
pass "troupe-train reports its per-step figures through the worker API: 11 names x steps 1..60, loss as printed"
