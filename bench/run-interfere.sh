#!/bin/bash
# SPDX-License-Identifier: MIT
#
# What collcd's resident grid costs a client's compute kernels, under MPS
# (issue 5: at most 5%). collc-interfere times a compute-bound kernel on GPU 0
# in these conditions, one process each:
#   baseline        MPS, no collcd
#   idle            collcd with its resident grids, no collectives
#   busy<SIZE>      collcd, and two client processes running all-reduces of
#                   SIZE back to back (GPUs 0,1; 0,0 on one GPU) meanwhile
#   baseline-after  MPS, collcd gone again (drift of clocks and temperature)
# with collcd at its default channels and at --max-channels 4 (the grid is
# 1 + lanes x channels blocks of 512 threads; at 64 registers a thread, the
# default, client blocks share a grid block's SM; a grid built with
# -DCOLLC_GRID_BLOCKS_PER_SM=1 takes 128, the whole register file of an SM).
# Prints a table last: condition, channels, grid blocks, SMs the kernel ran on,
# median and min ms, loss vs baseline, and the loss predicted if every grid
# block holds an SM alone. CSV, logs and the table go to $OUT (when set; else
# /tmp/collc-interfere).
#
#   PREBUILT=$PWD/.gpubuild bash bench/run-interfere.sh    # binaries built elsewhere
#   bash bench/run-interfere.sh                            # builds into $BUILD first
#
# Environment: PREBUILT (collcd, collc-interfere, libcollc.so.1 and the
# libraries they need), BUILD (default build-gpu), OUT, LAUNCHES (50),
# TARGET_MS (30: one launch at baseline), CHANNELS ("default 4": values for
# --max-channels), BUSY_SIZES ("64K 256M"), BUSY_GPUS (e.g. 0,1), RUN_TIMEOUT
# (300 s per condition), MPS_DIR (/tmp/collc-mps), MPS_RUNNING=1 (the caller
# started the MPS control daemon with CUDA_MPS_PIPE_DIRECTORY exported: use it,
# do not stop it).
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-gpu}
RESULTS=${OUT:-/tmp/collc-interfere}
LAUNCHES=${LAUNCHES:-50}
TARGET_MS=${TARGET_MS:-30}
CHANNELS=${CHANNELS:-default 4}
BUSY_SIZES=${BUSY_SIZES:-64K 256M}
RUN_TIMEOUT=${RUN_TIMEOUT:-300}
MPS_DIR=${MPS_DIR:-/tmp/collc-mps}
mkdir -p "$RESULTS"
CSV=$RESULTS/interfere.csv
COND=$RESULTS/conditions.tsv
: >"$CSV"
: >"$COND"
: >"$RESULTS/clocks.txt"

. "$ROOT/bench/gpu-lib.sh"
if [ -n "${PREBUILT:-}" ]; then
	bench_prebuilt
	INTERFERE=$PREBUILT/collc-interfere
	COLLCD=$PREBUILT/collcd
else
	bench_build collcd collc-interfere
	INTERFERE=$BUILD/bench/collc-interfere
	COLLCD=$BUILD/daemon/collcd
fi
for b in "$INTERFERE" "$COLLCD"; do
	[ -x "$b" ] || { echo "run-interfere.sh: $b is missing (a CUDA build makes it)"; exit 1; }
done

SOCK=/tmp/collc-interfere-$$.sock # short: $OUT may be too long for a socket path
OWN_MPS=0
stop_mps() {
	[ "$OWN_MPS" = 1 ] || return 0
	echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
	cp "$CUDA_MPS_LOG_DIRECTORY/control.log" "$RESULTS/mps-control.log" 2>/dev/null
	OWN_MPS=0
}
DPID=
stop_collcd() {
	[ -n "$DPID" ] || return 0
	kill -TERM "$DPID" 2>/dev/null
	for _ in $(seq 1 200); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.05; done
	kill -0 "$DPID" 2>/dev/null && kill -KILL "$DPID"
	wait "$DPID" 2>/dev/null
	DPID=
}
cleanup() { stop_collcd; rm -f "$SOCK" "$SOCK.admin"; stop_mps; }
trap cleanup EXIT

