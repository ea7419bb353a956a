#!/usr/bin/env bash
# bench.coll.smoke: bench/coll/run.sh with 2 ranks at 4 B and 64 KiB:
# troupe's CPU collective and PyTorch gloo beside it each timed every size,
# and the side-by-side table was written. Without torch (python3-torch) gloo
# cannot run: the test then ends as skipped (77), saying so, after the troupe
# half passed.
source "$(dirname "$0")/../smoke.bash"
run_logged coll "$BENCH/coll/run.sh" "$TROUPE_BIN" "$T/out" 2 4,65536
measured "$T/out/coll-troupe.json" "troupe's all-reduce timed at both sizes" \
    '[.results[] | select(.ranks == 2 and .median_us > 0)] | length == 2'
measured "$T/out/coll-troupe.json" "troupe's 64 KiB all-reduce moved data" \
    'any(.results[]; .bytes == 65536 and .busbw_gbs > 0)'
if torch_python >/dev/null; then
    measured "$T/out/coll-gloo.json" "gloo's all-reduce timed at both sizes" \
        '[.results[] | select(.ranks == 2 and .median_us > 0)] | length == 2'
    measured "$T/out/coll.json" "the side-by-side table has both sizes" '(.rows | length) == 2 and all(.rows[]; .speedup > 0)'
else
    skip_part "no python3 with torch (apt-get install python3-torch): gloo, the peer, not measured"
fi
