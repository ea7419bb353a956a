#!/usr/bin/env bash
# bench.dp.smoke: bench/dp/run.sh, one round of 1 MiB all-reduces between 2
# processes (troupe's CPU collective, then torch gloo), and troupe-train data
# parallel (a 1-layer model, 7 steps) at N = 1 and 2 under a real head and
# agents: both all-reduces timed, every run's step time measured. Needs torch
# (python3-torch) for gloo, the peer: without it the test is skipped (77).
source "$(dirname "$0")/../smoke.bash"
torch_python >/dev/null || skip_test "no python3 with torch (apt-get install python3-torch): bench/dp's gloo peer cannot run"
ROUNDS=1 AR_RANKS=2 AR_MIB=1 DP_N="1 2" DP_STEPS=7 DP_MODEL="{layers: 1, width: 32, heads: 2, seq_len: 16}" run_logged dp "$BENCH/dp/run.sh" "$TROUPE_BIN" "$T/out"
measured "$T/out/dp.json" "troupe and gloo all-reduced 1 MiB between 2 ranks" \
    '(.allreduce | length) == 1 and all(.allreduce[]; .ranks == 2 and .troupe_ms > 0 and .gloo_ms > 0)'
measured "$T/out/dp.json" "troupe-train steps timed standalone and at N = 1, 2" \
    '[.train_steps.standalone, .train_steps.dp1, .train_steps.dp2] | all(.step_ms > 0)'
