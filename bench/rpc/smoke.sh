#!/usr/bin/env bash
# bench.rpc.smoke: bench/rpc/run.sh with 64-byte echoes at 1 and 64 clients,
# one round of 300 ms (troupe-head and raw nng; gRPC where its peer was
# built): every cell made calls without errors, and the goals could be
# computed (run.sh exits 3 when a cell is missing).
source "$(dirname "$0")/../smoke.bash"
run_logged rpc "$BENCH/rpc/run.sh" "$TROUPE_BIN" "$T/rpc.json" --sizes 64 --clients 1,64 --rounds 1 \
    --warmup-ms 100 --duration-ms 300
measured "$T/rpc.json" "troupe and nng cells made calls, without errors" \
    '[.cells[] | select(.system == "troupe" or .system == "nng")] as $c
     | ($c | length) == 4 and all($c[]; .ran and .calls > 0 and .calls_per_s > 0 and .p50_us > 0 and .errors == 0)'
measured "$T/rpc.json" "every cell that ran made calls" 'all(.cells[] | select(.ran); .calls > 0 and .errors == 0)'
