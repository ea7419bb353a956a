#!/usr/bin/env bash
# A report the head stored but whose answer was lost is sent again by the
# worker, and stored once. The worker reaches the head through a proxy that
# throws every answer away (cutproxy.py, SIGWINCH) from before its first
# report: the head stores the points, the worker never hears so, and keeps
# sending them until the connection drops and a new one brings the answers.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/../nodes/nodes_lib.bash"
: "${MX_WORKER:?}"
start_proxy
# Workers find the head at --advertise (TROUPE_HEAD): the proxy. The agent
# and the CLI use the head directly.
HTTPA=127.0.0.1:$(free_port)
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50 --advertise "$PROXY" --http "$HTTPA"
start_node na 4xH100:80GB --stop-grace-ms 1000
wait_for 10 "na ALIVE" nodes_alive 1
kill -WINCH "$PROXY_PID"
wait_for 10 "the proxy to lose answers" grep -q "answers lost" "$T/proxy.log"
cat >"$T/a.yaml" <<YAML
name: lost-answer
cluster: {nodes: [1]}
groups: [{name: policy, workers: 1, resources: {gpu: 1}, command: [$MX_WORKER]}]
env: {MX_POINTS: "40", MX_EVERY_US: "0", MX_NAMES: "loss"}
YAML
id=$(submit "$T/a.yaml")
stream() { cli -o json metrics "$id" | jq -c '.streams[0] // {}'; }
all_stored() { [ "$(stream | jq '.last_seq // 0')" = 40 ]; }
wait_for 30 "the head to store all 40 points (its answers lost on the way)" all_stored
st=$(stream)
[ "$(jq .stored <<<"$st")" = 40 ] && [ "$(jq .dropped <<<"$st")" = 0 ] || fail "before the resend: $st"
# The worker was never answered: it still holds every point and sends them
# all again (one call at a time, each after the last one's deadline, 5 s), so
# every report after the first is a resend. Wait until the head has one, so
# that the resend is proven to have reached the head, not only the drop below.
reports() { curl -s -m 5 "http://$HTTPA/metrics" | awk '$1 == "troupe_metric_reports_total" { print $2 }'; }
resent() { [ "$(reports)" -ge 2 ]; }
wait_for 30 "the worker to send its report again" resent
kill -HUP "$PROXY_PID" # drop the connection; the next one is answered
wait_for 60 "job $id SUCCEEDED" is_job_state "$id" SUCCEEDED
line=$(cli logs "$id" | grep "mx: reported=" || true)
[[ "$line" == *"reported=40 acked=40 dropped=0 buffered=0 flush=OK"* ]] || fail "worker: $line"
cli -o json metrics "$id" >"$T/all.json"
jq -e '.streams | length == 1 and .[0].stored == 40 and .[0].dropped == 0 and .[0].last_seq == 40' "$T/all.json" >/dev/null ||
    fail "head's count after the resends: $(jq -c .streams "$T/all.json")"
jq -e '[.points[].seq] as $s | ($s | length) == 40 and $s == ($s | unique)' "$T/all.json" >/dev/null ||
    fail "points: $(jq -c '[.points[].seq]' "$T/all.json")"
pass "40 points stored once although the worker sent them in $(reports) reports (answers lost): $(jq -c '.streams[0] | {stored, dropped, last_seq}' "$T/all.json")"
