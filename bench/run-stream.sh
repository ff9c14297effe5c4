#!/bin/bash
# SPDX-License-Identifier: MIT
#
# collc's stream-ordered forms and CUDA graph capture against NCCL on the GPUs
# of this machine (written for the 2 x H200 host; issue 17's figures): builds
# collc for sm_90 (or takes PREBUILT), starts the MPS control daemon (collcd's
# resident grid needs it), and runs, each with --vs-nccl --spawn-daemon
# --backend cuda and NCCL in the mode that measures as collc's does:
#   stream-8b        allreduce 8 B, --stream, 1000 iterations: back to back on one
#                    stream timed by CUDA events (pipe) and enqueue +
#                    cudaStreamSynchronize (p50); NCCL plain
#   graph-8b         allreduce 8 B, --graph, 1000 iterations: a graph of one
#                    all-reduce replayed to completion (p50) and graphs of DEPTH
#                    replayed back to back (pipe); NCCL graph
#   stream-allreduce allreduce 8 B .. 16 MiB, --stream (NCCL plain)
#   graph-allreduce  allreduce 8 B .. 16 MiB, --graph (NCCL graph)
#   stream-<coll>    for each of $COLLS (default none; e.g. COLLS="allgather
#                    reduce_scatter alltoall sendrecv"), 8 B .. 16 MiB, --stream
# with the CSV and log of each into $OUT (when set; else /tmp/collc-bench-stream),
# stops MPS and prints the tables last.
#
# The commands (what the lead runs on the device machine, from the repository root):
#   bash bench/run-stream.sh
#   PREBUILT=build-x/bench-bin bash bench/run-stream.sh   # collc-bench, collcd, libcollc.so* there
#   ITERS=200 DEPTH=8 COLLS="allgather sendrecv" bash bench/run-stream.sh
# One of them by hand (the others alike, --graph for --stream):
#   collc-bench --coll allreduce --nranks 2 --min-bytes 8 --max-bytes 8 --iters 1000 \
#     --warmup 100 --depth 8 --stream --vs-nccl --spawn-daemon --backend cuda
#
# Each run is limited to RUN_TIMEOUT seconds (default 180): a stream that never
# goes on cannot eat the session. Every run here takes well under a minute on
# 2 x H200 unless something hangs.
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-gpu}
RESULTS=${OUT:-/tmp/collc-bench-stream}
ITERS=${ITERS:-200}
WARMUP=${WARMUP:-20}
DEPTH=${DEPTH:-8}
MAX=${MAX:-16M}
RUN_TIMEOUT=${RUN_TIMEOUT:-180}
MPS_DIR=${MPS_DIR:-/tmp/collc-mps}
mkdir -p "$RESULTS"
. "$ROOT/bench/gpu-lib.sh"
bench_nranks

echo "== machine"
{
	date -u '+%Y-%m-%d %H:%M:%S UTC'
	uname -a
	nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv 2>&1
} | tee "$RESULTS/machine.txt"

bench_binaries

bench_start_mps
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}

NAMES=""
run() { # name coll mode max-bytes iters warmup
	local name=$1 coll=$2 mode=$3 max=$4 iters=$5 warmup=$6
	echo "== $name: $coll --$mode, $NRANKS GPUs, 8 B .. $max, $iters iterations"
	bench_run "$name" 15 --coll "$coll" --nranks "$NRANKS" \
		--min-bytes 8 --max-bytes "$max" --iters "$iters" --warmup "$warmup" \
		--depth "$DEPTH" --timeout-ms 20000 "--$mode" --vs-nccl --spawn-daemon \
		--backend cuda "${COLLCD_ARGS[@]}" --csv "$RESULTS/$name.csv"
	NAMES="$NAMES $name"
}

run stream-8b allreduce stream 8 1000 100
run graph-8b allreduce graph 8 1000 100
run stream-allreduce allreduce stream "$MAX" "$ITERS" "$WARMUP"
run graph-allreduce allreduce graph "$MAX" "$ITERS" "$WARMUP"
for coll in ${COLLS:-}; do
	run "stream-$coll" "$coll" stream "$MAX" "$ITERS" "$WARMUP"
done

bench_stop_mps
trap - EXIT

bench_tables "*.txt, *.csv"
