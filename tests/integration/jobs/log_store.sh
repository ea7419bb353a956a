#!/usr/bin/env bash
# The head's log store: bounded per job with a marker where it cut; file I/O
# never blocks the head (the job log was once opened and written inside
# the RPC callback under the head's lock, so a stuck file stalled every call).
source "$(dirname "$0")/../lib.sh"
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50 --max-job-log-bytes 8192
start_node na 2xH100:80GB --stop-grace-ms 1000
wait_for 10 "1 node ALIVE" nodes_alive 1

# 1. A job that writes far more than the bound and then fails: the log is cut
# at a marker, the middle is left out (counted), and the job's last lines -
# its Traceback - are kept after a second marker (a job's final
# Traceback is what its user reads first). Bound 8192: cut before 8192 - 2048 (tail window, a
# quarter) - 2 x 512 (markers); the tail window keeps the last <= 2048 bytes.
cat >"$T/big.yaml" <<YAML
name: big
cluster: {nodes: [2]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sh, -c, 'seq 1 2000 | sed "s/^/line /"; echo "Traceback (most recent call last):"; echo "ValueError: boom"; exit 3']}]
YAML
rc=0
timeout 60 "$CLI_BIN" submit "$T/big.yaml" >"$T/out" 2>"$T/err" || rc=$?
[ "$rc" = 1 ] || fail "big job: submit exited $rc, want 1 (the job fails): $(cat "$T/err")"
id=$(head -1 "$T/out")
[ "$(job_state "$id")" = FAILED ] || fail "job $id is $(job_state "$id"), want FAILED"
timeout 30 "$CLI_BIN" logs "$id" >"$T/big.log" || fail "troupe logs $id failed"
size=$(stat -c %s "$T/state/logs/job-$id.log")
[ "$size" -le 8192 ] || fail "job log is $size bytes, bound 8192"
cmp -s "$T/big.log" "$T/state/logs/job-$id.log" || fail "troupe logs differs from the head's file"
w="job$id-g-0"
cutl=$(grep -n '^\[troupe\] log cut at ' "$T/big.log" | cut -d: -f1 || true)
resl=$(grep -n '^\[troupe\] log resumes: ' "$T/big.log" | cut -d: -f1 || true)
[ -n "$cutl" ] && [ -n "$resl" ] && [ "$(grep -c '^\[troupe\]' "$T/big.log")" = 2 ] ||
    fail "want one cut marker and one resume marker: $(grep '^\[troupe\]' "$T/big.log")"
sed -n "${cutl}p" "$T/big.log" | grep_all '^\[troupe\] log cut at [0-9]* bytes (head max_job_log_bytes=8192): the output after this is left out, but for the job.s last 2048 bytes' ||
    fail "cut marker: $(sed -n "${cutl}p" "$T/big.log")"
k=$((cutl - 1))
[ "$k" -gt 100 ] || fail "only $k lines before the cut"
seq 1 "$k" | sed "s/^/[$w] line /" | cmp -s - <(head -n "$k" "$T/big.log") || fail "lines before the cut altered"
# After the resume marker: lines m..2000 in order, then the Traceback, nothing else.
sed -n "$((resl + 1)),\$p" "$T/big.log" >"$T/tail.log"
m=$(head -1 "$T/tail.log" | sed -n "s/^\[$w\] line \([0-9]*\)$/\1/p" || true)
[ -n "$m" ] && [ "$m" -gt "$k" ] || fail "tail does not start with a line of the job: $(head -1 "$T/tail.log")"
{ seq "$m" 2000 | sed "s/^/[$w] line /"; echo "[$w] Traceback (most recent call last):"; echo "[$w] ValueError: boom"; } |
    cmp -s - "$T/tail.log" || fail "tail after the resume marker is not lines $m..2000 + the Traceback: $(head -3 "$T/tail.log")"
tailb=$(stat -c %s "$T/tail.log")
[ "$tailb" -le 2048 ] && [ "$tailb" -gt 1500 ] || fail "tail is $tailb bytes, window 2048"
# The marker counts exactly the bytes left out between the two markers.
gone=$(seq $((k + 1)) $((m - 1)) | sed "s/^/[$w] line /" | wc -c)
sed -n "${resl}p" "$T/big.log" | grep_all -x "\[troupe\] log resumes: $gone bytes of output were left out here; the job's last $tailb bytes follow" ||
    fail "resume marker, want $gone bytes left out and $tailb kept: $(sed -n "${resl}p" "$T/big.log")"
grep -q "job=$id log cut at" "$T/head.log" || fail "the head did not log the cut"
pass "2000 lines + a Traceback into a bound of 8192 bytes ($size kept): lines 1..$k, cut marker, $gone bytes left out, lines $m..2000 and the Traceback"

# 2. The next job's log file is a FIFO nobody reads: opening it blocks. The
# head must keep answering, and serve the job's output from memory.
next=$((id + 1))
mkfifo "$T/state/logs/job-$next.log"
cat >"$T/hello.yaml" <<YAML
name: hello
cluster: {nodes: [2]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sh, -c, 'echo hello; sleep 30']}]
YAML
[ "$(submit "$T/hello.yaml")" = "$next" ] || fail "expected job id $next"
wait_for 10 "job $next output at the head" bash -c "timeout 3 '$CLI_BIN' logs $next | grep -qx '\[job$next-g-0\] hello'"
for i in 1 2 3; do
    timeout 3 "$CLI_BIN" status >/dev/null || fail "head stopped answering while a log file blocks (status #$i)"
    timeout 3 "$CLI_BIN" -o json jobs >/dev/null || fail "head stopped answering while a log file blocks (jobs #$i)"
done
pass "a log file that blocks on open stalls only the log writer: the head answers, output served from memory"

exec 3<>"$T/state/logs/job-$next.log" # a reader: the writer's open returns
wait_for 10 "the blocked write to complete" bash -c "timeout 1 dd bs=65536 count=1 status=none <&3 | grep -q hello"
rm -f "$T/state/logs/job-$next.log"
timeout 10 "$CLI_BIN" stop "$next" >/dev/null || fail "stop $next"
start=$(date +%s%N)
kill -TERM "$HEAD_PID"
wait_for 10 "troupe-head to exit after SIGTERM" bash -c "! kill -0 $HEAD_PID"
pass "head exits after SIGTERM in $(( ($(date +%s%N) - start) / 1000000 )) ms once the file unblocked"
