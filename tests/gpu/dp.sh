#!/usr/bin/env bash
# gpu.dp - data-parallel troupe-train on one machine of N GPUs:
# troupe-head and troupe-node (real GPU discovery), jobs of N workers x 1 GPU
# running troupe-train data-parallel over NCCL, and checks that
#   1. placement: every worker got its own GPU (the job's record, the
#      worker's CUDA_VISIBLE_DEVICES, and where nvidia-smi shows processes,
#      each troupe-train on a GPU of its own);
#   2. every rank's NCCL communicator was built from the ID rank 0 published
#      to the head (head: "rdzv ... published 1 IDs (N ranks)", each rank:
#      "nccl: communicator policy of job J, epoch 0, rank R of N ready from
#      the head's ID"), and every rank trains "over nccl";
#   3. the loss curve (loss, grad_norm, val_loss per step, every rank alike)
#      equals one GPU's standalone run with N x the micro-batch within
#      MGPU_TOL (default 5e-2: different GEMM shapes and reduction order).
#      The run is fp32 at lr 1e-3, where two identical standalone runs
#      agree far inside that (bf16 at lr 3e-3, grad_norm ~10, moved 3.6%
#      between two identical runs against a 5% tolerance): the reference is
#      run twice, both differences are printed, and the check fails when
#      the reference's own noise exceeds a fifth of the tolerance;
#   4. `profile: {steps: "2:4", workers: "*policy-P"}` (P = 1, or 0 when
#      N = 1) made exactly that worker call cudaProfilerStart at step 2 and
#      cudaProfilerStop at step 4 and profile steps 2 and 3, no other worker
#      profiled, and `troupe trace` holds spans of that worker only, steps 2
#      and 3 only;
#   5. the job SUCCEEDED;
#   6. one worker (policy-K, K = N-1) SIGKILLed mid-run fails the job within
#      MGPU_KILL_DEADLINE_S (default dp.timeout_ms 30 s + 15 s), the reason
#      names job<ID>-policy-K, and no worker process is left;
#   7. with `restart: {max_restarts: 1}`, policy-K killed between two
#      checkpoints (SIGSTOPped first, killed only once its last step is at
#      least 2 past a checkpoint, so that steps are run again): every rank
#      resumes from the checkpoint (a multiple of the checkpoint cadence),
#      the job SUCCEEDS with 1 restart, and every step the second attempt
#      repeats matches the first attempt's within the tolerance (at least
#      one such step: a run with none fails);
#   8. for N >= 4: a job of N/2 policy + N/2 generation workers with the
#      refit communicator (troupe-train --role generation, dp_refit.bash);
#      each generation worker reports refits. A troupe-train without --role
#      fails the check.
#
# N is nvidia-smi's GPU count, or TROUPE_GPUS. Without a GPU (or a build
# without NCCL) it exits 77, a failure under TROUPE_REQUIRE_GPU=1.
#
# TROUPE_GPU_DRYRUN=1 checks this script's logic on any machine: the agent
# gets --fake-gpus Nx H200 (N = TROUPE_GPUS, default 2), troupe-train runs
# its CPU backend on the worker API's CPU collective, the tolerance is 1e-5
# (fp32 on the CPU), and the checks that only a GPU can answer say what they
# did instead (no NCCL lines: the CPU collective's; cudaProfilerStart may be
# "skipped: libcudart not found" or "failed (CUDA error)"; no nvidia-smi). Logs go to $GPU_OUT when set.
source "$(dirname "$0")/../integration/lib.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
COMPARE=$HERE/../integration/dp/compare.py
DRY=${TROUPE_GPU_DRYRUN:-0}

skip() {
    if [ "${TROUPE_REQUIRE_GPU:-0}" = 1 ]; then fail "TROUPE_REQUIRE_GPU=1 but: $*"; fi
    skip_test "$@" # exit 77 through lib.sh's cleanup (its watchdog is stopped too)
}
"$TRAIN_BIN" --help >/dev/null 2>&1 || skip "troupe-train does not run (missing libraries?)"
if [ "$DRY" = 1 ]; then
    N=${TROUPE_GPUS:-2}
    DEVICE=cpu
    TOL=${MGPU_TOL:-1e-5}
    echo "dry run: $N simulated GPUs, troupe-train on the CPU collective (TROUPE_GPU_DRYRUN=1)"
