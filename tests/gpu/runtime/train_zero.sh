#!/usr/bin/env bash
# gpu.runtime.train_zero - ZeRO-1 (dp.zero 1) of troupe-train over NCCL on
# the machine's GPUs (at least 2; TROUPE_GPUS=N uses N of them), under a real
# head and node agent:
#   1. parity: a small fp32 model at N ranks with dp.zero 1 (gradient slices
#      reduce-scattered with ncclReduceScatter, AdamW on the shard, the fp32
#      master all-gathered with ncclAllGather) follows dp.zero 0's curve
#      (loss, grad_norm, val_loss per step, every rank alike) within
#      ZERO_TOL (default 1e-3; the CUDA backend's fp32 atomics make two
#      identical dp.zero 0 runs differ too: that difference is printed
#      beside it), with the buckets started during backward (dp.overlap,
#      the default) and after it, and with bf16 gradients against dp.zero 0
#      with bf16 gradients (ZERO_TOL_BF16, default 2e-2);
#   2. memory: the backend's device allocations per rank (mem_in_use_bytes
#      in the metrics) fall by AdamW's m and v less this rank's shard:
#      at least 8 x params x (1 - 1/N) x 0.99 bytes;
#   3. checkpoints: a dp.zero 1 run's checkpoint at step 20 resumed with
#      dp.zero 0 to step 40 follows the run that was dp.zero 0 both times
#      (steps 21..40, same tolerance), and the other way round; in bf16
#      precision too (the master gathered before the checkpoint; the step
#      gathers only the bf16 copy, behind the next forward; ZERO_TOL_BF16P,
#      default 5e-2, with two dp.zero 0 runs' difference printed beside).
# Exits 77 without 2 GPUs (a failure under TROUPE_REQUIRE_GPU=1). Logs and
# metrics go to $GPU_OUT when set, the figures to $GPU_OUT/zero.json.
source "$(dirname "$0")/../../integration/lib.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
COMPARE=$HERE/../../integration/dp/compare.py

source "$(dirname "$0")/gpu_lib.bash"
gpu_require nccl
N=${TROUPE_GPUS:-$(nvidia-smi -L | grep -c '^GPU ')}
[ "$N" -ge 2 ] || skip "ZeRO-1 needs at least 2 GPUs, this machine has $N"

start_head --heartbeat-ms 200 --suspect-after 5 --dead-after 25
"$NODE_BIN" --head "$HEAD" --name gpu0 --state-dir "$T/node-gpu0" >>"$T/node-gpu0.log" 2>&1 &
PIDS+=("$!")
wait_for 30 "the node agent to register with its real GPUs" alive_count

# run_job NAME CONFIG SETS...: N troupe-train workers x 1 GPU with CONFIG and
# --set SETS, rank R's metrics to $OUTDIR/NAME.R; waits for SUCCEEDED.
run_job() {
    local name=$1 config=$2 sets="" s id
    shift 2
    for s in "$@"; do sets="$sets --set $s"; done
    rm -f "$OUTDIR/$name".[0-9]*
    cat >"$T/job-$name.yaml" <<YAML
name: $name
cluster: {nodes: [$N]}
groups:
  - name: policy
    workers: $N
    resources: {gpu: 1}
    command: [bash, -c, 'exec "\$0" --config "\$1" --set metrics.json="\$2.\$RANK"$sets', $TRAIN_BIN, $config, $OUTDIR/$name]
env: {NCCL_NVLS_ENABLE: "0"}
YAML
    id=$(submit "$T/job-$name.yaml")
    wait_for 300 "job $id ($name) to end" ended "$id"
    cli logs "$id" >"$OUTDIR/$name.log" 2>&1 || true
    [ "$(job_state_py "$id")" = SUCCEEDED ] || fail "job $id ($name) $(job_state_py "$id"): $(tail -n 20 "$OUTDIR/$name.log")"
}
ranks() { local r; for ((r = 0; r < N; r++)); do echo "$OUTDIR/$1.$r"; done; }

"$TRAIN_BIN" --make-data "$T/data.tok" --tokens 262144 >/dev/null
cat >"$T/small.yaml" <<YAML
seed: 5
device: cuda
model: {layers: 2, width: 128, heads: 2, seq_len: 64}
train: {steps: 40, micro_batch: 8, accum_steps: 2, warmup_steps: 4, lr: 3e-3, grad_clip: 0.5, precision: fp32}
data: {path: $T/data.tok, val_fraction: 0.1}
eval: {every: 10, batches: 4}
dp: {bucket_mb: 1, timeout_ms: 60000}
YAML
TOL=${ZERO_TOL:-1e-3}
TOLB=${ZERO_TOL_BF16:-2e-2}

# ---- 1. parity -------------------------------------------------------------
run_job z0 "$T/small.yaml" dp.zero=0
run_job z0_again "$T/small.yaml" dp.zero=0
noise=$(python3 "$COMPARE" "$OUTDIR/z0.0" "$OUTDIR/z0_again.0" --tol 1 --independent) || fail "$noise"
run_job z1 "$T/small.yaml" dp.zero=1
grep -q "data parallel: rank 0 of $N over nccl" "$OUTDIR/z1.log" || fail "no 'data parallel ... over nccl' line: $(grep -v step= "$OUTDIR/z1.log" | tail)"
out=$(python3 "$COMPARE" "$OUTDIR/z0.0" $(ranks z1) --tol "$TOL") || fail "dp.zero 1 vs 0: $out"
pass "N=$N fp32, dp.zero 1 vs 0: $out (two dp.zero 0 runs: $noise)"
run_job z1_serial "$T/small.yaml" dp.zero=1 dp.overlap=false
out=$(python3 "$COMPARE" "$OUTDIR/z0.0" $(ranks z1_serial) --tol "$TOL") || fail "dp.zero 1 overlap off vs dp.zero 0: $out"
pass "N=$N fp32, dp.zero 1 with the buckets after backward vs dp.zero 0: $out"
run_job z0_bf16 "$T/small.yaml" dp.zero=0 dp.grad_dtype=bf16
run_job z1_bf16 "$T/small.yaml" dp.zero=1 dp.grad_dtype=bf16
out=$(python3 "$COMPARE" "$OUTDIR/z0_bf16.0" $(ranks z1_bf16) --tol "$TOLB") || fail "bf16 gradients, dp.zero 1 vs 0: $out"
pass "N=$N bf16 gradients, dp.zero 1 vs 0: $out"

