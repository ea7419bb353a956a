#!/usr/bin/env bash
# test.sh - the whole CPU test suite (the README's test command; .ci/run calls it).
#
#  1. install missing packages (scripts/setup.sh)
#  2. build (CUDA parts too when a toolkit is present) and run ctest: unit + integration
#  3. the deploy tests (label deploy, tests/deploy/): deploy/ run by real engines
#     - the image built and run by podman, compose by podman-compose, the Slurm
#     script under slurmctld/slurmd, the Kubernetes manifests, the systemd units;
#     a test whose engine cannot start here is listed as skipped, with why
#  4. build again with clang -fsanitize=address,undefined and libFuzzer, run
#     unit + integration + a bounded fuzz run
# GPU tests (label gpu) skip here without a GPU; they run on the lent GPU machines.
# After each ctest run, scripts/check_tests.sh fails the command when a suite
# is missing or fewer tests ran than the floors in tests/min_counts; CMake's
# messages about skipped suites are shown, not hidden.
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

# run_tests DIR LABELS: ctest, then the suite and count checks.
run_tests() {
    local rc=0
    ctest --test-dir "$1" -L "$2" --output-on-failure -j "$JOBS" 2>&1 | tee "$LOGS/ctest.log" || rc=$?
    [ $rc = 0 ] || return $rc
    scripts/check_tests.sh "$1" "$2" "$LOGS/ctest.log"
}

scripts/setup.sh

echo "== build (release)"
configure build -S . -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "$JOBS"
echo "== tests (release)"
run_tests build 'unit|integration|gpu'

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
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    run_tests build-asan 'unit|integration|fuzz'
echo "== all tests passed"
