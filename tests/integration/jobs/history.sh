#!/usr/bin/env bash
# Bounded history: `troupe jobs` pages (limit + cursor, newest first,
# filters by state and name) and a page never exceeds the head's frame (it
# failed for good past ~25k jobs); finished jobs are kept by keep_jobs and
# `troupe delete`, their records, events and logs removed together.
source "$(dirname "$0")/../lib.sh"
# A small frame, so that a page of big specs must be cut to fit.
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50 --max-frame-bytes 65536 --keep-jobs 5 --keep-days 0
start_node na 1xH100:80GB --stop-grace-ms 1000
wait_for 10 "1 node ALIVE" nodes_alive 1
pad=$(head -c 3000 /dev/zero | tr '\0' x)
cat >"$T/hold.yaml" <<YAML
name: hold
cluster: {nodes: [1]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sleep, "60"]}]
YAML
cat >"$T/quick.yaml" <<YAML
name: quick
cluster: {nodes: [1]}
env: {PAD: "$pad"}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sh, -c, 'echo done']}]
YAML
hold=$(submit "$T/hold.yaml")
wait_for 10 "job $hold RUNNING" is_job_state "$hold" RUNNING
files=(); for i in $(seq 1 10); do files+=("$T/quick.yaml"); done
for b in 1 2 3; do cli submit --no-wait "${files[@]}" >>"$T/ids" || fail "batch submit $b"; done
[ "$(wc -l <"$T/ids")" = 30 ] || fail "30 ids expected: $(cat "$T/ids")"
last=$(tail -1 "$T/ids")

# Pages: newest first, 10 at a time, every job once.
p=$(cli -o json jobs --limit 10)
[ "$(jqr '[.jobs[].id] | map(tostring) | join(",")' <<<"$p")" = "$(seq "$last" -1 $((last - 9)) | paste -sd,)" ] ||
    fail "first page: $p"
[ "$(jqr .next_cursor <<<"$p")" = $((last - 9)) ] || fail "next_cursor: $(jqr .next_cursor <<<"$p")"
seen=(); cursor=0; pages=0
while :; do
    p=$(cli -o json jobs --limit 1000 --cursor "$cursor")
    seen+=($(jqr '.jobs[].id' <<<"$p"))
    pages=$((pages + 1)); cursor=$(jqr .next_cursor <<<"$p")
    [ "$cursor" = 0 ] && break
    [ "$pages" -lt 100 ] || fail "pages never end"
done
[ "${seen[*]}" = "$(seq "$last" -1 1 | paste -sd' ')" ] || fail "walk gave ${seen[*]}"
[ "$pages" -gt 1 ] || fail "31 jobs of ~3 KB fit one 64 KiB frame? pages=$pages"
pass "31 jobs in $pages pages of at most 1000 that each fit a 64 KiB frame, newest first, each once"
[ "$(cli -o json jobs --oldest-first --limit 3 | jqr '[.jobs[].id] | map(tostring) | join(",")')" = "1,2,3" ] ||
    fail "--oldest-first"
[ "$(cli -o json jobs --state pending --limit 5 | jqr '[.jobs[] | select(.state == "PENDING") | .id] | length')" = 5 ] ||
    fail "--state pending: $(cli -o json jobs --state pending --limit 5)"
[ "$(cli -o json jobs --state RUNNING,failed | jqr '[.jobs[].id] | map(tostring) | join(",")')" = "$hold" ] ||
    fail "--state RUNNING,failed"
[ "$(cli -o json jobs --name 'ho*' | jqr '[.jobs[].id] | map(tostring) | join(",")')" = "$hold" ] || fail "--name"
[ "$(cli -o json jobs --all | jqr .count)" = 31 ] || fail "--all"
set +e; cli jobs --limit 0 2>"$T/err"; rc=$?; set -e
[ $rc = 2 ] && grep -q "1 to 1000" "$T/err" || fail "--limit 0: rc=$rc $(cat "$T/err")"
pass "--oldest-first, --state, --name, --all, a bad --limit refused"

# delete: refused while active, then retention keeps the newest 5 finished.
set +e; cli delete "$hold" >"$T/out" 2>"$T/err"; rc=$?; set -e
[ $rc = 1 ] && grep -q "FAILED_PRECONDITION: job $hold is RUNNING; stop it first (troupe stop $hold), then delete it" "$T/err" ||
    fail "delete of a running job: rc=$rc $(cat "$T/err")"
pass "delete of a RUNNING job: FAILED_PRECONDITION, stop it first"
cli stop "$hold" >/dev/null 2>&1 || fail "stop $hold"
wait_for 60 "every job to finish" bash -c "[ \"\$('$CLI_BIN' -o json jobs --active | jq .count)\" = 0 ]"
wait_for 10 "retention to keep 5 jobs" bash -c "[ \"\$('$CLI_BIN' -o json jobs --all | jq .count)\" = 5 ]"
[ "$(cli -o json jobs --all --oldest-first | jqr '[.jobs[].id] | map(tostring) | join(",")')" = "$(seq $((last - 4)) "$last" | paste -sd,)" ] ||
    fail "kept: $(cli -o json jobs --all | jqr '[.jobs[].id]')"
for id in $(seq 1 $((last - 5))); do
    [ ! -e "$T/state/logs/job-$id.log" ] || fail "log of deleted job $id still on disk"
done
[ -s "$T/state/logs/job-$last.log" ] || fail "log of kept job $last missing"
grep -q "retention: deleted jobs=" "$T/head.log" || fail "retention not logged"
pass "keep_jobs=5: the newest 5 finished jobs kept, the others gone with their logs"

cli delete "$last" >"$T/out" || fail "delete $last"
[ "$(cat "$T/out")" = "deleted job $last" ] || fail "delete said: $(cat "$T/out")"
set +e; cli job "$last" 2>"$T/err"; rc=$?; set -e
[ $rc = 1 ] && grep -q "NOT_FOUND" "$T/err" || fail "deleted job still answers: $(cat "$T/err")"
set +e; cli -o json delete "$last" >"$T/out" 2>"$T/err"; rc=$?; set -e
[ $rc = 1 ] && grep -q "NOT_FOUND: no job $last" "$T/err" && [ "$(jqr '.deleted | length' "$T/out")" = 0 ] ||
    fail "second delete: rc=$rc $(cat "$T/err") $(cat "$T/out")"
wait_for 10 "log of job $last removed" bash -c "[ ! -e '$T/state/logs/job-$last.log' ]"
pass "troupe delete: gone from listings, get and disk; deleting again is NOT_FOUND"

# The store forgot them too: a restarted head shows the same 4 jobs.
stop_pid -TERM "$HEAD_PID"
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50 --keep-jobs 5 --keep-days 0
[ "$(cli -o json jobs --all --oldest-first | jqr '[.jobs[].id] | map(tostring) | join(",")')" = "$(seq $((last - 4)) $((last - 1)) | paste -sd,)" ] ||
    fail "after restart: $(cli -o json jobs --all | jqr '[.jobs[].id]')"
pass "after a head restart: the same 4 jobs (records deleted from the store)"
