#!/usr/bin/env bash
# check_tests.sh BUILD_DIR LABELS LOG - after ctest ran in BUILD_DIR with
# `-L LABELS` and wrote its output to LOG, check that no suite vanished and
# that no fewer tests ran than the floors in tests/min_counts (a missing jq or
# cmocka, a CMake condition gone wrong, or a suite renamed away would
# otherwise pass as "100% tests passed").
set -euo pipefail
dir=$1 labels=$2 log=$3
floors=$(dirname "$0")/../tests/min_counts
bad=0 want=0
gpu=$(grep -q '^TROUPE_WITH_CUDA:BOOL=ON' "$dir/CMakeCache.txt" && grep -qE '^CMAKE_CUDA_COMPILER:[A-Z]*=/' "$dir/CMakeCache.txt" && echo 1 || echo 0)
registered=$(ctest --test-dir "$dir" -N -L "$labels" | sed -n 's/^ *Test *#[0-9]*: //p')
while read -r prefix min needs; do
    case $prefix in ''|'#'*) continue ;; esac
    label=${prefix%%.*}
    grep -qE "^($labels)\$" <<<"$label" || continue
    # Suites that exist only where their toolchain does (CUDA, libFuzzer builds).
    if [ "${needs:-}" = cuda ] && [ "$gpu" = 0 ]; then continue; fi
    if [ "${needs:-}" = fuzz ] && ! grep -q '^TROUPE_FUZZ:BOOL=ON' "$dir/CMakeCache.txt"; then continue; fi
    n=$(grep -c "^${prefix//./\\.}" <<<"$registered" || true)
    want=$((want + min))
    if [ "$n" -lt "$min" ]; then
        echo "check_tests: $dir has $n tests named $prefix*, expected at least $min (tests/min_counts)" >&2
        bad=1
    fi
done <"$floors"
# A suite with no floor could vanish unseen: every suite registered here
# (the first two parts of a test's name) must have its line.
for suite in $(sed -n 's/^\([a-z0-9_]*\.[a-z0-9_]*\).*/\1/p' <<<"$registered" | sort -u); do
    if ! grep -qE "^${suite//./\\.}[[:space:]]" "$floors"; then
        echo "check_tests: suite $suite ($(grep -c "^${suite//./\\.}\." <<<"$registered") tests) has no floor in tests/min_counts; add one" >&2
        bad=1
    fi
done
ran=$(sed -n 's/.*tests passed, [0-9]* tests failed out of \([0-9]*\)$/\1/p' "$log" | tail -1)
if [ -z "$ran" ] || [ "$ran" -lt "$want" ]; then
    echo "check_tests: ctest -L '$labels' in $dir ran ${ran:-no} tests; the floor is $want (tests/min_counts)" >&2
    bad=1
fi
[ $bad = 0 ] && echo "check_tests: $dir -L '$labels': $ran tests ran (floor $want), every suite present"
exit $bad
