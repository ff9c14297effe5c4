#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time from its seed corpus.
#
#   run_fuzz.sh FUZZER SEED_CORPUS_DIR ARTIFACT_DIR
#
# COLLC_FUZZ_SECONDS (default 20) bounds the run; COLLC_FUZZ_JOBS (default 1)
# runs that many fuzzing processes. New inputs go to a scratch corpus, never
# into the seed corpus. A crash leaves the input in ARTIFACT_DIR and prints
# the command that replays it. Exit 0 when no property failed.
set -u
fuzzer=$1 seeds=$2 artifacts=$3
name=$(basename "$fuzzer")
secs=${COLLC_FUZZ_SECONDS:-20}
jobs=${COLLC_FUZZ_JOBS:-1}

if [ ! -x "$fuzzer" ]; then
	echo "FAIL: $name: $fuzzer was not built"
	exit 1
fi
if [ ! -d "$seeds" ] || [ -z "$(ls -A "$seeds")" ]; then
	echo "FAIL: $name: no seed corpus in $seeds"
	exit 1
fi
mkdir -p "$artifacts"
work=$(mktemp -d "${TMPDIR:-/tmp}/collc-$name-XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus"
log="$work/log"

# The seeds first, as a regression run: any of them failing fails the test
# at once with the input named.
echo "$name: replaying $(ls "$seeds" | wc -l) seeds from $seeds"
if ! timeout -k 5 120 "$fuzzer" -runs=0 -artifact_prefix="$artifacts/" "$seeds" >"$log" 2>&1; then
	cat "$log"
	echo "FAIL: $name: a seed input breaks a property (see above)"
	exit 1
fi

seed=${COLLC_FUZZ_SEED:-$(( ($(date +%s%N) / 1000) % 2147483647 ))}
echo "$name: fuzzing for ${secs} s (seed $seed, $jobs job(s); replay with COLLC_FUZZ_SEED=$seed)"
args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=4096
      -print_final_stats=1 -seed="$seed" -artifact_prefix="$artifacts/")
if [ "$jobs" -gt 1 ]; then
	args+=(-jobs="$jobs" -workers="$jobs")
fi
timeout -k 10 $((secs + 120)) "$fuzzer" "${args[@]}" "$work/corpus" "$seeds" >"$log" 2>&1
rc=$?
execs=$(grep -h 'stat::number_of_executed_units' "$log" "$work"/fuzz-*.log 2>/dev/null |
	awk '{s += $2} END {print s + 0}')
if [ $rc -ne 0 ]; then
	tail -n 60 "$log"
	crash=$(grep -ho "Test unit written to .*" "$log" | head -1 | sed 's/Test unit written to //')
	[ $rc -eq 124 ] && echo "FAIL: $name: watchdog: the fuzzer ran past $((secs + 120)) s"
	echo "FAIL: $name: a property failed after $execs executions (exit $rc, seed $seed)"
	if [ -n "$crash" ]; then
		echo "  input: $crash ($(stat -c %s "$crash") bytes): $(od -An -tx1 -N64 "$crash" | tr -s ' \n' ' ')..."
		echo "  replay: $fuzzer $crash"
	fi
	exit 1
fi
corpus=$(ls "$work/corpus" | wc -l)
cov=$(grep -ho 'cov: [0-9]*' "$log" | tail -1)
echo "$name: PASS: $execs executions in ${secs} s, $corpus new corpus inputs, ${cov:-cov: ?}"
