#!/usr/bin/env bash
# gpu.runtime.train_nccl_profile - troupe-train under troupe on a real GPU:
# troupe-head + troupe-node (real GPU discovery, no --fake-gpus), one job of
# GPU_WORKERS (default 1) troupe-train workers on CUDA with
# `profile: {steps: "2:4", workers: "*policy*"}`. Checks that
#   - the group's NCCL communicator was built from the ID rank 0 published to
#     the head (head log: "rdzv job=N comm=policy epoch=0 published 1 IDs";
#     each worker: "nccl: communicator policy of job N, epoch 0, rank R of W
#     ready from the head's ID (...)", then the warm-up all-reduce);
#   - cudaProfilerStart ran at step 2 and cudaProfilerStop at step 4 (the
#     real libcudart, no "failed"), profiled steps exactly 2 and 3;
#   - the job SUCCEEDED;
#   - troupe trace gives every rank's spans of exactly steps 2 and 3, each
#     step holding troupe-train's forward, backward, (grad all-reduce with
#     more than one worker) and optimizer spans, nested and in order.
# With TROUPE_GPU_NCU=1 it also runs the job with each worker under `ncu
# --profile-from-start off` and checks that kernels were profiled, all of
# them between the worker's cudaProfilerStart (step 2) and Stop (step 4)
# lines, and none is the NCCL warm-up's (which runs before step 1).
#
# Without a GPU (or a build without NCCL) it exits 77 (skipped) and says why;
# with TROUPE_REQUIRE_GPU=1 that is a failure instead. Needs no jq (the lent
# GPU machines have none): JSON is read with python3. Logs go to $GPU_OUT
# when set (the lent machine's runner's $OUT).
source "$(dirname "$0")/../../integration/lib.sh"

source "$(dirname "$0")/gpu_lib.bash"
gpu_require nccl
W=${GPU_WORKERS:-1}
is_state_py() { [ "$(job_state_py "$1")" = "$2" ]; }

start_head --heartbeat-ms 200 --suspect-after 5 --dead-after 25
"$NODE_BIN" --head "$HEAD" --name gpu0 --state-dir "$T/node-gpu0" >>"$T/node-gpu0.log" 2>&1 &
PIDS+=("$!")
wait_for 30 "the node agent to register with its real GPUs" alive_count
cli nodes | tee "$OUTDIR/nodes.txt"

"$TRAIN_BIN" --make-data "$T/data.tok" --tokens 65536 >/dev/null
cat >"$T/train.yaml" <<YAML
seed: 5
device: cuda
model: {layers: 2, width: 64, heads: 4, seq_len: 64}
train: {steps: 6, micro_batch: 4, warmup_steps: 1}
data: {path: $T/data.tok, val_fraction: 0}
eval: {every: 0}
YAML
run_job() { # run_job NAME COMMAND...: submit, wait for the end, keep the logs in $OUTDIR/NAME.log
    local name=$1; shift
    local cmd
    cmd=$(printf '%s, ' "$@"); cmd=${cmd%, }
    cat >"$T/job-$name.yaml" <<YAML
name: $name
cluster: {nodes: [$W]}
groups:
  - {name: policy, workers: $W, resources: {gpu: 1}, command: [$cmd]}
profile: {steps: "2:4", workers: "*policy*"}
env: {NCCL_NVLS_ENABLE: "0"}
YAML
    id=$(submit "$T/job-$name.yaml")
    wait_for 300 "job $id ($name) to end" ended "$id"
    cli logs "$id" >"$OUTDIR/$name.log" 2>&1 || true
    cp "$T/head.log" "$OUTDIR/head.log"
    is_state_py "$id" SUCCEEDED || fail "job $id ($name) $(job_state_py "$id"): $(cli job "$id"; tail -n 30 "$OUTDIR/$name.log")"
}

run_job train "$TRAIN_BIN" --config "$T/train.yaml"
L=$OUTDIR/train.log
grep -q "rdzv job=$id comm=policy epoch=0 published 1 IDs ($W ranks)" "$T/head.log" \
    || fail "the head never got the ID: $(grep rdzv "$T/head.log")"
for r in $(seq 0 $((W - 1))); do
    want="created and published by this rank"; [ "$r" = 0 ] || want="received from the head"
    grep -q "nccl: communicator policy of job $id, epoch 0, rank $r of $W ready from the head's ID (1 ID, $want)" "$L" \
        || fail "rank $r: no communicator line: $(grep -i nccl "$L")"
