#!/usr/bin/env bash
# A deleted job's metrics leave metrics.db with it: by `troupe delete`, by
# retention (keep_jobs), and, for what a stop left behind, at the next start.
# Another job's points are untouched throughout. Checked in the file itself
# (sqlite3), since the head answers NOT_FOUND for a deleted job anyway.
source "$(dirname "$0")/../lib.sh"
: "${MX_WORKER:?}"
command -v sqlite3 >/dev/null || fail "sqlite3 (Debian's sqlite3 package) is needed to look into metrics.db"
start_cluster --keep-jobs 2 --keep-days 0
db=$T/state/metrics.db
rows() { sqlite3 "file:$db?mode=ro" "SELECT (SELECT count(*) FROM metric_points WHERE job = $1) + (SELECT count(*) FROM metric_streams WHERE job = $1)"; }
has_rows() { [ "$(rows "$1")" = "$2" ]; }
job() { # job NAME POINTS: a finished job of one worker that reported POINTS points
    cat >"$T/$1.yaml" <<YAML
name: $1
cluster: {nodes: [4]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [$MX_WORKER]}]
env: {MX_POINTS: "$2", MX_NAMES: "loss"}
YAML
    local id
    id=$(submit "$T/$1.yaml")
    wait_for 60 "job $1 ($id) to succeed" is_job_state "$id" SUCCEEDED
    echo "$id"
}
a=$(job a 1000)
b=$(job b 700)
[ "$(rows "$a")" = 1001 ] && [ "$(rows "$b")" = 701 ] || fail "before: a $(rows "$a") b $(rows "$b") rows"
cli delete "$a" >/dev/null || fail "troupe delete $a"
wait_for 10 "job $a's metrics to leave metrics.db" has_rows "$a" 0
[ "$(rows "$b")" = 701 ] || fail "job $b lost rows: $(rows "$b")"
out=$(cli metrics "$a" 2>&1) && fail "metrics of a deleted job: $out"
[[ "$out" == *NOT_FOUND* ]] || fail "metrics of a deleted job: $out"
pass "troupe delete: job $a's 1000 points and its stream are gone from metrics.db, job $b's 700 stay"

c=$(job c 300)
d=$(job d 200) # keep_jobs 2: b, the oldest of b c d, goes
wait_for 10 "retention to delete job $b" eval '! cli job '"$b"' >/dev/null 2>&1'
wait_for 10 "job $b's metrics to leave metrics.db" has_rows "$b" 0
[ "$(rows "$c")" = 301 ] && [ "$(rows "$d")" = 201 ] || fail "c $(rows "$c") d $(rows "$d")"
pass "retention (keep_jobs 2): job $b's metrics deleted with it, jobs $c and $d keep theirs"

# A stop that leaves metrics of a job the head no longer has (here: written
# into the file while the head is down) is cleaned up at the next start.
stop_pid -t 20 "$HEAD_PID"
sqlite3 "$db" "INSERT INTO metric_points(job, worker, attempt, seq, step, name, value, ts_ms) VALUES (4242, 'w', 0, 1, 1, 'loss', 1.0, 0);
               INSERT INTO metric_streams VALUES (4242, 'w', 0, 1, 1, 0, 1, 0);"
[ "$(rows 4242)" = 2 ] || fail "could not plant the orphan rows"
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50 --keep-jobs 2 --keep-days 0
[ "$(rows 4242)" = 0 ] || fail "orphan rows still there after the start: $(rows 4242)"
[ "$(rows "$c")" = 301 ] && [ "$(rows "$d")" = 201 ] || fail "after restart: c $(rows "$c") d $(rows "$d")"
grep -q "metrics of 1 job the head no longer has (deleted before a restart): deleting them" "$T/head.log" \
    || fail "no log line about the orphans"
pass "metrics of a job the head no longer has are deleted at start, before it serves; the others stay"

# Point ids are a plain rowid (no AUTOINCREMENT in a new metrics.db): deleting
# the newest job (d) can hand its ids out again, to the next job only. Job c's
# points keep their ids, and job e's points (made after) come in order with
# ids past every id c has, so a cursor (after_id) of a live job never misses
# a point.
ids() { cli -o json metrics "$1" | jq -c '[.points[].id]'; }
c_before=$(ids "$c")
cli delete "$d" >/dev/null || fail "troupe delete $d"
wait_for 10 "job $d's metrics to leave metrics.db" has_rows "$d" 0
e=$(job e 150)
[ "$(ids "$c")" = "$c_before" ] || fail "job $c's ids changed"
cli -o json metrics "$e" | jq -e --argjson cmax "$(jq 'max' <<<"$c_before")" \
    '[.points[].id] as $i | ($i | length) == 150 and $i == ($i | sort) and ($i | unique | length) == 150
     and $i[0] > $cmax and [.points[].seq] == [range(1; 151)]' >/dev/null \
    || fail "job $e's ids: $(ids "$e" | head -c 300) (job $c's max $(jq 'max' <<<"$c_before"))"
pass "after deleting the newest job, the next job's ids follow every live job's, in order"
