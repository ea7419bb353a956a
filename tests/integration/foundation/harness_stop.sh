#!/usr/bin/env bash
# lib.sh's stop_pid and await_end: every stop of a process has a deadline.
# stop_pid signals a process of the test and reaps it, giving its exit
# status; await_end gives the status of one that ends by itself. A process
# that ignores SIGTERM fails the test at the deadline (times the slowdown),
# named with its state, and is killed - not a bare `wait` that hangs until
# the watchdog, which names no culprit.
source "$(dirname "$0")/../lib.sh"
LIB=$(cd "$(dirname "$0")/.." && pwd)/lib.sh
gone() { ! alive "$1"; }
ms() { echo $(( $(date +%s%N) / 1000000 )); }

sleep 300 &
p=$!
stop_pid "$p"
gone "$p" || fail "stop_pid returned with pid $p alive"
[ "$STOP_RC" = 143 ] || fail "stop_pid: STOP_RC $STOP_RC for a sleep ended by SIGTERM, want 143"
sleep 300 &
p=$!
stop_pid -KILL "$p"
[ "$STOP_RC" = 137 ] || fail "stop_pid -KILL: STOP_RC $STOP_RC, want 137"
(sleep 0.3; exit 3) &
p=$!
await_end 10 "a subshell that exits 3" "$p"
[ "$END_RC" = 3 ] || fail "await_end: END_RC $END_RC, want 3"
pass "stop_pid reaps with the exit status (143 after SIGTERM, 137 after SIGKILL); await_end gives 3 for exit 3"

# A process that ignores SIGTERM, stopped with a 1 s deadline by a test of
# its own: that test fails within seconds, naming the process; it is killed.
cat >"$T/stubborn.sh" <<EOF2
source "$LIB"
bash -c 'trap "" TERM; echo \$\$ >"$T/stubborn.pid"; while :; do sleep 0.1; done' &
wait_for 5 "the stubborn process to start" test -s "$T/stubborn.pid"
stop_pid -t 1 "\$(cat "$T/stubborn.pid")"
pass "not reached: stop_pid returned"
EOF2
t0=$(ms)
set +e
TROUPE_TEST_SLOWDOWN=1 bash "$T/stubborn.sh" >"$T/stubborn.out" 2>&1 # a file: see harness_cleanup.sh
rc=$?
set -e
took=$(( $(ms) - t0 ))
out=$(cat "$T/stubborn.out")
stubborn=$(cat "$T/stubborn.pid")
[ $rc = 1 ] || fail "a test whose process ignored SIGTERM exited $rc, not 1: $out"
grep -q "^FAIL: timed out after 1s waiting for: $stubborn (bash) to end after SIGTERM (pids $stubborn still running; killed)" <<<"$out" ||
    fail "stop_pid did not name the process that did not stop: $out"
grep -q "still running: pid $stubborn: bash -c trap" <<<"$out" || fail "stop_pid did not show the command: $out"
grep -q "not reached" <<<"$out" && fail "stop_pid returned although the process did not stop: $out"
[ $took -lt 10000 ] || fail "the test took $took ms to fail (deadline 1 s)"
wait_for 5 "the stubborn process $stubborn killed" gone "$stubborn"
pass "a process ignoring SIGTERM fails the test after stop_pid's 1 s deadline ($took ms), named: $(grep '^FAIL' <<<"$out")"
