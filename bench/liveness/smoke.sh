#!/usr/bin/env bash
# bench.liveness.smoke: bench/liveness/run.sh, one round of the sigterm and
# kill9 cases with the head's default liveness settings: each fault was
# timed to the job state it must lead to (-1 would be a 30 s timeout). The
# network-cut cases wait out the DEAD timeout and the lease and are left to
# the full run (integration.nodes covers them as behaviour).
source "$(dirname "$0")/../smoke.bash"
export TROUPE_SHARED_UID=true
CASES="sigterm kill9" run_logged liveness "$BENCH/liveness/run.sh" "$TROUPE_BIN" "$T/liveness.json" 1
measured "$T/liveness.json" "agent SIGTERM -> node LEFT and job ended, kill -9 -> job FAILED, each timed" \
    '.rounds == 1 and ([.results.sigterm_left, .results.sigterm_job, .results.kill9_failed] | all(length == 1 and .[0] > 0))'
