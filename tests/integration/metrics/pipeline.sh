#!/usr/bin/env bash
# troupe_worker_metric end to end: two workers report 10,000 points each;
# `troupe metrics -o json` returns all of them, in order, nothing lost; the
# filters, --last, CSV and the table; NaN and infinities stored and shown as
# such; bad input (unknown job, unknown worker, bad names).
source "$(dirname "$0")/../lib.sh"
: "${MX_WORKER:?}"
start_cluster
cat >"$T/a.yaml" <<YAML
name: metrics
cluster: {nodes: [4]}
groups: [{name: policy, workers: 2, resources: {gpu: 1}, command: [$MX_WORKER]}]
env: {MX_POINTS: "10000", MX_SPECIAL: "1"}
YAML
id=$(submit "$T/a.yaml")
wait_for 60 "job $id to succeed" is_job_state "$id" SUCCEEDED
cli logs "$id" | grep "mx: reported=" >"$T/mx" || true
[ "$(grep -c 'dropped=0 buffered=0 flush=OK' "$T/mx")" = 2 ] || fail "workers: $(cat "$T/mx")"
cli -o json metrics "$id" >"$T/all.json" || fail "troupe metrics -o json failed"
for r in 0 1; do
    w="job$id-policy-$r"
    n=$(jq --arg w "$w" '[.points[] | select(.worker==$w and .name!="odd")] | length' "$T/all.json")
    [ "$n" = 10000 ] || fail "$w: $n points, not 10000"
    # in order: seq 4..10003 (1-3 are the odd values), values r*1e6+i, steps i/2+1
    jq -e --arg w "$w" --argjson r "$r" '[.points[] | select(.worker==$w and .name!="odd")] as $p
        | [range(0; 10000)] | all(. as $i | $p[$i].seq == $i + 4 and $p[$i].value == $r * 1000000 + $i
              and $p[$i].step == ($i / 2 | floor) + 1 and $p[$i].name == (if $i % 2 == 0 then "loss" else "tok_s" end))' \
        "$T/all.json" >/dev/null || fail "$w: points out of order or altered"
    jq -e --arg w "$w" '[.points[] | select(.worker==$w and .name=="odd") | .value] == ["NaN", "+Inf", "-Inf"]' \
        "$T/all.json" >/dev/null || fail "$w: NaN/inf not kept: $(jq -c '[.points[] | select(.name=="odd")]' "$T/all.json")"
    jq -e --arg w "$w" '.streams[] | select(.worker==$w) | .stored == 10003 and .dropped == 0 and .last_seq == 10003' \
        "$T/all.json" >/dev/null || fail "$w: stream $(jq -c .streams "$T/all.json")"
done
[ "$(jq '.points | length' "$T/all.json")" = 20006 ] || fail "total $(jq '.points | length' "$T/all.json")"
jq -e '[.points[].id] | . == sort and (unique | length) == 20006' "$T/all.json" >/dev/null || fail "ids not increasing"
pass "2 workers x 10,000 points (+3 NaN/inf each): all returned in order, 0 dropped"

cli -o json metrics "$id" --worker "job$id-policy-1" --name loss --last 3 >"$T/last.json"
jq -e '[.points[] | [.worker, .name, .value]] == [["job'"$id"'-policy-1","loss",1009994],
       ["job'"$id"'-policy-1","loss",1009996],["job'"$id"'-policy-1","loss",1009998]]' "$T/last.json" >/dev/null \
    || fail "--last 3 --worker --name: $(jq -c .points "$T/last.json")"
pass "--worker, --name and --last 3 give the newest 3 matching points, oldest first"

cli -o csv metrics "$id" --name odd >"$T/odd.csv"
[ "$(head -1 "$T/odd.csv")" = "id,worker,attempt,seq,step,name,value,ts_ms" ] || fail "csv header: $(head -1 "$T/odd.csv")"
[ "$(cut -d, -f7 "$T/odd.csv" | tail -n +2 | sort | tr '\n' ' ')" = "+Inf +Inf -Inf -Inf NaN NaN " ] \
    || fail "csv values: $(cat "$T/odd.csv")"
cli metrics "$id" --name odd >"$T/odd.txt" 2>"$T/odd.err"
grep -q "NaN" "$T/odd.txt" && grep -q -- "-Inf" "$T/odd.txt" || fail "table: $(cat "$T/odd.txt")"
grep -q "job$id-policy-0 attempt 0: 10003 points stored, 0 dropped" "$T/odd.err" || fail "summary: $(cat "$T/odd.err")"
pass "CSV and table show NaN, +Inf and -Inf; the table says stored and dropped per worker"

out=$(cli metrics 999 2>&1) && fail "unknown job accepted: $out"
[[ "$out" == *NOT_FOUND*"no job 999"* ]] || fail "unknown job: $out"
out=$(cli metrics "$id" --worker nope 2>&1) && fail "unknown worker accepted: $out"
[[ "$out" == *NOT_FOUND*"has no worker nope"* ]] || fail "unknown worker: $out"
rc=0; out=$(cli metrics "$id" --last x 2>&1) || rc=$?
[ "$rc" = 2 ] || fail "--last x: rc=$rc $out"
pass "unknown job and worker: NOT_FOUND; bad --last: usage error"
