#!/usr/bin/env bash
# Batches: several jobs submitted or stopped in one call (SubmitJobs /
# StopJobs through libtroupe and the CLI), each item with its own outcome.
source "$(dirname "$0")/../lib.sh"
start_cluster
mk() { # NAME GPUS COMMAND...
    local n=$1 g=$2; shift 2
    printf 'name: %s\ncluster: {nodes: [%s]}\ngroups: [{name: g, workers: 1, resources: {gpu: %s}, command: [%s]}]\n' \
        "$n" "$g" "$g" "$*" >"$T/$n.yaml"
}
mk ok1 1 'sh, -c, "echo one"'
mk ok2 2 'sh, -c, "echo two"'
mk huge 32 'true'
printf 'name: broken\ncluster: {nodes: [4]}\ngroups:\n  - name: g\n    workers: 1\n    resources: {gpu: -1}\n    command: [true]\n' >"$T/broken.yaml"

# A bad file anywhere: nothing is submitted, the error names file:line:col.
set +e; out=$(cli submit "$T/ok1.yaml" "$T/broken.yaml" 2>&1); rc=$?; set -e
[ $rc = 1 ] && grep -qE "broken.yaml:6:[0-9]+" <<<"$out" && grep -q "nothing submitted" <<<"$out" || fail "bad file: rc=$rc $out"
[ "$(cli -o json jobs | jqr .count)" = 0 ] || fail "a job was submitted although one file was bad"
pass "one bad file refuses the whole batch before anything is sent: $(head -1 <<<"$out")"

# Two good jobs run to SUCCEEDED; the CLI waits for both.
set +e; out=$(timeout 60 "$CLI_BIN" submit "$T/ok1.yaml" "$T/ok2.yaml" 2>"$T/sub.err"); rc=$?; set -e
[ $rc = 0 ] || fail "batch of two good jobs: rc=$rc $(cat "$T/sub.err")"
[ "$(wc -l <<<"$out")" = 2 ] || fail "expected two ids, got: $out"
[ "$(grep -c SUCCEEDED "$T/sub.err")" = 2 ] || fail "expected two SUCCEEDED lines: $(cat "$T/sub.err")"
pass "batch of 2 submitted in one call, both SUCCEEDED (ids $(tr '\n' ' ' <<<"$out"))"

# An infeasible item is refused with the numbers; the others are placed.
set +e; js=$(cli -o json submit --no-wait "$T/ok1.yaml" "$T/huge.yaml" "$T/ok2.yaml" 2>"$T/sub.err"); rc=$?; set -e
[ $rc = 1 ] || fail "a refused item should make the exit status 1 (rc=$rc)"
[ "$(jqr '.jobs | length' <<<"$js")" = 3 ] || fail "expected 3 items: $js"
[ "$(jqr '.jobs[1].code' <<<"$js")" = FAILED_PRECONDITION ] &&
    [ "$(jqr '.jobs[1].message' <<<"$js")" = "group g needs 1 node with 32 free GPUs; largest node has 16" ] ||
    fail "huge item: $js"
[ "$(jqr '[.jobs[0,2].code] | unique | .[0]' <<<"$js")" = OK ] || fail "good items: $js"
grep -q "huge.yaml refused: FAILED_PRECONDITION" "$T/sub.err" || fail "no refusal line: $(cat "$T/sub.err")"
pass "mixed batch: $(jqr '.jobs[1].message' <<<"$js")"

# Stop several at once; an unknown id is reported, the others stop.
mk s1 4 'sleep, "60"'
mk s2 8 'sleep, "60"'
ids=$(cli submit --no-wait "$T/s1.yaml" "$T/s2.yaml")
a=$(sed -n 1p <<<"$ids"); b=$(sed -n 2p <<<"$ids")
wait_for 10 "both sleepers RUNNING" sh -c "[ \"\$($CLI_BIN -o json job $a | jq -r '.workers[0].state')\" = RUNNING ] && [ \"\$($CLI_BIN -o json job $b | jq -r '.workers[0].state')\" = RUNNING ]"
pids="$(cli -o json job "$a" | jqr '.workers[0].pid') $(cli -o json job "$b" | jqr '.workers[0].pid')"
set +e; out=$(timeout 30 "$CLI_BIN" stop "$a" 999999 "$b" 2>&1); rc=$?; set -e
[ $rc = 1 ] && grep -q "job 999999: NOT_FOUND" <<<"$out" || fail "unknown id in stop batch: rc=$rc $out"
[ "$(grep -c "no worker left running" <<<"$out")" = 2 ] || fail "both jobs should end: $out"
for id in "$a" "$b"; do [ "$(job_state "$id")" = STOPPED ] || fail "job $id not STOPPED"; done
for p in $pids; do ! alive "$p" || fail "worker pid $p still alive"; done
pass "stop of 3 ids in one call: 2 STOPPED with no process left, 999999 NOT_FOUND"

# Too many items is a clear usage error; the head keeps serving.
set +e; out=$(cli stop $(seq 1 4097) 2>&1); rc=$?; set -e
[ $rc = 2 ] && grep -q usage <<<"$out" || fail "4097 ids: rc=$rc $out"
cli status >/dev/null || fail "head stopped answering"
pass "4,097 ids refused as bad usage; head still serving"
