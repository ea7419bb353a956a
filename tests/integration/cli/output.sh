#!/usr/bin/env bash
# kubectl habits, one meaning each: -o is the output format on every command
# (a format a command does not print is an error naming the ones it does),
# --output FILE writes a file (troupe trace -o json never writes a file named
# json), -o wide adds columns to jobs and nodes, both have an AGE column,
# jobs --all stays newest first, a mistyped command, option or format gets a
# "did you mean", and troupe metrics --name says when a name matches nothing.
source "$(dirname "$0")/../lib.sh"
: "${MX_WORKER:?}"
start_head
start_node n1 8xH200:141GB
wait_for 10 "1 node ALIVE" nodes_alive 1

# expect RC CMD...: run CMD (stdout to $T/out, stderr to $T/err), check its exit status.
expect() {
    local want=$1; shift
    set +e; "$@" >"$T/out" 2>"$T/err"; local rc=$?; set -e
    [ "$rc" = "$want" ] || fail "'$*' exited $rc, want $want; stdout: $(head -c 400 "$T/out"); stderr: $(cat "$T/err")"
}
errs() { grep -qF -- "$1" "$T/err" || fail "stderr lacks '$1': $(cat "$T/err")"; }

cat >"$T/ok.yaml" <<YAML
name: ok
cluster: {nodes: [1]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [true]}]
YAML
cat >"$T/mx.yaml" <<YAML
name: mx
cluster: {nodes: [1]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [$MX_WORKER]}]
env: {MX_POINTS: "20", MX_EVERY_US: "1000", MX_NAMES: "loss,tokens_per_s"}
YAML
a=$(submit "$T/ok.yaml"); b=$(submit "$T/ok.yaml"); c=$(submit "$T/mx.yaml")
wait_for 30 "jobs $a $b $c SUCCEEDED" bash -c "[ \"\$('$CLI_BIN' -o json jobs --state SUCCEEDED | jq .count)\" = 3 ]"

# -o: the format everywhere; a format the command lacks is exit 2, naming what it has.
for cmd in "jobs" "nodes" "status" "job $a" "logs $a" "ping"; do
    expect 2 cli $cmd -o csv
    errs "no output format 'csv' here (it prints: table json"
done
expect 2 cli job "$a" -o wide
errs "(it prints: table json)"
expect 2 cli -o yaml jobs
errs "unknown output format 'yaml'"
expect 2 cli jobs -o jsn
errs "did you mean 'json'?"
expect 0 cli metrics "$c" -o csv
head -1 "$T/out" | grep -qx "id,worker,attempt,seq,step,name,value,ts_ms" || fail "metrics -o csv: $(head -2 "$T/out")"
expect 0 cli nodes --format json
jq -e '.count == 1' "$T/out" >/dev/null || fail "--format json: $(cat "$T/out")"
pass "-o is the format on every command; csv only where it exists (metrics), unknown formats exit 2 with a suggestion"

# troupe trace: -o json is the format (the trace is JSON), never a file name.
cd "$T"
expect 1 cli trace "$a" -o json
errs "has no trace yet"
[ ! -e "$T/json" ] || fail "troupe trace -o json wrote a file named json"
expect 2 cli trace "$a" -o table
errs "troupe trace: no output format 'table' here (it prints: json)"
expect 2 cli trace "$a" --output json
errs "--output FILE names a file; the output format is -o json"
[ ! -e "$T/json" ] || fail "--output json wrote a file named json"
expect 1 cli trace "$a" --output "$T/t.json"
[ ! -e "$T/t.json" ] || fail "no trace, yet --output left a file"
# --output FILE: what any command prints goes to the file.
expect 0 cli jobs -o json --output "$T/jobs.json"
[ ! -s "$T/out" ] && jq -e '.count == 3' "$T/jobs.json" >/dev/null || fail "--output: $(cat "$T/jobs.json")"
pass "trace -o json writes no file named json; --output json is refused; --output FILE writes FILE"