else
    nvidia-smi -L >/dev/null 2>&1 || skip "no GPU here (nvidia-smi -L fails)"
    ldd "$TRAIN_BIN" | grep libtroupe_nccl >/dev/null || skip "troupe-train was built without CUDA+NCCL (no libtroupe_nccl)"
    N=${TROUPE_GPUS:-$(nvidia-smi -L | grep -c '^GPU ')}
    DEVICE=cuda
    TOL=${MGPU_TOL:-5e-2}
fi
[[ "$N" =~ ^[1-9][0-9]*$ ]] || fail "TROUPE_GPUS=$N: expected a GPU count >= 1"
K=$((N - 1))                  # the worker killed in checks 6 and 7
P=$((N > 1 ? 1 : 0))          # the profiled worker (*policy-1; policy-0 alone at N = 1)
export NCCL_NVLS_ENABLE=0     # never NVLink multicast on the lent machines
OUTDIR=${GPU_OUT:-$T/out}
mkdir -p "$OUTDIR"
rm -f "$OUTDIR"/m.* "$OUTDIR"/ref.json "$OUTDIR"/ref2.json # metrics files are appended to

# JSON through python3: the lent GPU machines have no jq.
js() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
jstate() { cli -o json job "$1" | js 'd["state"]'; }
jreason() { cli -o json job "$1" | js 'd["reason"]'; }
is_jstate() { [ "$(jstate "$1")" = "$2" ]; }
ended() { case "$(jstate "$1")" in SUCCEEDED | FAILED | STOPPED) return 0 ;; esac; return 1; }
alive_one() { [ "$(cli -o json nodes --alive | js 'd["count"]')" = 1 ]; }
# tt_pid ID WORKER: the pid of worker WORKER's (policy-1) troupe-train: the job
# lists the agent's supervisor, whose only child is the command (bash exec'ing
# troupe-train).
tt_pid() {
    local shim
    shim=$(cli -o json job "$1" | js "[w['pid'] for w in d['workers'] if w['name'] == 'job$1-$2'][0]")
    pgrep -P "$shim" troupe-train
}

start_head --heartbeat-ms 200 --suspect-after 5 --dead-after 25
if [ "$DRY" = 1 ]; then
    start_node gpu0 "${N}xH200:141GB" --stop-grace-ms 5000
else
    "$NODE_BIN" --head "$HEAD" --name gpu0 --state-dir "$T/node-gpu0" --stop-grace-ms 5000 >>"$T/node-gpu0.log" 2>&1 &
    PIDS+=("$!")
fi
wait_for 30 "the node agent to register" alive_one
cli nodes | tee "$OUTDIR/nodes.txt"
have=$(cli -o json nodes --alive | js 'd["gpus_total"]')
[ "$have" -ge "$N" ] || fail "the agent found $have GPU(s), the test wants $N (TROUPE_GPUS, else nvidia-smi -L's count)"

# Model and data: small enough for a quick curve, big enough (on the GPU) for
# the kill to land mid-run.
if [ "$DRY" = 1 ]; then
    MODEL="{layers: 2, width: 32, heads: 2, seq_len: 16}"
    B=2 STEPS=30 PREC=fp32 TOKENS=16384
    RS_STEPS=${MGPU_RESTART_STEPS:-400} RS_EVERY=20 RS_KILL_AT=50
else
    MODEL="{layers: 4, width: 256, heads: 4, seq_len: 128}"
    B=8 STEPS=40 PREC=fp32 TOKENS=1048576
    # Kill mid-interval (350, checkpoints every 100): at 300 (first H200 run)
    # the kill landed while the ranks wrote checkpoint 300, the group resumed
    # from it and no step was run twice, so there was nothing to compare.
    RS_STEPS=${MGPU_RESTART_STEPS:-3000} RS_EVERY=100 RS_KILL_AT=350
fi
"$TRAIN_BIN" --make-data "$T/data.tok" --tokens "$TOKENS" >/dev/null
cat >"$T/train.yaml" <<YAML
seed: 5
device: $DEVICE
model: $MODEL
train: {steps: $STEPS, micro_batch: $B, accum_steps: 2, warmup_steps: 4, lr: 1e-3, grad_clip: 0.5, precision: $PREC}
data: {path: $T/data.tok, val_fraction: 0.1}
eval: {every: 10, batches: 3}
dp: {mode: on, timeout_ms: 30000}
YAML

