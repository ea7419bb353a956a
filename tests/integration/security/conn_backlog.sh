#!/usr/bin/env bash
# A job's ranks dialling the head at once all get in on their first try. The
# head's listening socket has an accept queue far beyond nng's 128 (up to
# net.core.somaxconn), on tcp:// and ipc://, and 600 ranks, each on its own
# connection made at the same moment, all have their first call (StoreCheck)
# answered. With nng's queue of 128 the kernel dropped the handshakes beyond
# it and each such rank waited for its SYN to be sent again 1 s (then 3 s)
# later: at 2,048 ranks at once 1,187 listen overflows and 732 SYN
# retransmissions in one run (nstat), connections 1.7 s instead of 0.6 s.
# Re-plant: delete the backlog_raise(srv) call in tr_rpc_server_start
# (common/rpc_server.c); the queue checks then read 128.
source "$(dirname "$0")/../lib.sh"

RDZV=$TROUPE_BIN/bench/rdzv/rdzv_bench
[ -x "$RDZV" ] || fail "$RDZV missing: build with -DTROUPE_BENCHMARKS=ON (the default)"
command -v ss >/dev/null || skip "no ss (iproute2) to read the accept queue's length"
somax=$(cat /proc/sys/net/core/somaxconn)
[ "$somax" -gt 128 ] || skip "net.core.somaxconn is $somax: the kernel caps every accept queue there"
want=$((somax < 512 ? somax : 512))
umask 077
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/admin.tok"
unset TROUPE_TOKEN
export TROUPE_TOKEN_FILE=$T/admin.tok

# queue_of LINE: the accept queue's length, ss's Send-Q of a listening socket
# (the column after Recv-Q: ss -lx puts the socket's kind first, -lt does not).
queue_of() { awk '{ for (i = 1; i < NF; i++) if ($i == "LISTEN") { print $(i + 2); exit } }' <<<"$1"; }

start_head --token-file "$T/admin.tok" --log-level debug
line=$(ss -ltnH "sport = :$PORT")
[ -n "$line" ] || fail "ss lists no listening socket on port $PORT"
q=$(queue_of "$line")
[ "$q" -ge "$want" ] || fail "the head's tcp:// accept queue is $q connections, want at least $want: $line"
grep -q "rpc: accept queue of $HEAD is $q connections" "$T/head.log" ||
    fail "the head did not log its accept queue: $(grep 'accept queue' "$T/head.log")"
pass "tcp:// accept queue of $q connections (net.core.somaxconn $somax; nng's own is 128)"

# 600 ranks at once: each its own connection and first call, from its own thread.
"$RDZV" --store --connect burst --head "$HEAD" --token-file "$T/admin.tok" --ranks 600 --json "$T/burst.json" \
    >"$T/burst.out" 2>&1 || fail "600 ranks at once: $(tail -5 "$T/burst.out")"
[ "$(jq '.results[0].ranks' "$T/burst.json")" = 600 ] || fail "no result for 600 ranks: $(cat "$T/burst.json")"
pass "600 ranks connecting at once, every first call answered in $(jq '.results[0].connect_ms' "$T/burst.json") ms"
kill "$HEAD_PID"; wait "$HEAD_PID" 2>/dev/null || true

# The same on an ipc:// listener.
sock=$T/head.sock
"$HEAD_BIN" --listen "ipc://$sock" --state-dir "$T/state-ipc" --token-file "$T/admin.tok" --log-level debug \
    >>"$T/head-ipc.log" 2>&1 &
HEAD_PID=$!
PIDS+=("$HEAD_PID")
wait_for 10 "troupe-head to answer on ipc://$sock" "$CLI_BIN" --head "ipc://$sock" status
line=$(ss -lxH | awk -v p="$sock" '$5 == p')
[ -n "$line" ] || fail "ss lists no listening socket at $sock: $(ss -lxH | head -5)"
q=$(queue_of "$line")
[ "$q" -ge "$want" ] || fail "the head's ipc:// accept queue is $q connections, want at least $want: $line"
pass "ipc:// accept queue of $q connections"
