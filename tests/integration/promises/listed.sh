#!/usr/bin/env bash
# PROMISES.md names the test of every README promise; a name that is no
# longer registered (a script renamed or removed) would leave its promise
# untested while the list still claims it. Every test named there -
# integration.<suite>.<script> written as suite.script, unit.* names and
# unit.*.* prefixes - must be registered in this build.
source "$(dirname "$0")/../lib.sh"
list=$(dirname "$0")/PROMISES.md
# The registered names, from CMake's test files: not `ctest -N`, which would
# start the running ctest's LastTest.log afresh (scripts/check_tests.sh reads
# the skipped tests' reasons from it).
registered=$(find "$TROUPE_BIN" -name CTestTestfile.cmake -exec sed -n -e 's/^add_test(\[=\[\([^]]*\)\]=\].*/\1/p' \
    -e 's/^add_test(\([^ []*\) .*/\1/p' {} +)
[ "$(wc -l <<<"$registered")" -gt 100 ] || fail "$TROUPE_BIN registers too few tests: $(head -3 <<<"$registered")"
# Tokens like jobs.two_groups, unit.node.gpus.translate_visible, and globs
# ending in * (unit.sched.*, unit.sched.backfill_*).
names=$(grep '^|' "$list" | cut -d'|' -f3 | grep -oE '\b[a-z]+(\.[a-z0-9_]+)+(\.\*|\*)?' | grep -vE '\.(sh|md)$' | sort -u)
n=0 missing=""
for t in $names; do
    case $t in unit.*) want=$t ;; *) want=integration.$t ;; esac
    if [ "${want%\*}" != "$want" ]; then
        grep -q "^${want%\*}" <<<"$registered" || missing="$missing $t"
    else
        grep -qx "$want" <<<"$registered" || missing="$missing $t"
    fi
    n=$((n + 1))
done
[ -z "$missing" ] || fail "PROMISES.md names tests that are not registered:$missing"
[ "$n" -ge 40 ] || fail "only $n test names found in PROMISES.md: $names"
pass "every one of the $n tests PROMISES.md names is registered"
