#!/usr/bin/env bash
# demo.sh - the README's main command: install what is missing, build, start a
# local troupe-head and one troupe-node (real GPUs when present, simulated ones
# otherwise), submit the example job, follow its progress and metrics, then
# shut everything down cleanly (--keep, or TROUPE_DEMO_KEEP=1: leave the head
# and node running, with the dashboard, and print how to stop them later).
set -euo pipefail
KEEP=${TROUPE_DEMO_KEEP:-0}
for a in "$@"; do
    case "$a" in
    --keep) KEEP=1 ;;
    -h|--help) echo "usage: scripts/demo.sh [--keep]   (--keep or TROUPE_DEMO_KEEP=1: leave the cluster and its dashboard up)"; exit 0 ;;
    *) echo "demo.sh: unknown argument '$a' (usage: scripts/demo.sh [--keep])" >&2; exit 2 ;;
    esac
done
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=${JOBS:-$(nproc)}
# Where the programs, library, headers and units are installed (cmake --install).
PREFIX=${TROUPE_PREFIX:-$ROOT/install}

scripts/setup.sh --demo

echo "== build and install into $PREFIX"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$JOBS" --target troupe-head troupe-node troupe-cli troupe-train troupe troupe-completion
cmake --install build --prefix "$PREFIX" >/dev/null

