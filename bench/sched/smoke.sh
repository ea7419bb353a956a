#!/usr/bin/env bash
# bench.sched.smoke: troupe-bench-sched for 0.1 s a case on 200 nodes; every
# feasible case placed and released groups, none waited for room, and the
# queue pass ran.
source "$(dirname "$0")/../smoke.bash"
run_logged sched "$TROUPE_BIN/bench/sched/troupe-bench-sched" --seconds 0.1 --nodes 200 --json "$T/sched.json"
# STRICT_PACK of 64 workers fits no node: reported infeasible, with no rate.
measured "$T/sched.json" "every feasible case placed and released groups" \
    '[.results[] | select(.strategy != "STRICT_PACK" or .workers < 64)] as $f
     | ($f | length) == 22 and all($f[]; .place_release_per_s > 0 and .waited == 0)'
measured "$T/sched.json" "the queue pass started jobs" '.queue_pass.passes_per_s > 0 and .queue_pass.started_per_pass > 0'
