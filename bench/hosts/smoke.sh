#!/usr/bin/env bash
# bench.hosts.smoke: bench/hosts/run.sh with 200 simulated agents (auth on,
# one node credential for all), 0.5 s of warm-up and 1 s measured, 5 silent
# and 5 closed deaths, heartbeats every 200 ms (so the silent deaths are DEAD
# in 1.6 s): the agents registered and heartbeated, `troupe status` answered,
# and both kinds of death were seen.
source "$(dirname "$0")/../smoke.bash"
HEAD_ARGS="--heartbeat-ms 200" run_logged hosts "$BENCH/hosts/run.sh" "$TROUPE_BIN" "$T/hosts.json" 200 \
    --warmup-s 0.5 --measure-s 1 --kill 5
measured "$T/hosts.json" "200 agents registered, heartbeated and stayed ALIVE" \
    '.nodes == 200 and .nodes_alive == 200 and .heartbeats_per_s > 0 and .heartbeat_errors == 0 and .heartbeat_p50_ms > 0'
measured "$T/hosts.json" "troupe status answered under the agents" '.status_ok > 0 and .status_failed == 0 and .status_p50_ms > 0'
measured "$T/hosts.json" "silent and closed deaths were seen" \
    '.kill == 5 and .silent_deaths_detected_ms > 0 and .closed_deaths_detected_ms > 0 and .first_error == ""'
