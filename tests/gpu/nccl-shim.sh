#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# NCCL programs on collc (device machine only): NVIDIA's nccl-tests with their
# own correctness check (-c 1), first on the real NCCL, then unchanged on
# libnccl-collc (found as libnccl.so.2 through LD_LIBRARY_PATH) with a collcd
# this script starts under MPS. Prints a table last; logs go to $OUT and
# $OUT/nccl-shim-logs.tgz.
#
#   tests/gpu/nccl-shim.sh
#
# nccl-tests are built on the development machine from their public source
# (never copied into this repository), into the ignored folder .gpubuild/:
#   make -C <nccl-tests>/src MPI=0 CUDA_HOME=/usr/local/cuda NCCL_HOME=/usr/local/cuda \
#     NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=$PWD/.gpubuild/nccl-tests
#   mkdir -p .gpubuild/nccl-tests-bin && for t in all_reduce all_gather reduce_scatter \
#     broadcast sendrecv alltoall; do strip -o .gpubuild/nccl-tests-bin/${t}_perf \
#     .gpubuild/nccl-tests/${t}_perf; done
# The six stripped binaries are 25 MB: carry .gpubuild/nccl-tests-bin to the
# device machine (they need CUDA 13's libcudart.so.13 and libnccl.so.2 there).
#
# Ranks: 2 on 2 GPUs for both (nccl-tests -g 2, one process). With one GPU the
# real NCCL runs 1 rank (it cannot put two on one GPU) and collc 2 ranks on
# that GPU (tests/gpu/gpu_fold.c folds nccl-tests' device 1 onto device 0).
#
# Environment: BUILD (build dir, default build-gpu), PREBUILT (a directory with
# collcd, collcctl, libcollc.so.1 and libnccl-collc.so: skips the build),
# NCCL_TESTS (default .gpubuild/nccl-tests-bin), OUT (logs), MAXBYTES (1G),
# ITERS (20), PER_TEST_S (150: each run is killed after), BUDGET_S (540: runs
# not started by then are skipped; the real NCCL's runs get 40% of what is left
# after the build), TESTS (default below).
#
# Then PyTorch's nccl backend (tests/gpu/nccl_shim_torch.py, skipped without
# torch): DDP losses against a one-process reference, a captured all_reduce
# replayed, the 8-byte eager latency; on the real NCCL (a GPU per rank) and
# on the shim (LD_PRELOAD, 2 ranks), once more with torch's cudaMallocAsync
# allocator (pool memory: the shim's staged path). collcd's count of submitted
# collectives must grow in every collc run, which proves the shim answered.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build-gpu}
LOGDIR=${OUT:-/tmp/collc-nccl-shim-logs}
NCCL_TESTS=${NCCL_TESTS:-$ROOT/.gpubuild/nccl-tests-bin}
MAXBYTES=${MAXBYTES:-1G}
ITERS=${ITERS:-20}
PER_TEST_S=${PER_TEST_S:-150}
BUDGET_S=${BUDGET_S:-540}
TESTS=${TESTS:-"all_reduce all_gather reduce_scatter broadcast sendrecv alltoall"}
T_START=$(date +%s)
mkdir -p "$LOGDIR"
RES=$LOGDIR/results.txt
: >"$RES"
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER

. "$ROOT/tests/gpu/lib.sh"
# Seconds left in the current phase (the real NCCL gets 40% of the budget, collc the rest).
PHASE_END=$(( T_START + BUDGET_S ))
left() { echo $(( PHASE_END - $(date +%s) )); }

# collc: collcd, collcctl, libcollc and libnccl-collc (with its libnccl.so.2 name).
if [ -n "${PREBUILT:-}" ]; then
	BIN=$PREBUILT
else
	gpu_build collcd collcctl nccl-collc
	BIN=$BUILD/bin
	mkdir -p "$BIN"
	cp "$BUILD/daemon/collcd" "$BUILD/client/collcctl" "$BIN/"
	cp -P "$BUILD"/client/libcollc.so* "$BUILD/nccl/libnccl-collc.so" "$BIN/"
fi
mkdir -p "$BIN/compat"
ln -sf ../libnccl-collc.so "$BIN/compat/libnccl.so.2"
# A prebuilt one (PREBUILT) serves where the device machine has no compiler.
if [ ! -e "$BIN/libgpufold.so" ] &&
	! cc -shared -fPIC -o "$BIN/libgpufold.so" "$ROOT/tests/gpu/gpu_fold.c" -ldl 2>>"$LOGDIR/build.log"; then
	result "gpufold FAIL cannot build tests/gpu/gpu_fold.c"
fi
for t in $TESTS; do
	[ -x "$NCCL_TESTS/${t}_perf" ] || { result "nccl-tests FAIL no $NCCL_TESTS/${t}_perf (see the header for the build)"; exit 1; }
