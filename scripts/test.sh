#!/usr/bin/env bash
# test.sh - the whole CPU test suite (the README's test command; .ci/run calls it).
#
#  1. install missing packages (scripts/setup.sh)
#  2. build (CUDA parts too when a toolkit is present) and run ctest: unit + integration
#  3. build again with clang -fsanitize=address,undefined and libFuzzer, run
#     unit + integration + a bounded fuzz run
# GPU tests (label gpu) skip here without a GPU; they run on the lent GPU machines.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}

scripts/setup.sh

echo "== build (release)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$JOBS"
echo "== tests (release)"
ctest --test-dir build -L 'unit|integration|gpu' --output-on-failure -j "$JOBS"

echo "== build (clang, address+undefined sanitizers, libFuzzer)"
CC=clang cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTROUPE_WITH_CUDA=OFF \
    -DTROUPE_SANITIZE=ON -DTROUPE_FUZZ=ON -DTROUPE_BENCH_GRPC=OFF >/dev/null
cmake --build build-asan -j "$JOBS"
echo "== tests (sanitizers + fuzz)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan -L 'unit|integration|fuzz' --output-on-failure -j "$JOBS"
echo "== all tests passed"
