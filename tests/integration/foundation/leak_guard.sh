#!/usr/bin/env bash
# The guard in lib.sh's cleanup must itself work: a test that leaves a
# process of its cluster behind (one carrying its TROUPE_HEAD, in a session of
# its own) fails, names that process, and still cleans up — even though every
# assertion of that test passed. (A worker's own setsid'd children no longer
# leak: its supervisor is their subreaper and kills them, nodes/descendants.sh;
# so the test script makes the leak itself, with a worker's environment.)
source "$(dirname "$0")/../lib.sh"
cat >"$T/j.yaml" <<YAML
name: leaky
cluster: {nodes: [1]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sleep, '300']}]
YAML
cat >"$T/leaky.sh" <<EOF2
source "$(cd "$(dirname "$0")/.." && pwd)/lib.sh"
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50
start_node lk 1
wait_for 10 "lk ALIVE" nodes_alive 1
submit "$T/j.yaml" >/dev/null
(TROUPE_WORKER=job1-g-0 setsid sleep 307 & echo \$! >"$T/leaked.pid")   # looks like a worker's, is not a job of the script
wait_for 10 "the leaked pid written" test -s "$T/leaked.pid"
pass "the leaky test's own checks pass"
EOF2
set +e
out=$(bash "$T/leaky.sh" 2>&1); rc=$?
set -e
leaked=$(cat "$T/leaked.pid" 2>/dev/null || true)
[ -n "$leaked" ] || fail "the leaky worker never ran: $out"
[ $rc = 1 ] || fail "a test that leaked a process exited $rc: $out"
grep -q "^ok: the leaky test's own checks pass" <<<"$out" || fail "the leaky test did not get to its checks: $out"
grep -q "^FAIL: worker processes outlived their agents (leaked):" <<<"$out" &&
    grep -q "^  pid $leaked: sleep 307" <<<"$out" || fail "the leak was not named: $out"
alive "$leaked" && { kill -9 "$leaked"; fail "the leaked process $leaked was not killed by cleanup"; }
pass "a leaked worker process fails the test, is named (pid $leaked: sleep 307) and killed"