if [ "${MPS_RUNNING:-0}" = 1 ]; then
	echo "== MPS: the caller's (${CUDA_MPS_PIPE_DIRECTORY:-default pipe directory})"
else
	echo "== MPS ($MPS_DIR)"
	export CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR/pipe
	export CUDA_MPS_LOG_DIRECTORY=$MPS_DIR/log
	mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
	if nvidia-cuda-mps-control -d; then
		OWN_MPS=1
	else
		echo "run-interfere.sh: nvidia-cuda-mps-control -d failed: collcd --require-mps will refuse"
	fi
fi

clocks() { # label
	printf '%-16s %s\n' "$1" "$(nvidia-smi -i 0 --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
		--format=csv,noheader 2>&1)" >>"$RESULTS/clocks.txt"
}

# One condition: label channels grid-blocks [collc-interfere options]; a row in $COND either way.
measure() {
	local label=$1 ch=$2 grid=$3 rc
	shift 3
	clocks "$label"
	echo "== $label"
	timeout -k 10 "$RUN_TIMEOUT" "$INTERFERE" --launches "$LAUNCHES" --fma-iters "$ITERS" \
		--label "$label" --csv "$CSV" "$@" >"$RESULTS/$label.txt" 2>"$RESULTS/$label.log"
	rc=$?
	sed 's/^/   /' "$RESULTS/$label.txt"
	[ "$rc" = 0 ] || { echo "   exit $rc$([ "$rc" = 124 ] && echo ' (timed out)'); stderr:"; sed 's/^/   | /' "$RESULTS/$label.log" | tail -15; }
	printf '%s\t%s\t%s\t%s\n' "$label" "$ch" "$grid" "$rc" >>"$COND"
}

echo "== calibrate: $TARGET_MS ms a launch, no collcd"
ITERS=$(timeout -k 10 "$RUN_TIMEOUT" "$INTERFERE" --calibrate "$TARGET_MS" 2>"$RESULTS/calibrate.log" |
	awk '/^fma_iters/ { print $2 }')
if [ -z "$ITERS" ]; then
	cat "$RESULTS/calibrate.log"
	echo "run-interfere.sh: calibration failed"
	exit 1
fi
echo "   fma_iters $ITERS"

measure baseline - 0

for ch in $CHANNELS; do
	dargs=(--backend cuda --socket "$SOCK" --foreground --log-level info --require-mps)
	[ "$ch" = default ] || dargs+=(--max-channels "$ch")
	dlog=$RESULTS/collcd-ch$ch.log
	rm -f "$SOCK" "$SOCK.admin"
	echo "== collcd ${dargs[*]}"
	"$COLLCD" "${dargs[@]}" >"$dlog" 2>&1 &
	DPID=$!
	for _ in $(seq 1 1200); do
		[ -S "$SOCK" ] && break
		kill -0 "$DPID" 2>/dev/null || break
		sleep 0.05
	done
	if ! [ -S "$SOCK" ] || ! kill -0 "$DPID" 2>/dev/null; then
		echo "   collcd did not start:"
		sed 's/^/   | /' "$dlog" | tail -15
		printf '%s\t%s\t%s\t%s\n' "idle-${ch}ch" "$ch" "?" "collcd did not start" >>"$COND"
		stop_collcd
		continue
	fi
	# "CUDA backend: 2 GPUs x 2 lanes, 32 channels, grid of 65 blocks x 512 threads per GPU"
	line=$(grep -m1 -o 'CUDA backend: .*grid of [0-9]* blocks.*' "$dlog")
	echo "   $line"
	grep -m1 -o 'MPS:.*' "$dlog" | sed 's/^/   /'
	chans=$(sed -n 's/.* \([0-9]*\) channels,.*/\1/p' <<<"$line")
	grid=$(sed -n 's/.*grid of \([0-9]*\) blocks.*/\1/p' <<<"$line")
	tag=${chans:-$ch}ch
	gopt=()
	[ -n "$grid" ] && gopt=(--grid-blocks "$grid")
	sleep 1 # the grid settles: every block resident and polling
	measure "idle-$tag" "${chans:-$ch}" "${grid:-?}" ${gopt[@]+"${gopt[@]}"}
	for size in $BUSY_SIZES; do
		measure "busy$size-$tag" "${chans:-$ch}" "${grid:-?}" ${gopt[@]+"${gopt[@]}"} --busy-bytes "$size" \
			--socket "$SOCK" ${BUSY_GPUS:+--busy-gpus "$BUSY_GPUS"}
	done
	stop_collcd