# job NAME WORKERS CONFIG PREFIX [MAX_RESTARTS [PROFILE_PATTERN]]: writes
# $T/NAME.yaml, one group "policy" of WORKERS x 1 GPU running troupe-train
# with CONFIG, rank R appending its metrics to PREFIX.R; each worker first
# logs its placement as its environment has it.
job() {
    local prof=""
    [ -z "${6:-}" ] || prof="profile: {steps: \"2:4\", workers: \"$6\"}"
    cat >"$T/$1.yaml" <<YAML
name: $1
cluster: {nodes: [$N]}
restart: {max_restarts: ${5:-0}}
groups:
  - name: policy
    workers: $2
    resources: {gpu: 1}
    command: [bash, -c, 'echo "placement: \$TROUPE_WORKER rank \$RANK CUDA_VISIBLE_DEVICES=\$CUDA_VISIBLE_DEVICES" >&2; exec "\$0" --config "\$1" --set metrics.json="\$2.\$RANK"', $TRAIN_BIN, $3, $4]
$prof
env: {NCCL_NVLS_ENABLE: "0"}
YAML
}
# finish ID NAME: wait for job ID's end, keep its logs and the head's in $OUTDIR.
finish() {
    wait_for "${3:-600}" "job $1 ($2) to end" ended "$1"
    cli logs "$1" >"$OUTDIR/$2.log" 2>&1 || true
    cli -o json job "$1" >"$OUTDIR/$2.job.json" 2>&1 || true
    cp "$T/head.log" "$OUTDIR/head.log"
}

# ---- the reference: one process, N x the micro-batch, before any job ------
standalone() { # standalone NAME SETS...
    local name=$1 s sets=()
    shift
    for s in "$@"; do sets+=(--set "$s"); done
    "$TRAIN_BIN" --config "$T/train.yaml" --set dp.mode=off --metrics-json "$OUTDIR/$name.json" "${sets[@]}" \
        >"$OUTDIR/$name.log" 2>&1 || fail "standalone $name: $(tail -5 "$OUTDIR/$name.log")"
}
standalone ref "train.micro_batch=$((N * B))"
standalone ref2 "train.micro_batch=$((N * B))"
# The curve check means something only far above the reference's own noise.
noise=$(python3 "$COMPARE" "$OUTDIR/ref.json" "$OUTDIR/ref2.json" --noise-of "$TOL" 2>&1) || fail "standalone references: $noise"
echo "$noise"

# ---- 1-5: the data-parallel job --------------------------------------------
job dp "$N" "$T/train.yaml" "$OUTDIR/m" 0 "*policy-$P"
id=$(submit "$T/dp.yaml")
finish "$id" dp
L=$OUTDIR/dp.log
is_jstate "$id" SUCCEEDED || fail "job $id $(jstate "$id"): $(jreason "$id"); $(tail -n 30 "$L")"

# 1. placement
python3 - "$OUTDIR/dp.job.json" "$L" "$N" "$id" <<'PY' || fail "placement: see $OUTDIR/dp.job.json"
import json, re, sys
job, log, n, jid = json.load(open(sys.argv[1])), open(sys.argv[2]).read(), int(sys.argv[3]), sys.argv[4]
ws = job["workers"]
assert len(ws) == n, f"{len(ws)} workers, want {n}"
gpus = [tuple(w["gpus"]) for w in ws]
assert all(len(g) == 1 for g in gpus), f"a worker has other than 1 GPU: {gpus}"
assert len(set((w["node"], w["gpus"][0]) for w in ws)) == n, f"two workers share a GPU: {gpus}"
for w in ws:
    m = re.search(rf"\[{w['name']}\].*placement: {w['name']} rank {w['rank']} CUDA_VISIBLE_DEVICES=(\S*)", log)
    assert m, f"{w['name']}: no placement line"
    assert m.group(1) == str(w["gpus"][0]), f"{w['name']}: CUDA_VISIBLE_DEVICES={m.group(1)}, the job says GPU {w['gpus'][0]}"
print("placement: " + ", ".join(f"{w['name']} rank {w['rank']} on {w['node']} GPU {w['gpus'][0]}" for w in ws))
PY
pass "every worker has its own GPU (job record = its CUDA_VISIBLE_DEVICES, all distinct)"

