#!/usr/bin/env bash
# gpu.runtime.torch_nccl - examples/torch/dp.py on real GPUs: troupe.torch's
# init_process_group picks NCCL (CUDA present), its unique ID and start-up
# barrier go through the head's store (no MASTER_PORT), DDP trains on
# min(2, GPUs) ranks, one GPU each, and ends with the same parameters as one
# rank with the same global batch (within TORCH_TOL, default 1e-4: fp32 GEMMs
# of other shapes); profile: steps 3:5 of dp-0 make troupe.torch.step call
# torch.cuda.profiler.start at step 3 and stop at step 5 there only; the time from submit to the first step is printed. Needs
# a python3 whose torch has CUDA and NCCL ($TROUPE_PYTHON), and libtroupe
# ($TROUPE_LIBRARY, default the build tree's). Exits 77 without them (a
# failure under TROUPE_REQUIRE_GPU=1). No jq needed.
source "$(dirname "$0")/../../integration/lib.sh"
source "$(dirname "$0")/gpu_lib.bash"
EX=$(cd "$(dirname "$0")/../../../examples/torch" && pwd)
SRC=$(cd "$(dirname "$0")/../../../python" && pwd)
PY=${TROUPE_PYTHON:-python3}
LIB=${TROUPE_LIBRARY:-$TROUPE_BIN/client/libtroupe.so}
nvidia-smi -L >/dev/null 2>&1 || skip "no GPU here (nvidia-smi -L fails)"
"$PY" -c "import torch, torch.distributed as d; assert torch.cuda.is_available() and d.is_nccl_available()" 2>/dev/null ||
    skip "$PY has no torch with CUDA and NCCL"
export NCCL_NVLS_ENABLE=0 # never NVLink multicast on the lent machines
gpus=$(nvidia-smi -L | wc -l)
N=$(( gpus >= 2 ? 2 : 1 ))
start_head --heartbeat-ms 200 --suspect-after 5 --dead-after 25
"$NODE_BIN" --head "$HEAD" --name gpu0 --state-dir "$T/node-gpu0" >>"$T/node-gpu0.log" 2>&1 &
PIDS+=("$!")
wait_for 30 "the node agent to register with its real GPUs" alive_count
mkdir "$T/ex" && cp "$EX/dp.py" "$T/ex/"
run() { # run RANKS [PROFILE]: the example on RANKS GPUs; prints the job id
    cat >"$T/ex/dp$1.yaml" <<YAML
${2:-}
name: torch-dp$1
cluster: {nodes: [$gpus]}
groups:
  - {name: dp, workers: $1, resources: {gpu: 1}, command: [$PY, dp.py, --steps, "30", --global-batch, "32"]}
env: {PYTHONPATH: "$SRC", TROUPE_LIBRARY: "$LIB", NCCL_NVLS_ENABLE: "0", LD_LIBRARY_PATH: "${LD_LIBRARY_PATH:-}"}
YAML
    local t0 id
    t0=$(date +%s%N)
    id=$(submit "$T/ex/dp$1.yaml")
    wait_for 300 "job $id to end" ended "$id"
    cli logs "$id" >"$T/logs$1" 2>&1
    [ "$(job_state_py "$id")" = SUCCEEDED ] || fail "job $id: $(job_state_py "$id"): $(tail -30 "$T/logs$1")"
    echo "$id"
}
idN=$(run $N 'profile: {steps: "3:5", workers: "*dp-0"}')
id1=$(run 1)
[ "$(grep -c "dp: rank [0-9]/$N done: backend nccl on cuda" "$T/logs$N")" = "$N" ] || fail "not NCCL on every rank: $(grep 'dp:' "$T/logs$N")"
sN=$(grep "dp: rank 0/$N done" "$T/logs$N" | sed 's/.*parameter sum //')
s1=$(grep "dp: rank 0/1 done" "$T/logs1" | sed 's/.*parameter sum //')
python3 -c "import sys; a, b = float('$sN'), float('$s1'); tol = float('${TORCH_TOL:-1e-4}'); sys.exit(0 if abs(a - b) <= tol * max(abs(b), 1e-9) else 1)" ||
    fail "$N ranks ($sN) and 1 rank ($s1) differ beyond ${TORCH_TOL:-1e-4}"
pass "DDP over NCCL on $N GPUs through troupe.torch (no MASTER_PORT): parameter sum $sN, one GPU with the same batch $s1; $(grep 'dp: step 30' "$T/logs$N")"
grep -q "job$idN-dp-0\] troupe.torch: job$idN-dp-0: profiling from step 3 (torch.cuda.profiler.start)" "$T/logs$N" &&
    grep -q "job$idN-dp-0\] troupe.torch: job$idN-dp-0: profiled steps 3..4 (torch.cuda.profiler.stop)" "$T/logs$N" ||
    fail "rank 0's profiling window: $(grep 'troupe.torch' "$T/logs$N")"
grep -q "job$idN-dp-1\] troupe.torch" "$T/logs$N" && fail "rank 1 profiled: $(grep 'troupe.torch' "$T/logs$N")"
pass "troupe.torch.step drove torch.cuda.profiler over steps 3..4 of dp-0 only"
