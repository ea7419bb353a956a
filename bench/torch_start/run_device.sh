#!/usr/bin/env bash
# run_device.sh - submit -> first step of examples/torch/dp.py (DDP, 2 ranks)
# through troupe (troupe.torch's Store on the head: no MASTER_PORT, no
# TCPStore) beside the same script under torchrun (env://: a TCPStore on
# MASTER_PORT), in the same run, alternated: PAIRS pairs (default 3), troupe
# first in odd pairs, torchrun first in even ones. Prints a table and writes
# $OUT/torch_start.json (OUT defaults to ./torch_start-out).
#
#   bench/torch_start/run_device.sh
#
# Figures per run, in seconds: from `troupe submit` (or from starting
# torchrun) until rank 0's first training step has ended, as dp.py reports it
# ("dp: first step done at unix time T"): interpreter start, import, the
# process group's rendezvous (NCCL's unique ID and the start-up barrier
# through the store), DDP's first all-reduce and the first step; on troupe's
# side also the head's placement and the agent's launch.
#
# Environment (as tests/gpu and tests/python use them):
#   TROUPE_BIN      a build tree, or stage.sh's DEST/bin (server/troupe-head,
#                   worker/node/troupe-node, client/troupe) - required
#   TROUPE_LIBRARY  libtroupe.so for the workers (default $TROUPE_BIN/client/libtroupe.so;
#                   with stage.sh: DEST/lib/libtroupe.so.0)
#   TROUPE_PYTHON   a python3 with torch (CUDA and NCCL on a GPU machine; default python3)
#   LD_LIBRARY_PATH what the programs need (stage.sh's DEST/lib, CUDA's lib64)
#   DEVICE          gpu (NCCL, one GPU per rank; needs 2 GPUs) or cpu (gloo on
#                   simulated GPUs: the CPU check); default gpu where
#                   nvidia-smi -L lists 2 or more, else cpu
#   PAIRS (3), STEPS (20): pairs of runs, training steps per run
# Exit status: 0 when every run reached its first step on the expected
# backend, 1 otherwise (the log of the failing run is shown).
source "$(dirname "$0")/../../tests/integration/lib.sh"
EX=$(cd "$(dirname "$0")/../../examples/torch" && pwd)
SRC=$(cd "$(dirname "$0")/../../python" && pwd)
PY=${TROUPE_PYTHON:-python3}
LIB=${TROUPE_LIBRARY:-$TROUPE_BIN/client/libtroupe.so}
PAIRS=${PAIRS:-3}
STEPS=${STEPS:-20}
OUT=${OUT:-$PWD/torch_start-out}
mkdir -p "$OUT"
if [ -z "${DEVICE:-}" ]; then
    DEVICE=cpu
    [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ] && DEVICE=gpu
fi
[ -f "$LIB" ] || fail "no libtroupe at $LIB (set TROUPE_LIBRARY)"
js() { "$PY" -c "import json,sys; d=json.load(sys.stdin); print($1)"; } # no jq on the GPU machines
if [ "$DEVICE" = gpu ]; then
    [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ] || fail "DEVICE=gpu needs 2 GPUs (nvidia-smi -L lists fewer)"
    "$PY" -c "import torch, torch.distributed as d; assert torch.cuda.device_count() >= 2 and d.is_nccl_available()" ||
        fail "$PY has no torch with CUDA, 2 GPUs and NCCL (set TROUPE_PYTHON)"
    BACKEND="nccl on cuda"
else
    "$PY" -c "import torch.distributed as d; assert d.is_gloo_available()" || fail "$PY has no torch with gloo"
    BACKEND="gloo on cpu"
fi
export NCCL_NVLS_ENABLE=0 # never NVLink multicast on the lent machines
# torch 1.x's torchrun cannot parse its default -r/-t on Python 3.11+ (its
# Std enum lost the 0 member): redirect and tee stdout explicitly there.
TR_ARGS=$("$PY" -c 'import torch; print("-r 1 -t 1" if torch.__version__.startswith("1.") else "")')
TORCH_VERSION=$("$PY" -c 'import torch; print(torch.__version__)')

start_head --heartbeat-ms 200 --suspect-after 5 --dead-after 25
if [ "$DEVICE" = gpu ]; then
    "$NODE_BIN" --head "$HEAD" --name gpu0 --state-dir "$T/node-gpu0" >>"$T/node-gpu0.log" 2>&1 &
    NODE_GPUS=$(nvidia-smi -L | wc -l)
else
    "$NODE_BIN" --head "$HEAD" --name gpu0 --fake-gpus 2xSIM:1GB --state-dir "$T/node-gpu0" >>"$T/node-gpu0.log" 2>&1 &
    NODE_GPUS=2
fi
PIDS+=("$!")
alive_one() { [ "$(cli -o json nodes --alive | js 'd["count"]')" = 1 ]; }
wait_for 30 "the node agent to register" alive_one
mkdir -p "$T/ex" && cp "$EX/dp.py" "$T/ex/"
cat >"$T/ex/dp.yaml" <<YAML
name: torch-start
cluster: {nodes: [$NODE_GPUS]}
groups:
  - {name: dp, workers: 2, resources: {gpu: 1}, command: [$PY, dp.py, --steps, "$STEPS", --global-batch, "32"]}
