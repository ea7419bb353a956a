#!/usr/bin/env bash
# The built-in trace: 4 workers (policy x3, generation x1) profile steps 3:5;
# each step has named phases, a head barrier and a CPU all-reduce. The
# generation worker's clock is made 5 s fast (TROUPE_TRACE_SKEW_US, the test
# hook). `troupe trace JOB --output FILE` must give JSON that parses, one process per
# worker (pid = global rank) with spans of exactly steps 3 and 4, properly
# nested and monotone per track, and the skewed worker put back on the head's
# clock: its barrier releases line up with the others'. Refusals: no trace
# yet, unknown job, bad usage.
source "$(dirname "$0")/../lib.sh"
: "${RT_WORKER:?}"
command -v python3 >/dev/null || fail "python3 is needed (scripts/setup.sh installs it)"
start_cluster
cat >"$T/job.yaml" <<YAML
name: traced
cluster: {nodes: [4]}
groups:
  - {name: policy, workers: 3, resources: {gpu: 1}, command: [$RT_WORKER, run]}
  - {name: generation, workers: 1, resources: {gpu: 1}, command: [$RT_WORKER, run], env: {TROUPE_TRACE_SKEW_US: "5000000"}}
profile: {steps: "3:5", workers: "*"}
env: {RT_STEPS: "7", RT_STEP_MS: "60", RT_TRACE: "1"}
YAML
id=$(submit "$T/job.yaml")
wait_for 60 "job $id to succeed" is_job_state "$id" SUCCEEDED
said_offset() { cli logs "$id" >"$T/logs"; grep -Eq "\[job$id-generation-0\] rt: step 5: trace: .* spans sent \(clock offset -(49|50)[0-9]{5} us" "$T/logs"; }
for _ in $(seq 100); do said_offset && break; sleep 0.1; done
said_offset || fail "generation-0 did not say its spans went with a ~-5 s offset: $(cat "$T/logs")"
pass "$(grep "\[job$id-generation-0\] rt: step 5" "$T/logs")"

out=$(cli trace "$id" --output "$T/t.json")
grep -q "^job $id: [0-9]* spans of 4 workers (steps 3..4) written to $T/t.json" <<<"$out" || fail "troupe trace: $out"
pass "$out"
jq -e '.traceEvents | length > 0' "$T/t.json" >/dev/null || fail "jq cannot read the trace"

python3 - "$T/t.json" "$id" <<'PY' || fail "trace checks failed"
import json, sys
from collections import defaultdict
doc = json.load(open(sys.argv[1]))
job = sys.argv[2]
ev = doc["traceEvents"]
names = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
want = {0: "policy-0", 1: "policy-1", 2: "policy-2", 3: "generation-0"}
for pid, w in want.items():
    assert names.get(pid, "").startswith(f"job{job}-{w} (rank {pid}"), f"pid {pid} named {names.get(pid)!r}"
xs = [e for e in ev if e["ph"] == "X"]
assert {e["pid"] for e in xs} == set(want), f"pids with spans: {sorted({e['pid'] for e in xs})}"
for pid in want:
    mine = [e for e in xs if e["pid"] == pid]
    steps = sorted(e["name"] for e in mine if e["cat"] == "step")
    assert steps == ["step 3", "step 4"], f"pid {pid}: step spans {steps}"
    assert {e["args"]["step"] for e in mine} == {3, 4}, f"pid {pid}: spans of steps {sorted({e['args']['step'] for e in mine})}"
    kinds = {(e["cat"], e["name"]) for e in mine}
    for k in [("phase", "forward"), ("phase", "backward"), ("rdzv", "barrier step"), ("coll", "all-reduce")]:
        assert k in kinds, f"pid {pid}: no {k} span in {sorted(kinds)}"
    for e in mine:
        s = [x for x in mine if x["cat"] == "step" and x["args"]["step"] == e["args"]["step"]][0]
        assert s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"], f"pid {pid}: {e} outside {s}"
# Per track (pid, tid): in file order, starts never go back and spans nest.
tracks = defaultdict(list)
for e in xs:
    tracks[(e["pid"], e["tid"])].append(e)
for key, spans in tracks.items():
    stack = []
    for i, e in enumerate(spans):
        assert i == 0 or spans[i - 1]["ts"] <= e["ts"], f"track {key}: ts goes back at {e}"
        while stack and stack[-1] <= e["ts"]:
            stack.pop()
        assert not stack or e["ts"] + e["dur"] <= stack[-1], f"track {key}: {e} overlaps its parent's end"
        stack.append(e["ts"] + e["dur"])
# Clock offsets: about -5 s for the skewed worker, about 0 for the others;
# and the barrier releases (the end of "barrier step") line up across ranks.
offs = {w["rank"]: w["offset_us"] for w in doc["otherData"]["workers"]}
assert abs(offs[3] + 5_000_000) < 500_000, f"generation-0 offset {offs[3]}"
for r in (0, 1, 2):
    assert abs(offs[r]) < 500_000, f"rank {r} offset {offs[r]}"
