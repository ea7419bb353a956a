#!/usr/bin/env bash
# unknown_case.sh DIR - every cmocka suite built under DIR (executables named
# test_*) refuses a case name it does not have: exit 2 naming it
# (tr_test_main). cmocka's own filter ran nothing and exited 0, so a case
# misspelled in a CMakeLists.txt passed without running.
set -euo pipefail
dir=$1 n=0 bad=""
while IFS= read -r exe; do
    rc=0
    out=$("$exe" no_such_case_xyz /bin/true 2>&1) || rc=$? # the launcher suite also takes a program path
    if [ "$rc" != 2 ] || ! grep -qE "no (test )?(case )?named 'no_such_case_xyz'" <<<"$out"; then
        bad="$bad ${exe#"$dir"/}(exit $rc)"
    fi
    n=$((n + 1))
done < <(find "$dir" -type f -executable -name 'test_*' | sort)
[ -z "$bad" ] || { echo "FAIL: these suites do not refuse an unknown case name:$bad" >&2; exit 1; }
[ "$n" -ge 10 ] || { echo "FAIL: only $n unit test executables under $dir" >&2; exit 1; }
echo "ok: $n unit test executables refuse an unknown case name (exit 2, named)"
