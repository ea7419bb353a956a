#!/usr/bin/env bash
# bench.elastic.smoke: bench/elastic/run.sh, one round: a rank of an elastic
# group of 3 is killed and every phase of the shrink and of the grow-back was
# timed (non-negative, and the total under 30 s).
source "$(dirname "$0")/../smoke.bash"
export TROUPE_SHARED_UID=true
run_logged elastic "$BENCH/elastic/run.sh" "$TROUPE_BIN" "$T/elastic.json" 1
measured "$T/elastic.json" "kill -9 of a rank -> survivors' next step (detect, agreement, rebuild, sync, redone) and the grow-back, each timed" \
    '.rounds == 1 and ([.results[]] | all(length == 1 and .[0] >= 0)) and .results.total_ms[0] > 0 and .results.total_ms[0] < 30000 and .results.grow_total_ms[0] > 0'
