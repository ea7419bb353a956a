#!/usr/bin/env bash
# One CLI grammar: global options before or after the command, -o json on
# every command, documented exit codes, unknown ids and names refused.
source "$(dirname "$0")/../lib.sh"
start_head
start_node n1 8xH200:141GB --stop-grace-ms 2000
wait_for 10 "1 node ALIVE" nodes_alive 1

# expect RC CMD...: run CMD (stdout to $T/out, stderr to $T/err), check its exit status.
expect() {
    local want=$1; shift
    set +e; "$@" >"$T/out" 2>"$T/err"; local rc=$?; set -e
    [ "$rc" = "$want" ] || fail "'$*' exited $rc, want $want; stderr: $(cat "$T/err")"
}
# json CMD...: run CMD, which must succeed and print valid JSON on stdout.
json() { expect 0 "$@"; jq -e . "$T/out" >/dev/null || fail "'$*' printed no JSON: $(cat "$T/out")"; }

# Global options before or after the command, in both spellings.
for form in "-o json nodes" "nodes -o json" "nodes --format json" "nodes --format=json" "nodes -ojson" \
    "--head $HEAD nodes -o json" "nodes -o json --head $HEAD" "nodes --alive -o json --timeout 5000"; do
    json cli $form
    [ "$(jq .count "$T/out")" = 1 ] || fail "'troupe $form': $(cat "$T/out")"
done
expect 0 env -u TROUPE_HEAD "$CLI_BIN" nodes --head "$HEAD"
expect 1 env -u TROUPE_HEAD "$CLI_BIN" nodes --head tcp://127.0.0.1:1
pass "global options accepted before or after the command"

# Simulated GPUs are marked; status counts jobs by state.
expect 0 cli nodes
grep -q "H200 141GB (sim)" "$T/out" || fail "simulated GPUs not marked: $(cat "$T/out")"
json cli status -o json
jq -e '.jobs.pending == 0 and .jobs.succeeded == 0 and .nodes.alive == 1' "$T/out" >/dev/null || fail "status: $(cat "$T/out")"

cat >"$T/ok.yaml" <<YAML
name: ok
cluster: {nodes: [1]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sh, -c, 'echo hello from \$TROUPE_WORKER']}]
YAML
cat >"$T/bad.yaml" <<YAML
name: bad
cluster: {nodes: [1]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sh, -c, 'exit 3']}]
YAML
cat >"$T/sleep.yaml" <<YAML
name: sleeper
cluster: {nodes: [2]}
groups: [{name: g, workers: 2, resources: {gpu: 1}, command: [sleep, '300']}]
YAML
# Ignores SIGTERM (sleep inherits that), so stopping it takes the 2 s grace.
cat >"$T/stubborn.yaml" <<YAML
name: stubborn
cluster: {nodes: [2]}
groups: [{name: g, workers: 2, resources: {gpu: 1}, command: [sh, -c, 'trap "" TERM; sleep 300']}]
YAML

# submit: JSON lines (id first, final job last); exit 0 on SUCCEEDED, 1 on FAILED.
expect 0 cli submit "$T/ok.yaml" -o json
ok=$(head -1 "$T/out" | jq -r .job_id)
tail -1 "$T/out" | jq -e '.state == "SUCCEEDED"' >/dev/null || fail "submit -o json last line: $(cat "$T/out")"
jq -se 'map(select(.text)) | map(.text) | add | test("hello from job[0-9]+-g-0")' "$T/out" >/dev/null ||
    fail "submit -o json carries no worker output: $(cat "$T/out")"
expect 1 cli -o json submit "$T/bad.yaml"
tail -1 "$T/out" | jq -e '.state == "FAILED"' >/dev/null || fail "failed job: $(cat "$T/out")"
json cli submit --no-wait "$T/ok.yaml" -o json
jq -e '.job_id > 0' "$T/out" >/dev/null || fail "submit --no-wait -o json: $(cat "$T/out")"
pass "submit: -o json lines, exit 0 on SUCCEEDED and 1 on FAILED"

json cli jobs -o json
jq -e '.count == 3' "$T/out" >/dev/null || fail "jobs -o json: $(cat "$T/out")"
json cli job "$ok" -o json
jq -e '.workers[0].name | test("-g-0$")' "$T/out" >/dev/null || fail "job -o json: $(cat "$T/out")"
json cli logs "$ok" -o json
jq -e '.text | test("hello from")' "$T/out" >/dev/null || fail "logs -o json: $(cat "$T/out")"
json cli ping -o json
json cli status -o json
jq -e '.jobs.succeeded == 2 and .jobs.failed == 1' "$T/out" >/dev/null || fail "status job counts: $(cat "$T/out")"
expect 0 cli status
grep -q "jobs .*2 succeeded, 1 failed" "$T/out" || fail "status table: $(cat "$T/out")"
pass "jobs, job, logs, ping, status honour -o json; status counts jobs by state"

