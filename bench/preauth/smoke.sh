#!/usr/bin/env bash
# bench.preauth.smoke: bench/preauth/run.sh's frames cell (400 connections
# that never show a credential, each all but the last byte of a 4 MiB frame)
# with 20 `troupe status` samples: the attack connected and sent, the head's
# RSS was sampled, status answered. (integration.security.preauth_bounds
# asserts the bounds themselves.)
source "$(dirname "$0")/../smoke.bash"
CELLS=frames SAMPLES=20 run_logged preauth "$BENCH/preauth/run.sh" "$TROUPE_BIN" "$T/out"
measured "$T/out/preauth-frames.json" "400 unauthenticated connections sent their frames, the head was sampled" \
    '.conns == 400 and .opened == 400 and .bytes_sent > 0 and .rss_before_kb > 0 and .rss_peak_kb > 0 and .attack_s > 0'
measured "$T/out/preauth-frames.json" "troupe status answered under the attack" \
    '.status_ok == 20 and .status_failed == 0 and .status_p50_ms > 0'
