#!/usr/bin/env bash
# bench.store.smoke: bench/store/run.sh at 16 ranks, one round: troupe's job
# store (connections and their first calls, then a set answering 15 blocked
# gets) and PyTorch's TCPStore beside it each measured every figure, and the
# summary put them side by side. Without torch (python3-torch) the TCPStore
# half cannot run: the test then ends as skipped (77), saying so, after the
# troupe half passed.
source "$(dirname "$0")/../smoke.bash"
TCPSTORE_TIMEOUT_S=60 run_logged store "$BENCH/store/run.sh" "$TROUPE_BIN" "$T/out" 16 1
measured "$T/out/store-summary.json" "troupe: connections, fan-out and whole path of 16 ranks" \
    '.results[0].ranks == 16 and .results[0].troupe.runs == 1 and .results[0].troupe.connect_ms > 0 and
     .results[0].troupe.last_ms > 0 and .results[0].troupe.total_ms >= .results[0].troupe.connect_ms'
if torch_python >/dev/null; then
    measured "$T/out/store-summary.json" "TCPStore beside it, and the ratio" \
        '.results[0].tcpstore.runs == 1 and .results[0].tcpstore.connect_ms > 0 and .results[0].tcpstore.last_ms > 0 and
         (.results[0].tcpstore_over_troupe.total_ms > 0)'
else
    skip_part "no python3 with torch (apt-get install python3-torch): TCPStore, the peer, not measured"
fi