for step in (3, 4):
    ends = [e["ts"] + e["dur"] for e in xs if e["name"] == "barrier step" and e["args"]["step"] == step]
    assert len(ends) == 4, f"step {step}: {len(ends)} barrier spans"
    spread = max(ends) - min(ends)
    assert spread < 1_000_000, f"step {step}: barrier releases {spread} us apart (clock offset not applied?)"
    print(f"ok: step {step}: barrier releases of the 4 ranks within {spread} us")
print(f"ok: {len(xs)} spans, {len(tracks)} tracks nested and monotone; offsets {offs}")
PY

# Refusals.
cat >"$T/plain.yaml" <<YAML
name: plain
cluster: {nodes: [4]}
groups:
  - {name: policy, workers: 1, resources: {gpu: 1}, command: [$RT_WORKER, run]}
env: {RT_STEPS: "3", RT_STEP_MS: "10"}
YAML
p=$(submit "$T/plain.yaml")
wait_for 60 "job $p to succeed" is_job_state "$p" SUCCEEDED
out=$(cli trace "$p" 2>&1) && fail "a job without profiled steps gave a trace: $out"
grep -q "job $p has no trace yet: no worker has sent spans of a profiled step" <<<"$out" || fail "no trace: $out"
pass "no trace: $out"
out=$(cli trace 999 2>&1) && fail "unknown job: $out"
grep -q "NOT_FOUND.*no job 999" <<<"$out" || fail "unknown job: $out"
pass "unknown job: $out"
rc=0; out=$(cli trace 2>&1) || rc=$?
[ "$rc" = 2 ] && grep -q "usage: troupe trace JOB \[--output FILE\]" <<<"$out" || fail "usage ($rc): $out"
rc=0; out=$(cli trace "$id" --steps 2>&1) || rc=$?
[ "$rc" = 2 ] || fail "unknown option ($rc): $out"
pass "usage errors exit 2"

# ReportTrace refuses what the worker API never sends, keeping nothing
# (calls made as a worker of the running job r, environment set by hand).
sed -e 's/name: plain$/name: running/' -e 's/RT_STEPS: "3"/RT_STEPS: "100000"/' "$T/plain.yaml" >"$T/running.yaml"
r=$(submit "$T/running.yaml")
wait_for 20 "job $r running" bash -c "'$CLI_BIN' -o json job $r | jq -e '.state==\"RUNNING\"'"
as() { # as WORKER ATTEMPT -- rt_worker call ...
    local worker=$1 attempt=$2; shift 2
    env TROUPE_JOB="$r" TROUPE_GROUP=policy TROUPE_WORKER="$worker" TROUPE_ATTEMPT="$attempt" RANK=0 WORLD_SIZE=1 \
        "$RT_WORKER" call "$@" || true
}
expect() { grep -q "^ERR $2 .*$3" <<<"$1" || fail "expected $2 '$3', got: $1"; pass "$2: ${1#ERR $2 }"; }
now=$(( $(date +%s) * 1000000 ))
expect "$(as "job$r-policy-0" 0 trace-raw '' "$now" 5)" INVALID_ARGUMENT "span 0: a name of 1 to 128 bytes"
expect "$(as "job$r-policy-0" 0 trace-raw "$(printf 'x%.0s' $(seq 129))" "$now" 5)" INVALID_ARGUMENT "got name of 129 bytes"
expect "$(as "job$r-policy-0" 0 trace-raw fwd 0 5)" INVALID_ARGUMENT "ts_us > 0 and dur_us >= 0"
expect "$(as "job$r-policy-0" 0 trace-raw fwd "$now" -1)" INVALID_ARGUMENT "dur_us -1"
expect "$(as "job$r-policy-0" 0 trace-raw many:10001 "$now" 1)" INVALID_ARGUMENT "10001 spans in one call; at most 10000"
expect "$(as "job$r-policy-9" 0 trace-raw fwd "$now" 5)" PERMISSION_DENIED "worker job$r-policy-9 is not part of job $r"
expect "$(as "job$r-policy-0" 4 trace-raw fwd "$now" 5)" FAILED_PRECONDITION "attempt 4 is not current"
out=$(cli trace "$r" 2>&1) && fail "refused spans were kept: $out"
pass "nothing kept from refused reports"
out=$(as "job$r-policy-0" 0 trace-raw fwd "$now" 5); [ "$out" = OK ] || fail "a good span: $out"
n=$(cli trace "$r" | jq '[.traceEvents[] | select(.ph == "X")] | length')
[ "$n" = 1 ] || fail "expected the one good span, got $n"
pass "a well-formed span is kept and traced"
cli stop "$r" >/dev/null 2>&1 || true
