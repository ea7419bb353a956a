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

# Agents started by root run each worker under a uid of its own (README
# "Isolation"), and such a worker can write nowhere in $T (root's, 0700),
# where nearly every test's workers leave what the test then checks. So the
# tests' agents run workers as themselves (TROUPE_SHARED_UID is troupe-node's
# shared_uid), as an agent without root must; security/isolation.sh unsets it
# to test the isolation itself.
export TROUPE_SHARED_UID=true

# worker_pids: live processes of this test's workers, their supervisors and
# children (every one carries this test's TROUPE_HEAD and a TROUPE_WORKER).
worker_pids() {
    local f pid
    [ -n "${HEAD:-}" ] || return 0
    for f in $(grep -lzxF "TROUPE_HEAD=$HEAD" /proc/[0-9]*/environ 2>/dev/null); do
        pid=${f#/proc/}; pid=${pid%/environ}
        [ "$pid" != $$ ] && grep -qz '^TROUPE_WORKER=' "$f" 2>/dev/null && alive "$pid" && echo "$pid"
    done
    return 0
}
# no_workers: no process of this test's workers is alive.
no_workers() { [ -z "$(worker_pids)" ]; }
# train_pid ID NAME: the pid of worker NAME's (e.g. policy-1) troupe-train in
# job ID: the job lists the agent's supervisor process, and the command (bash
# exec'ing troupe-train) is its only child.
train_pid() {
    local shim
    shim=$(cli -o json job "$1" | jqr --arg w "job$1-$2" '.workers[] | select(.name==$w) | .pid')
    pgrep -P "$shim" troupe-train
}
# lines_at_least FILE N: FILE has at least N lines.
lines_at_least() { [ -f "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ]; }

# cleanup kills what the test started (head, agents, background jobs), then
# checks the README's promise that a killed agent takes its workers with it:
# a worker process still alive 5 s later is a leak, named and killed, and it
# fails the test even when every assertion passed.
cleanup() {
    local rc=$? p left="" end
    [ -z "${WATCHDOG_PID:-}" ] || kill -9 "$WATCHDOG_PID" 2>/dev/null || true
    for p in "${PIDS[@]}" $(jobs -p); do kill -9 "$p" 2>/dev/null || true; done
    end=$(( $(date +%s) + 5 ))
    while left=$(worker_pids) && [ -n "$left" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 0.1; done
    if [ -n "$left" ]; then
        echo "FAIL: worker processes outlived their agents (leaked):" >&2
        for p in $left; do
            echo "  pid $p: $(tr '\0' ' ' </proc/$p/cmdline 2>/dev/null)" >&2
            # Where it is stuck: its state, parent, tracer, signals, and the
            # kernel function it sleeps in.
            echo "    $(grep -E '^(State|PPid|TracerPid|SigPnd|ShdPnd|SigBlk|SigIgn):' /proc/$p/status 2>/dev/null |
                tr -s '\t\n' '  ') wchan $(cat /proc/$p/wchan 2>/dev/null)" >&2
        done
        for p in $left; do kill -9 "$p" 2>/dev/null || true; done
        [ $rc -ne 0 ] || rc=1
    fi
    wait 2>/dev/null || true
    if [ $rc -ne 0 ]; then
        echo "---- test failed (rc=$rc); logs from $T ----"
        for f in "$T"/*.log; do [ -f "$f" ] && { echo "== $f"; tail -n 40 "$f"; }; done
        # The workers' own output (a sanitizer's report from a worker that
        # aborted is only there).
        for f in "$T"/node-*/logs/*.log; do [ -s "$f" ] && { echo "== $f"; tail -n 60 "$f"; }; done
    fi
    rm -rf "$T"
    exit $rc
}
trap cleanup EXIT

# descendants PID: every process below PID, one per line, parents first.
descendants() {
    ps -eo pid=,ppid= | awk -v root="$1" '
        { kids[$2] = kids[$2] " " $1 }
        END { n = split(kids[root], q, " "); for (i = 1; i <= n; i++) { print q[i]; m = split(kids[q[i]], k, " "); for (j = 1; j <= m; j++) q[++n] = k[j] } }'
}

# The watchdog: a test still running TROUPE_TEST_DEADLINE_S seconds after it
# started (ctest sets it below its TIMEOUT) says what it was waiting on -
# every process of the test with its state and age, and where gdb is present
# the stacks of troupe's own processes - then fails the test through cleanup
# (which prints the logs) instead of being killed by ctest without a word.
watchdog() {
    local shell=$1 secs=$2 p n=0
    set +e +o pipefail # report what it can: a process may end while it looks
    # read -t on a pipe we hold both ends of: a wait with no child process
    # (a sleep would outlive a watchdog that cleanup kills).
    read -rt "$secs" _ <> <(:)
    {
        echo "FAIL: the test is still running after $secs s (TROUPE_TEST_DEADLINE_S); its processes:"
        for p in $(descendants "$shell"); do
            [ "$p" = "$BASHPID" ] && continue
            ps -o pid=,ppid=,stat=,etime=,args= -p "$p" 2>/dev/null | cut -c1-200 | sed 's/^/  /'
        done
        if command -v gdb >/dev/null; then
            for p in $(descendants "$shell"); do
                case "$(cat "/proc/$p/comm" 2>/dev/null)" in troupe*) ;; *) continue ;; esac
                [ $((n += 1)) -le 4 ] || break
                echo "  -- stacks of pid $p ($(cat "/proc/$p/comm"))"
                # one line per thread: its frames' functions, innermost first
                timeout 10 gdb -p "$p" -batch -ex 'thread apply all bt 12' 2>/dev/null | awk '
                    /^Thread/ { if (l != "") print l; l = "    " $2 ":"; next }
                    /^#/ { f = ($3 == "in") ? $4 : $2; if (f !~ /^_/ && f != "start_thread" && f != "clone3") l = l " " f }
                    END { if (l != "") print l }' | head -40
            done
        fi
    } >&2
    # TERM first: bash runs the trap once the command it waits for has ended,
    # which killing the test's processes then makes happen.
    kill -TERM "$shell" 2>/dev/null || true
    for p in $(descendants "$shell"); do [ "$p" = "$BASHPID" ] || kill -9 "$p" 2>/dev/null || true; done
}
if [ -n "${TROUPE_TEST_DEADLINE_S:-}" ]; then
    trap 'echo "FAIL: stopped by the watchdog" >&2; exit 1' TERM
    watchdog $$ "$TROUPE_TEST_DEADLINE_S" &
    WATCHDOG_PID=$!
    disown "$WATCHDOG_PID" # cleanup kills it; no "Killed" line from bash
fi

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

# start_node NAME SPEC [args...]: a node agent with simulated GPUs, talking to
# $HEAD, or to $NODE_HEAD where set (NODE_HEAD=$PROXY start_node ...: through
# the cuttable proxy).
start_node() {
    local name=$1 spec=$2; shift 2
    "$NODE_BIN" --head "${NODE_HEAD:-$HEAD}" --name "$name" --fake-gpus "$spec" --state-dir "$T/node-$name" "$@" \
        >>"$T/node-$name.log" 2>&1 &
    local pid=$!
    PIDS+=("$pid")
    eval "NODE_PID_${name//-/_}=$pid"
}

cli() { "$CLI_BIN" "$@"; }
# logs_grep ID PATTERN: the job's logs (troupe logs) match PATTERN (grep's
# basic regex). The logs go to a file first: in a pipe, grep -q quitting at
# its first match kills a long `troupe logs` with SIGPIPE, which pipefail
# turned into a failed check (integration.refit.kill under ASan).
logs_grep() {
    local f
    f=$(mktemp "$T/logs.XXXXXX")
    cli logs "$1" >"$f" 2>&1 || { rm -f "$f"; return 1; }
    grep -q -- "$2" "$f"
    local rc=$?
    rm -f "$f"
    return $rc
}
jqr() { jq -r "$@"; }

is_state() { [ "$(node_state "$1")" = "$2" ]; }
node_state() { cli -o json nodes | jqr --arg n "$1" '[.nodes[] | select(.name==$n)] | last | .state'; }
node_id() { cli -o json nodes | jqr --arg n "$1" '[.nodes[] | select(.name==$n)] | last | .id'; }
nodes_alive() { [ "$(cli -o json nodes --alive | jqr .count)" = "$1" ]; }
# `nodes --alive` counts SUSPECT nodes too, and a restarted head restores every
# node SUSPECT: to know that agents re-registered with a new head, mark its log
# before the restart and wait for reregistered.
# head_log_mark: the head log's length now.
head_log_mark() { stat -c %s "$T/head.log" 2>/dev/null || echo 0; }
# reregistered MARK NAME...: each NAME is ALIVE and the head logged its
# registration with its old id ("node registered ... again=1") after MARK.
reregistered() {
    local mark=$1 n; shift
    for n in "$@"; do
        tail -c +$((mark + 1)) "$T/head.log" | grep -qE "node registered node=[0-9]+ name=$n .* again=1\$" || return 1
        is_state "$n" ALIVE || return 1
    done
}

# --- jobs ---------------------------------------------------------------
job_state() { cli -o json job "$1" | jqr .state; }
job_reason() { cli -o json job "$1" | jqr .reason; }
# has_reason ID REASON: the job's reason is exactly REASON (whole string).
has_reason() { [ "$(job_reason "$1")" = "$2" ]; }
is_job_state() { [ "$(job_state "$1")" = "$2" ]; }
# start_cluster: head + three agents of 4, 8 and 16 simulated GPUs.
# Node liveness is not what its users test (the liveness tests start their own
# head with a 1 s window): a DEAD window of 5 s (lease 3.75 s) rides out the
# CPU stalls of a loaded CI machine. With 1 s, a second of headless Chromium
# in the next test starved the head and all three agents were declared DEAD
# (integration.http.prometheus); suite after suite had added --dead-after 50.
start_cluster() {
    start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50 "$@"
    start_node na 4xH100:80GB --labels gpu=H100 --stop-grace-ms 1000
    start_node nb 8xH200:141GB --labels gpu=H200 --stop-grace-ms 1000
    start_node nc 16xH200:141GB --labels gpu=H200 --stop-grace-ms 1000
    wait_for 10 "3 nodes ALIVE" nodes_alive 3
}
# submit FILE: submit without waiting, print the job id.
submit() { cli submit --no-wait "$1"; }
# alive PID: the process exists and is not a zombie (an exited process that
# its parent, possibly a pid 1 that never reaps, has not collected). The state
# is read once: a zombie this shell reaps between two reads of /proc/PID/stat
# must not count as alive (it did when a failed read meant "not a zombie").
alive() {
    local st
    st=$(sed -n 's/^.*) \([A-Za-z]\) .*$/\1/p' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}
