# smoke.bash - sourced by each bench/<name>/smoke.sh, the benchmark's short run
# in the test command (ctest -L bench, registered as bench.<name>.smoke by
# bench/CMakeLists.txt). A smoke run measures for a few seconds with the
# benchmark's own harness and then asserts that it measured something -
# non-zero counts and rates in its JSON, not just exit 0 - so that a harness
# that stopped measuring (a simulated agent the head no longer trusts, a
# credential it no longer takes) fails here instead of in the next
# benchmark run. The figures of a smoke run are not results.
#
# tests/integration/lib.sh gives the temp dir $T, the watchdog, skip_test and
# the clean-up of every process the run started.
source "$(dirname "${BASH_SOURCE[0]}")/../tests/integration/lib.sh"
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# measured FILE WHAT JQ_FILTER: the JSON in FILE satisfies the filter (one jq
# boolean), or the run fails naming WHAT and showing the JSON.
measured() {
    local file=$1 what=$2 filter=$3
    [ -s "$file" ] || fail "$what: the benchmark wrote no JSON ($file)"
    jq -e "$filter" "$file" >/dev/null ||
        fail "$what: not measured ($filter is false); the JSON: $(head -c 3000 "$file")"
    pass "$what"
}

# run_logged NAME CMD...: CMD with its output in $T/NAME.log, shown on failure
# (the tail) and its exit status checked.
run_logged() {
    local name=$1 rc=0 t0
    shift
    t0=$(date +%s%N)
    "$@" >"$T/$name.log" 2>&1 || rc=$?
    if [ "$rc" != 0 ]; then
        tail -n 40 "$T/$name.log" >&2
        fail "$name exited $rc: $*"
    fi
    echo "$name ran in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
}

# torch_python: the python3 with torch (Debian's python3-torch lives with
# /usr/bin/python3), or a skip saying it is missing.
torch_python() {
    local p
    for p in /usr/bin/python3 python3; do
        if "$p" -c 'import torch' 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    return 1
}
