#!/usr/bin/env bash
# gpu.runtime.nvml - the node agent's GPU figures from NVML on a real GPU:
# troupe-head + troupe-node without --fake-gpus, one troupe-train worker
# (124M, bf16, long enough to be sampled while it trains). Checks that
#   - `troupe -o json nodes` says stats.gpu_source "nvml";
#   - while the worker trains, the figures of GPU 0 agree with nvidia-smi's
#     taken at the same moment (the heartbeat samples every 200 ms here):
#     memory used within NVML_MEM_TOL_MB (default 64; the agent reads
#     nvmlDeviceGetMemoryInfo_v2, which leaves the driver's reserve out as
#     nvidia-smi's memory.used does: v1 counted it, 480 MiB more on an H100),
#     utilisation within NVML_UTIL_TOL (default 30 points; the two are
#     sampled over different windows) and both above 50 % while training;
#   - `troupe metrics JOB --name gpu_mem_in_use_bytes,mfu` of the running
#     worker has points, memory in use between 1 GB and nvidia-smi's used
#     memory, mfu in (0, 1).
# Every sample goes to $GPU_OUT/nvml.json (one JSON object per line).
# Exits 77 without a GPU (a failure under TROUPE_REQUIRE_GPU=1).
source "$(dirname "$0")/../../integration/lib.sh"

source "$(dirname "$0")/gpu_lib.bash"
gpu_require
has_stats() { [ "$(cli -o json nodes | js 'd["nodes"][0]["stats"] is not None')" = True ]; }

start_head --heartbeat-ms 200 --suspect-after 5 --dead-after 25
"$NODE_BIN" --head "$HEAD" --name gpu0 --state-dir "$T/node-gpu0" >>"$T/node-gpu0.log" 2>&1 &
PIDS+=("$!")
wait_for 30 "the node agent to register with its real GPUs" alive_count
wait_for 10 "the first heartbeat with figures" has_stats
src=$(cli -o json nodes | js 'd["nodes"][0]["stats"]["gpu_source"]')
[ "$src" = nvml ] || fail "stats.gpu_source is '$src', not nvml: $(grep -i gpu "$T/node-gpu0.log" | tail -3)"
pass "gpu_source nvml"

"$TRAIN_BIN" --make-data "$T/big.tok" --vocab 50257 --tokens 4000000 >/dev/null
cat >"$T/big.yaml" <<YAML
seed: 1
device: cuda
model: {layers: 12, width: 768, heads: 12, seq_len: 1024, vocab: 50257}
train: {steps: ${NVML_STEPS:-400}, micro_batch: 16, warmup_steps: 5, precision: bf16}
data: {path: $T/big.tok, val_fraction: 0}
eval: {every: 0}
YAML
cat >"$T/job.yaml" <<YAML
name: nvml
cluster: {nodes: [1]}
groups:
  - {name: policy, workers: 1, resources: {gpu: 1}, command: [$TRAIN_BIN, --config, $T/big.yaml, --set, dp.mode=off]}
env: {NCCL_NVLS_ENABLE: "0"}
YAML
id=$(submit "$T/job.yaml")
# steps reported through the metrics path: past step 20 the GPU is busy
at_step() {
    local s
    s=$(cli -o json metrics "$id" --name step_ms --last 1 | js 'max([p["step"] for p in d["points"]] or [0])')
    [ "$s" -ge 20 ]
}
wait_for 300 "job $id to report step 20" at_step

# sample: nvidia-smi and the head's figures back to back, 5 times 1 s apart
for i in 1 2 3 4 5; do
    smi=$(nvidia-smi --query-gpu=index,memory.used,memory.total,utilization.gpu,temperature.gpu,power.draw \
        --format=csv,noheader,nounits -i 0)
    nodes=$(cli -o json nodes)
    res=$(nvidia-smi --query-gpu=memory.reserved --format=csv,noheader,nounits -i 0 2>/dev/null || echo n/a)
    python3 - "$smi" "$res" "$nodes" <<'PY' >>"$OUTDIR/nvml.json"
