#!/usr/bin/env bash
# /metrics on a live head with a running job whose workers report: the
# output passes `promtool check metrics` and says what the cluster is (nodes,
# GPUs, jobs by state, RPC counts and latency histograms, metric ingest) and
# the workers' newest loss/tokens/MFU/memory with job, group and worker
# labels. The address is logged and shown by `troupe status`; --http off
# serves nothing; a bad or taken --http address stops the head with a reason.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/hlib.bash"
command -v promtool >/dev/null || skip_test "promtool not installed (Debian package prometheus; scripts/setup.sh installs it)"

start_cluster --http "127.0.0.1:$HPORT"
grep -q "http serving url=$HTTP " "$T/head.log" || fail "head log does not say where HTTP is: $(grep http "$T/head.log")"
[ "$(cli -o json status | jqr .http)" = "$HTTP" ] || fail "troupe status: $(cli -o json status)"
cli status | grep_all -x "http      $HTTP" || fail "troupe status table: $(cli status)"
pass "HTTP address logged at start and shown by troupe status ($HTTP)"

id=$(submit_reporter prom 2)
wait_for 60 "job $id RUNNING" is_job_state "$id" RUNNING
has_loss() { curl -s "$HTTP/metrics" | grep -c "^troupe_train_loss{job_id=\"$id\"" | grep_all -x 2; }
wait_for 60 "both workers' loss on /metrics" has_loss
curl -s -D "$T/headers" "$HTTP/metrics" >"$T/metrics.txt"
grep -qi '^Content-Type: text/plain; version=0.0.4' "$T/headers" || fail "content type: $(cat "$T/headers")"
promtool check metrics <"$T/metrics.txt" >"$T/promtool.out" 2>&1 || fail "promtool check metrics: $(cat "$T/promtool.out")"
# job and instance are Prometheus's own labels: a series carrying one would be renamed exported_job
! grep -qE '[{,](job|instance)="' "$T/metrics.txt" || fail "a label Prometheus sets itself: $(grep -E '[{,](job|instance)="' "$T/metrics.txt" | head -3)"
for f in process_cpu_seconds_total process_resident_memory_bytes process_virtual_memory_bytes process_open_fds \
         process_max_fds process_start_time_seconds; do
    grep -qE "^$f [0-9.e+]+$" "$T/metrics.txt" || fail "$f missing: $(grep ^process_ "$T/metrics.txt")"
done
! grep -E '^troupe_worker_metric_value\{.*name="(loss|tokens_per_s|mfu|step_ms|gpu_mem_in_use_bytes)"' "$T/metrics.txt" ||
    fail "troupe_worker_metric_value repeats the standard figures"
pass "promtool check metrics: no problems in $(wc -l <"$T/metrics.txt") lines; no job/instance label, process_* present"

m() { grep -E "^$1 " "$T/metrics.txt" | awk '{print $2}'; }
[ "$(m 'troupe_nodes\{state="alive"\}')" = 3 ] || fail "nodes alive: $(grep troupe_nodes "$T/metrics.txt")"
# the job's virtual node of 4 GPUs is held whole; troupe status says the same
free=$(cli -o json status | jqr .gpus.free)
[ "$(m troupe_gpus)" = 28 ] && [ "$(m troupe_gpus_allocated)" = 4 ] && [ "$free" = 24 ] || fail "gpus: $(grep "^troupe_gpus" "$T/metrics.txt" | tr "\n" " ")"
[ "$(m 'troupe_jobs\{state="running"\}')" = 1 ] || fail "jobs: $(grep troupe_jobs "$T/metrics.txt")"
[ "$(m troupe_pending_groups)" = 0 ] || fail "pending groups: $(m troupe_pending_groups)"
pass "nodes 3 alive, 28 GPUs of which 4 allocated (= troupe status), 1 job running, 0 pending groups"
# start_cluster: 100 ms heartbeats, DEAD after 50 (5 s); 3 agents are far below
# max_heartbeats_per_s, so the period told is heartbeat_ms.
[ "$(m troupe_heartbeat_period_seconds)" = 0.100 ] && [ "$(m troupe_node_dead_timeout_seconds)" = 5.000 ] ||
    fail "liveness gauges: $(grep -E '^troupe_(heartbeat|node_dead)' "$T/metrics.txt")"
[ "$(cli -o json status | jqr .nodes.heartbeat_ms)" = 100 ] || fail "status heartbeat_ms: $(cli -o json status)"