# 2. communicators from the head's IDs
for r in $(seq 0 $K); do
    if [ "$DRY" = 1 ]; then
        over=cpu-coll
    else
        over=nccl
        want="created and published by this rank"; [ "$r" = 0 ] || want="received from the head"
        grep -q "\[job$id-policy-$r\].*nccl: communicator policy of job $id, epoch 0, rank $r of $N ready from the head's ID (1 ID, $want)" "$L" \
            || fail "rank $r: no NCCL communicator line: $(grep -i "policy-$r.*nccl" "$L")"
    fi
    grep -q "\[job$id-policy-$r\].*data parallel: rank $r of $N over $over, global batch $((2 * B * N)) sequences" "$L" \
        || fail "rank $r: no 'data parallel: rank $r of $N over $over' line: $(grep "policy-$r" "$L" | grep -v step= | head -8)"
done
if [ "$DRY" = 1 ]; then
    pass "every rank trains data-parallel over the CPU collective, joined through the head (dry run: no NCCL)"
else
    grep -q "rdzv job=$id comm=policy epoch=0 published 1 IDs ($N ranks)" "$T/head.log" \
        || fail "the head never got the ID: $(grep rdzv "$T/head.log")"
    pass "$N NCCL communicator(s) built from the ID rank 0 published to the head; every rank trains over nccl"
fi

# 3. the loss curve vs one process with N x the batch
files=()
for r in $(seq 0 $K); do files+=("$OUTDIR/m.$r"); done
out=$(python3 "$COMPARE" "$OUTDIR/ref.json" "${files[@]}" --tol "$TOL") || fail "N=$N vs 1 x $((N * B)): $out (two standalone runs: $noise)"
pass "loss curve of $N ranks x B $B = one process x B $((N * B)) within $TOL: $out; $noise"

# 4. profiling range 2:4 on *policy-P only, and its trace
for r in $(seq 0 $K); do
    steps=$(grep -o "\[job$id-policy-$r\].*profiling step [0-9]*" "$L" | awk '{print $NF}' | tr '\n' ' ' || true)
    starts=$(grep -c "\[job$id-policy-$r\].*profiler: cudaProfilerStart" "$L" || true)
    if [ "$r" = "$P" ]; then
        [ "$steps" = "2 3 " ] || fail "policy-$r profiled steps '$steps', want '2 3 '"
        # No GPU in a dry run: the worker API finds no libcudart, or one that fails.
        if [ "$DRY" = 1 ]; then sfx='\( skipped: libcudart not found\| failed (CUDA error)\)\?'; else sfx=''; fi
        grep -q "\[job$id-policy-$r\].*profiler: cudaProfilerStart at step 2$sfx\$" "$L" \
            || fail "policy-$r: $(grep "policy-$r.*profiler" "$L")"
        grep -q "\[job$id-policy-$r\].*profiler: cudaProfilerStop at step 4$sfx\$" "$L" \
            || fail "policy-$r: $(grep "policy-$r.*profiler" "$L")"
        note=$(grep -o "\[job$id-policy-$r\].*profiler: cudaProfilerStart.*" "$L" | sed 's/.*profiler: //')
    else
        [ -z "$steps" ] && [ "$starts" = 0 ] || fail "policy-$r is not *policy-$P yet profiled steps '$steps' ($starts cudaProfilerStart)"
    fi
done
cli trace "$id" --output "$OUTDIR/trace.json" >"$OUTDIR/trace.txt" 2>&1 || fail "troupe trace: $(cat "$OUTDIR/trace.txt")"
python3 - "$OUTDIR/trace.json" "$P" <<'PY' || fail "trace: $(head -c 2000 "$OUTDIR/trace.json")"
import json, sys
d, p = json.load(open(sys.argv[1])), int(sys.argv[2])
xs = [e for e in d["traceEvents"] if e["ph"] == "X"]
pids = {e["pid"] for e in xs}
assert pids == {p}, f"spans of ranks {sorted(pids)}, want only {p}"
steps = sorted(e["name"] for e in xs if e["cat"] == "step")
assert steps == ["step 2", "step 3"], f"step spans {steps}"
assert {e["args"]["step"] for e in xs} == {2, 3}, "spans outside steps 2..3"
print(f"trace: {len(xs)} spans of rank {p} only, steps 2 and 3, kinds {sorted({e['cat'] for e in xs})}")
PY
pass "profile 2:4 on *policy-$P: that worker alone ($note), profiled steps 2 3; $(cat "$OUTDIR/trace.txt")"
pass "job $id SUCCEEDED"

