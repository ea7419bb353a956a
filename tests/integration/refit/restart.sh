#!/usr/bin/env bash
# The generation group outlives a restart of the policy group: policy (2
# ranks, checkpoint every 10 steps, refit every 10, 200 steps) loses rank 1 to
# SIGKILL after step 25 (200, not 60: a fast run finished all 60 steps before
# the poll saw step 25, and there was no restart to test); with max_restarts 1 the policy group restarts from
# its checkpoint in a new epoch, the generation worker's refit communicator
# fails (a rank went away), it waits for the communicator's next epoch and
# joins it, and takes the restarted policy's refits to the end: the job
# SUCCEEDS with 1 restart, the generation worker's last refit (step 200,
# final) holds exactly the restarted rank 0's weights, and its val_loss
# equals the policy's.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/refit_lib.bash"
HERE=$(cd "$(dirname "$0")" && pwd)
start_cluster --dead-after 50 # node liveness is not under test; at load 20+ a 1 s lease killed workers (2dd76ed)
"$TRAIN_BIN" --make-data "$T/data.tok" --tokens 16384 >/dev/null
cat >"$T/train.yaml" <<YAML
seed: 3
device: cpu
model: {layers: 2, width: 32, heads: 2, seq_len: 16}
train: {steps: 200, micro_batch: 2, warmup_steps: 3}
data: {path: $T/data.tok, val_fraction: 0.1}
eval: {every: 10, batches: 2}
checkpoint: {dir: $T/ckpt, every: 10}
dp: {timeout_ms: 20000}
refit: {every: 10, timeout_ms: 20000}
YAML
refit_job rs 2 1 "$T/train.yaml" 1
id=$(submit "$T/rs.yaml")
wait_for 60 "policy-1 to pass step 25" lines_at_least "$T/rs.m.1" 25
pid=$(train_pid "$id" policy-1) || fail "no troupe-train process for policy-1"
kill -9 "$pid"
wait_for 150 "job $id to succeed" is_job_state "$id" SUCCEEDED
restarts=$(cli -o json job "$id" | jqr .restarts)
[ "$restarts" = 1 ] || fail "restarts $restarts, expected 1"
cli logs "$id" >"$T/logs"
grep -q "\[job$id-generation-0\].*generation: refit communicator refit is at epoch 1 now: joining it" "$T/logs" ||
    fail "generation-0 did not rejoin: $(grep generation-0 "$T/logs" | tail -5)"
# The restarted rank 0 (attempt 1) logged its refits after the restart; the
# generation worker's line for the same step holds the same hash.
python3 - "$T/logs" "$id" "$T/rs.m.0" <<'PY' || fail "the final refit does not match"
import json, re, sys
logs, job, metrics = sys.argv[1], sys.argv[2], sys.argv[3]
def last(worker):
    found = None
    for line in open(logs):
        if line.startswith("[job%s-%s]" % (job, worker)) and "refit step=200 " in line:
            found = dict(re.findall(r"(\w+)=(\S+)", line[line.index("refit step="):]))
    return found
p, g = last("policy-0"), last("generation-0")
if p is None or g is None:
    sys.exit("no step-200 refit line: policy %s generation %s" % (p, g))
if p["params_fnv1a"] != g["params_fnv1a"] or g["final"] != "1":
    sys.exit("step 200: generation %s, policy %s" % (g, p))
val = [json.loads(l)["val_loss"] for l in open(metrics) if json.loads(l)["step"] == 200 and json.loads(l).get("val_loss") is not None]
if not val or abs(float(g["val_loss"]) - val[-1]) > 1e-5 * abs(val[-1]):
    sys.exit("step 200: generation val_loss %s, policy %s" % (g["val_loss"], val))
print("final refit after the restart: hash %s, val_loss %s (policy %.9g)" % (g["params_fnv1a"], g["val_loss"], val[-1]))
PY
pass "policy restarted once; the generation worker rejoined and took the final refit bit for bit"
