#!/usr/bin/env bash
# Every HTTP request is bounded in size and time: a body over 16 KiB is 413
# (and its connection closed, unread), headers past nng's buffer close the
# connection, and clients that send half a request and wait (slowloris) or
# send a body too slowly are cut off after http_idle_ms, without slowing
# anyone else: /healthz and RPC answer while 60 of them hang on. Past
# http_max_conns the most idle go; past http_max_conn_ms any goes.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/hlib.bash"

start_head --http "127.0.0.1:$HPORT" --http-idle-ms 1500
head -c 20000 /dev/zero | tr '\0' a >"$T/big"
expect_code "20 kB body" 413 /metrics --data-binary @"$T/big"
head -c 3000000 /dev/zero | tr '\0' a >"$T/huge"
expect_code "3 MB body" 413 /healthz --data-binary @"$T/huge"
expect_code "Content-Length 10 GB" 413 /healthz -X POST -H "Content-Length: 10000000000"
expect_code "small body on a GET path" 405 /metrics --data-binary "x=1"
code=$(http_code /healthz -H "X-Big: $(head -c 100000 /dev/zero | tr '\0' b)")
[ "$code" = 000 ] || [ "$code" = 400 ] || [ "$code" = 431 ] || fail "100 kB header answered $code"
healthy || fail "head not healthy after oversized requests"
pass "body > 16 KiB: 413 (20 kB, 3 MB, Content-Length 10 GB); 100 kB header: refused ($code); head fine"

# 60 slow clients: half a request line, then nothing; and 5 that promise a
# body and send a tenth of it.
python3 - "$HPORT" >"$T/slow.out" 2>&1 <<'PY' &
import socket, sys, time
port = int(sys.argv[1])
conns = []
for i in range(60):
    s = socket.create_connection(("127.0.0.1", port)); s.sendall(b"GET /metr"); conns.append(s)
for i in range(5):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\ntoken=abc"); conns.append(s)
print("open", len(conns), flush=True)
t0 = time.time(); closed = set()
while time.time() - t0 < 20 and len(closed) < len(conns):
    for i, s in enumerate(conns):
        if i in closed: continue
        s.settimeout(0.01)
        try:
            if s.recv(4096) == b"": closed.add(i); print("closed", i, round(time.time() - t0, 2), flush=True)
        except socket.timeout: pass
        except OSError: closed.add(i); print("closed", i, round(time.time() - t0, 2), flush=True)
print("done closed=%d of %d after %.1f s" % (len(closed), len(conns), time.time() - t0), flush=True)
PY
SLOW=$!
PIDS+=($SLOW)
wait_for 10 "65 slow clients connected" grep -q "open 65" "$T/slow.out"
for i in 1 2 3 4 5; do
    s=$(date +%s%N)
    healthy || fail "healthz failed while slow clients hang"
    cli ping >/dev/null || fail "RPC ping failed while slow clients hang"
    ms=$(( ($(date +%s%N) - s) / 1000000 ))
    [ $ms -lt 2000 ] || fail "healthz + ping took $ms ms with 65 slow clients"
done
pass "while 65 slow clients hang: /healthz and RPC ping answer (last round ${ms} ms)"
wait_for 20 "the slow clients cut off" grep -q "^done closed=65 of 65" "$T/slow.out"
last=$(grep '^closed' "$T/slow.out" | awk '{print $3}' | sort -n | tail -1)
awk -v l="$last" 'BEGIN { exit !(l >= 1.0 && l < 10) }' || fail "cut off after $last s (idle limit 1.5 s)"
grep -q "http: closed [0-9]* connections since the last such line: [1-9][0-9]* idle too long" "$T/head.log" || fail "cut-offs not logged"
healthy || fail "not healthy after"
pass "all 65 slow connections closed by the head within $last s (http_idle_ms 1500), logged; head still healthy"

