#!/usr/bin/env bash
# gpu.runtime.gemm_cache - troupe-train's on-disk cuBLASLt plan cache
# (TR_CUDA_GEMM_CACHE, worker/train/cuda/gemm.cu) under bad input. Standalone
# troupe-train, a small fp32 model, the same config every run:
#   1. cold: an empty cache directory; the run tunes every plan and writes
#      the file (one line per plan);
#   2. warm: every plan comes from the file (from_cache = built, tuned 0);
#   3. garbage algorithms: every line keeps its shape key but carries random
#      algorithm words; each must be refused by cuBLASLt's check and tuned
#      again, or, where cuBLASLt accepts it, compute the same curve;
#   4. junk: binary noise, a cut line and a line with a field missing in
#      place of the file: nothing parses, every plan is tuned again;
#   5. unwritable: TR_CUDA_GEMM_CACHE names a regular file: one warning that
#      the cache cannot be written, and training goes on.
# Every run must succeed and follow the cold run's loss curve (compare.py,
# GEMM_TOL, default 1e-4: the fp32 atomics of the CUDA backend make two runs
# differ a little; the difference of two cold runs is printed beside it).
# Exits 77 without a GPU (a failure under TROUPE_REQUIRE_GPU=1).
source "$(dirname "$0")/../../integration/lib.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
COMPARE=$HERE/../../integration/dp/compare.py
source "$(dirname "$0")/gpu_lib.bash"
gpu_require
TOL=${GEMM_TOL:-1e-4}

"$TRAIN_BIN" --make-data "$T/data.tok" --tokens 262144 >/dev/null
cat >"$T/small.yaml" <<YAML
seed: 7
device: cuda
model: {layers: 2, width: 128, heads: 2, seq_len: 64}
train: {steps: 20, micro_batch: 8, warmup_steps: 2, lr: 3e-3, precision: fp32}
data: {path: $T/data.tok, val_fraction: 0.1}
eval: {every: 10, batches: 2}
YAML

# run NAME CACHE: troupe-train with TR_CUDA_GEMM_CACHE=CACHE, metrics and log
# to $OUTDIR/NAME.{json,log}; sets built/from_cache/tuned from its last line.
run() {
    local name=$1 cache=$2 line
    TR_CUDA_GEMM_CACHE=$cache "$TRAIN_BIN" --config "$T/small.yaml" --metrics-json "$OUTDIR/$name.json" \
        --log-level info >"$OUTDIR/$name.log" 2>&1 || fail "$name: troupe-train failed: $(tail -5 "$OUTDIR/$name.log")"
    line=$(grep -o 'gemm plans built=[0-9]* from_cache=[0-9]* tuned=[0-9]*' "$OUTDIR/$name.log" | tail -n 1)
    [ -n "$line" ] || fail "$name: no 'gemm plans built=' line in its log"
    read -r built from_cache tuned < <(echo "$line" | sed 's/[^0-9 ]//g; s/  */ /g; s/^ //')
    python3 "$COMPARE" "$OUTDIR/cold.json" "$OUTDIR/$name.json" --tol "$TOL" --independent >"$T/cmp.txt" 2>&1 ||
        fail "$name: the loss curve left the cold run's: $(cat "$T/cmp.txt")"
    echo "$name: built=$built from_cache=$from_cache tuned=$tuned; $(tail -n 1 "$T/cmp.txt")"
}

C=$T/gc
TR_CUDA_GEMM_CACHE=$C "$TRAIN_BIN" --config "$T/small.yaml" --metrics-json "$OUTDIR/cold.json" --log-level info \
    >"$OUTDIR/cold.log" 2>&1 || fail "cold: troupe-train failed: $(tail -5 "$OUTDIR/cold.log")"
TR_CUDA_GEMM_CACHE=0 "$TRAIN_BIN" --config "$T/small.yaml" --metrics-json "$OUTDIR/cold2.json" >/dev/null 2>&1 ||
    fail "a second run without the cache failed"
noise=$(python3 "$COMPARE" "$OUTDIR/cold.json" "$OUTDIR/cold2.json" --tol 1 --independent | tail -n 1)
file=$(ls "$C"/gemm-*.txt 2>/dev/null | head -n 1)
[ -n "$file" ] || fail "cold: no cache file under $C: $(grep -i 'gemm plan' "$OUTDIR/cold.log")"
plans=$(wc -l <"$file")
[ "$plans" -gt 0 ] || fail "cold: $file is empty"
pass "cold run tuned and wrote $plans plan(s) to $(basename "$file") (two runs without the cache: $noise)"

run warm "$C"
[ "$from_cache" = "$built" ] && [ "$tuned" = 0 ] || fail "warm: built=$built from_cache=$from_cache tuned=$tuned, want all from the cache"
pass "warm run took all $built plan(s) from the file"

cp "$file" "$T/good.txt"
python3 - "$file" <<'PY'
import random, sys
random.seed(11)
out = []
for line in open(sys.argv[1]):
    key = line.split(":")[0]
    out.append(key + ": " + " ".join("%x" % random.getrandbits(64) for _ in range(8)) + "\n")
open(sys.argv[1], "w").writelines(out)
PY
run garbage "$C"
refused=$(grep -c 'is not accepted now: tuning again' "$OUTDIR/garbage.log" || true)
[ "$((from_cache + tuned))" = "$built" ] && [ "$refused" -ge "$tuned" ] ||
    fail "garbage: built=$built from_cache=$from_cache tuned=$tuned, $refused 'not accepted' line(s)"
pass "random algorithm words: $refused of $built refused by cuBLASLt's check and tuned again, $from_cache accepted, curve unchanged"

{ head -c 4096 /dev/urandom; echo; head -n 1 "$T/good.txt" | cut -c1-20; echo;
  head -n 1 "$T/good.txt" | cut -d' ' -f2-; } >"$file"
run junk "$C"
[ "$from_cache" = 0 ] && [ "$tuned" = "$built" ] || fail "junk: built=$built from_cache=$from_cache tuned=$tuned, want all tuned"
pass "noise, a cut line and a short line: none parsed, all $built plan(s) tuned again, curve unchanged"

: >"$T/afile"
run unwritable "$T/afile"
grep -q "gemm plan cache $T/afile/gemm-.*: cannot write" "$OUTDIR/unwritable.log" ||
    fail "unwritable: no 'cannot write' warning: $(grep -i 'gemm plan' "$OUTDIR/unwritable.log")"
[ "$(grep -c 'cannot write' "$OUTDIR/unwritable.log")" = 1 ] || fail "unwritable: the warning is not said once"
pass "a cache path that is a file: one 'cannot write' warning, trained on"
echo "OK"