# Unknown ids and names are errors (1) naming what exists; bad usage is 2.
expect 1 cli job 999999
grep -q "NOT_FOUND" "$T/err" || fail "job 999999: $(cat "$T/err")"
expect 1 cli logs 999999
expect 1 cli logs "$ok" --worker nosuch
grep -q "no worker 'nosuch'; its workers: job$ok-g-0" "$T/err" || fail "logs --worker nosuch: $(cat "$T/err")"
expect 1 cli logs "$ok" -f --worker nosuch
expect 1 cli stop 999999
expect 2 cli nosuchcommand
expect 2 cli jobs --nosuchflag
expect 2 cli job notanid
expect 2 cli -o yaml jobs
expect 2 cli jobs -o
expect 2 cli
expect 0 cli --help
grep -q "^Exit status:" "$T/out" || fail "--help lacks the exit codes"
expect 0 cli logs --help
grep -q "usage: troupe logs ID" "$T/out" || fail "logs --help: $(cat "$T/out")"
expect 0 cli help stop
pass "unknown ids, workers and commands are errors; usage errors exit 2"

# stop: progress with the right plural, -o json for one id.
sl=$(cli submit --no-wait "$T/stubborn.yaml")
wait_for 10 "sleepers RUNNING" bash -c "'$CLI_BIN' -o json job $sl | jq -e '[.workers[] | select(.state==\"RUNNING\")] | length == 2'"
json cli stop "$sl" -o json
jq -e '.jobs == [{"id":'"$sl"',"code":"OK","state":"STOPPED","message":""}]' "$T/out" >/dev/null ||
    fail "stop -o json: $(cat "$T/out")"
grep -qE "waiting for 2 workers to exit, SIGKILL in [12] s" "$T/err" || fail "stop progress: $(cat "$T/err")"
# The workers ignore SIGTERM: they ran until the SIGKILL, 2 s after the stop.
json cli job "$sl" -o json
jq -e '(.events[] | select(.kind == "STOPPED") | .ts_ms) as $s | all(.workers[]; .ended_ms - $s >= 1800)' \
    "$T/out" >/dev/null || fail "worker run time does not include the grace: $(cat "$T/out")"
expect 0 cli job "$sl"
grep -qE "^job$sl-g-0 .* [2-9]\.[0-9]s  " "$T/out" || fail "troupe job shows no run time with the grace: $(cat "$T/out")"
pass "stop with one id prints JSON, its progress with the SIGKILL countdown; run time includes the grace"

# Ctrl-C while following detaches with 130, the job keeps running.
# catches_sigint PID: the process has its SIGINT handler installed (SigCgt bit 2).
catches_sigint() { (( 0x$(awk '/^SigCgt:/ { print $2 }' "/proc/$1/status") & 2 )); }
sl=$(cli submit --no-wait "$T/sleep.yaml")
wait_for 10 "sleepers RUNNING" bash -c "'$CLI_BIN' -o json job $sl | jq -e '[.workers[] | select(.state==\"RUNNING\")] | length == 2'"
# stop follows too: a stubborn job (ignores SIGTERM) keeps it waiting for the
# agent's 2 s grace, and Ctrl-C comes meanwhile.
st=$(cli submit --no-wait "$T/stubborn.yaml")
wait_for 10 "stubborn RUNNING" bash -c "'$CLI_BIN' -o json job $st | jq -e '[.workers[] | select(.state==\"RUNNING\")] | length == 2'"
for cmd in "logs $sl -f" "submit $T/sleep.yaml" "metrics $sl -f" "stop $st"; do
    "$CLI_BIN" $cmd >"$T/f.out" 2>"$T/f.err" &
    pid=$!
    wait_for 10 "'troupe $cmd' to catch SIGINT" catches_sigint $pid
    stop_pid -INT "$pid"
    rc=$STOP_RC
    [ $rc = 130 ] || fail "'troupe $cmd' after Ctrl-C exited $rc, want 130: $(cat "$T/f.err")"
    grep -q "detached" "$T/f.err" || fail "'troupe $cmd' did not say it detached: $(cat "$T/f.err")"
done
is_job_state "$sl" RUNNING || fail "job $sl did not keep running after the detach"
pass "Ctrl-C while following (logs -f, submit, metrics -f, stop) exits 130, says it detached, leaves the job running"

# Completion comes from the same table as --help.
expect 0 cli completion bash
bash -n "$T/out" || fail "completion script is not valid bash"
for c in $("$CLI_BIN" --help | sed -n '/^Commands:/,/^$/p' | awk 'NR > 1 && NF { print $1 }' | sort -u); do
    grep -q "^        $c)" "$T/out" || fail "completion lacks command $c"
done
words=$(bash -c "source '$T/out'; COMP_WORDS=(troupe lo); COMP_CWORD=1; _troupe; echo \${COMPREPLY[*]}")
[ "$words" = logs ] || fail "completing 'troupe lo': '$words'"
words=$(bash -c "source '$T/out'; COMP_WORDS=(troupe stop ''); COMP_CWORD=2; _troupe '$CLI_BIN'; echo \${COMPREPLY[*]}")
grep -qw "$sl" <<<"$words" || fail "completing job ids for stop: '$words'"
pass "bash completion generated from the command table"