# ---- 6. one worker killed mid-run fails the job, naming it -----------------
sed "s/^train: .*/train: {steps: 1000000, micro_batch: $B, warmup_steps: 4, precision: $PREC}/" "$T/train.yaml" >"$T/cfg-kill.yaml"
job kill "$N" "$T/cfg-kill.yaml" "$T/k"
id=$(submit "$T/kill.yaml")
wait_for 120 "policy-$K of job $id to finish 20 steps" lines_at_least "$T/k.$K" 20
if [ "$DRY" = 0 ]; then
    # Every troupe-train on its own GPU as the driver sees it. In a container
    # nvidia-smi may show no process (another pid namespace): then say so.
    pids=" "
    for r in $(seq 0 $K); do pids+="$(tt_pid "$id" "policy-$r") "; done
    nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader >"$OUTDIR/compute-apps.txt" 2>&1 || true
    python3 - "$OUTDIR/compute-apps.txt" "$pids" "$N" <<'PY' || fail "nvidia-smi: $(cat "$OUTDIR/compute-apps.txt")"
import sys
rows = [l.split(",") for l in open(sys.argv[1]) if "," in l]
ours = set(sys.argv[2].split())
seen = {p.strip(): g.strip() for p, g in rows if p.strip() in ours}
if not seen:
    print(f"note: nvidia-smi lists none of troupe-train's pids {sorted(ours)} (another pid namespace?); placement checked by CUDA_VISIBLE_DEVICES only")
    sys.exit(0)
assert len(seen) == len(ours), f"nvidia-smi lists {len(seen)} of {len(ours)} troupe-train processes: {seen}"
assert len(set(seen.values())) == len(ours), f"troupe-train processes share a GPU: {seen}"
print(f"nvidia-smi: {len(seen)} troupe-train processes on {len(set(seen.values()))} distinct GPUs")
PY
fi
pid=$(tt_pid "$id" "policy-$K") || fail "no troupe-train process for policy-$K"
t0=$(date +%s%N)
kill -9 "$pid"
deadline=${MGPU_KILL_DEADLINE_S:-45}
wait_for "$deadline" "job $id to fail after policy-$K was killed" is_jstate "$id" FAILED
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
reason=$(jreason "$id")
[[ "$reason" == *"job$id-policy-$K"* ]] || fail "the reason does not name policy-$K: $reason"
wait_for 30 "no worker process left after job $id failed" no_workers
finish "$id" kill 30
pass "policy-$K killed: job FAILED $ms ms later (deadline ${deadline} s), reason: $reason; no process left"

# ---- 7. max_restarts 1: the group restarts and resumes from its checkpoint --
sed -e "s/^train: .*/train: {steps: $RS_STEPS, micro_batch: $B, warmup_steps: 4, precision: $PREC}/" \
    -e "s#^dp: .*#dp: {mode: on, timeout_ms: 30000}\ncheckpoint: {dir: $T/ckpt, every: $RS_EVERY}#" \
    -e "s/^eval: .*/eval: {every: 0}/" "$T/train.yaml" >"$T/cfg-restart.yaml"
job restart "$N" "$T/cfg-restart.yaml" "$T/r" 1
id=$(submit "$T/restart.yaml")
wait_for 120 "policy-$K of job $id to pass step $RS_KILL_AT" lines_at_least "$T/r.$K" "$RS_KILL_AT"
pid=$(tt_pid "$id" "policy-$K") || fail "no troupe-train process for policy-$K"
# Stop it, read the step it is at, and kill it only where steps will be run
# again: at least 2 past a checkpoint (a kill right after checkpoint 400 on
# a fast GPU left nothing to compare). Else let it run a few steps on.
# last_step: the step of the file's last complete line (0 when none is).
last_step() {
    python3 -c 'import json,sys
s = 0
for l in open(sys.argv[1]):
    try: s = json.loads(l)["step"]
    except ValueError: pass
print(s)' "$T/r.$K"
}
for try in $(seq 1 20); do
    kill -STOP "$pid"
    at=$(last_step)
    [ "$at" -lt "$RS_STEPS" ] || fail "policy-$K finished all $RS_STEPS steps before it could be killed (raise MGPU_RESTART_STEPS)"
    [ "$at" -lt "$RS_EVERY" ] || [ $((at % RS_EVERY)) -lt 2 ] || break
    kill -CONT "$pid"
    wait_for 60 "policy-$K past step $((at + 2))" lines_at_least "$T/r.$K" $((at + 2))
