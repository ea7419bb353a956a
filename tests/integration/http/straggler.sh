#!/usr/bin/env bash
# A straggler as HTTP shows it: rank 1 reports step times far above rank 0's
# (mx_worker's step_ms values are RANK*1e6 + i), the head's health judge names
# it a straggler; /api/jobs/ID lists it with its ratio, /metrics has
# troupe_job_straggler_ranks 1 and troupe_worker_straggler_ratio for rank 1
# only (promtool clean), and the dashboard says "OK, 1 straggler", names the
# rank and draws its lines bold (class straggler), not rank 0's. The ranks'
# GPU memory grows 3 bytes a step (value RANK*1e6+i) over a memory_slope_mb
# of about 1 byte: both get a memory warning, marked on the memory chart only
# (a ring on the latest point, the warning in the legend). Once the job is
# stopped, every mark stays (its last judgement, health.ended; screenshot:
# $TROUPE_ARTIFACTS/dashboard-ended-marks.png).
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/hlib.bash"

start_cluster --http "127.0.0.1:$HPORT"
cat >"$T/s.yaml" <<YAML
name: strag
cluster: {nodes: [4]}
groups: [{name: policy, workers: 2, resources: {gpu: 1}, command: [$MX_WORKER]}]
env: {MX_POINTS: "2000000", MX_EVERY_US: "5000", MX_NAMES: "loss,step_ms,gpu_mem_in_use_bytes"}
health: {memory_slope_mb: 0.000001}
YAML
id=$(submit "$T/s.yaml")
straggling() { curl -s "$HTTP/api/jobs/$id" | jq -e '.health.stragglers | length == 1' >/dev/null; }
wait_for 60 "rank 1 named a straggler (/api)" straggling
memory_warned() { curl -s "$HTTP/api/jobs/$id" | jq -e '[.health.memory[] | select(.memory_growing)] | length == 2' >/dev/null; }
wait_for 30 "both ranks' memory warnings (/api)" memory_warned
curl -s "$HTTP/api/jobs/$id" >"$T/job.json"
jq -e --arg w "job$id-policy-1" '.health.state == "OK" and .health.stragglers[0].rank == 1
    and .health.stragglers[0].worker == $w and .health.stragglers[0].ratio > 1.3
    and .health.stragglers[0].step_ms > .health.stragglers[0].group_step_ms' "$T/job.json" >/dev/null ||
    fail "/api health: $(jq -c .health "$T/job.json")"
ratio=$(jqr '.health.stragglers[0].ratio' "$T/job.json")
pass "/api/jobs/$id: health OK with rank 1 a straggler (${ratio}x its group's median step time)"

curl -s "$HTTP/metrics" >"$T/metrics.txt"
if command -v promtool >/dev/null; then
    promtool check metrics <"$T/metrics.txt" >"$T/promtool.out" 2>&1 || fail "promtool: $(cat "$T/promtool.out")"
else
    skip_part "promtool part: promtool not installed (Debian package prometheus; scripts/setup.sh installs it)"
fi
grep -qx "troupe_job_health{job_id=\"$id\",state=\"ok\"} 1" "$T/metrics.txt" &&
    grep -qx "troupe_job_straggler_ranks{job_id=\"$id\"} 1" "$T/metrics.txt" ||
    fail "job health on /metrics: $(grep troupe_job_ "$T/metrics.txt")"
r=$(grep "^troupe_worker_straggler_ratio{job_id=\"$id\",group=\"policy\",worker=\"job$id-policy-1\"} " "$T/metrics.txt" |
    awk '{print $2}')
awk -v r="${r:-0}" 'BEGIN { exit !(r > 1.3) }' || fail "straggler ratio on /metrics: '${r:-}'"
! grep -q "^troupe_worker_straggler_ratio{.*worker=\"job$id-policy-0\"" "$T/metrics.txt" || fail "rank 0 named"
pass "/metrics: health ok, 1 straggler rank, rank 1's ratio $r; promtool clean"

CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROMIUM" ] || skip_test "dashboard part: chromium not installed (Debian package chromium; scripts/setup.sh installs it)"
timeout 90 "$CHROMIUM" --headless --disable-dev-shm-usage --disable-gpu --no-sandbox --no-first-run \
    --user-data-dir="$T/chrome" --window-size=1400,1100 --virtual-time-budget=8000 --dump-dom "$HTTP/#job=$id" \
    >"$T/dom.html" 2>>"$T/chromium.log" || fail "chromium --dump-dom failed: $(tail -5 "$T/chromium.log")"
grep -q '<td class="warn" data-health="OK">OK, 1 straggler, memory warning</td>' "$T/dom.html" ||
    fail "jobs table: $(grep -o '<td class="[^"]*" data-health="[^"]*">[^<]*' "$T/dom.html")"
grep -q "<p id=\"job-health\" class=\"warn\" data-state=\"OK\">straggler: rank 1 (job$id-policy-1 on na)" \
    "$T/dom.html" || fail "health line: $(grep -o '<p id="job-health"[^<]*' "$T/dom.html")"
