#!/usr/bin/env bash
# troupe jobs: TIME, next to AGE, is how long a job has run - running for while
# it runs, ran for once it ended (until its last worker was gone, as troupe
# job's "ran") - and "-" for a job that never started; -o json has the same as
# run_s (null when never started) and queued_s, in seconds.
source "$(dirname "$0")/../lib.sh"
start_head
start_node n1 1xH200:141GB --stop-grace-ms 1000
wait_for 10 "1 node ALIVE" nodes_alive 1
# Each job runs at least 1.5 s, then until $T/go exists: the test decides when it ends.
cat >"$T/nap.yaml" <<YAML
name: nap
cluster: {nodes: [1]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sh, -c, 'sleep 1.5; while [ ! -f $T/go ]; do sleep 0.05; done']}]
YAML
a=$(submit "$T/nap.yaml")
wait_for 10 "job $a RUNNING" is_job_state "$a" RUNNING
b=$(submit "$T/nap.yaml") # waits for the one GPU
sleep 1.2
cli jobs >"$T/jobs.txt"
head -1 "$T/jobs.txt" | grep -qE "^ID +NAME +STATE +WORKERS +RESTARTS +TIME +AGE +REASON$" ||
    fail "header: $(head -1 "$T/jobs.txt")"
t=$(awk -v id="$a" '$1 == id { print $6 }' "$T/jobs.txt")
awk -v t="${t%s}" 'BEGIN { exit !(t >= 1.0 && t < 60) }' && [ "${t: -1}" = s ] ||
    fail "running job $a: TIME '$t': $(cat "$T/jobs.txt")"
grep -qE "^$b +nap +PENDING +1 +0 +- +[0-9]+s " "$T/jobs.txt" || fail "pending job $b: $(cat "$T/jobs.txt")"
cli -o json jobs >"$T/jobs.json"
jq -e --argjson a "$a" --argjson b "$b" '
    (.jobs[] | select(.id == $a) | .state == "RUNNING" and .run_s >= 1.0 and .run_s < 60 and .queued_s >= 0) and
    (.jobs[] | select(.id == $b) | .run_s == null and .queued_s >= 1.0)' "$T/jobs.json" >/dev/null ||
    fail "-o json while running: $(jq -c '[.jobs[] | {id, state, run_s, queued_s}]' "$T/jobs.json")"
pass "running for ${t} (TIME and run_s), a waiting job '-' and run_s null with queued_s"

touch "$T/go"
wait_for 20 "job $a SUCCEEDED" is_job_state "$a" SUCCEEDED
run=$(cli -o json job "$a" | jq '.run_s')
worker=$(cli -o json job "$a" | jq '[.workers[] | (.ended_ms - .started_ms)] | max / 1000')
awk -v r="$run" -v w="$worker" 'BEGIN { exit !(r >= 1.5 && r + 0.001 >= w && r < w + 2.0) }' ||
    fail "ran: run_s $run, its worker ran $worker s"
sleep 0.3
[ "$(cli -o json jobs | jq --argjson a "$a" '.jobs[] | select(.id == $a) | .run_s')" = "$run" ] ||
    fail "run_s of an ended job moved on: $run, now $(cli -o json jobs | jq -c '.jobs')"
cli jobs >"$T/jobs.txt"
t=$(awk -v id="$a" '$1 == id { print $6 }' "$T/jobs.txt")
awk -v t="${t%s}" -v r="$run" 'BEGIN { d = t - r; exit !(d < 0.051 && d > -0.051) }' ||
    fail "ended job $a: TIME '$t', run_s $run: $(cat "$T/jobs.txt")"
ran=$(cli job "$a" | sed -n 's/^time .*, ran \([0-9.]*\) s.*/\1/p')
awk -v t="${t%s}" -v r="$ran" 'BEGIN { exit !(t == r) }' || fail "TIME $t, troupe job says ran $ran s"
pass "ran for $t (run_s $run; its worker $worker s; troupe job: ran $ran s), fixed once ended"
wait_for 20 "job $b SUCCEEDED" is_job_state "$b" SUCCEEDED
