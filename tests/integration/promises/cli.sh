#!/usr/bin/env bash
# README, the CLI. Promises (PROMISES.md): `ping`, `jobs --active`,
# `logs -f` follows until the job ends, `logs --worker` shows one worker,
# and a CLI following a job says "lost contact with the head; retrying for
# 60 s" when the head goes away, then carries on once it is back.
source "$(dirname "$0")/../lib.sh"
# The head is down for a while below (until the CLI says it lost contact):
# running workers outlive a head outage only within their agent's lease
# (README, fencing), and the agent needs more than a short dead window to
# notice the new head (PROMISES.md): DEAD after 30 s, lease 22.5 s.
start_head --heartbeat-ms 500 --suspect-after 3 --dead-after 60
start_node ca 4xH100:80GB --stop-grace-ms 1000
wait_for 10 "ca ALIVE" nodes_alive 1
mkdir -p "$T/go"

out=$(cli ping -n 3)
[ "$(grep -cE "^reply from $HEAD: seq=[0-2] time=[0-9.]+ us$" <<<"$out")" = 3 ] || fail "ping -n 3: $out"
cli -o json ping | jq -e '.seq == 0 and .rtt_us > 0' >/dev/null || fail "ping -o json: $(cli -o json ping)"
set +e; out=$("$CLI_BIN" --head tcp://127.0.0.1:1 ping 2>&1); rc=$?; set -e
[ $rc = 1 ] && grep -q "^troupe: UNAVAILABLE: cannot reach tcp://127.0.0.1:1" <<<"$out" || fail "ping unreachable: rc=$rc $out"
pass "ping: 3 round trips, JSON, unreachable head exits 1"

# A job whose two workers print, wait for a file, and print again.
cat >"$T/talk.yaml" <<YAML
name: talk
cluster: {nodes: [2]}
groups: [{name: g, workers: 2, resources: {gpu: 1}, command: [sh, -c, 'echo "first \$RANK"; while [ ! -f $T/go/\$1 ]; do sleep 0.05; done; echo "second \$RANK"', sh]}]
YAML
sed 's/name: talk/name: done-already/; s/command: .*/command: [true]}]/' "$T/talk.yaml" >"$T/quick.yaml"
q=$(submit "$T/quick.yaml")
wait_for 10 "done-already SUCCEEDED" is_job_state "$q" SUCCEEDED
sed -i "s|\\\$1 \\]|talk ]|" "$T/talk.yaml"
id=$(submit "$T/talk.yaml")
wait_for 10 "talk RUNNING" is_job_state "$id" RUNNING
[ "$(cli -o json jobs --active | jqr '[.jobs[].id] | map(tostring) | join(",")')" = "$id" ] ||
    fail "jobs --active: $(cli -o json jobs --active)"
[ "$(cli -o json jobs | jqr '[.jobs[].id] | map(tostring) | join(",")')" = "$id,$q" ] || fail "jobs: $(cli -o json jobs)"
pass "jobs --active lists the running job only ($id), jobs lists both, newest first"

cli logs -f "$id" >"$T/follow.out" 2>"$T/follow.err" &
fpid=$!
wait_for 10 "logs -f to show both first lines" bash -c "[ \$(grep -c '^\\[job$id-g-[01]\\] first [01]\$' $T/follow.out) = 2 ]"
alive "$fpid" || fail "logs -f ended while the job runs"
touch "$T/go/talk"
await_end 15 "logs -f to end after the job's end" "$fpid"
[ "$END_RC" = 0 ] || fail "logs -f exited $END_RC: $(cat "$T/follow.err")"
[ "$(sort "$T/follow.out")" = "$(printf '[job%s-g-0] first 0\n[job%s-g-0] second 0\n[job%s-g-1] first 1\n[job%s-g-1] second 1' "$id" "$id" "$id" "$id")" ] ||
    fail "logs -f output: $(cat "$T/follow.out")"
pass "logs -f followed both workers' lines and ended with the job"

[ "$(cli logs "$id" --worker "job$id-g-1")" = "$(printf '[job%s-g-1] first 1\n[job%s-g-1] second 1' "$id" "$id")" ] ||
    fail "logs --worker: $(cli logs "$id" --worker "job$id-g-1")"
pass "logs --worker shows that worker's lines only"

# Lost contact: the head is killed while `troupe submit` follows a job.
sed -i 's/name: talk/name: survive/; s|go/talk|go/survive|' "$T/talk.yaml"
"$CLI_BIN" submit "$T/talk.yaml" >"$T/sub.out" 2>"$T/sub.err" &
spid=$!
wait_for 10 "the followed job to print its first lines" bash -c "[ \$(grep -c ' first ' $T/sub.out) = 2 ]"
stop_pid -9 "$HEAD_PID"
wait_for 15 "the CLI to say it lost contact" grep -q "^troupe: lost contact with the head (.*); retrying for 60 s$" "$T/sub.err"
alive "$spid" || fail "the CLI gave up at once: $(cat "$T/sub.err")"
mark=$(head_log_mark)
start_head --heartbeat-ms 500 --suspect-after 3 --dead-after 60
wait_for 10 "ca to register again" reregistered "$mark" ca
touch "$T/go/survive"
await_end 20 "troupe submit to finish after the job's end" "$spid"
[ "$END_RC" = 0 ] || fail "submit exited $END_RC after the head came back: $(cat "$T/sub.err")"
[ "$(grep -c ' second ' "$T/sub.out")" = 2 ] || fail "lines after the restart missing: $(cat "$T/sub.out")"
[ "$(grep -c "lost contact" "$T/sub.err")" = 1 ] || fail "lost contact said more than once: $(cat "$T/sub.err")"
pass "lost contact with the head said once, the CLI carried on after the restart: $(grep 'lost contact' "$T/sub.err")"