import json, sys, time
smi = [x.strip() for x in sys.argv[1].split(",")]
nodes = json.loads(sys.argv[3])["nodes"][0]
g = [g for g in nodes["gpus"] if g["index"] == 0][0]["stats"]
print(json.dumps({"t_ms": int(time.time() * 1000), "stats_at_ms": nodes["stats"]["at_ms"],
                  "gpu_source": nodes["stats"]["gpu_source"],
                  "troupe": g, "smi": {"memory_used_mib": float(smi[1]), "memory_total_mib": float(smi[2]),
                                       "utilization_pct": float(smi[3]), "temperature_c": float(smi[4]),
                                       "power_w": float(smi[5]) if smi[5].replace('.', '').isdigit() else None,
                                       "memory_reserved_mib": sys.argv[2].strip()}}))
PY
    sleep 1
done
cli -o json metrics "$id" --name gpu_mem_in_use_bytes,mfu >"$OUTDIR/nvml_metrics.json"
cli metrics "$id" --name gpu_mem_in_use_bytes,mfu --last 4 || true
python3 - "$OUTDIR/nvml.json" "$OUTDIR/nvml_metrics.json" "${NVML_MEM_TOL_MB:-64}" "${NVML_UTIL_TOL:-30}" <<'PY' \
    || fail "NVML figures disagree with nvidia-smi (above; samples in $OUTDIR/nvml.json)"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
mem_tol, util_tol = float(sys.argv[3]), float(sys.argv[4])
bad = []
for r in rows:
    t, s = r["troupe"], r["smi"]
    tm = t["memory_used_bytes"] / 2**20
    print(f"troupe: mem {tm:.0f} MiB util {t['utilization_pct']}% temp {t['temperature_c']} C "
          f"power {t['power_mw'] / 1000:.0f} W | nvidia-smi: mem {s['memory_used_mib']:.0f} MiB "
          f"(reserved {s['memory_reserved_mib']}) util {s['utilization_pct']:.0f}% temp {s['temperature_c']:.0f} C "
          f"power {s['power_w']} W | mem gap {tm - s['memory_used_mib']:+.0f} MiB")
    if r["gpu_source"] != "nvml":
        bad.append(f"gpu_source {r['gpu_source']}")
    if abs(tm - s["memory_used_mib"]) > mem_tol:
        bad.append(f"memory {tm:.0f} vs {s['memory_used_mib']:.0f} MiB")
    if abs(t["utilization_pct"] - s["utilization_pct"]) > util_tol:
        bad.append(f"utilisation {t['utilization_pct']} vs {s['utilization_pct']:.0f} %")
    if abs(t["temperature_c"] - s["temperature_c"]) > 3:
        bad.append(f"temperature {t['temperature_c']} vs {s['temperature_c']:.0f} C")
if statistics.median(r["troupe"]["utilization_pct"] for r in rows) < 50 or \
        statistics.median(r["smi"]["utilization_pct"] for r in rows) < 50:
    bad.append("median utilisation under 50 % while training")
pts = json.load(open(sys.argv[2]))["points"]
mem = [p["value"] for p in pts if p["name"] == "gpu_mem_in_use_bytes"]
mfu = [p["value"] for p in pts if p["name"] == "mfu" and isinstance(p["value"], (int, float))]
smi_used = max(r["smi"]["memory_used_mib"] for r in rows) * 2**20
print(f"troupe metrics: {len(mem)} gpu_mem_in_use_bytes points (last {mem[-1] if mem else None}), "
      f"{len(mfu)} mfu points (median {statistics.median(mfu) if mfu else None})")
if not mem or not (1e9 <= mem[-1] <= smi_used):
    bad.append(f"gpu_mem_in_use_bytes {mem[-1] if mem else None} not in [1e9, {smi_used:.0f}]")
if not mfu or not (0 < statistics.median(mfu) < 1):
    bad.append(f"mfu median not in (0, 1)")
print("\n".join("BAD: " + b for b in bad))
sys.exit(1 if bad else 0)
PY
pass "NVML figures agree with nvidia-smi while training; troupe metrics has gpu_mem_in_use_bytes and mfu"
cli stop "$id" >/dev/null 2>&1 || true
wait_for 60 "job $id to stop" ended "$id"