rep=$(m 'troupe_rpc_requests_total\{method="troupe.v1.Head/ReportMetrics",code="OK"\}')
[ -n "$rep" ] && [ "$rep" -gt 0 ] || fail "no ReportMetrics count: $(grep ReportMetrics "$T/metrics.txt" | head -3)"
inf=$(m 'troupe_rpc_request_duration_seconds_bucket\{method="troupe.v1.Head/ReportMetrics",le="\+Inf"\}')
cnt=$(m 'troupe_rpc_request_duration_seconds_count\{method="troupe.v1.Head/ReportMetrics"\}')
[ "$inf" = "$cnt" ] && [ "$cnt" -ge "$rep" ] || fail "histogram: +Inf=$inf count=$cnt ok=$rep"
stored=$(m troupe_metric_points_stored_total)
[ "$stored" -gt 0 ] && [ "$(m troupe_metric_points_dropped_total)" = 0 ] || fail "ingest: $(grep troupe_metric_ "$T/metrics.txt")"
pass "RPC: $rep ReportMetrics answered OK, histogram count $cnt = +Inf bucket; ingest: $stored points stored, 0 dropped"

for r in 0 1; do
    w="job$id-policy-$r"
    for f in troupe_train_loss troupe_train_tokens_per_second troupe_train_mfu_ratio \
             troupe_train_gpu_memory_in_use_bytes troupe_train_step_duration_seconds troupe_train_step; do
        v=$(m "$f\{job_id=\"$id\",group=\"policy\",worker=\"$w\"\}")
        [ -n "$v" ] || fail "$f for $w missing: $(grep "$w" "$T/metrics.txt" | head -5)"
    done
    # mx_worker reports RANK*1e6 + i: the newest loss is this worker's
    loss=$(m "troupe_train_loss\{job_id=\"$id\",group=\"policy\",worker=\"$w\"\}")
    awk -v l="$loss" -v r="$r" 'BEGIN { exit !(l >= r * 1e6 && l < (r + 1) * 1e6) }' || fail "$w loss $loss"
    # step_ms (reported in ms, exported in seconds) is mx_worker's 5th name:
    # its newest value is 4 past the newest loss, or 1 before it
    secs=$(m "troupe_train_step_duration_seconds\{job_id=\"$id\",group=\"policy\",worker=\"$w\"\}")
    awk -v l="$loss" -v s="$secs" 'BEGIN { d = s * 1000 - l; exit !((d > 3.99 && d < 4.01) || (d > -1.01 && d < -0.99)) }' ||
        fail "$w step_ms not in seconds: $secs (loss $loss)"
done
pass "per-worker gauges (loss, tokens/s, MFU, GPU memory, step time in seconds, step) for both workers with job/group/worker labels"

before=$(m troupe_metric_points_stored_total)
cli stop "$id" >/dev/null
wait_for 30 "job $id STOPPED" is_job_state "$id" STOPPED
curl -s "$HTTP/metrics" >"$T/after.txt"
promtool check metrics <"$T/after.txt" >"$T/promtool2.out" 2>&1 || fail "promtool after stop: $(cat "$T/promtool2.out")"
! grep -q "job_id=\"$id\"" "$T/after.txt" || fail "series of a stopped job still exported: $(grep "job_id=\"$id\"" "$T/after.txt" | head -3)"
total=$(grep -E "^troupe_metric_points_stored_total " "$T/after.txt" | awk '{print $2}')
[ "$total" -ge "$before" ] || fail "stored total went back: $before -> $total"
pass "after stop: still valid, no series of the job left (its workers' gauges and counters), totals kept ($total)"

# --http off, a bad address, an address taken.
P2=$(free_port)
"$HEAD_BIN" --listen "tcp://127.0.0.1:$P2" --state-dir "$T/s2" --http off >>"$T/head2.log" 2>&1 &
PIDS+=($!)
wait_for 10 "head 2" env TROUPE_HEAD="tcp://127.0.0.1:$P2" "$CLI_BIN" status
[ "$(TROUPE_HEAD="tcp://127.0.0.1:$P2" cli -o json status | jqr .http)" = "" ] || fail "--http off: status says http"
grep -q "http off" "$T/head2.log" || fail "--http off not logged"
rc=0; out=$("$HEAD_BIN" --listen "tcp://127.0.0.1:$(free_port)" --state-dir "$T/s3" --http nonsense 2>&1) || rc=$?
[ $rc = 2 ] && [[ "$out" == *"http 'nonsense': use HOST:PORT"* ]] || fail "bad --http: rc=$rc $out"
rc=0; out=$(timeout 20 "$HEAD_BIN" --listen "tcp://127.0.0.1:$(free_port)" --state-dir "$T/s4" --http "127.0.0.1:$HPORT" 2>&1) || rc=$?
[ $rc = 1 ] && [[ "$out" == *"http: cannot serve"* ]] || fail "taken --http: rc=$rc $out"
pass "--http off serves nothing (status empty); a bad address exits 2, a taken one exits 1, both with the reason"
