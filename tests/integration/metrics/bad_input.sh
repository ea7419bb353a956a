#!/usr/bin/env bash
# Reports the head must refuse, and a store that cannot write:
# - a worker of another job (job id and worker name that do not belong
#   together): PERMISSION_DENIED, its points dropped and counted;
# - an unknown job: NOT_FOUND;
# - while metrics.db cannot be written (TROUPE_TEST_STORE_FULL_IF), reports
#   are refused UNAVAILABLE and the worker keeps its points: once the store
#   writes again every point arrives, none dropped, none twice.
source "$(dirname "$0")/../lib.sh"
: "${MX_WORKER:?}"
start_cluster --dead-after 50 # node liveness is not what this tests: a 5 s window under load
cat >"$T/slow.yaml" <<YAML
name: slow
cluster: {nodes: [4]}
groups: [{name: policy, workers: 1, resources: {gpu: 1}, command: [sleep, "30"]}]
YAML
a=$(submit "$T/slow.yaml")
b=$(submit "$T/slow.yaml")
wait_for 20 "jobs $a and $b running" bash -c "[ \"\$($CLI_BIN -o json job $a | jq -r .state)\" = RUNNING ] && [ \"\$($CLI_BIN -o json job $b | jq -r .state)\" = RUNNING ]"
as_worker() { # JOB WORKER: mx_worker outside troupe, claiming to be WORKER of JOB
    env TROUPE_HEAD="$HEAD" TROUPE_JOB="$1" TROUPE_GROUP=policy TROUPE_WORKER="$2" TROUPE_ATTEMPT=0 RANK=0 \
        WORLD_SIZE=1 MX_POINTS=10 "$MX_WORKER" || true
}
out=$(as_worker "$a" "job$b-policy-0")
[[ "$out" == *"dropped=10 "*"flush=PERMISSION_DENIED"*"not part of job $a"* ]] || fail "another job's worker: $out"
[ "$(cli -o json metrics "$a" | jq '.points | length')" = 0 ] || fail "job $a got points: $(cli -o json metrics "$a")"
out=$(as_worker 999 job999-policy-0)
[[ "$out" == *"dropped=10 "*"flush=NOT_FOUND"*"no job 999"* ]] || fail "unknown job: $out"
pass "another job's worker: PERMISSION_DENIED, unknown job: NOT_FOUND; points dropped and counted by the worker"
cli stop "$a" "$b" >/dev/null

# The store cannot write: nothing is lost, the worker waits with its points.
stop_pid -9 "$HEAD_PID"
HTTPM=127.0.0.1:$(free_port)
TROUPE_TEST_STORE_FULL_IF="$T/full" start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50 --http "$HTTPM"
cat >"$T/a.yaml" <<YAML
name: full
cluster: {nodes: [4]}
groups: [{name: policy, workers: 1, resources: {gpu: 1}, command: [$MX_WORKER]}]
env: {MX_POINTS: "3000", MX_EVERY_US: "1000", MX_NAMES: "loss"}
YAML
id=$(submit "$T/a.yaml")
some() { [ "$(cli -o json metrics "$id" --last 1 | jq '.streams[0].stored // 0')" -gt 100 ]; }
wait_for 30 "the worker's first points at the head" some
mark=$(head_log_mark)
touch "$T/full"
wait_for 10 "the head to say metrics cannot be saved" bash -c "tail -c +$((mark + 1)) '$T/head.log' | grep -q 'metrics store cannot write'"
stuck=$(cli -o json metrics "$id" --last 1 | jq '.streams[0].stored')
# The worker's reports had their chance: the head tried (and failed) to
# write them twice more since.
failed_writes() { curl -s -m 5 "http://$HTTPM/metrics" | awk '$1 == "troupe_metric_writes_failed_total" { print $2 }'; }
f0=$(failed_writes)
more_failed() { [ "$(failed_writes)" -ge $((f0 + 2)) ]; }
wait_for 20 "two more failed metric writes" more_failed
[ "$(cli -o json metrics "$id" --last 1 | jq '.streams[0].stored')" = "$stuck" ] || fail "points stored while failing"
rm -f "$T/full"
wait_for 90 "job $id to succeed" is_job_state "$id" SUCCEEDED
line=$(cli logs "$id" | grep "mx: reported=" || true)
[[ "$line" == *"reported=3000 acked=3000 dropped=0 buffered=0 flush=OK"* ]] || fail "worker: $line"
cli -o json metrics "$id" >"$T/all.json"
jq -e '.streams[0].stored == 3000 and .streams[0].dropped == 0 and ([.points[].seq] == [range(1; 3001)])' \
    "$T/all.json" >/dev/null || fail "after the store failed: $(jq -c .streams "$T/all.json")"
pass "metrics store failing: nothing stored meanwhile ($stuck points), then all 3000 arrived once, 0 dropped"
