#!/usr/bin/env bash
# Builds collc with AddressSanitizer + UndefinedBehaviorSanitizer and with
# ThreadSanitizer, and runs the test suite under each. Any report fails.
#
#   ASan+UBSan  every test but the labels model|bench|sanitize-skip. The
#               full-length kill -9 (200 trials) and soak (2 min) carry
#               sanitize-skip; their short variants (rel_kill9_short: 20
#               trials, rel_soak_short: 20 s) run here instead.
#               unit_reduce_f16c (2^32 inputs) carries it too; unit_reduce
#               and unit_reduce_variants run the same loops here. The fuzz
#               targets (ASan+UBSan builds themselves) run for
#               COLLC_FUZZ_SECONDS (20) each.
#   TSan        the tests labelled "concurrency".
#
# Under both, ops_storm runs 10,000 collectives instead of 50,000
# (COLLC_STORM_COLLECTIVES), as the kill and soak tests run short variants.
#
# collcd started by a test is the one its build tree built, so the daemon is
# sanitized too; a report in collcd's log fails the test.
#
#   scripts/sanitize.sh          what `make test` runs (well under 15 min on 2 cores)
#   scripts/sanitize.sh --long   also the full-length kill and soak runs under ASan
#                                (COLLC_SOAK_SECONDS, COLLC_KILL_TRIALS apply) and
#                                the fuzzers for COLLC_FUZZ_SECONDS (default 600)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
long=0
if [ "${1:-}" = "--long" ]; then
	long=1
	export COLLC_FUZZ_SECONDS=${COLLC_FUZZ_SECONDS:-600}
fi

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:halt_on_error=1
# The full-length ops storm (50,000 collectives) takes 7 min under ASan and more
# under TSan on 2 cores; a fifth of it still runs every reconfiguration during
# traffic. --long keeps the full length.
if [ $long -eq 0 ]; then
	export COLLC_STORM_COLLECTIVES=${COLLC_STORM_COLLECTIVES:-10000}
fi
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# liburcu-qsbr is not TSan-instrumented: see the file for the one suppression.
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/reliability/tsan.supp

t_start=$(date +%s)
phase() { echo "== sanitize.sh: $1 ($(( $(date +%s) - t_start )) s so far)"; }

phase "ASan+UBSan build"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCOLLC_SANITIZE=address -DCOLLC_ENABLE_CUDA=OFF >/dev/null
cmake --build build-asan -j"$jobs"
phase "ASan+UBSan tests"
t0=$(date +%s)
asan_rc=0
if [ $long -eq 1 ]; then
	(cd build-asan && ctest -j"$jobs" --output-on-failure -LE "model|bench") || asan_rc=$?
else
	(cd build-asan && ctest -j"$jobs" --output-on-failure -LE "model|bench|sanitize-skip") || asan_rc=$?
fi
asan_s=$(( $(date +%s) - t0 ))

phase "TSan build"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DCOLLC_SANITIZE=thread -DCOLLC_ENABLE_CUDA=OFF -DCOLLC_FUZZ=OFF >/dev/null
cmake --build build-tsan -j"$jobs"
phase "TSan tests"
t0=$(date +%s)
tsan_rc=0
(cd build-tsan && ctest -j"$jobs" --output-on-failure -L "concurrency") || tsan_rc=$?
tsan_s=$(( $(date +%s) - t0 ))

# Both passes run whatever the first one found; either failing fails the script.
verdict() { [ "$1" -eq 0 ] && echo passed || echo FAILED; }
echo "== sanitize.sh: ASan+UBSan tests $(verdict $asan_rc) in ${asan_s} s, TSan tests $(verdict $tsan_rc) in ${tsan_s} s, $(( $(date +%s) - t_start )) s in all"
[ $asan_rc -eq 0 ] && [ $tsan_rc -eq 0 ]
