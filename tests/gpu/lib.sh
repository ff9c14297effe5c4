# SPDX-License-Identifier: MIT
# shellcheck shell=bash
#
# What the device-machine scripts of tests/gpu share (sourced by run.sh,
# nccl-shim.sh and net-daemons.sh after they set ROOT, BUILD, LOGDIR and RES):
# a result line, the wait for a collcd's socket and the CUDA build.

result() { echo "RESULT $*" | tee -a "$RES"; }

# Waits up to TRIES x 50 ms for collcd PID to create socket SOCK: 0 once it
# exists, 1 when the process ended or the time ran out.
wait_socket() { # SOCK PID TRIES
	for _ in $(seq 1 "$3"); do
		[ -S "$1" ] && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.05
	done
	return 1
}

# Builds the cmake targets given (none: all) into $BUILD for sm_90 (log:
# $LOGDIR/build.log); a build result either way, and exit 1 on failure.
gpu_build() {
	local targets=()
	[ $# -gt 0 ] && targets=(--target "$@")
	if cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 \
		>"$LOGDIR/build.log" 2>&1 &&
		cmake --build "$BUILD" -j"$(nproc)" "${targets[@]}" >>"$LOGDIR/build.log" 2>&1; then
		result "build PASS cmake, -arch=sm_90"
	else
		result "build FAIL see build.log"
		tail -30 "$LOGDIR/build.log"
		exit 1
	fi
}
