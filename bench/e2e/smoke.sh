#!/usr/bin/env bash
# bench.e2e.smoke: troupe-bench-e2e on 200 simulated nodes, 8 workers a
# group, one-call and batched cells (1 and 4 clients), then submit -> all
# RUNNING with 4 real agents once. Every cell must have completed cycles with
# no error: the simulated agents' connections must stay trusted by the head
# for the whole run (the batched cells run well after disconnect_ms).
source "$(dirname "$0")/../smoke.bash"
export TROUPE_SHARED_UID=true # the startup part's workers write into $T as this user
# A batched cell of 4 clients takes 10 x 8 placements a cycle: on a loaded
# machine none may end inside a fixed 0.5 s, so the window grows with it.
window=$(awk -v s="$TROUPE_TEST_SLOWDOWN" 'BEGIN { print 0.5 * s }')
run_logged e2e "$TROUPE_BIN/bench/e2e/troupe-bench-e2e" --head "$HEAD_BIN" --node "$NODE_BIN" --tmp "$T" \
    --workers 8 --batch 1,10 --clients 1,4 --sync false --nodes 200 --seconds "$window" --warmup-ms 100 \
    --startup-reps 1 --log-level warning --json "$T/e2e.json"
measured "$T/e2e.json" "all 4 cells placed and released groups, without errors" \
    '(.cycles | length) == 4 and all(.cycles[]; .ran and .cycles > 0 and .cycles_per_s > 0 and .errors == 0)'
measured "$T/e2e.json" "the batched cells placed whole batches" \
    '[.cycles[] | select(.batch == 10) | .cycles % 10 == 0] | length == 2 and all'
measured "$T/e2e.json" "64 workers started on real agents" '.startup.ran and .startup.runs == 1 and .startup.median_ms > 0'
