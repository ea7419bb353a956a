#!/usr/bin/env bash
# bench.hosts.smoke: bench/hosts/run.sh with 12 simulated agents (auth on,
# one node credential for all), 0.5 s of warm-up and 1 s measured, 3 silent
# and 3 closed deaths, heartbeats every 200 ms (so the silent deaths are DEAD
# in 1.6 s): the agents registered and heartbeated, `troupe status` answered,
# and both kinds of death were seen. (Fewer than 16 agents: 16 connections
# opened at once can make the head's pre-authentication budget reset one of
# them, a head matter of its own.)
source "$(dirname "$0")/../smoke.bash"
HEAD_ARGS="--heartbeat-ms 200" run_logged hosts "$BENCH/hosts/run.sh" "$TROUPE_BIN" "$T/hosts.json" 12 \
    --warmup-s 0.5 --measure-s 1 --kill 3
measured "$T/hosts.json" "12 agents registered, heartbeated and stayed ALIVE" \
    '.nodes == 12 and .nodes_alive == 12 and .heartbeats_per_s > 0 and .heartbeat_errors == 0 and .heartbeat_p50_ms > 0'
measured "$T/hosts.json" "troupe status answered under the agents" '.status_ok > 0 and .status_failed == 0 and .status_p50_ms > 0'
measured "$T/hosts.json" "silent and closed deaths were seen" \
    '.kill == 3 and .silent_deaths_detected_ms > 0 and .closed_deaths_detected_ms > 0 and .first_error == ""'
