#!/usr/bin/env bash
# lib.sh's cleanup kills what the test started and nothing else. A test
# (run here as a child script, itself on lib.sh) records the pid of a process
# it did not start - as when a pid it recorded was reused by another program
# after its own process ended - and leaves behind a daemon in a session of
# its own and the child of a `timeout` it started in the background (both
# outside its process tree once their parents are gone). At its end the
# stranger lives; the daemon, the timeout's child and $T are gone.
source "$(dirname "$0")/../lib.sh"
LIB=$(cd "$(dirname "$0")/.." && pwd)/lib.sh
gone() { ! alive "$1"; }

# A process of nobody's test: no TROUPE_TEST_TAG in its environment.
env -u TROUPE_TEST_TAG sleep 300 &
stranger=$!
trap 'kill "$stranger" 2>/dev/null; cleanup' EXIT # this test's own cleanup spares it too
cat >"$T/inner.sh" <<EOF2
source "$LIB"
echo "\$T" >"$T/inner.T"
PIDS+=("$stranger")                                      # a recorded pid that is not the test's own
(setsid sleep 301 & echo \$! >"$T/daemon.pid")           # an orphan in a session of its own
timeout 300 sleep 302 &                                  # a child of the test's child
wait_for 5 "the timeout's child" pgrep -P \$! -x sleep
pgrep -P \$! -x sleep >"$T/grandchild.pid"
pass "the inner test's checks pass"
EOF2
# Its output to a file: a process it left behind would hold a pipe open.
bash "$T/inner.sh" >"$T/inner.out" 2>&1 || fail "the inner test failed: $(cat "$T/inner.out")"
out=$(cat "$T/inner.out")
daemon=$(cat "$T/daemon.pid") grandchild=$(cat "$T/grandchild.pid")
[ -n "$daemon" ] && [ -n "$grandchild" ] || fail "the inner test did not start its processes: $out"
alive "$stranger" || fail "cleanup killed pid $stranger, which the test recorded but did not start"
wait_for 5 "the orphaned daemon $daemon killed by the cleanup" gone "$daemon"
wait_for 5 "the timeout's child $grandchild killed by the cleanup" gone "$grandchild"
[ ! -e "$(cat "$T/inner.T")" ] || fail "the inner test's dir $(cat "$T/inner.T") is still there"
pass "cleanup spared a recorded pid it did not start ($stranger), killed the orphaned daemon ($daemon) and the timeout's child ($grandchild), removed its dir"
