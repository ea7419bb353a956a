#!/usr/bin/env bash
# check_tests.sh BUILD_DIR LABELS LOG - after ctest ran in BUILD_DIR with
# `-L LABELS` and wrote its output to LOG, check that no module vanished and
# that enough tests PASSED: a missing jq or cmocka, a CMake condition gone
# wrong, a suite renamed away, or a tool a test needs and skips without
# would otherwise pass as "100% tests passed" (ctest counts a skip as a pass).
#
# tests/min_counts holds one floor per module: PREFIX MIN [NEEDS]. A test
# belongs to the longest PREFIX that is its name or a dotted start of it; its
# module is its name less the last part (unit.common.envelope.roundtrip ->
# unit.common.envelope; integration.jobs.stop -> integration.jobs; a two-part
# name is its own module), and every module must have its own line (a line
# for one test, e.g. one that needs root, may take that test out of its
# module's count). For each line: at least MIN tests registered, and at least
# MIN of them passed - skipped ones (exit 77) do not count, and are listed
# with the reason they printed (a line starting with SKIP). NEEDS:
#   cuda  built only with the CUDA toolkit, and runs only on a GPU
#   gpu   runs only on a GPU (or TROUPE_REQUIRE_GPU=1, where a skip fails)
#   fuzz  built only with -DTROUPE_FUZZ=ON
#   env   needs what not every machine gives (root, a namespace, a tmpfs,
#         room to raise a nice value, a second GPU): a skip is listed but
#         not a failure
# Every registered test must also take exit 77 as a skip (SKIP_RETURN_CODE).
set -euo pipefail
dir=$1 labels=$2 log=$3
floors=$(dirname "$0")/../tests/min_counts
bad=0 want=0

cache() { grep -E "^$1" "$dir/CMakeCache.txt" >/dev/null; }
built_cuda=0 built_fuzz=0 have_gpu=0
if cache 'TROUPE_WITH_CUDA:BOOL=ON' && cache 'CMAKE_CUDA_COMPILER:[A-Z]*=/'; then built_cuda=1; fi
if cache 'TROUPE_FUZZ:BOOL=ON'; then built_fuzz=1; fi
if [ "${TROUPE_REQUIRE_GPU:-0}" = 1 ] || nvidia-smi -L >/dev/null 2>&1; then have_gpu=1; fi

# Each test's result in this run, from ctest's per-test lines:
# "12/407 Test  #12: NAME ......   Passed    0.05 sec" (or ***Skipped, ***Failed).
results=$(sed -n 's/^ *[0-9]*\/[0-9]* *Test *#[0-9]*: \([^ ]*\) \.*[* ]*\([A-Za-z]*\).*/\1 \2/p' "$log")
passed=$(awk '$2 == "Passed" { print $1 }' <<<"$results")
skipped=$(awk '$2 == "Skipped" { print $1 }' <<<"$results")
# The output of every test of that run, skipped ones included (read before
# the next ctest command, which starts LastTest.log afresh).
last=$(cat "$dir/Testing/Temporary/LastTest.log" 2>/dev/null || true)

json=$(ctest --test-dir "$dir" --show-only=json-v1 -L "$labels")
registered=$(jq -r '.tests[].name' <<<"$json")
# A test without SKIP_RETURN_CODE 77 would fail where it cannot run - or,
# written to exit 0 instead, pass unseen.
no77=$(jq -r '.tests[] | select(([.properties[]? | select(.name == "SKIP_RETURN_CODE") | .value] | first) != 77) | .name' <<<"$json")
if [ -n "$no77" ]; then
    echo "check_tests: registered without SKIP_RETURN_CODE 77: $(tr '\n' ' ' <<<"$no77")" >&2
    bad=1
fi


lines=$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$floors")
# bucket NAME: the longest PREFIX of tests/min_counts that NAME falls under.
buckets=$(awk 'NR == FNR { need[$1] = 1; next }
    { n = split($0, p, "."); b = ""; s = p[1]
      for (i = 2; i <= n; i++) { s = s "." p[i]; if (s in need) b = s }
      print $0, (b == "" ? "-" : b) }' <(echo "$lines") <(echo "$registered"))

# Every module has its own line (or its tests have lines of their own).
while read -r name bucket; do
    [ -n "$name" ] || continue
    module=$name
    case $name in *.*.*) module=${name%.*} ;; esac
    if [ "$bucket" = - ] || [ ${#bucket} -lt ${#module} ]; then
        echo "check_tests: $name: module $module has no floor in tests/min_counts; add a line: $module N" >&2
        bad=1
    fi
done <<<"$buckets"

while read -r prefix min needs; do
    label=${prefix%%.*}
    grep -qE "^($labels)\$" <<<"$label" || continue
    reg_applies=1 run_applies=1
    case ${needs:-} in
    cuda) reg_applies=$built_cuda; run_applies=$((built_cuda && have_gpu)) ;;
    gpu) run_applies=$have_gpu ;;
    fuzz) reg_applies=$built_fuzz; run_applies=$built_fuzz ;;
    env) run_applies=0 ;;
    '') ;;
    *) echo "check_tests: tests/min_counts: $prefix: unknown NEEDS '$needs' (cuda, gpu, fuzz, env)" >&2; bad=1 ;;
    esac
    mine=$(awk -v b="$prefix" '$2 == b { print $1 }' <<<"$buckets")
    n=$(grep -c . <<<"$mine" || true)
    if [ "$reg_applies" = 1 ] && [ "$n" -lt "$min" ]; then
        echo "check_tests: $dir has $n tests registered under $prefix, expected at least $min (tests/min_counts)" >&2
        bad=1
    fi
    [ "$run_applies" = 1 ] || continue
    want=$((want + min))
    p=$(grep -cxF -f <(echo "$mine") <<<"$passed" || true)
    [ -n "$mine" ] || p=0
    if [ "$p" -lt "$min" ]; then
        echo "check_tests: only $p tests under $prefix passed, the floor is $min (tests/min_counts); skipped tests do not count" >&2
        bad=1
    fi
done <<<"$lines"

# The skipped, each with the reason it printed (ctest keeps every test's
# output in LastTest.log, even of those that did not fail).
nskip=0
if [ -n "$skipped" ]; then
    echo "check_tests: skipped (not counted as passed):"
    for t in $skipped; do
        nskip=$((nskip + 1))
        why=$(awk -v t="$t" '$0 ~ "^[0-9]+/[0-9]+ Test: " t "$" { on = 1; next }
            on && /^<end of output>/ { exit } on && /^SKIP/ { sub(/^SKIP[^:]*: */, ""); if (!seen[$0]++) { printf "%s%s", sep, $0; sep = "; " } }' <<<"$last")
        echo "  $t: ${why:-(no reason printed)}"
    done
fi
npass=$(grep -c . <<<"$passed" || true)
[ -n "$passed" ] || npass=0
if [ "$npass" -lt "$want" ]; then
    echo "check_tests: ctest -L '$labels' in $dir: $npass tests passed; the floors add up to $want (tests/min_counts)" >&2
    bad=1
fi
[ $bad = 0 ] && echo "check_tests: $dir -L '$labels': $npass passed (floor $want), $nskip skipped, every module present"
exit $bad
