#!/usr/bin/env bash
# A worker's descendants that leave its process group (setsid) are still its
# own: troupe stop kills them, and so does the agent's death (kill -9); a
# worker stopped by SIGSTOP shows as PAUSED and troupe stop still ends it at
# once (SIGCONT follows SIGTERM), not after the grace period.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/nodes_lib.bash"
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 10
start_node na 4xH100:80GB --stop-grace-ms 20000
wait_for 10 "na ALIVE" nodes_alive 1
mkdir -p "$T/pids"
# The worker starts a daemon in a session of its own, records its pid, waits.
cat >"$T/escape.yaml" <<YAML
name: escape
cluster: {nodes: [1]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sh, -c, 'setsid sh -c "echo \\\$\\\$ > $T/pids/escaped.\$TROUPE_JOB; exec sleep 300" & sleep 300']}]
YAML
escaped_started() { [ -s "$T/pids/escaped.$1" ]; }

j=$(submit "$T/escape.yaml")
wait_for 10 "the escaped daemon started" escaped_started "$j"
esc=$(cat "$T/pids/escaped.$j")
alive "$esc" || fail "daemon $esc not running"
[ "$(ps -o sid= -p "$esc" | tr -d ' ')" = "$esc" ] || fail "daemon $esc did not get a session of its own"
t0=$(ms_now)
cli stop "$j" >/dev/null 2>&1 || fail "troupe stop $j"
alive "$esc" && fail "troupe stop $j returned while the setsid'd daemon $esc still runs"
pass "troupe stop killed the setsid'd descendant $esc before it returned ($(( $(ms_now) - t0 )) ms)"

j2=$(submit "$T/escape.yaml")
wait_for 10 "the second daemon started" escaped_started "$j2"
esc2=$(cat "$T/pids/escaped.$j2")
kill -9 "$NODE_PID_na"
wait_for 5 "the setsid'd descendant died with the agent" bash -c "! kill -0 $esc2 2>/dev/null || awk '{exit \$3==\"Z\"?0:1}' /proc/$esc2/stat"
pass "agent killed -9: the setsid'd descendant $esc2 died with it"

# SIGSTOP: PAUSED, and troupe stop does not wait out the 20 s grace.
start_node nb 4xH100:80GB --stop-grace-ms 20000
wait_for 10 "nb ALIVE" is_state nb ALIVE
cat >"$T/pause.yaml" <<YAML
name: pause
cluster: {nodes: [1]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sh, -c, 'echo \$\$ > $T/pids/paused; exec sleep 300']}]
YAML
p=$(submit "$T/pause.yaml")
wait_for 10 "worker started" test -s "$T/pids/paused"
wait_for 10 "worker RUNNING" bash -c "'$CLI_BIN' -o json job $p | jq -e '.workers[0].state == \"RUNNING\"'"
kill -STOP "$(cat "$T/pids/paused")"
wait_for 5 "worker shown PAUSED" bash -c "'$CLI_BIN' -o json job $p | jq -e '.workers[0].state == \"PAUSED\" and .workers[0].paused'"
cli job "$p" | grep_all PAUSED || fail "troupe job does not show PAUSED: $(cli job "$p")"
pass "a SIGSTOPped worker shows as PAUSED"
t0=$(ms_now)
cli stop "$p" >/dev/null 2>&1 || fail "troupe stop $p"
dt=$(( $(ms_now) - t0 ))
[ "$dt" -lt 10000 ] || fail "troupe stop of a paused worker took $dt ms (waited out the grace?)"
cli -o json job "$p" | jqr '.workers[0].message' | grep_all "SIGTERM" || fail "message: $(cli -o json job "$p" | jqr '.workers[0].message')"
pass "troupe stop ended the paused worker in $dt ms with SIGTERM (SIGCONT sent after it)"
