#!/usr/bin/env bash
# One head per state dir: a second head on the same dir is refused at start,
# naming the first one's pid, with a non-zero exit; the lock goes with the
# process (kill -9 included). Ids never go backwards: a 0-byte or deleted
# head.db beside an old logs/ directory never shows an old job's log under a
# new job's id. (Before the lock, both heads served and handed out the same ids.)
source "$(dirname "$0")/../lib.sh"
start_head
start_node n1 2 --stop-grace-ms 1000
wait_for 10 "node ALIVE" nodes_alive 1

# --- a second head on the same state dir --------------------------------
PORT2=$(free_port)
rc=0
timeout 10 "$HEAD_BIN" --listen "tcp://127.0.0.1:$PORT2" --state-dir "$T/state" >"$T/second.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "second head on the same state dir: exit $rc (want a refusal): $(cat "$T/second.log")"
grep -q "pid $HEAD_PID" "$T/second.log" || fail "the refusal should name the first head's pid $HEAD_PID: $(cat "$T/second.log")"
grep -q "in use by another troupe-head" "$T/second.log" || fail "unclear refusal: $(cat "$T/second.log")"
! (exec 3<>/dev/tcp/127.0.0.1/$PORT2) 2>/dev/null || fail "the refused head still listens on $PORT2"
cli status >/dev/null || fail "the first head stopped answering"
pass "second head refused (exit $rc): $(cat "$T/second.log")"

# --- a removed head.lock does not let a second head in -------------------
# The lock is on the state dir itself (an old head locked the file head.lock:
# `rm head.lock` let a second head create and lock a new one, and both handed
# out job id 1). Re-plant: flock a file in the dir instead of the dir.
rm -f "$T/state/head.lock"
rc=0
timeout 10 "$HEAD_BIN" --listen "tcp://127.0.0.1:$PORT2" --state-dir "$T/state" >"$T/third.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "second head after rm head.lock: exit $rc (want a refusal): $(cat "$T/third.log")"
grep -q "in use by another troupe-head" "$T/third.log" || fail "unclear refusal after rm head.lock: $(cat "$T/third.log")"
! (exec 3<>/dev/tcp/127.0.0.1/$PORT2) 2>/dev/null || fail "the second head listens on $PORT2 after rm head.lock"
cli status >/dev/null || fail "the first head stopped answering"
pass "rm head.lock: a second head is still refused (exit $rc)"

# --- old logs must not reappear under a new job with the same id --------
cat >"$T/say.yaml" <<YAML
name: say
cluster: {nodes: [1]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sh, -c, 'echo "\$WORDS from job \$TROUPE_JOB"']}]
YAML
say() { # WORDS: submit, wait, print the id
    sed "s/^groups:/env: {WORDS: $1}\ngroups:/" "$T/say.yaml" >"$T/say-$1.yaml"
    local id; id=$(submit "$T/say-$1.yaml") || fail "submit: $id"
    [ -n "$id" ] || fail "submit printed no job id"
    wait_for 15 "job $id SUCCEEDED" is_job_state "$id" SUCCEEDED
    wait_for 5 "job $id's log line" bash -c "'$CLI_BIN' logs $id | grep -q '$1'"
    echo "$id"
}
old1=$(say OLDSECRET1)
old2=$(say OLDSECRET2)
# The head is killed; its lock dies with it.
stop_pid -9 "$HEAD_PID"
: >"$T/state/head.db"; rm -f "$T/state/head.db-wal" "$T/state/head.db-shm"
start_head
wait_for 10 "node n1 registers again (ALIVE)" is_state n1 ALIVE
pass "a head restarted after kill -9 takes the lock over"
new=$(say FRESH)
[ "$new" -gt "$old2" ] || fail "a fresh head.db beside old logs reused job id $new (old jobs $old1, $old2)"
logs_grep "$new" OLDSECRET && fail "job $new shows an old job's log: $(cli logs "$new")"
grep -q "found in an old log file" "$T/head.log" || fail "the head should say why the counter moved"
pass "0-byte head.db: new job id $new (old $old1, $old2), its log is its own"

# The same with head.db gone altogether, after a clean SIGTERM.
stop_pid -TERM "$HEAD_PID"
rm -f "$T/state/head.db" "$T/state/head.db-wal" "$T/state/head.db-shm"
start_head
wait_for 10 "node n1 registers again (ALIVE)" is_state n1 ALIVE
new2=$(say FRESHER)
[ "$new2" -gt "$new" ] || fail "a deleted head.db reused job id $new2 (old jobs up to $new)"
cli logs "$new2" | grep_all -E "OLDSECRET|FRESH from" && fail "job $new2 shows an old job's log: $(cli logs "$new2")"
pass "deleted head.db: new job id $new2, its log is its own"

# The counter row behind the stored records (an old backup of it, a hand
# edit): new ids still start past the largest stored job and node.
if command -v sqlite3 >/dev/null; then
    stop_pid -TERM "$HEAD_PID"
    rm -rf "$T/state/logs" # only the table may tell now
    sqlite3 "$T/state/head.db" "UPDATE ids SET next = 1;"
    start_head
    wait_for 10 "node n1 registers again (ALIVE)" is_state n1 ALIVE
    new3=$(say NEWEST)
    [ "$new3" -gt "$new2" ] || fail "a counter behind the jobs table reused job id $new3 (stored up to $new2)"
    grep -q "found in the jobs table" "$T/head.log" || fail "the head should say why the counter moved"
    pass "counter behind the table: new job id $new3 (stored up to $new2)"
else
    skip_part "stored-counter case: the sqlite3 CLI is not installed (Debian package sqlite3; scripts/setup.sh installs it)"
fi
