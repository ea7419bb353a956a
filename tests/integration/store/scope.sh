#!/usr/bin/env bash
# A job's store is its own: a worker whose credential is of one job and who
# names another is refused PERMISSION_DENIED. A group restart starts a new
# epoch whose store is empty: attempt 1 never reads attempt 0's keys, and
# meets through the store again.
source "$(dirname "$0")/../lib.sh"
: "${ST_WORKER:?}"
start_cluster
cat >"$T/hold.yaml" <<YAML
name: hold
cluster: {nodes: [4]}
groups:
  - {name: policy, workers: 1, resources: {gpu: 1}, command: [sleep, "60"]}
YAML
other=$(submit "$T/hold.yaml")
wait_for 15 "job $other running" is_job_state "$other" RUNNING
cat >"$T/foreign.yaml" <<YAML
name: foreign
cluster: {nodes: [4]}
groups:
  - {name: policy, workers: 1, resources: {gpu: 1}, command: [$ST_WORKER, foreign]}
env: {ST_OTHER_JOB: "$other"}
YAML
timeout 60 "$CLI_BIN" submit "$T/foreign.yaml" >"$T/out" 2>"$T/err" || fail "job failed: $(cat "$T/err")"
line=$(cli logs "$(head -1 "$T/out")" | grep "st: foreign")
echo "$line" | grep -q "ERR PERMISSION_DENIED" || fail "another job's store: $line"
pass "a worker naming another job is refused: $line"
cli stop "$other" >/dev/null

cat >"$T/restart.yaml" <<YAML
name: restart
cluster: {nodes: [4]}
groups:
  - {name: policy, workers: 2, resources: {gpu: 1}, command: [$ST_WORKER, restart]}
restart: {max_restarts: 1}
YAML
timeout 90 "$CLI_BIN" submit "$T/restart.yaml" >"$T/out" 2>"$T/err" || fail "restart job: $(cat "$T/err"; cli logs "$(head -1 "$T/out")")"
cli logs "$(head -1 "$T/out")" >"$T/logs"
grep -q "st: attempt 0 rank 1 saw old = attempt0; failing" "$T/logs" || fail "attempt 0: $(grep st: "$T/logs")"
[ "$(grep -c "st: attempt 1 rank [01] old present = 0" "$T/logs")" = 2 ] || fail "attempt 1 saw old keys: $(grep st: "$T/logs")"
[ "$(grep -c "st: attempt 1 rank [01] met" "$T/logs")" = 2 ] || fail "attempt 1 did not meet: $(grep st: "$T/logs")"
pass "after a group restart neither rank sees attempt 0's key; both meet through the new epoch's store"
