# lib.sh - helpers for troupe's integration tests (sourced by each test).
#
# Every test gets its own temp dir and loopback port, starts real processes,
# waits only with deadlines (wait_for), and kills everything it started on
# exit, whatever happens - and nothing else.
set -euo pipefail

: "${TROUPE_BIN:?TROUPE_BIN must point at the build tree}"

# Which processes are this test's: every one carries TROUPE_TEST_TAG=<pid of
# the test's shell>.<its start time> in its environment, inherited from the
# shell (re-executed here once so that its own environment, and with it every
# subshell's, holds the tag). A process the test started is found by it even
# when it left the test's process tree or group (an orphaned daemon, a
# `timeout` or `setsid` child), and a process that merely got a recorded pid
# after the test's own one ended (pids wrap in minutes on a busy machine) is
# never touched: kill_own reads the tag again right before each signal.
# The shell is started again as it was first (its own argv, from
# /proc/PID/cmdline: a script that shifted its arguments before sourcing
# this file gets them all back, and runs its first lines again).
mapfile -d '' -t TR_ARGV </proc/$$/cmdline
_tr_stat=$(</proc/$$/stat)
read -ra _tr_stat <<<"${_tr_stat##*) }"
if [ "${TROUPE_TEST_TAG:-}" != "$$.${_tr_stat[19]}" ]; then
    TROUPE_TEST_TAG=$$.${_tr_stat[19]} exec "${TR_ARGV[@]}"
fi
unset _tr_stat

HEAD_BIN=$TROUPE_BIN/server/troupe-head
NODE_BIN=$TROUPE_BIN/worker/node/troupe-node
CLI_BIN=$TROUPE_BIN/client/troupe
TRAIN_BIN=$TROUPE_BIN/worker/train/troupe-train

# TROUPE_TEST_SLOWDOWN: how much slower than idle this machine runs now - the
# 1-minute load average per CPU, rounded up, between 1 and 4 (or as set by the
# caller). Deadlines of waits for something that must happen (wait_for,
# start_head, the watchdog) are multiplied by it: under load they stretch
# instead of failing; on an idle machine they are what the test says.
if ! [[ "${TROUPE_TEST_SLOWDOWN:-}" =~ ^[1-9][0-9]*$ ]]; then
    read -r _tr_load _ </proc/loadavg
    TROUPE_TEST_SLOWDOWN=$(awk -v l="$_tr_load" -v n="$(nproc)" 'BEGIN { s = int(l / n); if (s < l / n) s++; print (s < 1) ? 1 : (s > 4) ? 4 : s }')
    unset _tr_load
fi
export TROUPE_TEST_SLOWDOWN
# scaled SECONDS: SECONDS times the slowdown.
scaled() { echo $(($1 * TROUPE_TEST_SLOWDOWN)); }

T=$(mktemp -d "${TMPDIR:-/tmp}/troupe-it.XXXXXX")
PIDS=() # kept for the tests' own use; cleanup goes by the tag, not by these
SKIPPED=()
AT_CLEANUP=()
# at_cleanup CMD: cleanup evals CMD once every process of the test is gone,
# before it removes $T: for what a test makes outside $T (a trap of the
# test's own that ran first would race the processes still writing there).
at_cleanup() { AT_CLEANUP+=("$1"); }