done

NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
nvidia-smi -L >"$LOGDIR/gpus.txt" 2>&1
REAL_G=1; [ "$NGPU" -ge 2 ] && REAL_G=2
FOLD=; [ "$NGPU" -lt 2 ] && FOLD=$BIN/libgpufold.so
echo "GPUs: $NGPU; real NCCL: $REAL_G rank(s); collc: 2 ranks${FOLD:+ on one GPU}"

# One nccl-tests run: label, then the command. Summary fields go to $RES.
perf() {
	local label=$1; shift
	local log=$LOGDIR/$label.log
	if [ "$(left)" -le 0 ]; then
		result "$label SKIP out of time (BUDGET_S=$BUDGET_S)"
		return
	fi
	local lim=$PER_TEST_S
	[ "$(left)" -lt "$lim" ] && lim=$(left)
	echo "=== $* ===" >"$log"
	local before after reached=
	before=$(submitted)
	timeout "$lim" "$@" >>"$log" 2>&1
	local rc=$?
	after=$(submitted)
	[ -n "$before" ] && [ -n "$after" ] && reached=" | collcd submitted +$(( after - before ))"
	# Data rows: size count type redop root | time algbw busbw #wrong (out of place) | the same in place.
	local rows small big wrong
	rows=$(awk '$1 ~ /^[0-9]+$/ && NF >= 13' "$log")
	small=$(awk 'NR == 1 { print $1 "B " $(NF-7) "us" }' <<<"$rows")
	big=$(awk 'END { s = ($1 >= 1073741824) ? "1GiB" : $1 "B"; printf "%s %sGB/s", s, $(NF-5) }' <<<"$rows")
	wrong=$(awk '{ w += ($(NF-4) ~ /^[0-9]+$/ ? $(NF-4) : 0) + ($NF ~ /^[0-9]+$/ ? $NF : 0) } END { print w + 0 }' <<<"$rows")
	local oob avg
	oob=$(grep -o 'Out of bounds values : [0-9]* [A-Z]*' "$log" | awk '{ print $6, $7 }')
	avg=$(grep -o 'Avg bus bandwidth *: [0-9.]*' "$log" | awk '{ print $NF }')
	if [ -n "$reached" ] && [ "$before" = "$after" ]; then
		result "$label FAIL no collective reached collcd (was libnccl-collc loaded?) rc=$rc"
	elif [ "$rc" = 0 ] && [ -n "$rows" ] && [ "$wrong" = 0 ] && [ "${oob% *}" = 0 ]; then
		result "$label PASS $small | $big | avg busbw ${avg:-?} GB/s | wrong 0$reached"
	else
		[ "$rc" = 124 ] && rc="timeout ${lim}s"
		result "$label FAIL rc=$rc wrong=$wrong oob=${oob:-none} $(grep -m2 -i 'collc-nccl WARN\|error\|fail\|invalid' "$log" | tr '\n' ' ' | cut -c1-200)"
	fi
}
ARGS=(-b 8 -e "$MAXBYTES" -f 4 -c 1 -n "$ITERS" -w 5)
# collcd's count of submitted collectives (empty while no collcd runs).
SOCK=/tmp/collc-nccl-shim.sock
DPID=
submitted() {
	[ -n "$DPID" ] || return 0
	"$BIN/collcctl" --socket "$SOCK" status --json 2>/dev/null |
		grep -o '"totals": *{"submitted": *[0-9]*' | grep -o '[0-9]*$'
}
# PyTorch's nccl backend (skipped without torch): label, world, then the environment to run with.
torchrun_() {
	local label=$1 world=$2; shift 2
	local log=$LOGDIR/torch-$label.log before after
	if [ "$(left)" -le 30 ]; then
		result "torch-$label SKIP out of time (BUDGET_S=$BUDGET_S)"
		return
	fi
	local lim=300
	[ "$(left)" -lt "$lim" ] && lim=$(left)
	before=$(submitted)
	timeout "$lim" env "$@" python3 "$ROOT/tests/gpu/nccl_shim_torch.py" --label "$label" --world "$world" \
		--timeout $(( lim - 20 )) >"$log" 2>&1
	after=$(submitted)
	grep '^RESULT' "$log" | sed 's/^RESULT //' | while read -r l; do result "$l"; done
	grep -q '^RESULT' "$log" || result "torch-$label FAIL no result: $(tail -2 "$log" | tr '\n' ' ' | cut -c1-200)"
	if [ -n "$before" ] && [ -n "$after" ] && ! grep -q '^RESULT .* SKIP' "$log"; then
		[ "$before" != "$after" ] && result "torch-$label-reached-collcd PASS collcd submitted +$(( after - before ))" ||
			result "torch-$label-reached-collcd FAIL no collective reached collcd (torch's NCCL not interposed?)"
	fi
}

