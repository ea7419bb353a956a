#!/usr/bin/env bash
# lib.sh's watchdog ends a hung test with what it waited on, and no process
# of it survives, not even one outside its process tree: a test that hangs
# past TROUPE_TEST_DEADLINE_S fails (exit 1, "still running after") within
# seconds of its deadline, its orphaned daemon killed and its dir removed;
# and a test whose shell is killed from outside (no cleanup runs) is cleaned
# up by the watchdog within seconds. Deadlines are stretched by
# TROUPE_TEST_SLOWDOWN: wait_for 1 under a slowdown of 2 waits 2 s.
source "$(dirname "$0")/../lib.sh"
LIB=$(cd "$(dirname "$0")/.." && pwd)/lib.sh
ms() { echo $(( $(date +%s%N) / 1000000 )); }
gone() { ! alive "$1"; }

cat >"$T/hang.sh" <<EOF2
source "$LIB"
echo "\$T" >"$T/hang.T"
(setsid sleep 321 & echo \$! >"$T/hang.pid")
read -r _ <> <(:)   # hangs, holding no child of its own
EOF2
t0=$(ms)
set +e
TROUPE_TEST_DEADLINE_S=3 TROUPE_TEST_SLOWDOWN=1 bash "$T/hang.sh" >"$T/hang.out" 2>&1 # a file: see harness_cleanup.sh
rc=$?
out=$(cat "$T/hang.out")
set -e
took=$(( $(ms) - t0 ))
[ $rc = 1 ] || fail "a hung test exited $rc, not 1: $out"
grep -q "^FAIL: the test is still running after 3 s" <<<"$out" || fail "the watchdog did not say so: $out"
grep -q "sleep 321" <<<"$out" || fail "the watchdog did not list the test's processes: $out"
[ $took -lt $((3000 + 10000 * TROUPE_TEST_SLOWDOWN)) ] || fail "the hung test took $took ms to end (deadline 3 s)"
wait_for 5 "the hung test's daemon killed" gone "$(cat "$T/hang.pid")"
[ ! -e "$(cat "$T/hang.T")" ] || fail "the hung test left its dir"
pass "a hung test fails after its 3 s deadline ($took ms), naming its processes; its daemon is killed, its dir removed"

cat >"$T/killed.sh" <<EOF2
source "$LIB"
echo "\$T" >"$T/killed.T"
(setsid sleep 322 & echo \$! >"$T/killed.pid")
read -r _ <> <(:)
EOF2
TROUPE_TEST_DEADLINE_S=600 TROUPE_TEST_SLOWDOWN=1 bash "$T/killed.sh" >"$T/killed.out" 2>&1 &
shell=$!
wait_for 10 "the test to start its daemon" test -s "$T/killed.pid"
kill -9 "$shell" # not by stop_pid: the test's shell has a tag of its own
await_end 10 "the killed test's shell to end" "$shell"
wait_for 10 "the watchdog to kill the daemon of a test whose shell was killed" gone "$(cat "$T/killed.pid")"
wait_for 5 "the watchdog to remove the killed test's dir" test ! -e "$(cat "$T/killed.T")"
grep -q "the test's shell died without its cleanup" "$T/killed.out" || fail "the watchdog did not say why: $(cat "$T/killed.out")"
pass "a test killed from outside (kill -9 of its shell): the watchdog killed its daemon and removed its dir"

cat >"$T/slow.sh" <<EOF2
source "$LIB"
t0=\$(( \$(date +%s%N) / 1000000 ))
wait_for 1 "something that never happens" false || true
EOF2
t0=$(ms)
set +e
out=$(TROUPE_TEST_SLOWDOWN=2 bash "$T/slow.sh" 2>&1)
set -e
took=$(( $(ms) - t0 ))
grep -q "timed out after 2s waiting for: something that never happens (1s x slowdown 2)" <<<"$out" || fail "wait_for under slowdown 2: $out"
[ $took -ge 2000 ] || fail "wait_for 1 under slowdown 2 gave up after $took ms"
pass "wait_for 1 under TROUPE_TEST_SLOWDOWN=2 waited 2 s and said so"
