# dp_refit.bash - check 8 of tests/gpu/dp.sh (sourced by it, N >= 4, when
# troupe-train has --role generation): weight refit from a data-parallel
# policy group to a generation group over the job's cross-group
# communicator, on N/2 + N/2 GPUs. Uses the refit tests' own checker
# (tests/integration/refit/check.py): at steps 10, 20 and 30 (the last one
# final) policy rank 0 logged a refit and every generation worker printed
# one with the same hash of the weights (bit-identical copies), and each
# generation worker's val_loss equals the policy's at that step within
# MGPU_REFIT_TOL (1e-5 on the CPU, 1e-3 on GPUs by default).

refit_check() {
    local np=$((N / 2)) ng=$((N - N / 2)) id over gens=() g check=$HERE/../integration/refit/check.py
    [ -f "$check" ] || fail "troupe-train has --role but $check is missing"
    cat >"$T/cfg-refit.yaml" <<YAML
seed: 5
device: $DEVICE
model: $MODEL
train: {steps: 30, micro_batch: $B, warmup_steps: 3, lr: 3e-3, precision: $PREC}
data: {path: $T/data.tok, val_fraction: 0.1}
eval: {every: 10, batches: 3}
dp: {timeout_ms: 60000}
refit: {every: 10, timeout_ms: 60000}
YAML
    cat >"$T/refit.yaml" <<YAML
name: refit
cluster: {nodes: [$N]}
groups:
  - name: policy
    workers: $np
    resources: {gpu: 1}
    command: [bash, -c, 'exec "\$0" --config "\$1" --set metrics.json="\$2.\$RANK"', $TRAIN_BIN, $T/cfg-refit.yaml, $OUTDIR/refit.m]
  - name: generation
    workers: $ng
    resources: {gpu: 1}
    command: [$TRAIN_BIN, --role, generation, --config, $T/cfg-refit.yaml]
communicators:
  - {name: refit, groups: [policy, generation]}
env: {NCCL_NVLS_ENABLE: "0"}
YAML
    rm -f "$OUTDIR"/refit.m.*
    id=$(submit "$T/refit.yaml")
    finish "$id" refit
    is_jstate "$id" SUCCEEDED || fail "refit job $id $(jstate "$id"): $(jreason "$id"); $(tail -n 20 "$OUTDIR/refit.log")"
    over=cpu-coll
    [ "$DRY" = 1 ] || over=nccl
    grep -q "\[job$id-policy-0\].*refit: rank 0 of $N of communicator refit over $over" "$OUTDIR/refit.log" ||
        fail "policy-0 did not join the refit communicator over $over: $(grep 'policy-0.*refit' "$OUTDIR/refit.log" | head -3)"
    if [ "$DRY" = 0 ]; then
        grep -q "rdzv job=$id comm=refit epoch=0 published 1 IDs ($N ranks)" "$T/head.log" ||
            fail "the head never got the refit communicator's ID: $(grep "rdzv job=$id" "$T/head.log")"
    fi
    python3 - "$OUTDIR/refit.job.json" "$N" <<'PY' || fail "refit job placement: see $OUTDIR/refit.job.json"
import json, sys
ws, n = json.load(open(sys.argv[1]))["workers"], int(sys.argv[2])
gpus = {(w["node"], g) for w in ws for g in w["gpus"]}
assert len(ws) == n and len(gpus) == n, f"{len(ws)} workers on {len(gpus)} GPUs, want {n} on {n}"
PY
    for g in $(seq 0 $((ng - 1))); do gens+=("job$id-generation-$g"); done
    out=$(python3 "$check" "$OUTDIR/refit.log" "$OUTDIR/refit.m.0" "job$id-policy-0" "${gens[@]}" --steps 10,20,30 \
        --tol "${MGPU_REFIT_TOL:-$([ "$DRY" = 1 ] && echo 1e-5 || echo 1e-3)}") || fail "refit: $out"
    pass "refit over $over: $np policy + $ng generation workers, each on its own GPU; $out"
}
