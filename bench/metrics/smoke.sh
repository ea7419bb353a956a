#!/usr/bin/env bash
# bench.metrics.smoke: bench/metrics/run.sh with 50 simulated workers x 10
# names at 10 Hz for 1 s (after 1 s of Ping alone): points were acknowledged (on disk), none dropped
# or failed, the `troupe metrics -f` follower and Ping were timed.
source "$(dirname "$0")/../smoke.bash"
IDLE_MS=1000 run_logged metrics "$BENCH/metrics/run.sh" "$TROUPE_BIN" "$T/out" 50 1
json=$(ls "$T"/out/metrics-*-w50.json 2>/dev/null | head -n 1)
measured "${json:-$T/out/metrics-w50.json}" "points were acknowledged, none dropped or failed" \
    '.made > 0 and .acked > 0 and .acked_per_s > 0 and .dropped == 0 and .failed_reports == 0 and .ack_latency_ms.n > 0'
measured "$json" "the follower and Ping were timed" '.follow_latency_ms.n > 0 and .ping_idle_ms.n > 0 and .ping_load_ms.n > 0'