# Past http_max_conns the most idle connections go, even ones that keep
# trickling bytes: a second head allowing 10, 30 clients sending a byte of
# their request line every 300 ms.
P2=$(free_port); H2=$(free_port)
"$HEAD_BIN" --listen "tcp://127.0.0.1:$P2" --state-dir "$T/s2" --http "127.0.0.1:$H2" --http-max-conns 10 \
    --http-idle-ms 5000 >>"$T/head2.log" 2>&1 &
PIDS+=($!)
wait_for 10 "head 2 serving HTTP" bash -c "[ \"\$(curl -s -m 2 http://127.0.0.1:$H2/healthz)\" = ok ]"
python3 - "$H2" >"$T/many.out" 2>&1 <<'PY' &
import socket, sys, time
port = int(sys.argv[1])
conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(30)]
print("open", len(conns), flush=True)
alive = set(range(30)); t0 = time.time()
while time.time() - t0 < 6:
    for i in list(alive):
        try:
            conns[i].sendall(b"G")
            conns[i].settimeout(0.001)
            if conns[i].recv(1) == b"": alive.discard(i)
        except socket.timeout: pass
        except OSError: alive.discard(i)
    time.sleep(0.3)
print("alive", len(alive), flush=True)
PY
MANY=$!
PIDS+=($MANY)
wait_for 20 "the trickling clients' count" grep -q "^alive" "$T/many.out"
left=$(awk '/^alive/ {print $2}' "$T/many.out")
[ "$left" -le 10 ] && [ "$left" -ge 5 ] || fail "$left of 30 trickling connections left (http_max_conns 10)"
grep -q "http: closed [0-9]* connections since the last such line: .* [1-9][0-9]* over http_max_conns" "$T/head2.log" || fail "not logged"
[ "$(curl -s -m 2 "http://127.0.0.1:$H2/healthz")" = ok ] || fail "head 2 not healthy"
pass "30 trickling connections with http_max_conns 10: $left left, the rest closed and logged; head healthy"

# A connection open past http_max_conn_ms goes even while it keeps sending:
# a third head with 2 s, 3 clients trickling a byte every 300 ms for 8 s.
P3=$(free_port); H3=$(free_port)
"$HEAD_BIN" --listen "tcp://127.0.0.1:$P3" --state-dir "$T/s3" --http "127.0.0.1:$H3" --http-max-conn-ms 2000 \
    --http-idle-ms 60000 >>"$T/head3.log" 2>&1 &
PIDS+=("$!")
wait_for 10 "head 3 serving HTTP" bash -c "[ \"\$(curl -s -m 2 http://127.0.0.1:$H3/healthz)\" = ok ]"
python3 - "$H3" >"$T/old.out" 2>&1 <<'PY' &
import socket, sys, time
port = int(sys.argv[1])
conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
t0 = time.time(); closed = {}
while time.time() - t0 < 8 and len(closed) < 3:
    for i, c in enumerate(conns):
        if i in closed: continue
        try:
            c.sendall(b"G")
            c.settimeout(0.001)
            if c.recv(1) == b"": closed[i] = time.time() - t0
        except socket.timeout: pass
        except OSError: closed[i] = time.time() - t0
    time.sleep(0.3)
print("closed", len(closed), "after", " ".join("%.1f" % closed[i] for i in sorted(closed)), flush=True)
PY
OLD=$!
PIDS+=("$OLD")
wait_for 20 "the old connections' fate" grep -q "^closed" "$T/old.out"
read -r _ n _ times <"$T/old.out"
[ "$n" = 3 ] ||
    fail "only $n of 3 connections that kept sending were closed past http_max_conn_ms 2000 ($(cat "$T/old.out"))"
for t in $times; do
    awk -v t="$t" 'BEGIN { exit !(t >= 1.9 && t < 7) }' || fail "a connection closed after $t s (http_max_conn_ms 2 s): $times"
done
grep -q "http: closed [0-9]* connections since the last such line: .* [1-9][0-9]* open too long" "$T/head3.log" || fail "not logged"
pass "3 connections that kept sending were closed at $times s (http_max_conn_ms 2000), logged"
