#!/usr/bin/env bash
# A stalled job as HTTP shows it: a worker stopped with SIGSTOP makes the
# head judge its job STALLED (health: {stall_after: 2s}); /api/jobs/ID says
# so naming the rank, /metrics has troupe_job_health{state="stalled"} 1 and
# the rank's troupe_worker_stalled_seconds (still passing promtool), and the
# dashboard in headless Chromium marks the job STALLED and draws the rank's
# lines as stalled (screenshot: $TROUPE_ARTIFACTS/dashboard-stalled.png).
# Stopped while stalled, the job keeps those marks: its last judgement stays
# (health.ended), in /api and on the dashboard.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/hlib.bash"

start_cluster --http "127.0.0.1:$HPORT"
cat >"$T/s.yaml" <<YAML
name: stall
cluster: {nodes: [4]}
groups: [{name: policy, workers: 2, resources: {gpu: 1}, command: [$MX_WORKER]}]
env: {MX_POINTS: "2000000", MX_EVERY_US: "5000", MX_NAMES: "loss,step_ms"}
health: {stall_after: 2s}
YAML
id=$(submit "$T/s.yaml")
api_health() { curl -s "$HTTP/api/jobs/$id" | jqr .health.state; }
is_health() { [ "$(api_health)" = "$1" ]; }
wait_for 60 "job $id judged OK (/api)" is_health OK
sup=$(cli -o json job "$id" | jqr '.workers[] | select(.rank==1) | .pid')
pid=$(pgrep -P "$sup") || fail "no process under rank 1's supervisor $sup"
kill -STOP "$pid"
wait_for 20 "job $id STALLED (/api)" is_health STALLED
curl -s "$HTTP/api/jobs/$id" >"$T/job.json"
jq -e --arg w "job$id-policy-1" '.state == "RUNNING" and .health.stall_after_ms == 2000
    and (.health.stalled | length == 1 and .[0].rank == 1 and .[0].worker == $w and .[0].node == "na"
         and .[0].last_step > 0 and .[0].since_ms > 0)' "$T/job.json" >/dev/null ||
    fail "/api/jobs/$id health: $(jq -c .health "$T/job.json")"
pass "SIGSTOP rank 1: /api/jobs/$id says STALLED, naming rank 1 on na and its last step"

curl -s "$HTTP/metrics" >"$T/metrics.txt"
if command -v promtool >/dev/null; then
    promtool check metrics <"$T/metrics.txt" >"$T/promtool.out" 2>&1 || fail "promtool: $(cat "$T/promtool.out")"
else
    skip_part "promtool part: promtool not installed (Debian package prometheus; scripts/setup.sh installs it)"
fi
grep -qx "troupe_job_health{job_id=\"$id\",state=\"stalled\"} 1" "$T/metrics.txt" &&
    grep -qx "troupe_job_health{job_id=\"$id\",state=\"ok\"} 0" "$T/metrics.txt" &&
    grep -qx "troupe_job_stalled_ranks{job_id=\"$id\"} 1" "$T/metrics.txt" ||
    fail "job health on /metrics: $(grep troupe_job_ "$T/metrics.txt")"
secs=$(grep "^troupe_worker_stalled_seconds{job_id=\"$id\",group=\"policy\",worker=\"job$id-policy-1\"} " \
    "$T/metrics.txt" | awk '{print $2}')
awk -v s="${secs:-0}" 'BEGIN { exit !(s >= 2 && s < 60) }' || fail "stalled seconds: '${secs:-}'"
! grep -q "^troupe_worker_stalled_seconds{.*worker=\"job$id-policy-0\"" "$T/metrics.txt" || fail "rank 0 named stalled"
pass "/metrics: troupe_job_health stalled 1, 1 stalled rank, rank 1 stalled for $secs s; promtool clean"

CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROMIUM" ] || skip_test "dashboard part: chromium not installed (Debian package chromium; scripts/setup.sh installs it)"
chrome() {
    timeout 90 "$CHROMIUM" --headless --disable-dev-shm-usage --disable-gpu --no-sandbox --no-first-run \
        --hide-scrollbars --user-data-dir="$T/chrome" --window-size=1400,1100 --virtual-time-budget=8000 "$@" \
        2>>"$T/chromium.log"
}
chrome --dump-dom "$HTTP/#job=$id" >"$T/dom.html" || fail "chromium --dump-dom failed: $(tail -5 "$T/chromium.log")"
grep -q "<tr class=\"job sel\" data-job=\"$id\" data-state=\"RUNNING\">" "$T/dom.html" || fail "job row missing"
grep -q '<td class="STALLED" data-health="STALLED">STALLED' "$T/dom.html" ||
    fail "job not shown STALLED: $(grep -o '<td class="[^"]*" data-health="[^"]*">[^<]*' "$T/dom.html")"
grep -q "<p id=\"job-health\" class=\"bad\" data-state=\"STALLED\">STALLED: rank 1 (job$id-policy-1 on na)" \
    "$T/dom.html" || fail "health line: $(grep -o '<p id="job-health"[^<]*' "$T/dom.html")"
grep -q "<polyline class=\"series stalled\" data-worker=\"job$id-policy-1\"" "$T/dom.html" ||
    fail "rank 1's line not drawn as stalled: $(grep -o '<polyline class="[^"]*" data-worker="[^"]*"' "$T/dom.html" | sort -u)"
! grep -q "<polyline class=\"series stalled\" data-worker=\"job$id-policy-0\"" "$T/dom.html" || fail "rank 0 drawn stalled"
mkdir -p "${TROUPE_ARTIFACTS:-$T/artifacts}"
shot=${TROUPE_ARTIFACTS:-$T/artifacts}/dashboard-stalled.png
rm -f "$shot"
(cd "$T" && chrome --screenshot="$shot" "$HTTP/#job=$id") || fail "screenshot failed"
[ -s "$shot" ] || fail "no screenshot at $shot"
pass "dashboard: job $id STALLED in the jobs table and the health line, rank 1's lines drawn stalled; $shot"

cli stop "$id" >/dev/null # SIGTERM, then SIGCONT: the stopped rank ends without a step
is_job_state "$id" STOPPED || fail "job $id: $(cli job "$id" | head -3)"
curl -s "$HTTP/api/jobs/$id" | jq -e --arg w "job$id-policy-1" '.health.state == "STALLED" and .health.ended == true
    and (.health.stalled | length == 1 and .[0].worker == $w)' >/dev/null ||
    fail "/api after the stop: $(curl -s "$HTTP/api/jobs/$id" | jq -c .health)"
chrome --dump-dom "$HTTP/#job=$id" >"$T/dom-ended.html" || fail "chromium --dump-dom failed: $(tail -5 "$T/chromium.log")"
grep -q "<tr class=\"job sel\" data-job=\"$id\" data-state=\"STOPPED\">" "$T/dom-ended.html" || fail "job row not STOPPED"
grep -q '<td class="STALLED" data-health="STALLED">STALLED (as it ended)</td>' "$T/dom-ended.html" ||
    fail "ended job's health: $(grep -o '<td class="[^"]*" data-health="[^"]*">[^<]*' "$T/dom-ended.html")"
grep -q "<p id=\"job-health\" class=\"bad\" data-state=\"STALLED\">as the job ended: STALLED: rank 1 (job$id-policy-1 on na)" \
    "$T/dom-ended.html" || fail "health line after the end: $(grep -o '<p id="job-health"[^<]*' "$T/dom-ended.html")"
grep -q "<polyline class=\"series stalled\" data-worker=\"job$id-policy-1\"[^>]*stroke-dasharray" "$T/dom-ended.html" ||
    fail "rank 1's line not stalled after the end: $(grep -o '<polyline class="[^"]*" data-worker="[^"]*"' "$T/dom-ended.html" | sort -u)"
! grep -q "<polyline class=\"series stalled\" data-worker=\"job$id-policy-0\"" "$T/dom-ended.html" || fail "rank 0 drawn stalled"
pass "stopped while stalled: /api and the dashboard still show job $id STALLED (as it ended), rank 1's lines dashed"
