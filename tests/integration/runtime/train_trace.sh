#!/usr/bin/env bash
# troupe-train's phases in the built-in trace (CPU path): two data-parallel
# ranks with accum_steps 2 profile steps 2:4 (steps 2 and 3: A inclusive, B
# exclusive). `troupe trace` must give, per rank, exactly the step spans
# "step 2" and "step 3", and inside each (nested, on the stepping thread) two
# forward and two backward spans (one per micro-batch, forward before its
# backward), one "grad all-reduce" holding the CPU collective's all-reduce
# spans, and one optimizer span after it; no span of any other step. The
# phase spans' lengths agree with the figures the step reports
# (forward_ms/backward_ms/optimizer_ms in troupe metrics).
source "$(dirname "$0")/../lib.sh"
command -v python3 >/dev/null || fail "python3 is needed (scripts/setup.sh installs it)"
start_cluster
"$TRAIN_BIN" --make-data "$T/data.tok" --tokens 8192 >/dev/null
cat >"$T/train.yaml" <<YAML
seed: 3
device: cpu
model: {layers: 1, width: 16, heads: 2, seq_len: 8}
train: {steps: 6, micro_batch: 1, accum_steps: 2, warmup_steps: 1}
data: {path: $T/data.tok, val_fraction: 0}
eval: {every: 0}
YAML
cat >"$T/job.yaml" <<YAML
name: train-trace
cluster: {nodes: [4]}
groups:
  - {name: policy, workers: 2, resources: {gpu: 1}, command: [$TRAIN_BIN, --config, $T/train.yaml]}
profile: {steps: "2:4", workers: "*"}
YAML
id=$(submit "$T/job.yaml")
wait_for 120 "job $id to succeed" is_job_state "$id" SUCCEEDED
# Spans are shipped when the profiled range ends (step 4's begin) and at
# close; the head has them once the workers have exited.
out=$(cli trace "$id" --output "$T/t.json") || fail "troupe trace: $out"
grep -q "^job $id: [0-9]* spans of 2 workers (steps 2..3) written to $T/t.json" <<<"$out" || fail "troupe trace: $out"
pass "$out"
cli -o json metrics "$id" --name forward_ms,backward_ms,optimizer_ms >"$T/m.json" || fail "troupe metrics failed"

python3 - "$T/t.json" "$T/m.json" "$id" <<'PY' || fail "trace checks failed"
import json, sys
doc = json.load(open(sys.argv[1]))
pts = json.load(open(sys.argv[2]))["points"]
job = sys.argv[3]
xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
assert {e["pid"] for e in xs} == {0, 1}, f"pids with spans: {sorted({e['pid'] for e in xs})}"
inside = lambda e, s: s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"]
for pid in (0, 1):
    mine = [e for e in xs if e["pid"] == pid]
    steps = sorted((e for e in mine if e["cat"] == "step"), key=lambda e: e["ts"])
    assert [s["name"] for s in steps] == ["step 2", "step 3"], f"rank {pid}: step spans {[s['name'] for s in steps]}"
    assert {e["args"]["step"] for e in mine} == {2, 3}, f"rank {pid}: spans of steps {sorted({e['args']['step'] for e in mine})}"
    for s in steps:
        n = s["args"]["step"]
        ph = sorted((e for e in mine if e["cat"] == "phase" and e["args"]["step"] == n), key=lambda e: (e["ts"], -e["dur"]))
        names = [e["name"] for e in ph]
        assert names == ["forward", "backward", "forward", "backward", "grad all-reduce", "optimizer"], \
            f"rank {pid} step {n}: phases in order {names}"
        for e in ph:
            assert inside(e, s), f"rank {pid}: {e} outside {s}"
            assert e["tid"] == s["tid"], f"rank {pid}: {e['name']} on thread {e['tid']}, step on {s['tid']}"
        # one after the other, never overlapping: each micro-batch's backward
        # starts where its forward ends (1 us rounding)
        for a, b in zip(ph, ph[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + 1, f"rank {pid} step {n}: {a['name']} overlaps {b['name']}"
        for i in (0, 2):
            assert abs(ph[i]["ts"] + ph[i]["dur"] - ph[i + 1]["ts"]) <= 1, f"rank {pid} step {n}: gap forward->backward"
        ar = ph[4]
        colls = [e for e in mine if e["cat"] == "coll" and e["name"] == "all-reduce" and inside(e, ar)]
        assert colls and all(e["tid"] == ar["tid"] for e in colls), f"rank {pid} step {n}: no all-reduce inside grad all-reduce: {ar} {[e for e in mine if e['cat'] == 'coll']}"
        # lengths: the step's reported figures (sums over the micro-batches, ms)
        fig = {p["name"]: p["value"] for p in pts if p["step"] == n and p["worker"] == f"job{job}-policy-{pid}"}
        for name, spans in (("forward_ms", ph[0:3:2]), ("backward_ms", ph[1:4:2]), ("optimizer_ms", ph[5:6])):
            us = sum(e["dur"] for e in spans)
            assert abs(us - fig[name] * 1000) <= 2 + 0.01 * us, f"rank {pid} step {n}: {name} {fig[name]} ms, spans {us} us"
    print(f"ok: rank {pid}: steps 2, 3 each hold forward/backward x2, grad all-reduce ({len(colls)} all-reduce inside), optimizer")
PY
pass "troupe-train phases nested in steps 2 and 3 of both ranks, lengths as reported"
