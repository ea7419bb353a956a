#!/usr/bin/env bash
# A real Prometheus (Debian's prometheus) scrapes the head every second for
# ~15 s while a job's workers report; its HTTP API then shows the per-job
# series under job_id with job being the scrape job (no exported_job: the
# head's labels do not collide with the ones Prometheus sets), the target up,
# and the process_* figures every exporter has.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/hlib.bash"
command -v prometheus >/dev/null || { echo "SKIP: prometheus not installed (Debian package prometheus; scripts/setup.sh installs it)"; exit 0; }

start_cluster --http "127.0.0.1:$HPORT"
id=$(submit_reporter scraped 2)
wait_for 60 "job $id RUNNING" is_job_state "$id" RUNNING

PPORT=$(free_port)
PROM=http://127.0.0.1:$PPORT
cat >"$T/prometheus.yml" <<YAML
global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: troupe-head
    static_configs: [{targets: ['127.0.0.1:$HPORT']}]
YAML
promtool check config "$T/prometheus.yml" >"$T/promtool.out" 2>&1 || fail "promtool check config: $(cat "$T/promtool.out")"
prometheus --config.file="$T/prometheus.yml" --storage.tsdb.path="$T/tsdb" --web.listen-address="127.0.0.1:$PPORT" \
    >>"$T/prometheus.log" 2>&1 &
PIDS+=($!)

# q PROMQL: the query's result vector (JSON) through the HTTP API.
q() { curl -s -m 5 -G "$PROM/api/v1/query" --data-urlencode "query=$1" | jq -c '.data.result'; }
up() { [ "$(q 'up{job="troupe-head"}' | jq -r '.[0].value[1]')" = 1 ]; }
wait_for 30 "Prometheus scraping the head (up == 1)" up
# about 15 scrapes at 1 s
sleep 15
both_losses() { [ "$(q "troupe_train_loss{job_id=\"$id\"}" | jq length)" = 2 ]; }
wait_for 10 "both workers' loss in Prometheus" both_losses
r=$(q "troupe_train_loss{job_id=\"$id\"}")
jq -e --arg id "$id" 'all(.[]; .metric.job == "troupe-head" and .metric.job_id == $id and .metric.group == "policy"
    and (.metric.worker | test("^job[0-9]+-policy-[01]$")) and .metric.instance != null and (has("exported_job") | not))' \
    <<<"$r" >/dev/null || fail "per-job series: $r"
n=$(q 'count({exported_job!=""})' | jq length)
[ "$n" = 0 ] || fail "series with exported_job: $(q '{exported_job!=""}' | head -c 600)"
samples=$(q "count_over_time(troupe_train_loss{job_id=\"$id\"}[30s])" | jq -r '[.[].value[1] | tonumber] | min')
[ "$samples" -ge 5 ] || fail "only $samples samples of the loss in 30 s at 1 s scrapes"
pass "Prometheus scraped the head ($samples samples per series): troupe_train_loss{job_id=\"$id\"} x2, job=\"troupe-head\" kept, no exported_job"

for f in process_cpu_seconds_total process_resident_memory_bytes process_virtual_memory_bytes process_open_fds \
         process_max_fds process_start_time_seconds; do
    v=$(q "$f{job=\"troupe-head\"}" | jq -r '.[0].value[1] // empty')
    [ -n "$v" ] || fail "$f not scraped"
done
rss=$(q 'process_resident_memory_bytes{job="troupe-head"}' | jq -r '.[0].value[1]')
fds=$(q 'process_open_fds{job="troupe-head"}' | jq -r '.[0].value[1]')
start=$(q 'process_start_time_seconds{job="troupe-head"}' | jq -r '.[0].value[1]')
awk -v r="$rss" -v f="$fds" -v s="$start" -v now="$(date +%s)" \
    'BEGIN { exit !(r > 1e6 && r < 1e10 && f > 3 && f < 100000 && s > now - 600 && s <= now) }' ||
    fail "process figures: rss=$rss fds=$fds start=$start"
pass "process_* figures scraped: rss=$rss bytes, $fds open fds, started at $start"

# The conventional names are their own families, not repeated in the generic gauge.
n=$(q "troupe_worker_metric_value{job_id=\"$id\",name=~\"loss|tokens_per_s|mfu|step_ms|gpu_mem_in_use_bytes\"}" | jq length)
[ "$n" = 0 ] || fail "troupe_worker_metric_value repeats the standard figures ($n series)"
pass "troupe_worker_metric_value does not repeat the standard figures"
