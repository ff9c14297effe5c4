#!/usr/bin/env bash
# Builds collc with AddressSanitizer + UndefinedBehaviorSanitizer and with
# ThreadSanitizer, and runs the test suite under each. Any report fails.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1

cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCOLLC_SANITIZE=address -DCOLLC_ENABLE_CUDA=OFF >/dev/null
cmake --build build-asan -j"$jobs"
(cd build-asan && ctest -j"$jobs" --output-on-failure -LE "model|bench|sanitize-skip")

cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DCOLLC_SANITIZE=thread -DCOLLC_ENABLE_CUDA=OFF >/dev/null
cmake --build build-tsan -j"$jobs"
(cd build-tsan && ctest -j"$jobs" --output-on-failure -L "concurrency")
