#!/usr/bin/env bash
# Jobs with a large env: reach their node and run. A node's assignments once
# went out in one NodeSync reply with each worker's whole env: a 64-worker job
# with 18 values of 4 KB (72 KB) on one 64-GPU node made a reply over the 4 MiB
# frame, the agent dropped it, and the job stayed RUNNING with every worker
# PENDING, with nothing logged (and the head leaked a connection per retry).
# Now a job's common part goes once per reply and a large set goes in parts.
# Cases: 64 workers x 72 KB; 8 workers x 922 KB; four 16-worker jobs of 72 KB;
# 64 one-worker jobs of 72 KB each (4.6 MB of distinct env: several parts);
# and a spec that no reply could carry is refused at submit with the numbers.
source "$(dirname "$0")/../lib.sh"
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50 --http off --log-level debug
start_node big 64xH200:141GB --stop-grace-ms 500
wait_for 10 "1 node ALIVE" nodes_alive 1

# spec NAME WORKERS VALUES BYTES: a job of WORKERS one-GPU workers with VALUES
# env values of BYTES each; each worker prints its rank and the first value's
# length, then waits to be stopped.
spec() {
    local name=$1 workers=$2 values=$3 bytes=$4 i v
    v=$(head -c "$bytes" /dev/zero | tr '\0' 'x')
    {
        echo "name: $name"
        echo "cluster: {nodes: [$workers]}"
        echo "env:"
        for ((i = 0; i < values; i++)); do echo "  BIG_$i: '$v'"; done
        echo "groups: [{name: g, workers: $workers, resources: {gpu: 1}, command: [sh, -c, 'echo up \$RANK \${#BIG_0}; exec sleep 600']}]"
    }
}
running() { # ID N: N workers of job ID RUNNING
    [ "$(cli -o json job "$1" | jqr '[.workers[] | select(.state=="RUNNING")] | length')" = "$2" ]
}
# started ID N BYTES: every worker is RUNNING and printed the env value whole.
started() {
    local id=$1 n=$2 bytes=$3 t0=$SECONDS
    wait_for 30 "job $id: $n workers RUNNING (workers: $(cli -o json job "$id" | jqr '[.workers[].state] | group_by(.) | map("\(.[0]) \(length)") | join(", ")'))" running "$id" "$n"
    wait_for 10 "job $id: $n workers saw their env" lines_are "$id" "$n" "$bytes"
}
lines_are() { [ "$(cli logs "$1" | grep -c " up [0-9]* $3\$")" = "$2" ]; }
conns() { cli -o json status | jqr .connections.open; }

spec w64 64 18 4096 >"$T/w64.yaml"
id=$(submit "$T/w64.yaml")
started "$id" 64 4096
pass "64 workers x 72 KB of env: all RUNNING with their env"
[ "$(conns)" -le 8 ] || fail "the head holds $(conns) connections for one agent and a CLI"
# An agent that takes no common parts (an older troupe-node) would need the
# whole 4.7 MB in one frame: it is answered RESOURCE_EXHAUSTED with the sizes,
# never sent a frame it would drop, and the node shows why.
out=$("${RAWCALL:?}" "$HEAD" sync-flat "$(node_id big)")
grep -q "code=8 " <<<"$out" && grep -q "does not take them in parts" <<<"$out" || fail "an old agent's poll: $out"
[ -n "$(cli -o json nodes | jqr '.nodes[0].sync_error')" ] || fail "the node should say why it is not synced"
cli nodes | grep_all "UNSYNCED" || fail "troupe nodes should show UNSYNCED: $(cli nodes)"
pass "an agent without common parts: $out"
cli stop "$id" >/dev/null
synced() { [ -z "$(cli -o json nodes | jqr '.nodes[0].sync_error')" ]; }
wait_for 10 "the node's sync_error cleared once a whole set went out" synced

spec w8 8 225 4096 >"$T/w8.yaml"
[ "$(stat -c %s "$T/w8.yaml")" -gt 900000 ] || fail "the 8-worker spec should be over 900 KB"
id=$(submit "$T/w8.yaml")
started "$id" 8 4096
pass "8 workers x 922 KB of env: all RUNNING"
cli stop "$id" >/dev/null

ids=()
for k in 1 2 3 4; do spec "q$k" 16 18 4096 >"$T/q$k.yaml"; ids+=("$(submit "$T/q$k.yaml")"); done
for id in "${ids[@]}"; do started "$id" 16 4096; done
pass "four 16-worker jobs of 72 KB on one node: all RUNNING"
cli stop "${ids[@]}" >/dev/null

# 64 one-worker jobs, each with its own 72 KB: 4.6 MB of common parts, more
# than one reply carries, so the agent gathers the set in parts.
files=()
for k in $(seq 1 64); do spec "s$k" 1 18 4096 >"$T/s$k.yaml"; files+=("$T/s$k.yaml"); done
ids=()
for b in 0 16 32 48; do
    mapfile -t -O "${#ids[@]}" ids < <(cli submit --no-wait "${files[@]:$b:16}")
done
[ "${#ids[@]}" = 64 ] || fail "submitted ${#ids[@]} of 64 jobs"
for id in "${ids[@]}"; do started "$id" 1 4096; done
pass "64 jobs of 72 KB each (a set in several parts): all RUNNING"
# The set went in parts, each under the frame; reports (four a second) are
# acknowledged without it (ack_only), so few replies of megabytes were built.
grep -q "node sync reply .* page=0 next=[1-9][0-9]* total=64 " "$T/head.log" || fail "the 64-job set did not go in parts"
big=$(grep -c "node sync reply .* bytes=[0-9]\{7\}" "$T/head.log" || true)
[ "$big" -le 6 ] || fail "$big NodeSync replies of megabytes were built (reports carried the set?)"
cli stop "${ids[@]}" >/dev/null
[ "$(cli -o json nodes | jqr '.nodes[0].sync_error')" = "" ] || fail "sync_error: $(cli -o json nodes | jqr '.nodes[0].sync_error')"

[ "$(conns)" -le 8 ] || fail "the head holds $(conns) connections"
! grep -q "exceeds max_frame_bytes" "$T/head.log" || fail "a reply over the frame limit was built: $(grep -m1 "exceeds max_frame_bytes" "$T/head.log")"

# A spec no reply could carry (its env alone nearly a frame) is refused at
# submit, with the numbers, instead of being placed and never sent. With the
# default 4 MiB frame a spec file (1 MiB at most) always fits; with a 256 KiB
# frame a 244 KB env still passes the submit frame but fits no reply.
stop_pid "$HEAD_PID"
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50 --http off --max-frame-bytes 262144
spec huge 1 61 4000 >"$T/huge.yaml"
if out=$(cli submit --no-wait "$T/huge.yaml" 2>&1); then
    fail "a job whose assignment fits no NodeSync reply was accepted (job $out)"
fi
grep -q "INVALID_ARGUMENT" <<<"$out" && grep -q "NodeSync" <<<"$out" && grep -Eq "[0-9]{6} bytes" <<<"$out" ||
    fail "the refusal should name the sizes: $out"
pass "refused at submit: $out"
