#!/usr/bin/env bash
# Traces survive a head restart: they are kept in STATE/traces.db beside
# metrics.db. Two jobs of 2 workers profile steps 2:4; job B is deleted (its
# rows leave traces.db), then the head is killed with -9 and restarted on the
# same state dir: `troupe trace A` gives exactly the trace it gave before
# (every span, name, time and worker clock offset), B stays gone, and the
# file holds A's spans only; a job D deleted just before the kill has no rows
# after the restart either, nor do rows of a job the head never had. A span sent to the restarted head is added after
# the loaded ones.
source "$(dirname "$0")/../lib.sh"
: "${RT_WORKER:?}"
command -v python3 >/dev/null || fail "python3 is needed (scripts/setup.sh installs it)"
start_cluster --dead-after 50 # node liveness is not what this tests
job() {
    cat >"$T/$1.yaml" <<YAML
name: $1
cluster: {nodes: [4]}
groups:
  - {name: policy, workers: 2, resources: {gpu: 1}, command: [$RT_WORKER, run]}
profile: {steps: "2:4", workers: "*"}
env: {RT_STEPS: "5", RT_STEP_MS: "20", RT_TRACE: "1"}
YAML
    submit "$T/$1.yaml"
}
a=$(job a)
b=$(job b)
d=$(job d)
wait_for 60 "job $a to succeed" is_job_state "$a" SUCCEEDED
wait_for 60 "job $b to succeed" is_job_state "$b" SUCCEEDED
wait_for 60 "job $d to succeed" is_job_state "$d" SUCCEEDED
# rows JOB: spans of JOB in traces.db (read beside the running head: WAL)
rows() { python3 -c "import sqlite3,sys; c=sqlite3.connect('file:'+sys.argv[1]+'?mode=ro', uri=True); print(c.execute('select count(*) from trace_spans where job=?', (int(sys.argv[2]),)).fetchone()[0])" "$T/state/traces.db" "$1"; }
spans() { jq '[.traceEvents[] | select(.ph == "X")] | length' "$1"; }
cli trace "$a" --output "$T/a1.json" >/dev/null || fail "trace of $a"
cli trace "$b" --output "$T/b1.json" >/dev/null || fail "trace of $b"
na=$(spans "$T/a1.json"); nb=$(spans "$T/b1.json")
[ "$na" -gt 8 ] && [ "$nb" -gt 8 ] || fail "too few spans: a $na, b $nb"
[ "$(rows "$a")" = "$na" ] && [ "$(rows "$b")" = "$nb" ] || fail "traces.db holds $(rows "$a")/$(rows "$b") spans, the head showed $na/$nb"
pass "job $a: $na spans, job $b: $nb spans, the same in traces.db"

cli delete "$b" >/dev/null || fail "delete $b"
gone_b() { [ "$(rows "$b")" = 0 ]; }
wait_for 10 "job $b's spans to leave traces.db" gone_b
pass "deleting job $b deleted its spans from traces.db"

# Job d is deleted right before the kill: its rows may still be in the file
# (the writer had no round yet); the next start deletes what it finds of
# jobs the head no longer has.
[ "$(rows "$d")" -gt 0 ] || fail "job $d has no rows"
cli delete "$d" >/dev/null || fail "delete $d"
stop_pid -9 "$HEAD_PID"
echo "job $d's rows at the kill: $(rows "$d")"
# and rows of a job 999 the head never had, as a crash could leave them
python3 - "$T/state/traces.db" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("insert into trace_reports(job, worker, grp, node, rank, group_rank, attempt, offset_us, rtt_us, kept, sent,"
          " dropped_worker) values(999, 'job999-x-0', 'x', 'na', 0, 0, 0, 0, 0, 1, 1, 0)")
c.execute("insert into trace_spans values(999, 'job999-x-0', 0, 'step 1', 'step', 1, 1, 1, 1)")
c.commit()
PY
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50
grep -q "trace store: $na spans of earlier profiled steps loaded from $T/state/traces.db" "$T/head.log" \
    || fail "the head did not say it loaded $na spans: $(grep 'trace store' "$T/head.log")"
cli trace "$a" --output "$T/a2.json" >/dev/null || fail "trace of $a after the restart"
diff <(jq -S . "$T/a1.json") <(jq -S . "$T/a2.json") >"$T/diff" || fail "the trace changed across the restart: $(head -20 "$T/diff")"
out=$(cli trace "$b" 2>&1) && fail "deleted job $b has a trace: $out"
grep -q "NOT_FOUND.*no job $b" <<<"$out" || fail "job $b: $out"
[ "$(rows "$b")" = 0 ] && [ "$(rows "$d")" = 0 ] && [ "$(rows 999)" = 0 ] \
    || fail "rows of deleted jobs: $b $(rows "$b"), $d $(rows "$d"), 999 $(rows 999)"
grep -q "trace store: traces of [12] jobs\? the head no longer has (deleted before a restart): deleting them" "$T/head.log" \
    || fail "no word of the orphans: $(grep 'trace store' "$T/head.log")"
pass "after kill -9 and restart: job $a's trace is identical ($na spans), jobs $b and $d gone"

# The restarted head goes on: a job profiled now adds to the file.
c=$(job c)
wait_for 60 "job $c to succeed" is_job_state "$c" SUCCEEDED
cli trace "$c" --output "$T/c.json" >/dev/null || fail "trace of $c"
[ "$(rows "$c")" = "$(spans "$T/c.json")" ] && [ "$(rows "$a")" = "$na" ] || fail "after the restart: rows $(rows "$c") for $(spans "$T/c.json") spans of $c, $(rows "$a") of $a"
pass "job $c after the restart: $(spans "$T/c.json") spans, stored too"
