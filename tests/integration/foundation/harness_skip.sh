#!/usr/bin/env bash
# A test that cannot run says why and exits 77 (ctest's SKIP_RETURN_CODE),
# never 0, and still cleans up: skip_test ends it there; skip_part lets the
# rest run and then ends it as skipped, listing each reason; a failure after
# a skip_part is still a failure.
source "$(dirname "$0")/../lib.sh"
LIB=$(cd "$(dirname "$0")/.." && pwd)/lib.sh
gone() { ! alive "$1"; }

# run_inner NAME BODY: run BODY as a test on lib.sh; sets rc and out.
run_inner() {
    printf 'source %q\necho "$T" >%q\n%s\n' "$LIB" "$T/$1.T" "$2" >"$T/$1.sh"
    set +e
    bash "$T/$1.sh" >"$T/$1.out" 2>&1 # a file: a process left behind would hold a pipe open
    rc=$?
    out=$(cat "$T/$1.out")
    set -e
}

run_inner whole '(setsid sleep 311 & echo $! >"'"$T"'/whole.pid"); skip_test "no frobnicator here"; fail "ran past skip_test"'
[ $rc = 77 ] || fail "skip_test exited $rc, not 77: $out"
[ "$(grep -c '^SKIP: no frobnicator here$' <<<"$out")" -ge 1 ] || fail "skip_test did not say why: $out"
wait_for 5 "the skipped test's daemon killed" gone "$(cat "$T/whole.pid")"
[ ! -e "$(cat "$T/whole.T")" ] || fail "the skipped test left its dir"
pass "skip_test: exit 77, 'SKIP: no frobnicator here', its daemon killed and its dir removed"

run_inner part 'skip_part "no widget"; skip_part "no gadget"; pass "the rest ran"'
[ $rc = 77 ] || fail "a test with skipped parts exited $rc, not 77: $out"
grep -q '^ok: the rest ran$' <<<"$out" && grep -q '^SKIP: no widget$' <<<"$out" && grep -q '^SKIP: no gadget$' <<<"$out" ||
    fail "skip_part: the rest did not run, or a reason is missing: $out"
pass "skip_part: the rest ran, then exit 77 naming both parts"

run_inner partfail 'skip_part "no widget"; fail "a real failure"'
[ $rc = 1 ] || fail "a failure after skip_part exited $rc, not 1: $out"
pass "a failure after skip_part is a failure (exit 1)"
