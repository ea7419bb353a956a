#!/usr/bin/env bash
# bench/mgpu/zero_device.sh - ZeRO-1 (dp.zero 1) in ONE device call on a
# machine of 2 or more GPUs, from the repository root, binaries staged by
# tests/gpu/runtime/stage.sh into .device (as bench/mgpu/run_device.sh):
#   test   tests/gpu/runtime/train_zero.sh: parity with dp.zero 0, memory,
#          checkpoints across dp.zero
#   zero1  troupe-train weak scaling with dp.zero 1 at all the GPUs (124M and
#          350M, WEAK_MODELS), the same jobs as run_device.sh's weak stage
#   mgpu   run_device.sh's weak (dp.zero 0, at 1 and N GPUs), ddp (PyTorch
#          DDP, same models and batch) and allreduce stages
# then one table side by side (step ms, tokens/s per GPU, efficiency against
# the 1-GPU run, per-GPU memory, against DDP). The whole under RUN_BUDGET_S
# (default 540 s). Results in $OUT (or ./bench-out-zero): zero.txt,
# zero.json, test.txt, the stages' folders.
set -u
cd "$(dirname "$0")/../.."
out=${OUT:-$PWD/bench-out-zero}
mkdir -p "$out"
export TROUPE_BIN=${TROUPE_BIN:-$PWD/.device/bin}
export LD_LIBRARY_PATH=$PWD/.device/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0 TROUPE_REQUIRE_GPU=${TROUPE_REQUIRE_GPU:-1}
budget=${RUN_BUDGET_S:-540}
t0=$(date +%s)
left() { echo $((budget - ($(date +%s) - t0))); }
G=${TROUPE_GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')}
status=0

echo "=== test (train_zero.sh)"
GPU_OUT=$out/test TROUPE_TEST_DEADLINE_S=200 timeout -k 5 210 bash tests/gpu/runtime/train_zero.sh >"$out/test.txt" 2>&1 ||
    status=1
grep -E '^(ok|FAIL|SKIP)|^rank ' "$out/test.txt" | tail -n 20
echo "test rc=$status ($(($(date +%s) - t0)) s)"

echo "=== zero1 (weak, dp.zero 1, $G GPUs)"
mkdir -p "$out/zero1/raw"
cap=$(($(left) < 200 ? $(left) : 200))
DP_ZERO=1 WEAK_SIZES=$G TROUPE_GPUS=$G TROUPE_TEST_DEADLINE_S=$((cap - 8)) timeout -k 5 "$cap" \
    bash bench/mgpu/troupe_bench.sh "$out/zero1/raw" weak >"$out/zero1/bench.txt" 2>&1 || { status=1; tail -n 15 "$out/zero1/bench.txt"; }
python3 bench/mgpu/summarize.py "$out/zero1" --json "$out/zero1/weak.json" >"$out/zero1/summary.txt" 2>&1
echo "zero1 done ($(($(date +%s) - t0)) s)"

echo "=== mgpu (run_device.sh weak ddp allreduce, dp.zero 0)"
OUT=$out/mgpu RUN_BUDGET_S=$(($(left) - 15)) bash bench/mgpu/run_device.sh weak ddp allreduce >"$out/mgpu.txt" 2>&1 || status=1
tail -n 40 "$out/mgpu.txt"

python3 - "$out" <<'PY' | tee "$out/zero.txt"
import json, os, sys
out = sys.argv[1]
def load(p):
    return json.load(open(p)) if os.path.exists(p) else {}
z1 = load(f"{out}/zero1/weak.json").get("weak", [])
m = load(f"{out}/mgpu/mgpu.json")
z0, ddp = m.get("weak", []), m.get("ddp", [])
res = {"machine": m.get("machine", {}), "rows": []}
print(f"{'model':>5} {'GPUs':>4} {'zero':>4} {'step ms':>8} {'tok/s/GPU':>10} {'efficiency':>10} {'GiB/GPU':>8} {'vs DDP':>7}")
for model in ("124M", "350M"):
    one = [w for w in z0 if w["model"] == model and w["gpus"] == 1]
    rows = [(0, w) for w in z0 if w["model"] == model] + [(1, w) for w in z1 if w["model"] == model]
    for zero, w in sorted(rows, key=lambda x: (x[1]["gpus"], x[0])):
        eff = w["tok_s_per_gpu"] / one[0]["tok_s_per_gpu"] if one else None
        d = [r for r in ddp if r["model"] == model and r["gpus"] == w["gpus"]]
        vs = w["tok_s_total"] / d[0]["tok_s"] if d else None
        row = {"model": model, "gpus": w["gpus"], "zero": zero, "step_ms": w["step_ms"], "tok_s_per_gpu": w["tok_s_per_gpu"],
               "efficiency": eff, "mem_peak_gib": w.get("mem_peak_gib_max_rank"), "over_ddp": vs,
               "ddp_tok_s": d[0]["tok_s"] if d else None}
        res["rows"].append(row)
        print(f"{model:>5} {w['gpus']:>4} {zero:>4} {w['step_ms']:>8.2f} {w['tok_s_per_gpu']:>10.0f} "
              f"{(f'{100 * eff:.1f}%' if eff else 'n/a'):>10} {w.get('mem_peak_gib_max_rank', 0):>8.2f} "
              f"{(f'{vs:.3f}' if vs else 'n/a'):>7}")
res["allreduce"] = m.get("allreduce", [])
mem = load(f"{out}/test/zero_mem_small.json")
if mem:
    res["test_memory"] = mem
json.dump(res, open(f"{out}/zero.json", "w"), indent=1)
PY
echo "total $(($(date +%s) - t0)) s, status $status"
exit $status
