#!/usr/bin/env bash
# ingest_nice reaches the report writers: with --ingest-nice 7 the threads
# that write and acknowledge metrics and traces (two per service) run at the
# head's nice + 7, and every other thread of the head (RPC, committer,
# reaper, the main thread) keeps the head's own.
source "$(dirname "$0")/../lib.sh"
base=$(nice)
if [ "$base" -gt 12 ]; then
    skip_test "the test runs at nice $base: no room to raise the head's threads by 7"
fi
want=$((base + 7))
start_head --ingest-nice 7 --http off
# thread_nices: the nice of each thread of the head, one a line (field 19 of
# /proc/PID/task/TID/stat; the comm before it may hold spaces, so count after
# its closing parenthesis).
thread_nices() {
    local f
    for f in /proc/"$HEAD_PID"/task/*/stat; do
        sed 's/^.*) //' "$f" | awk '{print $17}'
    done
}
count_at() { [ "$(thread_nices | grep -cx -- "$1")" = "$2" ]; }
wait_for 10 "4 threads of the head at nice $want (metrics and trace: writer, answerer)" count_at "$want" 4
total=$(thread_nices | wc -l)
others=$(thread_nices | grep -cx -- "$base" || true)
[ "$others" = $((total - 4)) ] || fail "of $total threads, $others at the head's nice $base (want $((total - 4))): $(thread_nices | tr '\n' ' ')"
main=$(sed 's/^.*) //' /proc/"$HEAD_PID"/stat | awk '{print $17}')
[ "$main" = "$base" ] || fail "the head's main thread is at nice $main, not $base"
pass "--ingest-nice 7: 4 report threads at nice $want, the other $((total - 4)) at $base"

# Out of range or not a number: refused at start, naming the setting.
for bad in -1 20 high; do
    rc=0; out=$("$HEAD_BIN" --listen "tcp://127.0.0.1:$(free_port)" --state-dir "$T/bad" --ingest-nice "$bad" 2>&1) || rc=$?
    [ $rc = 2 ] && grep -q "ingest_nice" <<<"$out" || fail "--ingest-nice $bad: rc=$rc $out"
done
pass "a bad --ingest-nice exits 2 naming the setting: $out"
