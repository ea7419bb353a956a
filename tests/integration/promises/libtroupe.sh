#!/usr/bin/env bash
# README: libtroupe is the C client (include/troupe/client.h). A C program
# using only the public API drives a real head (libtroupe_check.c; the
# sanitizer build runs it under ASan/UBSan).
source "$(dirname "$0")/../lib.sh"
: "${LIBTROUPE_CHECK:?}"
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50
start_node lt 2xH100:80GB --stop-grace-ms 1000
wait_for 10 "lt ALIVE" nodes_alive 1
out=$("$LIBTROUPE_CHECK" "$HEAD" 2>&1) || fail "libtroupe_check: $out"
echo "$out"
[ "$(grep -c '^ok: ' <<<"$out")" = 6 ] || fail "libtroupe_check ran $(grep -c '^ok: ' <<<"$out") of 6 steps"
pass "libtroupe: open, ping, nodes, submit, wait, logs, list, errors through the public API"