done

measure baseline-after - 0
stop_mps

# The table: conditions joined with the CSV rows by label.
{
	echo
	echo "collc-interfere: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nvidia-smi -i 0 --query-gpu=name --format=csv,noheader 2>/dev/null), $LAUNCHES launches, fma_iters $ITERS"
	awk -F'\t' -v csv="$CSV" '
	BEGIN {
		FS = "\t"
		while ((getline line < csv) > 0) {
			n = split(line, f, ",")
			if (f[1] == "label")
				continue
			med[f[1]] = f[9]; mn[f[1]] = f[10]; used[f[1]] = f[13]; sms = f[3]
			pred[f[1]] = f[17]; bw[f[1]] = f[22]
		}
		printf "%-20s %8s %6s %8s %10s %10s %9s %9s %10s %10s\n", "CONDITION", "CHANNELS", "GRID",
			"KERN_SMS", "MEDIAN_MS", "MIN_MS", "LOSS_MED", "LOSS_MIN", "PREDICTED", "LOAD_GB/S"
	}
	{
		l = $1
		if (!(l in med)) {
			why = ($4 !~ /^[0-9]+$/) ? $4 : ($4 == 124 ? "timed out" : "exit " $4)
			printf "%-20s %8s %6s   no result (%s)\n", l, $2, $3, why
			missing += l !~ /^baseline/
			next
		}
		if (l == "baseline") { b = med[l]; bm = mn[l] }
		lm = b ? sprintf("%+.1f%%", (med[l] / b - 1) * 100) : "-"
		ln = bm ? sprintf("%+.1f%%", (mn[l] / bm - 1) * 100) : "-"
		printf "%-20s %8s %6s %4s/%-3s %10.3f %10.3f %9s %9s %10s %10s\n", l, $2, $3, used[l], sms,
			med[l], mn[l], lm, ln, (pred[l] == "" ? "-" : sprintf("%+.1f%%", pred[l])),
			(bw[l] > 0 ? bw[l] : "-")
		if (b && l !~ /^baseline/) {
			x = (med[l] / b - 1) * 100
			if (!nrow++ || x > worst)
				worst = x
		}
	}
	END {
		if (nrow)
			printf "worst loss next to a grid: %+.1f%% (issue 5 target: <= 5%%: %s)%s\n", worst,
				(worst <= 5 ? "met" : "NOT met"),
				(missing ? sprintf("; %d conditions without a result", missing) : "")
	}' "$COND"
	echo "LOSS: median (min) kernel time vs baseline; KERN_SMS: SMs the kernel's blocks ran on (median"
	echo "over launches) / SMs of the GPU; PREDICTED: the loss if each grid block holds an SM alone;"
	echo "LOAD_GB/S: bus bandwidth of the load's all-reduces during the measurement."
	echo "clocks (SM MHz, max SM MHz, temperature, power) at the start of each condition:"
	sed 's/^/  /' "$RESULTS/clocks.txt"
} | tee "$RESULTS/table.txt"
