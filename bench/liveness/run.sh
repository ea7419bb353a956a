#!/usr/bin/env bash
# bench/liveness/run.sh BUILD_DIR [OUT.json] [ROUNDS]
#
# How fast a failure becomes a job state, with the head's DEFAULT liveness
# settings (heartbeat 500 ms, DEAD after 8 missed = 4 s, lease 3 s,
# disconnect 1 s). Real head, agents and workers on loopback; one 1-worker job
# per round on the agent under test, a spare agent for the restart cases:
#
#   sigterm    troupe-node gets SIGTERM          -> node LEFT, job FAILED
#   kill9      troupe-node gets kill -9          -> job FAILED (max_restarts 0)
#   kill9_rs   the same, max_restarts 1          -> restart decided (the job's
#              restart count moves) and its new attempt RUNNING on the spare node
#   cut        the agent's connection goes silent (a proxy stops moving bytes)
#                                                -> job FAILED
#   cut_rs     the same, max_restarts 1          -> restart decided / RUNNING elsewhere
#
# Times are from the fault to the state seen by polling `troupe -o json job`
# every 20 ms (about 10-30 ms of resolution). Prints a table; writes JSON.
# CASES: which cases to run (default "sigterm kill9 kill9_rs cut cut_rs").
set -euo pipefail
BUILD=${1:?usage: bench/liveness/run.sh BUILD_DIR [OUT.json] [ROUNDS]}
OUT=${2:-}
ROUNDS=${3:-3}
export TROUPE_BIN=$(cd "$BUILD" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../../tests/integration/lib.sh"
source "$HERE/../../tests/integration/nodes/nodes_lib.bash"

start_head   # the defaults
start_proxy
grep -m1 -o "heartbeat_ms=.*" "$T/head.log"

# poll_until JOB STATE...: ms since $t0 when the job is in one of the states.
poll_until() {
    local job=$1; shift
    local s
    while :; do
        s=$("$CLI_BIN" -o json job "$job" 2>/dev/null | jq -r .state) || s=
        for want in "$@"; do [ "$s" = "$want" ] && { echo $(( $(ms_now) - t0 )); return; }; done
        [ $(( $(ms_now) - t0 )) -gt 30000 ] && { echo -1; return; }
        sleep 0.02
    done
}
# restart_decided JOB: ms since $t0 when the head counted a restart (the job
# may be PENDING for only a moment, too short to poll).
restart_decided() {
    while :; do
        "$CLI_BIN" -o json job "$1" 2>/dev/null | jq -e '.restarts >= 1' >/dev/null && { echo $(( $(ms_now) - t0 )); return; }
        [ $(( $(ms_now) - t0 )) -gt 30000 ] && { echo -1; return; }
        sleep 0.02
    done
}
# restart_running JOB: ms since $t0 when attempt 1 is RUNNING.
restart_running() {
    while :; do
        "$CLI_BIN" -o json job "$1" 2>/dev/null |
            jq -e '[.workers[] | select(.attempt == 1 and .state == "RUNNING")] | length == 1' >/dev/null &&
            { echo $(( $(ms_now) - t0 )); return; }
        [ $(( $(ms_now) - t0 )) -gt 30000 ] && { echo -1; return; }
        sleep 0.02
    done
}

# agent NAME VIA: start an agent for the round (through the proxy or direct).
agent() {
    "$NODE_BIN" --head "$2" --name "$1" --fake-gpus 1 --state-dir "$T/node-$1" --stop-grace-ms 500 \
        >>"$T/node-$1.log" 2>&1 &
    AGENT_PID=$!
    PIDS+=("$AGENT_PID")
    wait_for 10 "$1 ALIVE" is_state "$1" ALIVE
}
job_on() { # NAME RESTARTS: a 1-GPU sleeper, placed on the only free node
    printf 'name: %s\ncluster: {nodes: [1]}\nrestart: {max_restarts: %s}\ngroups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sleep, "300"]}]\n' \
        "$1" "$2" >"$T/$1.yaml"
    local j
    j=$(submit "$T/$1.yaml")
    wait_for 10 "$1 RUNNING" bash -c "'$CLI_BIN' -o json job $j | jq -e '.workers[0].state == \"RUNNING\"'"
    echo "$j"
}

declare -A R
add() { R[$1]="${R[$1]:-}${R[$1]:+ }$2"; }
CASES=" ${CASES:-sigterm kill9 kill9_rs cut cut_rs} "
on() { [[ "$CASES" == *" $1 "* ]]; }
for r in $(seq 1 "$ROUNDS"); do
    if on sigterm; then
        agent "t$r" "$HEAD"; j=$(job_on "st$r" 0)
        t0=$(ms_now); kill -TERM "$AGENT_PID"
        while ! is_state "t$r" LEFT; do sleep 0.02; done; add sigterm_left $(( $(ms_now) - t0 ))
        add sigterm_job "$(poll_until "$j" FAILED STOPPED)"
    fi
    if on kill9; then # no restart
        agent "k$r" "$HEAD"; j=$(job_on "k$r" 0)
        t0=$(ms_now); kill -9 "$AGENT_PID"; add kill9_failed "$(poll_until "$j" FAILED)"
    fi
    if on kill9_rs; then # restart on a spare
        agent "kr$r" "$HEAD"; victim=$AGENT_PID; j=$(job_on "kr$r" 1); agent "spare$r" "$HEAD"
        t0=$(ms_now); kill -9 "$victim"; add kill9_rs_decided "$(restart_decided "$j")"; add kill9_rs_running "$(restart_running "$j")"
        kill -TERM "$AGENT_PID" # the spare
    fi
    if on cut; then # silent cut, no restart
        kill -USR2 "$PROXY_PID"
        agent "c$r" "$PROXY"; cut_pid=$AGENT_PID; j=$(job_on "c$r" 0)
        t0=$(ms_now); kill -USR1 "$PROXY_PID"; add cut_failed "$(poll_until "$j" FAILED)"
        kill -9 "$cut_pid"
    fi
    if on cut_rs; then # silent cut, restart on a spare
        kill -USR2 "$PROXY_PID"
        agent "cr$r" "$PROXY"; cut_pid=$AGENT_PID; j=$(job_on "cr$r" 1); agent "cspare$r" "$HEAD"
        t0=$(ms_now); kill -USR1 "$PROXY_PID"; add cut_rs_decided "$(restart_decided "$j")"; add cut_rs_running "$(restart_running "$j")"
        kill -9 "$cut_pid"; kill -TERM "$AGENT_PID"
    fi
    wait_for 10 "round $r agents gone" bash -c "[ \$('$CLI_BIN' -o json nodes --alive | jq .count) = 0 ]"
done

stats() { tr ' ' '\n' <<<"$1" | sort -n | awk '{ v[NR] = $1; s += $1 } END { printf "%d %d %d", v[1], v[int((NR + 1) / 2)], v[NR] }'; }
printf '\n%-44s %8s %8s %8s   %s\n' "fault -> state (ms, default settings)" min median max "goal"
row() { local s; [ -n "${R[$1]:-}" ] || return 0; s=$(stats "${R[$1]}"); printf '%-44s %8s %8s %8s   %s\n' "$2" $s "$3"; }
row sigterm_left    "agent SIGTERM -> node LEFT"                    "at once"
row sigterm_job     "agent SIGTERM -> job ended"                    "at once"
row kill9_failed    "agent kill -9 -> job FAILED"                   "<= 2000"
row kill9_rs_decided "agent kill -9 -> restart decided"   "<= 2000"
row kill9_rs_running "agent kill -9 -> new attempt RUNNING"         "after the lease"
row cut_failed      "network cut -> job FAILED"                     "<= 5000"
row cut_rs_decided  "network cut -> restart decided"      "<= 5000"
row cut_rs_running  "network cut -> new attempt RUNNING"            "<= 5000"
if [ -n "$OUT" ]; then
    {
        printf '{"bench":"liveness","rounds":%d,"settings":"%s","results":{' "$ROUNDS" "$(grep -m1 -o 'heartbeat_ms=.*' "$T/head.log")"
        first=1
        for k in sigterm_left sigterm_job kill9_failed kill9_rs_decided kill9_rs_running cut_failed cut_rs_decided cut_rs_running; do
            [ -n "${R[$k]:-}" ] || continue
            [ $first = 1 ] || printf ','; first=0
            printf '"%s":[%s]' "$k" "$(tr ' ' ',' <<<"${R[$k]}")"
        done
        printf '}}\n'
    } >"$OUT"
    echo "wrote $OUT"
fi