# -o wide and AGE.
expect 0 cli jobs
head -1 "$T/out" | grep -qE "^ID +NAME +STATE +WORKERS +RESTARTS +TIME +AGE +REASON$" || fail "jobs header: $(head -1 "$T/out")"
grep -qE "^$a +ok +SUCCEEDED +1 +0 +[0-9.]+s +[0-9]+s +all 1 workers" "$T/out" || fail "jobs AGE: $(cat "$T/out")"
expect 0 cli jobs -o wide
head -1 "$T/out" | grep -qE " AGE +SUBMITTED +STARTED +ENDED +QUEUED +REASON$" || fail "jobs -o wide header: $(head -1 "$T/out")"
grep -qE "^$a .* [0-9]+s  [0-9]{2}:[0-9]{2}:[0-9]{2} +[0-9:]{8} +[0-9:]{8} +[0-9.]+s  all" "$T/out" || fail "jobs -o wide: $(cat "$T/out")"
expect 0 cli nodes
head -1 "$T/out" | grep -qE " SEEN +AGE +REASON$" || fail "nodes header: $(head -1 "$T/out")"
expect 0 cli nodes -o wide
head -1 "$T/out" | grep -qE " AGE +HOSTNAME +ADDRESS +PID +LABELS +REASON$" || fail "nodes -o wide header: $(head -1 "$T/out")"
grep -qE " $NODE_PID_n1 " "$T/out" || fail "nodes -o wide lacks the agent's pid $NODE_PID_n1: $(cat "$T/out")"
pass "jobs and nodes have AGE; -o wide adds times (jobs) and hostname, address, pid, labels (nodes)"

# jobs --all: newest first, like a page; --oldest-first turns it.
expect 0 cli jobs --all
[ "$(awk 'NR > 1 { print $1 }' "$T/out" | tr '\n' ' ')" = "$c $b $a " ] || fail "jobs --all order: $(cat "$T/out")"
expect 0 cli jobs --all -o json
[ "$(jq -c '[.jobs[].id]' "$T/out")" = "[$c,$b,$a]" ] || fail "jobs --all -o json order: $(cat "$T/out")"
expect 0 cli jobs --all --oldest-first
[ "$(awk 'NR > 1 { print $1 }' "$T/out" | tr '\n' ' ')" = "$a $b $c " ] || fail "jobs --all --oldest-first: $(cat "$T/out")"
pass "jobs --all is newest first (table and JSON), --oldest-first turns it"

# did you mean.
expect 2 cli jbos
errs "unknown command 'jbos'; did you mean 'jobs'?"
expect 2 cli jobs --alll
errs "troupe jobs: unknown option '--alll'; did you mean '--all'?"
expect 2 cli metrics "$c" --nmae loss
errs "did you mean '--name'?"
expect 2 cli --hed "$HEAD" jobs
errs "unknown option '--hed'; did you mean '--head'?"
expect 2 cli frobnicate
grep -q "did you mean" "$T/err" && fail "a suggestion for an unrelated word: $(cat "$T/err")"
pass "a mistyped command, option or format gets a 'did you mean'"

# metrics --name that matches nothing.
expect 0 cli metrics "$c" --name loss,tok_s
grep -q " loss " "$T/out" || fail "loss points missing: $(cat "$T/out")"
errs "warning: job $c has no metric named 'tok_s' (its names: loss tokens_per_s)"
expect 1 cli metrics "$c" --name tok_s
errs "error: job $c has no metric named 'tok_s'"
expect 1 cli metrics "$c" -f --name tokens_per_sec
errs "has no metric named 'tokens_per_sec'; did you mean 'tokens_per_s'?"
expect 1 cli metrics "$c" -o json --name tok_s
jq -e '.points == []' "$T/out" >/dev/null || fail "metrics -o json: $(cat "$T/out")"
pass "metrics --name: a name matching nothing is a warning (others matched) or an error, exit 1 (none matched), naming the job's names"