done
[ "$at" -ge "$RS_EVERY" ] && [ $((at % RS_EVERY)) -ge 2 ] || fail "policy-$K was always within 2 steps of a checkpoint when stopped ($try tries)"
echo "policy-$K stopped at step $at (checkpoints every $RS_EVERY): killed"
kill -9 "$pid"
kill -CONT "$pid" 2>/dev/null || true
finish "$id" restart 600
L=$OUTDIR/restart.log
is_jstate "$id" SUCCEEDED || fail "job $id $(jstate "$id") after the restart: $(jreason "$id"); $(tail -n 20 "$L")"
[ "$(cli -o json job "$id" | js 'd["restarts"]')" = 1 ] || fail "restarts: $(cli -o json job "$id" | js 'd["restarts"]'), want 1"
for r in $(seq 0 $K); do
    line=$(grep -o "\[job$id-policy-$r\].*resumed rank=$r of $N step=[0-9]*" "$L") \
        || fail "policy-$r did not resume: $(grep "policy-$r" "$L" | grep -v step= | tail -5)"
    step=${line##*step=}
    [ $((step % RS_EVERY)) = 0 ] && [ "$step" -ge "$RS_EVERY" ] && [ "$step" -lt "$RS_STEPS" ] || fail "policy-$r resumed at step $step"
    tail -1 "$T/r.$r" | grep_all "\"step\":$RS_STEPS," || fail "rank $r did not reach step $RS_STEPS: $(tail -1 "$T/r.$r")"
done
files=()
for r in $(seq 0 $K); do files+=("$T/r.$r"); done
out=$(python3 - "$TOL" "$step" "${files[@]}" <<'PY'
# Each rank's file holds attempt 0's steps, then attempt 1's from the
# checkpoint on: the steps both attempts ran must agree. The kill was placed
# past a checkpoint, so an unbroken run (no step run twice) is a failure.
import json, sys
tol, resumed, worst, overlap, seamless = float(sys.argv[1]), int(sys.argv[2]), 0.0, 0, 0
for path in sys.argv[3:]:
    attempts, last = [[]], 0
    for l in open(path):
        if l.strip():
            m = json.loads(l)
            if m["step"] <= last:
                attempts.append([])
            attempts[-1].append(m)
            last = m["step"]
    if len(attempts) == 1 and any(m["step"] == resumed for m in attempts[0]):
        seamless += 1
        continue
    if len(attempts) != 2:
        sys.exit(f"FAIL: {path}: {len(attempts)} attempts, want 2")
    first = {m["step"]: m for m in attempts[0]}
    for m in attempts[1]:
        a = first.get(m["step"])
        if a is None:
            continue
        overlap += 1
        for key in ("loss", "grad_norm"):
            d = abs(a[key] - m[key]) / max(1.0, abs(a[key]))
            worst = max(worst, d)
            if d > tol:
                sys.exit(f"FAIL: {path}: step {m['step']} {key} {m[key]} after the restart, {a[key]} before (rel {d:.3g} > {tol})")
if seamless:
    sys.exit(f"FAIL: {seamless} rank(s) ran no step twice although the kill came past checkpoint {resumed}")
if overlap == 0:
    sys.exit("FAIL: no step was run by both attempts (the kill came right after a checkpoint?)")
print(f"{overlap} step(s) run by both attempts agree within {worst:.3g}")
PY
) || fail "$out"
pass "max_restarts 1: policy-$K killed, every rank resumed at step $step, job SUCCEEDED with 1 restart; $out"

# ---- 8. weight refit to a generation group (N >= 4) ---------------------------
# The help goes to a variable first: `--help | grep -q` under pipefail failed
# when grep quit at its match and troupe-train's next write got SIGPIPE, and
# the check was skipped on a fast machine. Where N >= 4 the feature is
# expected: its absence is a failure, not a skip.
train_help=$("$TRAIN_BIN" --help 2>&1 || true)
if [ "$N" -lt 4 ]; then
    echo "note: the generation group with refits runs for N >= 4 only (N = $N)"
elif ! grep -q -- '--role' <<<"$train_help"; then
    fail "check 8: troupe-train --help lists no --role (weight refit to a generation group): $(head -3 <<<"$train_help")"
elif [ ! -f "$HERE/dp_refit.bash" ]; then
    fail "check 8: tests/gpu/dp_refit.bash (the refit job and its checks) is missing"
else
    source "$HERE/dp_refit.bash"
    refit_check
fi