done
pass "NCCL communicator of $W rank(s) built from the ID published to the head (epoch 0), warm-up all-reduce done"
for w in $(seq 0 $((W - 1))); do
    p=$(grep -o "\[job$id-policy-$w\].*profiling step [0-9]*" "$L" | awk '{print $NF}' | tr '\n' ' ')
    [ "$p" = "2 3 " ] || fail "policy-$w profiled steps '$p', want '2 3 '"
    grep -q "\[job$id-policy-$w\].*profiler: cudaProfilerStart at step 2\$" "$L" \
        || fail "policy-$w: $(grep "policy-$w.*profiler" "$L")"
    grep -q "\[job$id-policy-$w\].*profiler: cudaProfilerStop at step 4\$" "$L" \
        || fail "policy-$w: $(grep "policy-$w.*profiler" "$L")"
done
pass "cudaProfilerStart at step 2, cudaProfilerStop at step 4, profiled steps exactly 2 3; job $id SUCCEEDED"
# The built-in trace of the same job (what works where nsys does not): every
# rank's spans of exactly steps 2 and 3, on the head's clock.
cli trace "$id" --output "$OUTDIR/trace.json" >"$OUTDIR/trace.txt" 2>&1 || fail "troupe trace: $(cat "$OUTDIR/trace.txt")"
python3 - "$OUTDIR/trace.json" "$W" <<'PY' || fail "trace: $(head -c 2000 "$OUTDIR/trace.json")"
import json, sys
d = json.load(open(sys.argv[1])); w = int(sys.argv[2])
xs = [e for e in d["traceEvents"] if e["ph"] == "X"]
for pid in range(w):
    steps = sorted(e["name"] for e in xs if e["pid"] == pid and e["cat"] == "step")
    assert steps == ["step 2", "step 3"], f"rank {pid}: {steps}"
    assert {e["args"]["step"] for e in xs if e["pid"] == pid} == {2, 3}
    # troupe-train's phases, nested in their step on its thread, one after
    # the other; their lengths are the CUDA events' (GPU time), placed on the
    # host clock by the sync that ends each phase (worker/train/train.c).
    for s in (e for e in xs if e["pid"] == pid and e["cat"] == "step"):
        ph = sorted((e for e in xs if e["pid"] == pid and e["cat"] == "phase" and e["args"]["step"] == s["args"]["step"]),
                    key=lambda e: e["ts"])
        names = [e["name"] for e in ph]
        want = ["forward", "backward"] + (["grad all-reduce"] if w > 1 else []) + ["optimizer"]
        assert [n for n in names if n != "grad all-reduce" or w > 1] == want, f"rank {pid} {s['name']}: phases {names}"
        for e in ph:
            assert s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] and e["tid"] == s["tid"], f"{e} outside {s}"
        for a, b in zip(ph, ph[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + 1, f"rank {pid}: {a['name']} overlaps {b['name']}"
        print(f"rank {pid} {s['name']}: {s['dur']} us; " + ", ".join(f"{e['name']} {e['dur']} us" for e in ph))
print(f"trace ok: {len(xs)} spans of {w} rank(s), kinds {sorted({e['cat'] for e in xs})}")
PY
pass "troupe trace: $(cat "$OUTDIR/trace.txt")"

if [ "${TROUPE_GPU_NCU:-0}" = 1 ]; then
    NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null) || fail "TROUPE_GPU_NCU=1 but ncu is not installed"
    run_job ncu "$NCU" --profile-from-start off --metrics gpu__time_duration.sum --target-processes all \
        "$TRAIN_BIN" --config "$T/train.yaml"
    L=$OUTDIR/ncu.log
    n=$(grep -c '==PROF== Profiling "' "$L" || true)
    [ "$n" -gt 0 ] || fail "ncu profiled no kernel: $(grep '==PROF==\|==ERROR==\|==WARNING==' "$L" | head)"
    # One grep each, no early-exiting reader in a pipe: under pipefail a
    # `grep | head -1` or `grep | grep -q` can die of SIGPIPE (rc 141), which
    # aborted this script on the H100 and would turn the NCCL check's `!` into
    # a pass.
    if grep -qi '==PROF== Profiling "[^"]*nccl' "$L"; then
        fail "ncu profiled an NCCL kernel (the warm-up is outside the range)"
    fi
    first=$(grep -n -m1 '==PROF== Profiling "' "$L" | cut -d: -f1)
    last=$(grep -n '==PROF== Profiling "' "$L" | tail -n 1 | cut -d: -f1)
    start=$(grep -n -m1 'profiler: cudaProfilerStart at step 2$' "$L" | cut -d: -f1)
    stop=$(grep -n -m1 'profiler: cudaProfilerStop at step 4$' "$L" | cut -d: -f1)
    [ -n "$start" ] && [ -n "$stop" ] && [ "$start" -lt "$first" ] && [ "$last" -lt "$stop" ] \
        || fail "kernels profiled outside steps 2..3: start line $start, kernels $first..$last, stop line $stop"
    pass "ncu --profile-from-start off: $n kernels, all between cudaProfilerStart (step 2) and Stop (step 4), no NCCL kernel"
else
    echo "note: the ncu check runs with TROUPE_GPU_NCU=1"
fi