grep -q "<polyline class=\"series straggler\" data-worker=\"job$id-policy-1\"" "$T/dom.html" ||
    fail "rank 1 not drawn as a straggler: $(grep -o '<polyline class="[^"]*" data-worker="[^"]*"' "$T/dom.html" | sort -u)"
grep -q "<polyline class=\"series\" data-worker=\"job$id-policy-0\"" "$T/dom.html" || fail "rank 0's line missing or marked"
pass "dashboard: 'OK, 1 straggler' in the jobs table, rank 1 named above the charts and drawn bold, rank 0 plain"

# memory_marks FILE: both ranks' lines marked on the memory chart (class
# memory, a ring with the warning), and on no other chart.
memory_marks() {
    local mem
    mem=$(grep -o '<svg[^>]*data-metric="gpu_mem_in_use_bytes".*' "$1" | sed 's|</svg>.*||')
    grep -q "<polyline class=\"series memory\" data-worker=\"job$id-policy-0\"" <<<"$mem" &&
        grep -q "<polyline class=\"series straggler memory\" data-worker=\"job$id-policy-1\"" <<<"$mem" &&
        [ "$(grep -o '<circle class="memory-mark" data-worker="[^"]*"' <<<"$mem" | sort -u | wc -l)" = 2 ] &&
        grep -q "<title>memory warning: job$id-policy-1 grows [0-9.]* B/step</title>" <<<"$mem" &&
        [ "$(grep -o '<polyline class="series[a-z ]* memory"' "$1" | wc -l)" = 2 ] &&
        [ "$(grep -o '<circle class="memory-mark"' "$1" | wc -l)" = 2 ]
}
memory_marks "$T/dom.html" ||
    fail "memory marks: $(grep -o '<polyline class="[^"]*" data-worker="[^"]*"\|<circle class="memory-mark"[^>]*>' "$T/dom.html" | sort | uniq -c)"
pass "dashboard: both ranks' memory warnings marked on the GPU memory chart (bold, a ring with the warning), not elsewhere"

cli stop "$id" >/dev/null
curl -s "$HTTP/api/jobs/$id" | jq -e '.state == "STOPPED" and .health.ended == true and .health.state == "OK"
    and (.health.stragglers | length == 1 and .[0].rank == 1) and (.health.memory | length == 2)' >/dev/null ||
    fail "/api after the stop: $(curl -s "$HTTP/api/jobs/$id" | jq -c '[.state, .health]')"
timeout 90 "$CHROMIUM" --headless --disable-dev-shm-usage --disable-gpu --no-sandbox --no-first-run \
    --user-data-dir="$T/chrome" --window-size=1400,1100 --virtual-time-budget=8000 --dump-dom "$HTTP/#job=$id" \
    >"$T/dom-ended.html" 2>>"$T/chromium.log" || fail "chromium --dump-dom failed: $(tail -5 "$T/chromium.log")"
grep -q '<td class="warn" data-health="OK">OK, 1 straggler, memory warning (as it ended)</td>' "$T/dom-ended.html" ||
    fail "jobs table after the stop: $(grep -o '<td class="[^"]*" data-health="[^"]*">[^<]*' "$T/dom-ended.html")"
grep -q "<p id=\"job-health\" class=\"warn\" data-state=\"OK\">as the job ended: straggler: rank 1 (job$id-policy-1 on na)" \
    "$T/dom-ended.html" || fail "health line after the stop: $(grep -o '<p id="job-health"[^<]*' "$T/dom-ended.html")"
grep -q "<polyline class=\"series straggler\" data-worker=\"job$id-policy-1\"" "$T/dom-ended.html" ||
    fail "rank 1 not a straggler after the stop: $(grep -o '<polyline class="[^"]*" data-worker="[^"]*"' "$T/dom-ended.html" | sort -u)"
memory_marks "$T/dom-ended.html" || fail "memory marks after the stop: $(grep -o '<circle class="memory-mark"[^>]*>' "$T/dom-ended.html")"
mkdir -p "${TROUPE_ARTIFACTS:-$T/artifacts}"
shot=${TROUPE_ARTIFACTS:-$T/artifacts}/dashboard-ended-marks.png
rm -f "$shot"
(cd "$T" && timeout 90 "$CHROMIUM" --headless --disable-dev-shm-usage --disable-gpu --no-sandbox --no-first-run \
    --hide-scrollbars --user-data-dir="$T/chrome" --window-size=1400,1100 --virtual-time-budget=8000 \
    --screenshot="$shot" "$HTTP/#job=$id" 2>>"$T/chromium.log") || fail "screenshot failed"
[ -s "$shot" ] || fail "no screenshot at $shot"
pass "stopped: the dashboard keeps 'OK, 1 straggler, memory warning (as it ended)', rank 1 bold, the memory rings; $shot"
