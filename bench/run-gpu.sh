#!/bin/bash
# SPDX-License-Identifier: MIT
#
# collc vs NCCL on the GPUs of this machine (written for the 2 x H200 host):
# builds collc for sm_90, starts the MPS control daemon (collcd's resident
# grid needs it), runs collc-bench --vs-nccl --spawn-daemon --backend cuda for
#   allreduce       8 B .. 1 GiB
#   allgather       8 B .. 256 MiB
#   reduce_scatter  8 B .. 256 MiB
#   alltoall        8 B .. 512 MiB (COPIES=0 skips it and sendrecv)
#   sendrecv        8 B .. 256 MiB
# with the CSV, PNG and log of each into $OUT (when set; else
# /tmp/collc-bench-gpu), runs bench/run-interfere.sh (a client's compute
# kernel next to the resident grid; INTERFERE=0 skips it), stops MPS, and
# prints the tables last.
#
#   bash bench/run-gpu.sh                      # from the repository root
#   NRANKS=2 ITERS=100 DEPTH=8 bash bench/run-gpu.sh
#
# Each run is limited to RUN_TIMEOUT seconds (default 240) so that a hang in
# one collective cannot eat the whole session. The plots need gnuplot or
# python3-matplotlib on this machine; without them the CSVs still come back,
# and elsewhere `collc-bench --from-csv X.csv --plot X.png` draws them.
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-gpu}
RESULTS=${OUT:-/tmp/collc-bench-gpu}
ITERS=${ITERS:-100}
WARMUP=${WARMUP:-10}
DEPTH=${DEPTH:-8}
RUN_TIMEOUT=${RUN_TIMEOUT:-240}
MPS_DIR=${MPS_DIR:-/tmp/collc-mps}
mkdir -p "$RESULTS"
. "$ROOT/bench/gpu-lib.sh"
bench_nranks

echo "== machine"
{
	date -u '+%Y-%m-%d %H:%M:%S UTC'
	uname -a
	echo "nproc: $(nproc)"
	lscpu | head -15
	nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv 2>&1
	nvidia-smi topo -m 2>&1 | head -8
	nvcc --version 2>&1 | tail -2
} | tee "$RESULTS/machine.txt"

bench_binaries
[ -n "${PREBUILT:-}" ] || grep -E "CUDA backend|collc-bench" "$RESULTS/build.log"

bench_start_mps
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}

run() { # name coll max-bytes
	local name=$1 coll=$2 max=$3
	echo "== $name: $coll, $NRANKS GPUs, 8 B .. $max"
	bench_run "$name" 25 --coll "$coll" --nranks "$NRANKS" \
		--min-bytes 8 --max-bytes "$max" --iters "$ITERS" --warmup "$WARMUP" --depth "$DEPTH" \
		--timeout-ms 20000 --vs-nccl --spawn-daemon --backend cuda "${COLLCD_ARGS[@]}" \
		--csv "$RESULTS/$name.csv" --plot "$RESULTS/$name.png"
}

run gpu-allreduce allreduce 1G
run gpu-allgather allgather 256M
run gpu-reduce_scatter reduce_scatter 256M
NAMES="gpu-allreduce gpu-allgather gpu-reduce_scatter"
if [ "${COPIES:-1}" != 0 ]; then
	run gpu-alltoall alltoall 512M
	run gpu-sendrecv sendrecv 256M
	NAMES="$NAMES gpu-alltoall gpu-sendrecv"
fi

# A client's compute kernel next to the resident grid, under this MPS (INTERFERE=0 skips it).
if [ "${INTERFERE:-1}" != 0 ]; then
	echo "== interfere: bench/run-interfere.sh (log: $RESULTS/interfere.txt)"
	OUT=$RESULTS/interfere MPS_RUNNING=1 BUILD=$BUILD bash "$ROOT/bench/run-interfere.sh" \
		>"$RESULTS/interfere.txt" 2>&1
	echo "   exit $?"
fi

bench_stop_mps
trap - EXIT

bench_tables "*.txt, *.csv, *.png"
if [ -f "$RESULTS/interfere/table.txt" ]; then
	echo
	echo "---- interfere (a client's compute kernel next to the resident grid)"
	cat "$RESULTS/interfere/table.txt"
fi
