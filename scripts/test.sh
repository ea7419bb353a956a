#!/usr/bin/env bash
# test.sh - the whole CPU test suite (the README's test command; .ci/run calls it).
#
#  1. install missing packages (scripts/setup.sh)
#  2. build (CUDA parts too when a toolkit is present) and run ctest: unit +
#     integration + the benchmarks' smoke runs (label bench: a few seconds each,
#     asserting that each harness still measures something)
#  3. the deploy tests (label deploy, tests/deploy/): deploy/ run by real engines
#     - the image built and run by podman, compose by podman-compose, the Slurm
#     script under slurmctld/slurmd, the Kubernetes manifests, the systemd units;
#     a test whose engine cannot start here is listed as skipped, with why
#  4. build again with clang -fsanitize=address,undefined and libFuzzer, run
#     unit + integration + a bounded fuzz run
# GPU tests (label gpu) skip here without a GPU; they run on the lent GPU machines.
# After each ctest run, scripts/check_tests.sh fails the command when a module
# is missing or fewer tests passed than the floors in tests/min_counts (a
# skipped test is listed with its reason, never counted); CMake's messages
# about skipped suites are shown, not hidden. Each ctest run gets a TMPDIR of
# its own: a file, mount or process of the tests still there after it (found
# by that TMPDIR in its environment) is named, removed, and fails the command.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
LOGS=$(mktemp -d)
trap 'rm -rf "$LOGS"' EXIT

# configure DIR ARGS...: cmake, showing warnings and any "skipped" notices.
configure() {
    local dir=$1; shift
    cmake -B "$dir" "$@" >"$LOGS/cmake.log" || { cat "$LOGS/cmake.log"; return 1; }
    grep -iE "skip|not found" "$LOGS/cmake.log" || true
}

# run_tests DIR LABELS: ctest, then the module and count checks and the
# check that the tests left nothing behind.
run_tests() {
    local rc=0 tmp
    tmp=$(mktemp -d /tmp/troupe-test.XXXXXX)
    # Traversable, not listable: workers that run under uids of their own
    # (integration.security.isolation) reach their workdir below it by path.
    chmod 711 "$tmp"
    TMPDIR=$tmp ctest --test-dir "$1" -L "$2" --output-on-failure -j "$JOBS" 2>&1 | tee "$LOGS/ctest.log" || rc=$?
    left_behind "$tmp" || { [ $rc != 0 ] || rc=1; }
    [ $rc = 0 ] || return $rc
    scripts/check_tests.sh "$1" "$2" "$LOGS/ctest.log"
}

# left_behind TMP: no process still carries TMPDIR=TMP (every test's process
# does), nothing is mounted below it and it is empty; what is, is named and
# removed, and the check fails.
left_behind() {
    local tmp=$1 bad=0 p f procs end=$(($(date +%s) + 5))
    # A process killed by a test's last clean-up may take a moment to go
    # (an exiting sanitizer build unmaps a lot; an orphan waits to be reaped).
    while procs=$(live_with "TMPDIR=$tmp") && [ -n "$procs" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 0.2; done
    for p in $procs; do
        f=$(ps -o pid=,etime=,args= -p "$p" 2>/dev/null) || continue
        echo "left behind: process $f" >&2
        kill -9 "$p" 2>/dev/null || true
        bad=1
    done
    for f in $(awk -v t="$tmp/" 'index($2, t) == 1 { print $2 }' /proc/self/mounts | sort -r); do
        echo "left behind: mount $f" >&2
        umount -l "$f" || true
        bad=1
    done
    for f in "$tmp"/* "$tmp"/.[!.]*; do
        [ -e "$f" ] || continue
        echo "left behind: $(ls -ld "$f")" >&2
        bad=1
    done
    rm -rf "$tmp"
    [ $bad = 0 ] || echo "test.sh: the tests left the above behind (a test must clean up what it makes)" >&2
    return $bad
}

# live_with VAR=VALUE: the pids of live processes (not zombies) whose
# environment holds VAR=VALUE.
live_with() {
    local f p st
    for f in $(grep -lzxF "$1" /proc/[0-9]*/environ 2>/dev/null); do
        p=${f#/proc/}; p=${p%/environ}
        st=$(sed -n 's/^.*) \([A-Za-z]\) .*$/\1/p' "/proc/$p/stat" 2>/dev/null) || continue
        [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ] && echo "$p"
    done
    return 0
}

# The sanitizer run's leak suppressions (tests/lsan.supp) name functions,
# which LeakSanitizer only knows through llvm-symbolizer (Debian: llvm-14);
# without it every suppression silently stops matching.
symbolizer() {
    local s
    for s in "$(command -v llvm-symbolizer || true)" /usr/lib/llvm-14/bin/llvm-symbolizer /usr/bin/llvm-symbolizer-14; do
        [ -n "$s" ] && [ -x "$s" ] && { echo "$s"; return 0; }
    done
    echo "test.sh: no llvm-symbolizer (Debian package llvm-14; scripts/setup.sh installs it): tests/lsan.supp cannot match" >&2
    return 1
}

scripts/setup.sh
SYMBOLIZER=$(symbolizer)

echo "== build (release)"
configure build -S . -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "$JOBS"
echo "== tests (release)"
run_tests build 'unit|integration|gpu|bench'

echo "== deploy tests (podman image and containers, podman-compose, Slurm, Kubernetes manifests, systemd units)"
start=$SECONDS
run_tests build deploy
skipped=$(grep -cE '\*\*\*Skipped' "$LOGS/ctest.log" || true)
echo "== deploy tests ran in $((SECONDS - start)) s; skipped: ${skipped} (each names why in its output above)"

echo "== build (clang, address+undefined sanitizers, libFuzzer)"
CC=clang configure build-asan -S . -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTROUPE_WITH_CUDA=OFF \
    -DTROUPE_SANITIZE=ON -DTROUPE_FUZZ=ON -DTROUPE_BENCH_GRPC=OFF
cmake --build build-asan -j "$JOBS"
echo "== tests (sanitizers + fuzz)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:external_symbolizer_path=$SYMBOLIZER LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    run_tests build-asan 'unit|integration|fuzz'
echo "== all tests passed"