env: {PYTHONPATH: "$SRC", TROUPE_LIBRARY: "$LIB", NCCL_NVLS_ENABLE: "0", GLOO_SOCKET_IFNAME: lo, LD_LIBRARY_PATH: "${LD_LIBRARY_PATH:-}"}
YAML

now() { date +%s.%N; }
# first_step LOG T0: seconds from T0 to rank 0's first step in LOG, after
# checking that both ranks ran on the expected backend.
first_step() {
    local t n
    n=$(grep -c "dp: rank [01]/2 done: backend $BACKEND" "$1" || true)
    [ "$n" = 2 ] || { tail -40 "$1" >&2; fail "not both ranks done on $BACKEND ($n): $1"; }
    t=$(grep -o 'dp: first step done at unix time [0-9.]*' "$1" | head -1 | awk '{print $NF}')
    [ -n "$t" ] || { tail -40 "$1" >&2; fail "no first step in $1"; }
    awk -v a="$2" -v b="$t" 'BEGIN { printf "%.3f\n", b - a }'
}
troupe_run() { # PAIR: one job through troupe; prints its seconds
    local t0 id state
    t0=$(now)
    id=$(cli submit --no-wait "$T/ex/dp.yaml") || fail "submit: $id"
    wait_for 300 "job $id to end" job_ended "$id"
    cli logs "$id" >"$OUT/troupe-$1.log" 2>&1
    state=$(cli -o json job "$id" | js 'd["state"]')
    [ "$state" = SUCCEEDED ] || { tail -40 "$OUT/troupe-$1.log" >&2; fail "job $id: $state"; }
    first_step "$OUT/troupe-$1.log" "$t0"
}
job_ended() { case "$(cli -o json job "$1" | js 'd["state"]')" in SUCCEEDED | FAILED | STOPPED) return 0 ;; esac; return 1; }
torchrun_run() { # PAIR: the same script under torchrun; prints its seconds
    local t0 rc=0
    t0=$(now)
    # shellcheck disable=SC2086 # TR_ARGS is empty or two options
    (cd "$T/ex" && PYTHONPATH="$SRC" TROUPE_LIBRARY="$LIB" GLOO_SOCKET_IFNAME=lo \
        timeout 300 "$PY" -m torch.distributed.run --standalone --nproc_per_node 2 $TR_ARGS \
        dp.py --torchrun --steps "$STEPS" --global-batch 32) >"$OUT/torchrun-$1.log" 2>&1 || rc=$?
    [ "$rc" = 0 ] || { tail -40 "$OUT/torchrun-$1.log" >&2; fail "torchrun exited $rc"; }
    first_step "$OUT/torchrun-$1.log" "$t0"
}

echo "submit -> first step, examples/torch/dp.py on 2 ranks ($BACKEND, torch $TORCH_VERSION), $PAIRS pairs"
: >"$OUT/runs.txt"
for k in $(seq 1 "$PAIRS"); do
    if [ $((k % 2)) = 1 ]; then
        a=$(troupe_run "$k"); b=$(torchrun_run "$k")
    else
        b=$(torchrun_run "$k"); a=$(troupe_run "$k")
    fi
    echo "pair $k: troupe $a s, torchrun $b s"
    echo "$k $a $b" >>"$OUT/runs.txt"
done
commit=$(cat "$TROUPE_BIN/../commit" 2>/dev/null || git -C "$EX" rev-parse --short HEAD 2>/dev/null || echo unknown)
"$PY" - "$OUT/runs.txt" "$OUT/torch_start.json" "$DEVICE" "$BACKEND" "$TORCH_VERSION" "$commit" <<'PY'
import json, socket, statistics, sys
runs = [l.split() for l in open(sys.argv[1]) if l.strip()]
t = [float(r[1]) for r in runs]; p = [float(r[2]) for r in runs]
out = {"bench": "torch_start", "what": "submit -> rank 0's first step, examples/torch/dp.py, 2 ranks",
       "device": sys.argv[3], "backend": sys.argv[4], "torch": sys.argv[5], "commit": sys.argv[6],
       "host": socket.gethostname(), "pairs": [{"pair": int(r[0]), "troupe_s": float(r[1]), "torchrun_s": float(r[2])}
                                            for r in runs],
       "troupe_median_s": statistics.median(t), "torchrun_median_s": statistics.median(p)}
json.dump(out, open(sys.argv[2], "w"), indent=1)
print(f"{'':>10} {'median s':>9} {'min s':>7} {'max s':>7}  runs")
for name, v in (("troupe", t), ("torchrun", p)):
    print(f"{name:>10} {statistics.median(v):>9.3f} {min(v):>7.3f} {max(v):>7.3f}  {' '.join(f'{x:.3f}' for x in v)}")
print(f"troupe / torchrun: {statistics.median(t) / statistics.median(p):.2f}x (below 1: troupe starts sooner)")
PY
pass "submit -> first step measured: $OUT/torch_start.json"
