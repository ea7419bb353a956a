#!/usr/bin/env bash
# ReportMetrics counters are checked against what the head has seen of the
# worker's stream. e8e9dba took `reported = 2^63` and added it to the
# head-wide troupe_metric_points_dropped_total for good, and answered OK to a
# report older than one already settled although its points had been counted
# as dropped. Now: a seq, reported or dropped past 2^53 is refused; a report
# that would count more points as dropped than the worker says it dropped is
# refused; an older report whose points are not on disk is refused saying so
# (a resend of stored points is still OK). Re-plant: return TROUPE_OK at the
# top of report_fits (server/metrics.c).
source "$(dirname "$0")/../lib.sh"
RAW=${RAWCALL:?}
HPORT=$(free_port)
start_head --heartbeat-ms 100 --dead-after 50 --http "127.0.0.1:$HPORT" # liveness is not under test: a 3.75 s lease
start_node na 1xH100:80GB
wait_for 10 "node ALIVE" nodes_alive 1
cat >"$T/j.yaml" <<YAML
name: j
cluster: {nodes: [1]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sleep, "60"]}]
YAML
job=$(submit "$T/j.yaml")
wait_for 10 "job $job RUNNING" is_job_state "$job" RUNNING
w=$(cli -o json job "$job" | jqr '.workers[0].name')
dropped_total() { curl -s -m 5 "http://127.0.0.1:$HPORT/metrics" | awk '$1 == "troupe_metric_points_dropped_total" {print $2}'; }
# call EXPECTED-CODE-NAME REPORTED DROPPED SEQ...: one report, its answer checked.
call() {
    local want=$1; shift
    out=$("$RAW" "$HEAD" report-metrics "$job" "$w" 0 "$@")
    grep -q "($want)" <<<"$out" || fail "report-metrics $*: expected $want, got: $out"
}

call INVALID_ARGUMENT 9223372036854775808 0
grep -q "no worker numbers more than" <<<"$out" || fail "unclear refusal: $out"
call INVALID_ARGUMENT 9223372036854775808 9223372036854775808
call INVALID_ARGUMENT 1000 0 1 2 3 # seqs 4..1000 settled as dropped, none counted by the worker
grep -q "would count 997 more points as dropped (997 in all) but the worker says it dropped 0" <<<"$out" ||
    fail "unclear refusal: $out"
[ "$(dropped_total)" = 0 ] || fail "refused reports moved troupe_metric_points_dropped_total to $(dropped_total)"
pass "reported 2^63, dropped 2^63 and gaps beyond the worker's own count refused; dropped_total still 0"

call OK 3 0 1 2 3
call OK 3 0 1 2 3 # a resend of stored points
call OK 6 1 5 6   # seq 4 dropped by the worker, and counted by it
[ "$(dropped_total)" = 1 ] || fail "dropped_total $(dropped_total) after one real drop"
call OK 12 4 7 10 12 # 8, 9 and 11: three more (4 in all)
[ "$(dropped_total)" = 4 ] || fail "dropped_total $(dropped_total) after four real drops"
call FAILED_PRECONDITION 9 4 8 9 # older than the report that settled 8 and 9 as dropped
grep -q "a later one already settled up to 12: of its 2 points 0 are stored" <<<"$out" || fail "unclear refusal: $out"
call OK 6 4 5 6 # older, but these points are stored: a resend
[ "$(dropped_total)" = 4 ] || fail "dropped_total $(dropped_total) after refused and resent reports"
streams=$(cli -o json metrics "$job" 2>/dev/null | jq -c '.streams[0] | {stored, dropped, reported}' || true)
pass "real drops counted (4), an older report of dropped points refused with what was stored, resends OK ($streams)"
