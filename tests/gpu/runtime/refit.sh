#!/usr/bin/env bash
# gpu.runtime.refit - weight refit from a policy worker training on a GPU to a
# generation worker evaluating on a GPU (troupe-train --role generation, the
# CUDA backend's get_params/set_params/forward_loss):
#   1. one GPU: the node shows it as 2 simulated GPUs so both workers are
#      placed, and both run on the real device 0 (CUDA_VISIBLE_DEVICES=0);
#      NCCL cannot join two ranks on one device, so the refit goes over the
#      CPU collective (refit.transport cpu). Refits at 10, 20 and 30 (final):
#      the generation worker's weights hash to policy rank 0's, and its
#      val_loss equals the policy's within REFIT_TOL (default 1e-4: two
#      processes, the same fp32 weights and batches).
#   2. two GPUs or more: the same job on real GPUs 0 and 1 with refit.transport
#      auto, so the refit goes over NCCL (communicator refit from the head's
#      IDs), by refit.path auto = device: the fp32 master from device memory
#      to device memory, hashed on the GPU (params_mix64); then in bf16
#      precision (the bf16 copy travels, half the bytes), and with refit.path
#      host (the fp32 vector through host memory over NCCL, FNV-1a); skipped
#      with one GPU.
# Exits 77 without a GPU (a failure under TROUPE_REQUIRE_GPU=1). No jq needed.
# Logs go to $GPU_OUT when set.
source "$(dirname "$0")/../../integration/lib.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
CHECK=$HERE/../../integration/refit/check.py

source "$(dirname "$0")/gpu_lib.bash"
gpu_require nccl
ngpu=$(nvidia-smi -L | grep -c '^GPU ')

"$TRAIN_BIN" --make-data "$T/data.tok" --tokens 262144 >/dev/null
cat >"$T/train.yaml" <<YAML
seed: 5
device: cuda
model: {layers: 2, width: 128, heads: 2, seq_len: 64}
train: {steps: 30, micro_batch: 8, warmup_steps: 4, lr: 3e-3, precision: fp32}
data: {path: $T/data.tok, val_fraction: 0.1}
eval: {every: 10, batches: 4}
refit: {every: 10, timeout_ms: 120000}
YAML

# run NAME PIN TRANSPORT PATH [SET...]: policy + generation, one worker
# each; PIN=1 runs both on device 0; PATH: the refit path every refit line
# must say (host | device); SET: more --set KEY=VALUE for both. Checks the
# refits with check.py.
run() {
    local name=$1 pin=$2 transport=$3 path=$4 pre="" id sets=""
    shift 4
    for kv in "$@"; do sets="$sets --set $kv"; done
    [ "$pin" = 1 ] && pre="export CUDA_VISIBLE_DEVICES=0; "
    cat >"$T/$name.yaml" <<YAML
name: $name
cluster: {nodes: [2]}
groups:
  - {name: policy, workers: 1, resources: {gpu: 1}, command: [sh, -c, '${pre}exec $TRAIN_BIN --config $T/train.yaml --set refit.transport=$transport$sets --metrics-json $OUTDIR/$name.policy.json']}
  - {name: generation, workers: 1, resources: {gpu: 1}, command: [sh, -c, '${pre}exec $TRAIN_BIN --role generation --config $T/train.yaml --set refit.transport=$transport$sets']}
communicators: [{name: refit, groups: [policy, generation]}]
env: {NCCL_NVLS_ENABLE: "0"}
YAML
    id=$(submit "$T/$name.yaml")
    wait_for 600 "job $id ($name) to end" ended "$id"
    cli logs "$id" >"$OUTDIR/$name.log" 2>&1 || true
    [ "$(job_state_py "$id")" = SUCCEEDED ] || fail "job $id ($name) $(job_state_py "$id"): $(tail -n 20 "$OUTDIR/$name.log")"
    grep -q "\[job$id-policy-0\].*training backend=cuda" "$OUTDIR/$name.log" || fail "$name: the policy did not train on the GPU"
    grep -q "\[job$id-generation-0\].*generation: backend=cuda" "$OUTDIR/$name.log" || fail "$name: the generation worker is not on the GPU"
    out=$(python3 "$CHECK" "$OUTDIR/$name.log" "$OUTDIR/$name.policy.json" "job$id-policy-0" "job$id-generation-0" \
        --steps 10,20,30 --tol "${REFIT_TOL:-1e-4}" --path "$path") || fail "$name: $out"
    echo "$out"
}

start_head --heartbeat-ms 200 --suspect-after 5 --dead-after 25
if [ "$ngpu" -lt 2 ]; then
    "$NODE_BIN" --head "$HEAD" --name gpu0 --fake-gpus 2xH100:80GB --state-dir "$T/node-gpu0" >>"$T/node-gpu0.log" 2>&1 &
else
    "$NODE_BIN" --head "$HEAD" --name gpu0 --state-dir "$T/node-gpu0" >>"$T/node-gpu0.log" 2>&1 &
fi
PIDS+=("$!")
wait_for 30 "the node agent to register" alive_count

run one_gpu 1 cpu host
grep -q "refit: rank 0 of 2 of communicator refit over cpu-coll" "$OUTDIR/one_gpu.log" || fail "one_gpu: not over the CPU collective"
pass "one GPU, two CUDA processes: refits over the CPU collective, weights bit-identical, val_loss equal"
if [ "$ngpu" -lt 2 ]; then
    # A skip even under TROUPE_REQUIRE_GPU=1: the GPU works (the half above ran
    # on it); this machine has too few of them.
    skip_test "refit over NCCL needs 2 GPUs, this machine has $ngpu (the one-GPU half passed)"
fi
run two_gpus 0 auto device
grep -q "refit: rank 0 of 2 of communicator refit over nccl" "$OUTDIR/two_gpus.log" || fail "two_gpus: not over NCCL"
grep -q "nccl: communicator refit of job" "$OUTDIR/two_gpus.log" || fail "two_gpus: no NCCL refit communicator line"
grep -q "refit step=10 .* path=device dtype=f32 params_mix64=" "$OUTDIR/two_gpus.log" || fail "two_gpus: not device to device in fp32"
pass "two GPUs: refits over NCCL device to device (fp32 master), weights bit-identical, val_loss equal"
run two_gpus_bf16 0 auto device train.precision=bf16
grep -q "refit step=10 .* path=device dtype=bf16 params_mix64=" "$OUTDIR/two_gpus_bf16.log" || fail "two_gpus_bf16: not device to device in bf16"
pass "two GPUs, bf16: the bf16 weights device to device, bit-identical, val_loss equal"
run two_gpus_host 0 auto host refit.path=host
grep -q "refit step=10 .* path=host dtype=f32 params_fnv1a=" "$OUTDIR/two_gpus_host.log" || fail "two_gpus_host: not through host memory"
pass "two GPUs, refit.path host: through host memory over NCCL, as before"
