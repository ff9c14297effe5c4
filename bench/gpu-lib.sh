# SPDX-License-Identifier: MIT
#
# What the GPU scripts of bench/ share (sourced by run-gpu.sh, run-stream.sh
# and run-interfere.sh after they set ROOT, BUILD, RESULTS and MPS_DIR):
# the rank count, the binaries (built for sm_90, or PREBUILT), the MPS
# control daemon, a collc-bench run and the tables at the end. Messages name the script that sourced this.

# NRANKS, unless set: every GPU of this machine, at least 2.
bench_nranks() {
	if [ -z "${NRANKS:-}" ]; then
		NRANKS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
		[ "$NRANKS" -ge 2 ] || NRANKS=2
	fi
}

# Binaries built elsewhere (cmake, CUDA_ARCHITECTURES 90) with the libraries they need.
bench_prebuilt() {
	echo "== prebuilt ($PREBUILT)"
	export LD_LIBRARY_PATH=$PREBUILT${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

# Builds the cmake targets given into $BUILD for sm_90 (log: $RESULTS/build.log), or exits 1.
bench_build() {
	echo "== build ($BUILD)"
	if ! { cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 &&
		cmake --build "$BUILD" -j"$(nproc)" --target "$@"; } >"$RESULTS/build.log" 2>&1; then
		tail -40 "$RESULTS/build.log"
		echo "${0##*/}: build failed (log: $RESULTS/build.log)"
		exit 1
	fi
}

# BENCH (collc-bench) and COLLCD_ARGS (its --collcd option, if any): PREBUILT's or built.
bench_binaries() {
	if [ -n "${PREBUILT:-}" ]; then
		bench_prebuilt
		BENCH=$PREBUILT/collc-bench
		COLLCD_ARGS=(--collcd "$PREBUILT/collcd")
	else
		bench_build collcd collc-bench
		BENCH=$BUILD/bench/collc-bench
		COLLCD_ARGS=()
	fi
}

# Runs collc-bench with the options given, at most RUN_TIMEOUT seconds; its table,
# log and exit status go to $RESULTS/NAME.txt, .log, .rc. Shows the last lines of the log.
bench_run() { # name log-lines collc-bench-options...
	local name=$1 lines=$2 rc
	shift 2
	timeout -k 10 "$RUN_TIMEOUT" "$BENCH" "$@" >"$RESULTS/$name.txt" 2>"$RESULTS/$name.log"
	rc=$?
	echo "   exit $rc$([ $rc -eq 124 ] && echo ' (timed out)'); stderr:"
	sed 's/^/   | /' "$RESULTS/$name.log" | tail -"$lines"
	echo "$rc" >"$RESULTS/$name.rc"
}

# The tables of the runs in $NAMES, last; the argument names the files they left.
bench_tables() { # files
	echo
	echo "== tables (also in $RESULTS/$1)"
	for name in $NAMES; do
		echo
		echo "---- $name (exit $(cat "$RESULTS/$name.rc"))"
		cat "$RESULTS/$name.txt"
	done
}

# Starts the MPS control daemon in $MPS_DIR (collcd's resident grid needs it);
# bench_stop_mps, also run on exit, stops it and keeps its log in $RESULTS.
bench_start_mps() {
	echo "== MPS ($MPS_DIR)"
	export CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR/pipe
	export CUDA_MPS_LOG_DIRECTORY=$MPS_DIR/log
	mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
	trap bench_stop_mps EXIT
	if ! nvidia-cuda-mps-control -d; then
		echo "${0##*/}: nvidia-cuda-mps-control -d failed; running without MPS"
	fi
}
bench_stop_mps() {
	echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
	cp "$CUDA_MPS_LOG_DIRECTORY/control.log" "$RESULTS/mps-control.log" 2>/dev/null
}
