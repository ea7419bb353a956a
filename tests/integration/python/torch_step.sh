#!/usr/bin/env bash
# troupe.torch.step on CPU: a job profiling steps 3:5 of *policy-1 (its
# profile:) runs two PyTorch ranks stepping with troupe.torch.step. Exactly
# steps 3 and 4 of rank 1 are profiled: the window is recorded
# (troupe.torch.profile_windows, a line on stderr), reported to the head (a
# "profiled" metric per step, the trace's spans), and step figures (step_ms,
# loss) arrive for every step of both ranks. The runtime does not drive a CUDA
# profiler of its own under troupe.torch (TROUPE_CUDART points at a fake
# libcudart that would print every call). Then a group's NRL_NSYS_* env:
# entries override the job's for its workers only. Exit 77 (skipped) without
# torch.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/py_lib.bash"
: "${FAKE_CUDART:?}"
D=$(cd "$(dirname "$0")" && pwd)
need_torch_gloo
start_cluster
cat >"$T/job.yaml" <<YAML
name: ptstep
cluster: {nodes: [4]}
groups:
  - {name: policy, workers: 2, resources: {gpu: 1}, command: [$PY_CMD, $D/torch_step_worker.py]}
env: {$PY_JOB_ENV, GLOO_SOCKET_IFNAME: lo, PT_STEPS: "6", TROUPE_CUDART: "$FAKE_CUDART"}
profile: {steps: "3:5", workers: "*policy-1"}
YAML
timeout 150 "$CLI_BIN" submit "$T/job.yaml" >"$T/out" 2>"$T/err" || fail "job failed: $(cat "$T/err"; cli logs "$(head -1 "$T/out")")"
id=$(head -1 "$T/out")
cli logs "$id" >"$T/logs"
[ "$(grep -c "ptstep: rank 1 step [0-9]* profiled" "$T/logs")" = 2 ] && grep -q "ptstep: rank 1 step 3 profiled" "$T/logs" &&
    grep -q "ptstep: rank 1 step 4 profiled" "$T/logs" || fail "rank 1's profiled steps: $(grep ptstep "$T/logs")"
grep -q "ptstep: rank 0 step" "$T/logs" && fail "rank 0 profiled: $(grep ptstep "$T/logs")"
grep -q "ptstep: rank 1 windows \[(3, 5)\]" "$T/logs" && grep -q "ptstep: rank 0 windows \[\]" "$T/logs" ||
    fail "windows: $(grep ptstep "$T/logs")"
grep -q "job$id-policy-1\] troupe.torch: job$id-policy-1: profiling from step 3 (CPU: spans and metrics only)" "$T/logs" &&
    grep -q "job$id-policy-1\] troupe.torch: job$id-policy-1: profiled steps 3..4 (CPU)" "$T/logs" ||
    fail "window lines: $(grep troupe.torch "$T/logs")"
pass "steps 3..4 of policy-1 only, recorded as the window [(3, 5)]: $(grep -o 'troupe.torch: .*profiled steps.*' "$T/logs")"
grep -q fake_cudart "$T/logs" && fail "the runtime drove its own libcudart: $(grep fake_cudart "$T/logs")"
pass "no cudaProfilerStart/Stop from libtroupe's own libcudart under troupe.torch"
m=$(cli -o json metrics "$id" --name profiled)
[ "$(jq -c '[.points[] | [.worker, .step, .value]] | sort' <<<"$m")" = "[[\"job$id-policy-1\",3,1],[\"job$id-policy-1\",4,1]]" ] ||
    fail "profiled metric: $m"
m=$(cli -o json metrics "$id" --name step_ms)
[ "$(jq '[.points[] | select(.value >= 0)] | length' <<<"$m")" = 12 ] || fail "step_ms: $m"
[ "$(cli -o json metrics "$id" --name loss | jq '[.points[]] | length')" = 12 ] || fail "loss: $(cli -o json metrics "$id" --name loss)"
pass "the head has a profiled metric for steps 3 and 4 of policy-1, step_ms and loss for all 12 steps"
cli trace "$id" --output "$T/trace.json" >/dev/null || fail "troupe trace failed"
got=$(jq -c '[.traceEvents[] | select(.ph == "X" and .cat == "step") | [.pid, .args.step]] | sort' "$T/trace.json")
[ "$got" = "[[1,3],[1,4]]" ] || fail "trace steps: $got"
pass "troupe trace holds steps 3 and 4 of rank 1: $got"

# NeMo RL's variables in a group's env: override the job's for that group's
# workers, as the head's check assumes: the job's env profiles step 1 of every
# worker, the policy group's own range 2:4 replaces it for the policy workers
# (steps 2 and 3, B exclusive); the generation worker keeps the job's.
R=NRL_NSYS_PROFILE_STEP_RANGE; P=NRL_NSYS_WORKER_PATTERNS
cat >"$T/grp.yaml" <<YAML
name: ptgroup
cluster: {nodes: [4]}
groups:
  - {name: policy, workers: 2, resources: {gpu: 1}, command: [$PY_CMD, $D/torch_step_worker.py], env: {$R: "2:4"}}
  - {name: generation, workers: 1, resources: {gpu: 1}, command: [$PY_CMD, $D/torch_step_worker.py]}
env: {$PY_JOB_ENV, GLOO_SOCKET_IFNAME: lo, PT_STEPS: "5", TROUPE_CUDART: "$FAKE_CUDART", $R: "1:2", $P: "*"}
YAML
timeout 150 "$CLI_BIN" submit "$T/grp.yaml" >"$T/out" 2>"$T/err" || fail "job failed: $(cat "$T/err"; cli logs "$(head -1 "$T/out")")"
id=$(head -1 "$T/out")
m=$(cli -o json metrics "$id" --name profiled)
want="[[\"job$id-generation-0\",1,1],[\"job$id-policy-0\",2,1],[\"job$id-policy-0\",3,1],[\"job$id-policy-1\",2,1],[\"job$id-policy-1\",3,1]]"
got=$(jq -c '[.points[] | [.worker, .step, .value]] | sort' <<<"$m")
[ "$got" = "$want" ] || fail "profiled steps with a group's $R over the job's: $got, expected $want"
pass "a group's $R=2:4 over the job's 1:2: policy workers profile steps 2..3, the generation worker step 1"