# bf16 precision: the step all-gathers the bf16 copy (not the master) and
# the next forward waits for it bucket by bucket; bf16 runs differ from one
# another far more than fp32 ones (printed beside), hence ZERO_TOL_BF16P
run_job zb0 "$T/small.yaml" dp.zero=0 train.precision=bf16 train.lr=1e-3
run_job zb0_again "$T/small.yaml" dp.zero=0 train.precision=bf16 train.lr=1e-3
noise=$(python3 "$COMPARE" "$OUTDIR/zb0.0" "$OUTDIR/zb0_again.0" --tol 1 --independent) || fail "$noise"
run_job zb1 "$T/small.yaml" dp.zero=1 train.precision=bf16 train.lr=1e-3
out=$(python3 "$COMPARE" "$OUTDIR/zb0.0" $(ranks zb1) --tol "${ZERO_TOL_BF16P:-5e-2}") || fail "bf16 precision, dp.zero 1 vs 0: $out (two dp.zero 0 runs: $noise)"
pass "N=$N bf16 precision (bf16 copy all-gathered behind the next forward), dp.zero 1 vs 0: $out (two dp.zero 0 runs: $noise)"

# ---- 2. memory -------------------------------------------------------------
python3 - "$OUTDIR" "$N" <<'PY' || fail "dp.zero 1 did not shrink the optimiser state"
import json, sys
out, n = sys.argv[1], int(sys.argv[2])
def mem(name, r):
    rows = [json.loads(l) for l in open(f"{out}/{name}.{r}") if l.strip()]
    return rows[-1]["mem_in_use_bytes"]
log = [l for l in open(f"{out}/z0.log") if "training backend=cuda params=" in l]
params = int(log[0].split("params=")[1].split()[0])
want = 8 * params * (1 - 1 / n) * 0.99
res = {"gpus": n, "params": params, "ranks": []}
ok = True
for r in range(n):
    a, b = mem("z0", r), mem("z1", r)
    res["ranks"].append({"rank": r, "zero0_in_use_bytes": a, "zero1_in_use_bytes": b, "saved_bytes": a - b})
    print(f"rank {r}: dp.zero 0 {a / 2**20:.2f} MiB, dp.zero 1 {b / 2**20:.2f} MiB, saved {(a - b) / 2**20:.2f} MiB "
          f"(AdamW m+v of {params} params: {8 * params / 2**20:.2f} MiB; want >= {want / 2**20:.2f})")
    ok = ok and a - b >= want
json.dump(res, open(f"{out}/zero_mem_small.json", "w"), indent=1)
sys.exit(0 if ok else 1)
PY
pass "N=$N: dp.zero 1 keeps 1/$N of AdamW's state per GPU"

# ---- 3. checkpoints across dp.zero -----------------------------------------
# Each case trains 20 steps (train.steps 20, checkpoint at 20), then resumes
# to 40 (the schedule of 40 from there); the reference does the same with
# dp.zero 0 both times.
ck_run() { # ck_run NAME FIRST_ZERO SECOND_ZERO [SETS...]
    local name=$1 z1st=$2 z2nd=$3
    shift 3
    rm -rf "$T/ck-$name"
    run_job "${name}_a" "$T/small.yaml" dp.zero="$z1st" train.steps=20 checkpoint.dir="$T/ck-$name" checkpoint.every=10 "$@"
    run_job "${name}_b" "$T/small.yaml" dp.zero="$z2nd" checkpoint.dir="$T/ck-$name" checkpoint.every=10 "$@"
    grep -q "resumed checkpoint=.* step=20" "$OUTDIR/${name}_b.log" ||
        fail "$name: no resume at step 20: $(grep -v step= "$OUTDIR/${name}_b.log" | tail -5)"
}
ck_run ck00 0 0
for c in ck10:1:0 ck01:0:1; do
    IFS=: read -r name z1st z2nd <<<"$c"
    ck_run "$name" "$z1st" "$z2nd"
    out=$(python3 "$COMPARE" "$OUTDIR/ck00_b.0" $(ranks "${name}_b") --tol "$TOL" --from 21) || fail "$name: $out"
    pass "N=$N: a checkpoint of dp.zero $z1st at step 20 resumed with dp.zero $z2nd: steps 21..40 $out"
done
# bf16 precision: the checkpoint first all-gathers the master each rank
# keeps current on its shard only (gather_params)
ck_run ckb00 0 0 train.precision=bf16 train.lr=1e-3
ck_run ckb10 1 0 train.precision=bf16 train.lr=1e-3
out=$(python3 "$COMPARE" "$OUTDIR/ckb00_b.0" $(ranks ckb10_b) --tol "${ZERO_TOL_BF16P:-5e-2}" --from 21) || fail "ckb10: $out"
pass "N=$N bf16 precision: a checkpoint of dp.zero 1 at step 20 resumed with dp.zero 0: steps 21..40 $out"
