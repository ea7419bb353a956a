#!/usr/bin/env bash
# bench.store.smoke: bench/store/run.sh at 16 ranks, one round: troupe's job
# store (connections and their first calls, then a set answering 15 blocked
# gets) and PyTorch's TCPStore beside it each measured every figure, and the
# summary put them side by side; store_conn_phases timed 32 connections to a
# head and to a bare nng echo server. Without torch (python3-torch) the TCPStore
# half cannot run: the test then ends as skipped (77), saying so, after the
# troupe half passed.
source "$(dirname "$0")/../smoke.bash"
TCPSTORE_TIMEOUT_S=60 run_logged store "$BENCH/store/run.sh" "$TROUPE_BIN" "$T/out" 16 1
measured "$T/out/store-summary.json" "troupe: connections, fan-out and whole path of 16 ranks" \
    '.results[0].ranks == 16 and .results[0].troupe.runs == 1 and .results[0].troupe.connect_ms > 0 and
     .results[0].troupe.last_ms > 0 and .results[0].troupe.total_ms >= .results[0].troupe.connect_ms'
# store_conn_phases: 32 connections to a head and to a bare nng echo server.
PHASES=$TROUPE_BIN/bench/store/store_conn_phases
umask 077
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/admin.tok"
export TROUPE_TOKEN_FILE=$T/admin.tok
start_head --token-file "$T/admin.tok"
ECHO_URL=tcp://127.0.0.1:$(free_port)
"$PHASES" --echo "$ECHO_URL" >"$T/echo.log" 2>&1 &
PIDS+=("$!")
run_logged phases-troupe "$PHASES" --head "$HEAD" --token-file "$T/admin.tok" --n 32 --json "$T/phases-troupe.json"
measured "$T/phases-troupe.json" "a connection and its first call through libtroupe to troupe-head" \
    '.side == "troupe" and .n == 32 and .median_us > 0 and .first_call_us > 0 and .second_call_us > 0'
run_logged phases-nng "$PHASES" --nng "$ECHO_URL" --n 32 --json "$T/phases-nng.json"
measured "$T/phases-nng.json" "the same through a bare nng REQ socket to a REP echo server" \
    '.side == "nng" and .n == 32 and .median_us > 0 and .first_call_us > 0 and .second_call_us > 0'
if torch_python >/dev/null; then
    measured "$T/out/store-summary.json" "TCPStore beside it, and the ratio" \
        '.results[0].tcpstore.runs == 1 and .results[0].tcpstore.connect_ms > 0 and .results[0].tcpstore.last_ms > 0 and
         (.results[0].tcpstore_over_troupe.total_ms > 0)'
else
    skip_part "no python3 with torch (apt-get install python3-torch): TCPStore, the peer, not measured"
fi
