#!/usr/bin/env bash
# No lost output: a worker that writes a burst and exits at once gets every
# line to the head, in order, before the job is reported ended (once, of
# 20,001 lines 5,085 arrived and the final Traceback was missing).
source "$(dirname "$0")/../lib.sh"
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50
start_node na 2xH100:80GB --stop-grace-ms 1000
wait_for 10 "1 node ALIVE" nodes_alive 1
cat >"$T/burst.yaml" <<YAML
name: burst
cluster: {nodes: [2]}
groups:
  - {name: g, workers: 1, resources: {gpu: 1},
     command: [sh, -c, 'seq 1 20001 | sed "s/^/line /"; echo "Traceback (most recent call last): the end"; exit 1']}
YAML
set +e; timeout 60 "$CLI_BIN" submit "$T/burst.yaml" >"$T/out" 2>"$T/err"; rc=$?; set -e
[ $rc = 1 ] || fail "submit should exit 1 on FAILED, got $rc: $(cat "$T/err")"
id=$(head -1 "$T/out")
# The job is FAILED: everything the worker wrote must already be at the head.
timeout 30 "$CLI_BIN" logs "$id" >"$T/logs" || fail "troupe logs $id failed"
n=$(grep -c '^\[job'"$id"'-g-0\] line [0-9]*$' "$T/logs" || true)
[ "$n" = 20001 ] || fail "expected 20001 lines at the head, got $n"
seq 1 20001 | sed "s/^/[job$id-g-0] line /" >"$T/want"
grep '^\[job'"$id"'-g-0\] line ' "$T/logs" | cmp -s - "$T/want" || fail "lines out of order or altered"
[ "$(tail -1 "$T/logs")" = "[job$id-g-0] Traceback (most recent call last): the end" ] ||
    fail "last line: $(tail -1 "$T/logs")"
pass "20001 lines and the final Traceback, in order, before the job ended"
# Follow mode ends only once everything was read, and sees the same.
set +e; timeout 30 "$CLI_BIN" logs -f "$id" >"$T/logs-f" 2>"$T/err-f"; rc=$?; set -e
[ $rc = 1 ] || fail "logs -f of a FAILED job should exit 1 (as submit does), got $rc: $(cat "$T/err-f")"
cmp -s "$T/logs" "$T/logs-f" || fail "logs -f differs from logs ($(wc -l <"$T/logs-f") lines)"
pass "logs -f of the ended job: the same $(wc -l <"$T/logs") lines"
