#!/usr/bin/env bash
# A worker reports while the head is killed (-9) and restarted. Its buffer
# (TROUPE_METRICS_BUFFER=500) fills while the head is away and new points are
# dropped: the worker loses at most what it says it dropped, and the head's
# count of that worker's drops (from the gaps in its sequence numbers) is
# exactly the worker's own. Nothing the head acknowledged before the kill is
# lost, and nothing sent twice (a report the head saved but could not answer)
# is stored twice.
source "$(dirname "$0")/../lib.sh"
: "${MX_WORKER:?}"
start_cluster --dead-after 50 # node liveness is not what this tests: a 5 s window under load
cat >"$T/a.yaml" <<YAML
name: restart
cluster: {nodes: [4]}
groups: [{name: policy, workers: 1, resources: {gpu: 1}, command: [$MX_WORKER]}]
env: {MX_POINTS: "6000", MX_EVERY_US: "1000", MX_NAMES: "loss", TROUPE_METRICS_BUFFER: "500"}
YAML
id=$(submit "$T/a.yaml")
w="job$id-policy-0"
some() { [ "$(cli -o json metrics "$id" --last 1 | jq '.streams[0].stored // 0')" -gt 200 ]; }
wait_for 30 "the worker's first points at the head" some
stop_pid -9 "$HEAD_PID"
# Away until the worker's buffer is full and it drops points (it says so).
dropping() { grep -q "mx: buffer full" "$T"/node-*/logs/job"$id"-policy-0.0.log; }
wait_for 30 "the worker to drop points while the head is away" dropping
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50
wait_for 90 "job $id to succeed" is_job_state "$id" SUCCEEDED
line=$(cli logs "$id" | grep "mx: reported=" || true)
[[ "$line" == *"reported=6000 acked=6000"*"buffered=0 flush=OK"* ]] || fail "worker: $line"
dropped=$(sed 's/.*dropped=\([0-9]*\).*/\1/' <<<"$line")
[ "$dropped" -gt 0 ] || fail "the worker dropped nothing: the head was not away long enough ($line)"
cli -o json metrics "$id" >"$T/all.json"
jq -e --argjson d "$dropped" '.streams | length == 1 and .[0].dropped == $d and .[0].worker_dropped == $d
    and .[0].stored == 6000 - $d and .[0].last_seq == 6000' "$T/all.json" >/dev/null \
    || fail "head's count: $(jq -c .streams "$T/all.json"), worker dropped $dropped"
jq -e --argjson d "$dropped" '[.points[].seq] as $s | ($s | length) == 6000 - $d and $s == ($s | unique)
    and all(.points[]; .value == .seq - 1)' "$T/all.json" >/dev/null \
    || fail "points: $(jq '.points | length' "$T/all.json") for $((6000 - dropped)) expected, or out of order"
pass "head killed and restarted: worker dropped $dropped of 6000, the head counts exactly $dropped and stores the other $((6000 - dropped)), once each, in order"