# own_pids [-w] [EXCEPT...]: this test's live processes other than the
# calling shell, the EXCEPT pids and (with -w) the workers' (a listing: a
# process may end before its pid is used; kill_own checks again). Call it
# directly in $(...), not nested: an enclosing subshell carries the tag too.
# The grep that searches carries it as well, and has ended when it is checked.
own_pids() {
    local f p nw=0
    [ "${1:-}" != -w ] || { nw=1; shift; }
    for f in $(grep -lzxF "TROUPE_TEST_TAG=$TROUPE_TEST_TAG" /proc/[0-9]*/environ 2>/dev/null); do
        p=${f#/proc/}; p=${p%/environ}
        [ "$p" != "$BASHPID" ] || continue
        [[ " $* " != *" $p "* ]] || continue
        [ $nw = 0 ] || ! is_worker "$p" || continue
        ours "$p" && echo "$p"
    done
    return 0
}
# ours PID: PID is a live process of this test (it carries the tag now).
ours() { [ "$1" != $$ ] && grep -qzxF "TROUPE_TEST_TAG=$TROUPE_TEST_TAG" "/proc/$1/environ" 2>/dev/null && alive "$1"; }
# kill_own SIGNAL PID...: signal each PID that is this test's right now.
kill_own() {
    local sig=$1 p; shift
    for p in "$@"; do
        [ "$p" != "$BASHPID" ] && ours "$p" && kill "-$sig" "$p" 2>/dev/null
    done
    return 0
}
# is_worker PID: a process of a job's worker (the agent gives each TROUPE_WORKER).
is_worker() { grep -qz '^TROUPE_WORKER=' "/proc/$1/environ" 2>/dev/null; }

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
train_pid() { worker_child_pid "$1" "job$1-$2" troupe-train; }
# worker_child_pid ID WORKER [NAME]: the pid of worker WORKER's program (named
# NAME) in job ID: the job lists the agent's supervisor, whose child it is.
# Asked again for up to 5 s (times the slowdown): a listing read just as the
# worker started may not hold its supervisor yet (under ASan at load 34 it
# did not). Prints nothing and fails, saying what it looked for, after that.
worker_child_pid() {
    local shim p end=$((EPOCHSECONDS + 5 * TROUPE_TEST_SLOWDOWN))
    while :; do
        shim=$(cli -o json job "$1" | jqr --arg w "$2" '.workers[] | select(.name==$w and (.removed | not)) | .pid')
        if [[ "$shim" =~ ^[1-9][0-9]*$ ]] && p=$(pgrep -P "$shim" ${3:+"$3"}) && [ -n "$p" ]; then
            echo "$p"
            return 0
        fi
        [ "$EPOCHSECONDS" -lt "$end" ] || break
        sleep 0.1
    done
    echo "no running process${3:+ $3} under worker $2 of job $1 (its supervisor: '${shim:-none}')" >&2
    return 1
}
# lines_at_least FILE N: FILE has at least N lines.
lines_at_least() { [ -f "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ]; }

# cleanup kills what the test started (head, agents, proxies, background
# jobs and whatever they left behind) and nothing else, then checks the
# README's promise that a killed agent takes its workers with it: a worker
# process still alive 5 s later is a leak, named and killed, and it fails the
# test even when every assertion passed. A test that skipped (exit 77, or
# skip_part) says why, once more, at its end.
cleanup() {
    local rc=$? p left="" end others
    # No errexit here: the watchdog stops a hung test by SIGTERM and then
    # SIGKILLs every process of the test at once, which can hit a command
    # substitution of this cleanup (it carries the tag); under errexit that
    # ended the shell with 137 before the logs were shown. What one killed
    # listing missed, the loop below lists again.
    set +e
    # Everything but the workers (and the watchdog, which still guards this
    # cleanup) first.
    others=$(own_pids -w "${WATCHDOG_PID:-}")
    kill_own 9 $others
    end=$((EPOCHSECONDS + 5 * TROUPE_TEST_SLOWDOWN))
    while left=$(worker_pids) && [ -n "$left" ] && [ "$EPOCHSECONDS" -lt "$end" ]; do sleep 0.1; done
    if [ -n "$left" ]; then
        echo "FAIL: worker processes outlived their agents (leaked):" >&2
        for p in $left; do
            echo "  pid $p: $(tr '\0' ' ' </proc/$p/cmdline 2>/dev/null)" >&2
            # Where it is stuck: its state, parent, tracer, signals, and the
            # kernel function it sleeps in.
            echo "    $(grep -E '^(State|PPid|TracerPid|SigPnd|ShdPnd|SigBlk|SigIgn):' /proc/$p/status 2>/dev/null |
                tr -s '\t\n' '  ') wchan $(cat /proc/$p/wchan 2>/dev/null)" >&2
        done
        [ $rc -ne 0 ] && [ $rc -ne 77 ] || rc=1
    fi
    # Then whatever of the test is left (leaked workers, anything started
    # meanwhile), until none is: bounded, a process in D state is named.
    end=$((EPOCHSECONDS + 5 * TROUPE_TEST_SLOWDOWN))
    while :; do
        # Twice when the first listing was killed midway (the watchdog's
        # one pass of SIGKILLs): an empty answer must mean none is left.
        left=$(own_pids "${WATCHDOG_PID:-}") || left=$(own_pids "${WATCHDOG_PID:-}")
        [ -n "$left" ] || break
        if [ "$EPOCHSECONDS" -ge "$end" ]; then
            echo "WARNING: processes of this test survive SIGKILL: $(ps -o pid=,stat=,args= -p "${left//$'\n'/,}" 2>/dev/null | tr '\n' ';')" >&2
            break
        fi
        kill_own 9 $left
        sleep 0.05
    done
    wait 2>/dev/null || true
    # What the test made outside $T, now that nothing of it can write there.
    for p in "${AT_CLEANUP[@]}"; do eval "$p" || echo "WARNING: at_cleanup '$p' failed" >&2; done
    if [ $rc = 0 ] && [ ${#SKIPPED[@]} -gt 0 ]; then rc=77; fi
    if [ $rc = 77 ]; then
        for p in "${SKIPPED[@]}"; do echo "SKIP: $p"; done
        [ ${#SKIPPED[@]} -gt 0 ] || echo "SKIP: (the test exited 77 without saying why)"
    elif [ $rc -ne 0 ]; then
        echo "---- test failed (rc=$rc); logs from $T ----"
        for f in "$T"/*.log; do
            [ -f "$f" ] || continue
            # What went wrong is often long before the end (a refusal, a
            # lease that ran out): each distinct warning or error once first.
            echo "== $f: notices, warnings and errors (the first of each, with its count)"
            log_digest "$f"
            echo "== $f: the last 40 lines"
            tail -n 40 "$f"
        done
        # The workers' own output (a sanitizer's report from a worker that
        # aborted is only there).
        for f in "$T"/node-*/logs/*.log; do [ -s "$f" ] && { echo "== $f"; tail -n 60 "$f"; }; done
    fi
    # What the test mounted under $T (a tmpfs state dir), deepest first.
    awk -v t="$T/" 'index($2, t) == 1 { print $2 }' /proc/self/mounts | sort -r |
        while read -r p; do umount -l "$p" || true; done
    rm -rf "$T" || echo "WARNING: could not remove $T" >&2
    kill_own 9 "${WATCHDOG_PID:-}"
    exit $rc
}
# log_digest FILE: each distinct notice, warning or error line of a troupe
# log once (the timestamp and pid left out of the comparison), in order of
# first appearance with that time and how often it came; at most 60.
log_digest() {
    awk '/ (notice|warning|error): / { m = $0; sub(/^[^ ]+ [^ ]+ /, "", m)
            if (!(m in n)) { order[++k] = m; first[m] = $1 } n[m]++ }
        END { for (i = 1; i <= k && i <= 60; i++) printf "%s %s%s\n", first[order[i]], order[i], (n[order[i]] > 1 ? "  (x" n[order[i]] ")" : "") }' "$1"
}
# skip_test WHY: the test cannot run here (a tool, a privilege, a GPU it needs
# is missing): exit 77, which ctest counts as skipped - never as passed - and
# scripts/check_tests.sh lists with WHY. Cleans up like any other end.
skip_test() { SKIPPED+=("$*"); echo "SKIP: $*"; exit 77; }
skip() { skip_test "$@"; }
# skip_part WHY: one part of the test cannot run here; the rest runs, and the
# test then ends as skipped (77) instead of passed, listing WHY.
skip_part() { SKIPPED+=("$*"); echo "SKIP (part): $*"; }

# private_mounts: run this test again, from its start, in a mount namespace
# of its own, before it has started anything: what it mounts (a tmpfs, the
# bind mounts of `ip netns add`) is seen by no one else and goes away with
# its last process, even when the test is killed. Skips (77), saying why,
# where a mount namespace cannot be made (no root, no CAP_SYS_ADMIN).
private_mounts() {
    [ "${TROUPE_TEST_MOUNTS:-}" != "$TROUPE_TEST_TAG" ] || return 0
    local err
    command -v unshare >/dev/null || skip_test "unshare (util-linux) not installed: no mount namespace of its own"
    if ! err=$(unshare --mount --propagation private true 2>&1); then
        # In a chroot "/" is no mount point, so its propagation cannot be
        # made private (EINVAL), root or not.
        case $err in
        *"root filesystem propagation"*)
            skip_test "cannot make a private mount namespace here: / is not a mount point (a chroot?) (unshare --mount: $err)" ;;
        esac
        skip_test "cannot make a mount namespace here (unshare --mount: ${err:-failed}; needs root with CAP_SYS_ADMIN)"
    fi
    trap - EXIT
    kill_own 9 "${WATCHDOG_PID:-}"
    rm -rf "$T"
    TROUPE_TEST_MOUNTS=$TROUPE_TEST_TAG exec unshare --mount --propagation private "${TR_ARGV[@]}"
}
trap cleanup EXIT

# The watchdog: a test still running TROUPE_TEST_DEADLINE_S seconds (times
# TROUPE_TEST_SLOWDOWN) after it started says what it was waiting on - every
# process of the test with its state and age, and where gdb is present the
# stacks of troupe's own processes - then fails the test through cleanup
# (which prints the logs) instead of being killed by ctest without a word.
# ctest's TIMEOUT lies above the longest such deadline (integration.cmake):
# ctest kills only the test's process tree, and an orphaned head or agent
# would outlive it. Should the shell itself not end within 30 s of that (or
# die without its cleanup, killed from outside), the watchdog kills what is
# left of the test, the shell included, and removes $T.
watchdog() {
    local shell=$1 secs=$2 p n=0 end
    set +e +o pipefail # report what it can: a process may end while it looks
    end=$(( $(date +%s) + secs ))
    # read -t on a pipe we hold both ends of: a wait with no child process
    # (a sleep would outlive a watchdog that cleanup kills). Every 2 s: is
    # the shell still there (its parent is; an orphan's parent is another)?
    while [ "$(date +%s)" -lt "$end" ]; do
        read -rt 2 _ <> <(:)
        watchdog_parent_is "$shell" || { watchdog_reap "the test's shell died without its cleanup"; return; }
    done
    {
        echo "FAIL: the test is still running after $secs s (TROUPE_TEST_DEADLINE_S $TROUPE_TEST_DEADLINE_S x slowdown $TROUPE_TEST_SLOWDOWN); its processes:"
        for p in $(own_pids); do
            ps -o pid=,ppid=,stat=,etime=,args= -p "$p" 2>/dev/null | cut -c1-200 | sed 's/^/  /'
        done
        if command -v gdb >/dev/null; then
            for p in $(own_pids); do
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
    watchdog_parent_is "$shell" && kill -TERM "$shell" 2>/dev/null
    kill_own 9 $(own_pids)
    end=$(( $(date +%s) + 30 ))
    while watchdog_parent_is "$shell" && [ "$(date +%s)" -lt "$end" ]; do read -rt 1 _ <> <(:); done
    if ! watchdog_parent_is "$shell"; then
        # The shell ended, its cleanup run (which kills this watchdog last)
        # or cut short: what it did not remove goes now.
        [ ! -e "$T" ] || watchdog_reap "the test's shell ended without removing $T"
        return 0
    fi
    watchdog_reap "the test's shell did not end 30 s after the watchdog stopped it" kill
}
# watchdog_parent_is SHELL: the watchdog is still SHELL's child (SHELL lives).
watchdog_parent_is() {
    local st
    st=$(</proc/$BASHPID/stat) && read -ra st <<<"${st##*) }" && [ "${st[1]}" = "$1" ]
}
# watchdog_reap WHY [kill]: the cleanup the shell could not do: kill every
# process of the test (with kill: the shell too), remove $T.
watchdog_reap() {
    local i
    echo "FAIL: $1; the watchdog kills what is left of the test and removes $T" >&2
    [ "${2:-}" = kill ] && watchdog_parent_is "$$" && kill -9 "$$" 2>/dev/null
    for i in 1 2 3 4 5; do kill_own 9 $(own_pids); done
    rm -rf "$T"
}

source "$(dirname "${BASH_SOURCE[0]}")/free_port.bash"
PORT=$(free_port)
HEAD=tcp://127.0.0.1:$PORT
export TROUPE_HEAD=$HEAD

fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }

# wait_for SECONDS WHAT CMD...: retry CMD until it succeeds or SECONDS times
# TROUPE_TEST_SLOWDOWN have passed (a wait for something that must happen; a
# check that something does NOT happen within a time must not use it).
wait_for() {
    local secs=$1 what=$2; shift 2
    local end=$(( $(date +%s%N) / 1000000 + secs * TROUPE_TEST_SLOWDOWN * 1000 ))
    while ! "$@" >/dev/null 2>&1; do
        if [ $(( $(date +%s%N) / 1000000 )) -ge $end ]; then
            fail "timed out after $((secs * TROUPE_TEST_SLOWDOWN))s waiting for: $what$([ "$TROUPE_TEST_SLOWDOWN" = 1 ] || echo " (${secs}s x slowdown $TROUPE_TEST_SLOWDOWN)")"
        fi
        sleep 0.1
    done
}

# proc_start PID: PID's start time (in clock ticks since boot) while it is a
# live process, not a zombie; fails once it has ended. A pid is only "the
# same process" while this stays the same: once the shell has reaped a child,
# its pid may be handed to any new process.
proc_start() {
    local st
    { st=$(</proc/"$1"/stat); } 2>/dev/null || return 1
    read -ra st <<<"${st##*) }"
    [ "${st[0]}" != Z ] && [ "${st[0]}" != X ] && echo "${st[19]}"
}

# await_end SECONDS WHAT PID...: wait up to SECONDS (times the slowdown) for
# each PID to end, then reap it. END_RC: the exit status of the last PID (127
# where it was not this shell's child). One still running at the deadline is
# named with its state and the kernel function it sleeps in, killed, and
# fails the test, saying WHAT was awaited: a bare `wait` would hang until the
# watchdog, which names no culprit.
await_end() {
    local secs=$1 what=$2
    shift 2
    # stderr aside: bash reports a child killed by a signal ("Killed") on it
    # at whatever command runs when it reaps the child, not at `wait`.
    { _tr_end "$secs" "$@"; } 2>/dev/null
    _tr_end_check "$secs" "$what"
}
# _tr_end SECONDS PID...: the polling of await_end; TR_LEFT: the pids still
# running at the deadline (none reaped then), else END_RC as await_end says.
_tr_end() {
    local secs=$1 p s end
    shift
    local -A start=()
    for p in "$@"; do s=$(proc_start "$p") && start[$p]=$s; done
    end=$(( $(date +%s%N) / 1000000 + secs * TROUPE_TEST_SLOWDOWN * 1000 ))
    while :; do
        TR_LEFT=""
        for p in "${!start[@]}"; do [ "$(proc_start "$p")" != "${start[$p]}" ] || TR_LEFT+=" $p"; done
        [ -n "$TR_LEFT" ] && [ $(( $(date +%s%N) / 1000000 )) -lt $end ] || break
        sleep 0.05
    done
    [ -z "$TR_LEFT" ] || return 0
    END_RC=0
    for p in "$@"; do END_RC=0; wait "$p" || END_RC=$?; done
    return 0
}
# _tr_end_check SECONDS WHAT: after _tr_end, name, kill and fail on what is
# left.
_tr_end_check() {
    local p
    [ -n "$TR_LEFT" ] || return 0
    for p in $TR_LEFT; do
        echo "  still running: pid $p: $(tr '\0' ' ' </proc/$p/cmdline 2>/dev/null | cut -c1-200)" >&2
        echo "    $(grep -E '^(State|PPid|SigPnd|ShdPnd|SigBlk|SigIgn):' /proc/$p/status 2>/dev/null | tr -s '\t\n' '  ') wchan $(cat /proc/$p/wchan 2>/dev/null)" >&2
    done
    kill_own 9 $TR_LEFT
    fail "timed out after $(($1 * TROUPE_TEST_SLOWDOWN))s waiting for: $2 (pids$TR_LEFT still running; killed)"
}

# stop_pid [-SIG] [-t SECONDS] PID...: stop these processes of the test and
# reap them: SIG (TERM unless given) to each, then await_end with a deadline
# of SECONDS (20 unless given, above the head's default shutdown_timeout_ms
# of 15 s; times the slowdown). A process that does not end on its signal
# fails the test, named (a daemon that ignores SIGTERM is a bug; one that
# SIGKILL does not end is stuck in the kernel). STOP_RC: the exit status of
# the last PID (see END_RC). Returns 0.
stop_pid() {
    local sig=TERM secs=20 p names=""
    while :; do
        case "${1:-}" in
            -t) secs=$2; shift 2 ;;
            -[A-Z0-9]*) sig=${1#-}; shift ;;
            *) break ;;
        esac
    done
    for p in "$@"; do names+="${names:+, }$p ($(cat "/proc/$p/comm" 2>/dev/null || echo ended))"; done
    { kill_own "$sig" "$@"; _tr_end "$secs" "$@"; } 2>/dev/null
    _tr_end_check "$secs" "$names to end after SIG$sig"
    STOP_RC=$END_RC
    return 0
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
# grep_all GREP-ARGS...: `grep -q` for the end of a pipeline, which reads all
# of its input before it answers. grep -q exits at its first match; under
# pipefail the writer, killed by SIGPIPE at its next write, then fails the
# pipeline and the check with it - by timing and output size, a check that
# fails now and then (or skips a step it gates). (A `bash -c` string does
# not inherit pipefail: grep -q is safe there.)
grep_all() {
    local in
    in=$(cat) || return 1
    grep -q "$@" <<<"$in"
}

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
        tail -c +$((mark + 1)) "$T/head.log" | grep_all -E "node registered node=[0-9]+ name=$n .* again=1\$" || return 1
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
# Every thread counts: a SIGKILLed head's main thread turns zombie (Z) while
# its other threads still exit, and until the last one is gone its files -
# the state dir's lock among them - stay open, so a head started "after" it
# is refused the lock.
alive() {
    local f st
    [ -d "/proc/$1/task" ] || return 1
    for f in /proc/"$1"/task/*/stat; do
        st=$(sed -n 's/^.*) \([A-Za-z]\) .*$/\1/p' "$f" 2>/dev/null) || continue
        [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ] && return 0
    done
    return 1
}

# The watchdog starts last: its subshell has the functions defined above.
if [ -n "${TROUPE_TEST_DEADLINE_S:-}" ]; then
    trap 'echo "FAIL: stopped by the watchdog" >&2; exit 1' TERM
    watchdog $$ "$(scaled "$TROUPE_TEST_DEADLINE_S")" &
    WATCHDOG_PID=$!
    disown "$WATCHDOG_PID" # cleanup kills it last (kill_own: only while it is ours); no "Killed" line
fi
