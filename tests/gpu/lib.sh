# SPDX-License-Identifier: MIT
#
# What the device-machine scripts of tests/gpu share (sourced by run.sh and
# nccl-shim.sh after they set ROOT, BUILD, LOGDIR and RES): a result line and
# the CUDA build.

result() { echo "RESULT $*" | tee -a "$RES"; }

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
