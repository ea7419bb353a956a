# lib.sh - helpers for troupe's integration tests (sourced by each test).
#
# Every test gets its own temp dir and loopback port, starts real processes,
# waits only with deadlines (wait_for), and kills everything it started on
# exit, whatever happens.
set -euo pipefail

: "${TROUPE_BIN:?TROUPE_BIN must point at the build tree}"
HEAD_BIN=$TROUPE_BIN/server/troupe-head
NODE_BIN=$TROUPE_BIN/worker/node/troupe-node
CLI_BIN=$TROUPE_BIN/client/troupe
TRAIN_BIN=$TROUPE_BIN/worker/train/troupe-train

T=$(mktemp -d /tmp/troupe-it.XXXXXX)
PIDS=()

cleanup() {
    local rc=$?
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    # Workers run in their own process groups; the node agents stop them, but
    # a killed agent cannot: sweep anything still running from this test dir.
    pkill -9 -f "$T" 2>/dev/null || true
    # A worker's children (`sleep 300` under `sh -c`) outlive an agent killed
    # with -9: PR_SET_PDEATHSIG reaches only the group leader, and their command
    # lines do not name $T. Every worker carries this test's TROUPE_HEAD.
    local f pid
    for f in $([ -n "${HEAD:-}" ] && grep -lzxF "TROUPE_HEAD=$HEAD" /proc/[0-9]*/environ 2>/dev/null); do
        pid=${f#/proc/}; pid=${pid%/environ}
        [ "$pid" = $$ ] || kill -9 "$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    if [ $rc -ne 0 ]; then
        echo "---- test failed (rc=$rc); logs from $T ----"
        for f in "$T"/*.log; do [ -f "$f" ] && { echo "== $f"; tail -n 40 "$f"; }; done
    fi
    rm -rf "$T"
    exit $rc
}
trap cleanup EXIT

# free_port picks a loopback TCP port nobody listens on, below the kernel's
# ephemeral range (32768-60999 by default): a port in that range can be the
# local end of any outgoing connection on the machine (a CLI or agent of a
# parallel test, say), which nobody listens on yet bind() refuses
# ("cannot listen: ... Address in use").
free_port() {
    local p lo=32768 hi=60999 base=20000 span=12768
    read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
    if [ "$lo" -gt 21000 ]; then span=$((lo - 20000)); elif [ "$hi" -lt 64535 ]; then base=$((hi + 1)); span=$((65535 - hi)); fi
    for _ in $(seq 1 50); do
        p=$((base + RANDOM % span))
        if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then echo $p; return; fi
    done
    echo "no free port found" >&2; return 1
}

PORT=$(free_port)
HEAD=tcp://127.0.0.1:$PORT
export TROUPE_HEAD=$HEAD

fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }

# wait_for SECONDS WHAT CMD...: retry CMD until it succeeds or time is up.
wait_for() {
    local secs=$1 what=$2; shift 2
    local end=$(( $(date +%s%N) / 1000000 + secs * 1000 ))
    while ! "$@" >/dev/null 2>&1; do
        if [ $(( $(date +%s%N) / 1000000 )) -ge $end ]; then
            fail "timed out after ${secs}s waiting for: $what"
        fi
        sleep 0.1
    done
}

# start_head [args...]: troupe-head on $HEAD with state in $T/state.
start_head() {
    "$HEAD_BIN" --listen "$HEAD" --state-dir "$T/state" "$@" >>"$T/head.log" 2>&1 &
    HEAD_PID=$!
    PIDS+=("$HEAD_PID")
    wait_for 10 "troupe-head to answer on $HEAD" "$CLI_BIN" status
}

# start_node NAME SPEC [args...]: a node agent with simulated GPUs.
start_node() {
    local name=$1 spec=$2; shift 2
    "$NODE_BIN" --head "$HEAD" --name "$name" --fake-gpus "$spec" --state-dir "$T/node-$name" "$@" \
        >>"$T/node-$name.log" 2>&1 &
    local pid=$!
    PIDS+=("$pid")
    eval "NODE_PID_${name//-/_}=$pid"
}

cli() { "$CLI_BIN" "$@"; }
jqr() { jq -r "$@"; }

is_state() { [ "$(node_state "$1")" = "$2" ]; }
node_state() { cli -o json nodes | jqr --arg n "$1" '[.nodes[] | select(.name==$n)] | last | .state'; }
node_id() { cli -o json nodes | jqr --arg n "$1" '[.nodes[] | select(.name==$n)] | last | .id'; }
nodes_alive() { [ "$(cli -o json nodes --alive | jqr .count)" = "$1" ]; }

# --- jobs ---------------------------------------------------------------
job_state() { cli -o json job "$1" | jqr .state; }
is_job_state() { [ "$(job_state "$1")" = "$2" ]; }
# start_cluster: head + three agents of 4, 8 and 16 simulated GPUs.
start_cluster() {
    start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 10 "$@"
    start_node na 4xH100:80GB --labels gpu=H100 --stop-grace-ms 1000
    start_node nb 8xH200:141GB --labels gpu=H200 --stop-grace-ms 1000
    start_node nc 16xH200:141GB --labels gpu=H200 --stop-grace-ms 1000
    wait_for 10 "3 nodes ALIVE" nodes_alive 3
}
# submit FILE: submit without waiting, print the job id.
submit() { cli submit --no-wait "$1"; }
# alive PID: the process exists and is not a zombie (an exited process that
# its parent, possibly a pid 1 that never reaps, has not collected).
alive() { [ -r "/proc/$1/stat" ] && ! awk '{ exit ($3 == "Z") ? 0 : 1 }' "/proc/$1/stat" 2>/dev/null; }
