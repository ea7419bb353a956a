#!/usr/bin/env bash
# gpu.runtime.torch_rl - examples/torch/rl.py on real GPUs: a policy rank and a
# generation rank, one GPU each; the policy's default process group and the
# refit communicator's (troupe.torch.new_process_group) are NCCL, their
# rendezvous through the head's store. At every refit the generation holds the
# policy's parameters (same digest) and reports the same validation loss.
# Needs two GPUs and a python3 whose torch has CUDA and NCCL ($TROUPE_PYTHON);
# exits 77 without them (a failure under TROUPE_REQUIRE_GPU=1 where a GPU is
# missing). No jq needed.
source "$(dirname "$0")/../../integration/lib.sh"
source "$(dirname "$0")/gpu_lib.bash"
EX=$(cd "$(dirname "$0")/../../../examples/torch" && pwd)
SRC=$(cd "$(dirname "$0")/../../../python" && pwd)
PY=${TROUPE_PYTHON:-python3}
LIB=${TROUPE_LIBRARY:-$TROUPE_BIN/client/libtroupe.so}
nvidia-smi -L >/dev/null 2>&1 || skip "no GPU here (nvidia-smi -L fails)"
"$PY" -c "import torch, torch.distributed as d; assert torch.cuda.is_available() and d.is_nccl_available()" 2>/dev/null ||
    skip "$PY has no torch with CUDA and NCCL"
gpus=$(nvidia-smi -L | wc -l)
[ "$gpus" -ge 2 ] || skip "needs 2 GPUs (NCCL refuses two ranks of one communicator on one GPU); $gpus here"
export NCCL_NVLS_ENABLE=0 # never NVLink multicast on the lent machines
start_head --heartbeat-ms 200 --suspect-after 5 --dead-after 25
"$NODE_BIN" --head "$HEAD" --name gpu0 --state-dir "$T/node-gpu0" >>"$T/node-gpu0.log" 2>&1 &
PIDS+=("$!")
wait_for 30 "the node agent to register with its real GPUs" alive_count
mkdir "$T/ex" && cp "$EX/rl.py" "$T/ex/"
cat >"$T/ex/rl.yaml" <<YAML
name: torch-rl
cluster: {nodes: [2]}
groups:
  - {name: policy, workers: 1, resources: {gpu: 1}, command: [$PY, rl.py, --steps, "40", --refit-every, "10"]}
  - {name: generation, workers: 1, resources: {gpu: 1}, command: [$PY, rl.py, --steps, "40", --refit-every, "10"]}
communicators: [{name: refit, groups: [policy, generation]}]
env: {PYTHONPATH: "$SRC", TROUPE_LIBRARY: "$LIB", NCCL_NVLS_ENABLE: "0", LD_LIBRARY_PATH: "${LD_LIBRARY_PATH:-}"}
YAML
id=$(submit "$T/ex/rl.yaml")
wait_for 300 "job $id to end" ended "$id"
cli logs "$id" >"$T/logs" 2>&1
[ "$(job_state_py "$id")" = SUCCEEDED ] || fail "job $id: $(job_state_py "$id"): $(tail -30 "$T/logs")"
[ "$(grep -c "rl: job$id-.* backend nccl on cuda" "$T/logs")" = 2 ] || fail "not NCCL on both: $(grep 'rl:' "$T/logs")"
for s in 10 20 30 40; do
    p=$(grep "rl: policy refit step=$s " "$T/logs") || fail "no refit at $s: $(grep rl: "$T/logs")"
    params=$(sed 's/.* params=\([0-9a-f]*\) .*/\1/' <<<"$p")
    val=$(sed 's/.* val_loss=\([0-9.]*\) .*/\1/' <<<"$p")
    grep -q "rl: generation refit step=$s rank=1 .* params=$params val_loss=$val$" "$T/logs" ||
        fail "generation at $s (want params=$params val_loss=$val): $(grep "generation refit step=$s " "$T/logs")"
done
pass "4 refits over NCCL between two GPUs: $(grep 'rl: policy refit step=40' "$T/logs"); $(grep 'rl: generation refit step=40' "$T/logs")"