RUN=$(mktemp -d /tmp/troupe-demo.XXXXXX)
PORT=${TROUPE_DEMO_PORT:-7770}
# Port taken: pick one below the kernel's ephemeral range (32768+), where no
# outgoing connection can hold it.
if (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null; then PORT=$((20000 + RANDOM % 12000)); fi
HPORT=${TROUPE_DEMO_HTTP_PORT:-8470}  # the dashboard and /metrics (the head's default --http port)
if (exec 3<>/dev/tcp/127.0.0.1/$HPORT) 2>/dev/null; then HPORT=$((20000 + RANDOM % 12000)); fi
export TROUPE_HEAD=tcp://127.0.0.1:$PORT
export PATH=$PREFIX/bin:$PATH
PIDS=()
DASH=
stop_all() {
    if [ "$KEEP" = 1 ] && [ ${#PIDS[@]} -gt 0 ]; then
        echo "== kept running (--keep): troupe-head (pid ${PIDS[0]}) and troupe-node (pid ${PIDS[1]:-none}); logs and state in $RUN"
        echo "   dashboard: $DASH   (Prometheus: $DASH/metrics)"
        echo "   to use it: export PATH=$PREFIX/bin:\$PATH TROUPE_HEAD=$TROUPE_HEAD"
        echo "   to stop it: kill ${PIDS[*]}"
        return
    fi
    # Agents first (they stop their workers), then the head; SIGTERM each and
    # wait, so every process shuts down the way it would in production.
    for ((i=${#PIDS[@]}-1; i>=0; i--)); do kill -TERM "${PIDS[$i]}" 2>/dev/null || true; wait "${PIDS[$i]}" 2>/dev/null || true; done
    echo "== stopped head and node; logs and state kept in $RUN"
    echo "== troupe is installed in $PREFIX; to use it by hand (README \"Using it\"):"
    echo "   export PATH=$PREFIX/bin:\$PATH"
}
trap stop_all EXIT

echo "== troupe-head on $TROUPE_HEAD (state in $RUN/head)"
# setsid: with --keep the head and node outlive this script and its terminal.
setsid troupe-head --listen "$TROUPE_HEAD" --state-dir "$RUN/head" --http "127.0.0.1:$HPORT" >"$RUN/head.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do troupe status >/dev/null 2>&1 && break; sleep 0.1; done
troupe status >/dev/null || { cat "$RUN/head.log"; exit 1; }
DASH=$(troupe -o json status | jq -r '.http // empty')
DASH=${DASH:-http://127.0.0.1:$HPORT}
echo "== the dashboard (live charts of every job's metrics and health): $DASH"

gpus=$(troupe-node --check-config | sed -n 's/^# gpus: \([0-9]*\).*/\1/p')
# One user's demo on one machine: the workers write data.tok into
# examples/demo, a folder of whoever checked it out, so they run as the
# agent's own user (--shared-uid; README "Isolation" for shared clusters).
NODE_ARGS=(--name demo-node --state-dir "$RUN/node" --shared-uid)
if [ "${gpus:-0}" -gt 0 ] && [ "${TROUPE_DEMO_FAKE:-0}" != 1 ]; then
    echo "== troupe-node with the $gpus real GPU(s) of this machine"
else
    echo "== troupe-node with 8 simulated GPUs (no GPU found here)"
    NODE_ARGS+=(--fake-gpus 8xH200:141GB)
fi
setsid troupe-node "${NODE_ARGS[@]}" >"$RUN/node.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do [ "$(troupe -o json nodes --alive | jq .count)" = 1 ] && break; sleep 0.1; done
troupe nodes

# The job runs in its own directory with its config and generated data.
mkdir -p "$RUN/job"
cp examples/demo/job.yaml examples/demo/train.yaml "$RUN/job/"
# 30 steps instead of the example's 60, validation and refits every 10 instead
# of 20: the demo (a restart included) stays under a minute.
sed -i -e 's/^  steps: 60/  steps: 30/' -e 's/^  every: 20/  every: 10/' "$RUN/job/train.yaml"
if [ "${gpus:-0}" -gt 0 ] && [ "${TROUPE_DEMO_FAKE:-0}" != 1 ]; then
    examples/demo/fit.sh "$gpus" "$RUN/job/job.yaml" # fewer than 8 real GPUs: shrink to fit
fi

total=$(troupe -o json nodes | jq .gpus_total)
# An impossible job is refused at submit, with the numbers.
cat >"$RUN/job/impossible.yaml" <<YAML
name: impossible
cluster: {nodes: [$((total * 2))]}
groups: [{name: policy, workers: 1, resources: {gpu: $((total * 2))}, command: [true]}]
YAML
echo "== an impossible job is refused at submit, with the numbers"
troupe submit "$RUN/job/impossible.yaml" || true
# A job holding every GPU for a few seconds: the example job waits PENDING, then runs.
cat >"$RUN/job/blocker.yaml" <<YAML
name: blocker
cluster: {nodes: [$total]}
groups: [{name: hold, workers: 1, resources: {gpu: $total}, command: [sleep, '3']}]
YAML
echo "== a job holding all $total GPUs for 3 s, so the example job must wait"
troupe submit --no-wait "$RUN/job/blocker.yaml" >/dev/null

echo "== troupe submit (PENDING, then placement, progress and per-step metrics; Ctrl-C detaches)"
set +e
troupe submit --raw "$RUN/job/job.yaml" &  # --raw: every worker line (the demo prints beside it; no live redraw)
submit_pid=$!
# A failure handled: once training is under way, kill one policy worker; its
# group restarts (max_restarts: 1 in job.yaml) and the job still SUCCEEDS.
id=
for _ in $(seq 600); do
    id=$(troupe -o json jobs | jq -r '[.jobs[] | select(.name == "demo")] | first | .id // empty')
    [ -n "$id" ] && [ "$(troupe logs "$id" --worker "job$id-policy-0" 2>/dev/null | grep -c 'step=')" -ge 2 ] && break
    sleep 0.1
done
echo "== job $id is running: watch it at $DASH/#job=$id" >&2
victim=$(troupe -o json job "$id" | jq -r '[.workers[] | select(.group == "policy" and .state == "RUNNING")] | last | "\(.name) \(.pid)"')
if [ -n "$id" ] && [ "${victim#* }" -gt 0 ] 2>/dev/null; then
    echo "== demo: killing worker ${victim% *} (pid ${victim#* }) with SIGKILL; its group restarts (max_restarts: 1)" >&2
    kill -KILL "${victim#* }"
fi
wait $submit_pid
rc=$?
set -e
echo "== troupe job (placement, restarts, exit codes)"
troupe job "$id"
# Every refit: policy rank 0 sent its weights (bytes, time, MB/s, FNV-1a hash
# of the parameters) and each generation worker took them (the same hash) and
# evaluated them; the restart shows as the generation rejoining in epoch 1.
echo "== the refits (policy rank 0 -> generation workers: same weights hash, the generation's val_loss)"
troupe logs "$id" | grep -E 'refit step=|rejoin|joining it' || true
echo "== troupe metrics (the generation workers' val_loss after each refit, through the metrics path)"
troupe metrics "$id" --name val_loss || true
# job.yaml profiles steps 2-3 of policy-0: the runtime recorded them as spans on the head's clock.
echo "== troupe trace (the profiled steps, one process per worker, Chrome/Perfetto JSON)"
if troupe trace "$id" --output "$RUN/trace.json"; then
    echo "== the trace is $RUN/trace.json: open it in https://ui.perfetto.dev (or chrome://tracing)"
fi
[ "$KEEP" = 1 ] || echo "== to look around afterwards in the dashboard ($DASH/#job=$id), run scripts/demo.sh --keep"
exit $rc
