#!/usr/bin/env bash
# bench.rdzv.smoke: bench/rdzv/run.sh at 8 ranks (the profile-change fan-out
# at 2): the NCCL-ID rendezvous, the job store and the profile change each
# reached their last rank, and PyTorch's TCPStore beside them did too. (Below
# 16 ranks: 16 connections opened at once can make the head's
# pre-authentication budget reset one of them, a head matter of its own.)
# Without torch (python3-torch) the TCPStore half cannot run: the test then
# ends as skipped (77), saying so, after the troupe half passed.
source "$(dirname "$0")/../smoke.bash"
CONTROL_RANKS=2 TCPSTORE_TIMEOUT_S=30 run_logged rdzv "$BENCH/rdzv/run.sh" "$TROUPE_BIN" "$T/out" 8
for f in troupe store control; do
    measured "$T/out/rdzv-$f.json" "rdzv-$f: every size reached its last rank" \
        '(.results | length) > 0 and all(.results[]; .ranks >= 2 and .last_ms > 0 and .median_ms > 0)'
done
if torch_python >/dev/null; then
    measured "$T/out/rdzv-tcpstore.json" "TCPStore: every size reached its last rank" \
        '(.results | length) == 1 and all(.results[]; .last_ms > 0)'
else
    skip_part "no python3 with torch (apt-get install python3-torch): TCPStore, the peer, not measured"
fi
