#!/usr/bin/env bash
# A job prints 30,001 lines and exits while the head's state dir (a 4 MiB
# tmpfs) is full. The agent keeps re-sending the report the head cannot save;
# the head must recognise each re-send as the same output (per-worker stream
# offsets), so:
#  - its resident memory stays under a fixed bound while the disk is full
#    (baseline + BOUND_MB; the output it holds unwritten is bounded by
#    max_log_memory_bytes, here its floor of 1 MiB, under the 1.1 MB the job
#    prints, so reports are refused and the agent keeps the rest);
#  - the worker's end waits with its last bytes: the job is not SUCCEEDED
#    while its output is held back;
#  - once space returns, `troupe logs` has every line exactly once, in order.
# Needs root to mount the tmpfs; skips (exit 77) elsewhere. The test runs in
# a mount namespace of its own: the tmpfs goes away with it, even when it is
# killed; lib.sh's cleanup kills its processes and unmounts.
source "$(dirname "$0")/../lib.sh"
private_mounts
mkdir -p "$T/state"
mount -t tmpfs -o size=4m,mode=0700 tmpfs "$T/state" 2>"$T/mount.err" ||
    skip_test "cannot mount a tmpfs here ($(cat "$T/mount.err"))"

LINES=30001
# The output comes in two parts, the second once the head has taken the
# first: a report is always taken while the head holds nothing unsaved, and
# under load the agent read all 1.1 MB in one report after the worker had
# ended - taken whole, nothing held back, the job SUCCEEDED at once. The head
# holds some 970 KB after the first 25,000 lines; the second part (140 KB)
# cannot all fit under the 1 MiB bound, however the agent cuts it.
SPLIT=25000
BOUND_MB=16 # over the baseline: 1 MiB of held output, the rest is slack
# Under AddressSanitizer freed memory waits in a quarantine (256 MiB by
# default) before it is reused: keep it small so RSS shows the head's own use.
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}quarantine_size_mb=4"
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$HEAD_PID/status"; }

start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50 --max-log-memory-bytes 1048576
start_node na 1xH100:80GB --stop-grace-ms 1000
wait_for 10 "node ALIVE" nodes_alive 1
base=$(rss_kb)

printf 'name: chatty\ncluster: {nodes: [1]}\ngroups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sh, -c, %s]}]\n' \
    "'while [ ! -f $T/go ]; do sleep 0.1; done; i=1; while [ \$i -le $LINES ]; do echo \"step log line number \$i\"; [ \$i != $SPLIT ] || while [ ! -f $T/go2 ]; do sleep 0.1; done; i=\$((i+1)); done'" >"$T/chatty.yaml"

id=$(submit "$T/chatty.yaml")
wait_for 15 "job $id RUNNING" is_job_state "$id" RUNNING
# Fill every free block; removing the filler gives the space back.
dd if=/dev/zero of="$T/state/filler" bs=64k 2>/dev/null || true
sync
touch "$T/go"
wait_for 30 "the head to take the first $SPLIT lines (troupe logs)" logs_grep "$id" "step log line number $SPLIT\$"
touch "$T/go2"
peak=$base
end=$(( $(date +%s) + 45 ))
while [ "$(date +%s)" -lt "$end" ]; do
    r=$(rss_kb); [ "$r" -le "$peak" ] || peak=$r
    [ $((peak - base)) -le $((BOUND_MB * 1024)) ] ||
        fail "head RSS grew by $(((peak - base) / 1024)) MiB (from $((base / 1024)) MiB) within 45 s of a full disk; bound ${BOUND_MB} MiB"
    sleep 0.5
done
grep -q "job output held back" "$T/head.log" || fail "the head never held output back (max_log_memory_bytes)"
is_job_state "$id" RUNNING || fail "job $id is $(job_state "$id") while its last output is held back"
pass "disk full for 45 s: head RSS $((base / 1024)) MiB -> peak $((peak / 1024)) MiB (bound +${BOUND_MB} MiB)"
grep -q "step log line" "$T/node-na.log" && fail "the worker's output went to the agent's log" || true

rm -f "$T/state/filler"
wait_for 60 "job $id SUCCEEDED once the disk has room" is_job_state "$id" SUCCEEDED
cli logs "$id" >"$T/got.log" || fail "troupe logs $id failed"
grep -v '^\[troupe\]' "$T/got.log" >"$T/got.lines" || true
for i in $(seq 1 $LINES); do echo "[job$id-g-0] step log line number $i"; done >"$T/want.lines"
if ! cmp -s "$T/want.lines" "$T/got.lines"; then
    fail "troupe logs has $(wc -l <"$T/got.lines") lines for $LINES written ($(sort "$T/got.lines" | uniq -d | wc -l) duplicated); first difference: $(diff "$T/want.lines" "$T/got.lines" | head -5 | tr '\n' '|')"
fi
pass "after space returned: $LINES lines, each once, in order; head RSS now $(($(rss_kb) / 1024)) MiB"
