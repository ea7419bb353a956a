#!/usr/bin/env bash
# Text a worker or user sends and the head keeps is checked at the head:
# a ReportFailure reason or a SetProfile worker pattern with a newline (or
# any control byte) is refused INVALID_ARGUMENT with the rule, as is one over
# its length (1024 bytes), so `troupe job` never prints a line the head did
# not write and the head never stores megabytes of pattern. e8e9dba stored
# both raw: `troupe job` printed the forged line, and a 2 MiB pattern was
# kept. Re-plant: drop the tr_text_check in check_from (server/failure.c) or
# in tr_js_globs_check (common/jobspec_rules.c).
source "$(dirname "$0")/../lib.sh"
RAW=${RAWCALL:?}
start_head --heartbeat-ms 100 --dead-after 50 # liveness is not under test: a 3.75 s lease, not 400 ms
start_node na 1xH100:80GB
wait_for 10 "node ALIVE" nodes_alive 1
cat >"$T/j.yaml" <<YAML
name: j
cluster: {nodes: [1]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sleep, "60"]}]
YAML
job=$(submit "$T/j.yaml")
wait_for 10 "job $job RUNNING" is_job_state "$job" RUNNING
worker=$(cli -o json job "$job" | jqr '.workers[0].name')
FORGED=$'disk full\nfailure   rank 0 of g (FORGED on na, attempt 0): OK: all is well'

# ReportFailure: a newline, an escape sequence, too long.
out=$("$RAW" "$HEAD" report-failure "$job" "$worker" 0 "$FORGED")
grep -q "code=3 (INVALID_ARGUMENT) message=failure reason of [0-9]* bytes refused: it must be printable ASCII" <<<"$out" ||
    fail "a failure reason with a newline was not refused: $out"
out=$("$RAW" "$HEAD" report-failure "$job" "$worker" 0 $'red \e[31mALERT')
grep -q "(INVALID_ARGUMENT)" <<<"$out" || fail "a failure reason with an escape sequence was not refused: $out"
out=$("$RAW" "$HEAD" report-failure "$job" "$worker" 0 "$(head -c 1025 /dev/zero | tr '\0' x)")
grep -q "(INVALID_ARGUMENT) message=failure reason of 1025 bytes refused" <<<"$out" ||
    fail "a 1025-byte failure reason was not refused: $out"
[ "$(cli -o json job "$job" | jq '.failures | length')" = 0 ] || fail "a refused reason was kept: $(cli -o json job "$job")"
! cli job "$job" | grep_all "FORGED" || fail "troupe job printed the forged line: $(cli job "$job")"
out=$("$RAW" "$HEAD" report-failure "$job" "$worker" 0 "CUDA error: out of memory (tried 2 GiB)")
grep -q "code=0 (OK)" <<<"$out" || fail "a plain failure reason was refused: $out"
cli job "$job" | grep_all "^failure   rank 0 of g .*: INTERNAL: CUDA error: out of memory (tried 2 GiB)$" ||
    fail "the plain reason is not shown: $(cli job "$job")"
pass "failure reasons: newline, escape and 1025 bytes refused with the rule; a plain one kept and shown"

# SetProfile: a newline in the worker patterns, and a 2 MiB pattern.
out=$("$RAW" "$HEAD" set-profile "$job" $'*g*\nprofile   FORGED')
grep -q "code=3 (INVALID_ARGUMENT) message=.*worker patterns is not valid (printable ASCII" <<<"$out" ||
    fail "a worker pattern with a newline was not refused: $out"
out=$("$RAW" "$HEAD" set-profile "$job" @2097152)
grep -q "code=3 (INVALID_ARGUMENT) message=.*worker patterns is 2097152 bytes" <<<"$out" ||
    fail "a 2 MiB worker pattern was not refused: $out"
[ "$(cli -o json job "$job" | jq '.profile.version // 0')" = 0 ] || fail "a refused profile was kept: $(cli -o json job "$job" | jq .profile)"
! cli job "$job" | grep_all "FORGED" || fail "troupe job printed a forged profile line"
out=$("$RAW" "$HEAD" set-profile "$job" "*g*")
grep -q "code=0 (OK)" <<<"$out" || fail "a plain profile setting was refused: $out"
pass "profile worker patterns: newline and 2 MiB refused; a plain one kept"