# 1. The real NCCL (before MPS starts: it runs without).
PHASE_END=$(( $(date +%s) + (T_START + BUDGET_S - $(date +%s)) * 2 / 5 ))
for t in $TESTS; do
	perf "nccl-$t" "$NCCL_TESTS/${t}_perf" "${ARGS[@]}" -g "$REAL_G"
done
perf "nccl-all_reduce-graph" "$NCCL_TESTS/all_reduce_perf" -b 8 -e 8M -f 8 -c 1 -n "$ITERS" -w 5 -G 5 -g "$REAL_G"
torchrun_ nccl "$REAL_G" NCCL_DEBUG=

# 2. The same binaries on libnccl-collc, collcd under MPS.
PHASE_END=$(( T_START + BUDGET_S ))
export CUDA_MPS_PIPE_DIRECTORY=/tmp/collc-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/collc-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
nvidia-cuda-mps-control -d
rm -f "$SOCK" "$SOCK.admin"
LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$BIN/collcd" --backend cuda \
	--socket "$SOCK" --foreground --log-level info >"$LOGDIR/collcd.log" 2>&1 &
DPID=$!
for _ in $(seq 1 200); do [ -S "$SOCK" ] && break; kill -0 "$DPID" 2>/dev/null || break; sleep 0.05; done
if [ -S "$SOCK" ]; then
	result "collcd PASS serving $SOCK (pid $DPID)"
	SHIM=(env COLLC_SOCKET="$SOCK" LD_LIBRARY_PATH="$BIN/compat:$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
		LD_PRELOAD="$FOLD" NCCL_DEBUG=WARN)
	for t in $TESTS; do
		perf "collc-$t" "${SHIM[@]}" "$NCCL_TESTS/${t}_perf" "${ARGS[@]}" -g 2
	done
	perf "collc-all_reduce-graph" "${SHIM[@]}" "$NCCL_TESTS/all_reduce_perf" -b 8 -e 8M -f 8 -c 1 -n "$ITERS" -w 5 -G 5 -g 2
	# torch: the shim preloaded (torch loads its own libnccl.so.2 by path); no device folding.
	torchrun_ collc 2 COLLC_SOCKET="$SOCK" LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
		LD_PRELOAD="$BIN/libnccl-collc.so" NCCL_DEBUG=WARN
	# The same with torch's cudaMallocAsync allocator: pool memory, which the shim stages.
	torchrun_ collc-pool 2 COLLC_SOCKET="$SOCK" LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
		LD_PRELOAD="$BIN/libnccl-collc.so" NCCL_DEBUG=WARN PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
	# Which library answered: nccl-tests prints the version it runs on; ldd of the shim's name.
	"${SHIM[@]}" ldd "$NCCL_TESTS/all_reduce_perf" | grep -i nccl >"$LOGDIR/ldd-collc.txt"
	"$BIN/collcctl" --socket "$SOCK" status >"$LOGDIR/status.txt" 2>&1
	kill -TERM "$DPID"
	for _ in $(seq 1 100); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.05; done
	kill -0 "$DPID" 2>/dev/null && kill -KILL "$DPID"
	wait "$DPID"
	rc=$?
	DPID=
	[ "$rc" = 0 ] && result "collcd-clean-exit PASS exit 0" || result "collcd-clean-exit FAIL exit status $rc"
else
	result "collcd FAIL did not start: $(tail -3 "$LOGDIR/collcd.log" | tr '\n' ' ')"
fi
echo quit | nvidia-cuda-mps-control >/dev/null 2>&1

NP=$(grep -c '^RESULT .* PASS' "$RES"); NF=$(grep -c '^RESULT .* FAIL' "$RES")
{
	echo
	echo "nccl-tests on the real NCCL and on libnccl-collc: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | sed 's/^ *//' | tr '\n' ' ')"
	echo "real NCCL $REAL_G rank(s), collc 2 ranks${FOLD:+ on one GPU}; -b 8 -e $MAXBYTES -f 4 -c 1 -n $ITERS; $(( $(date +%s) - T_START )) s"
	printf '%-28s %-5s %s\n' RUN RESULT "SMALLEST (time) | LARGEST (busbw) | AVG | CHECK"
	grep '^RESULT' "$RES" | sed 's/^RESULT //' | awk '{ s=$1; r=$2; $1=""; $2=""; sub(/^  /, ""); printf "%-28s %-5s %s\n", s, r, $0 }'
	echo "$NP passed, $NF failed"
} | tee "$LOGDIR/table.txt"
tar -czf "$LOGDIR/nccl-shim-logs.tgz" -C "$LOGDIR" --exclude nccl-shim-logs.tgz . 2>/dev/null
[ "$NF" = 0 ]
