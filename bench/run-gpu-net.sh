#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# collc-bench with GPU ranks across daemons on one machine (the device
# machine): two collcd with --backend cuda and --listen on loopback, their
# grids on one GPU under MPS (started here with its own pipe directory, and
# stopped at the end), the ranks round-robin over the two (rank r on daemon
# r % 2, so 4 ranks make two per daemon: group rings, hierarchical
# all-reduces), the crossing rings in mapped host memory and the proxies over
# TCP. Each --set goes to both daemons. A/B: run it once per variant, in
# alternating calls. Not part of CI.
#
#   PREBUILT=dir bench/run-gpu-net.sh [--ranks N] [--gpu G] [--set KEY=VALUE]... [-- collc-bench arguments...]
#
# PREBUILT: collcd, collc-bench and libcollc.so.1 (and the libraries they
# need; with collcctl there too, each daemon's count of eager collectives
# follows the table). OUT: where the daemons' logs go (default
# /tmp/collc-gpunet-bench). The staged eager path of GPU ranks against the
# ring: --set net_eager_staged_max_bytes=262144 against =0.
set -u
LOGDIR=${OUT:-/tmp/collc-gpunet-bench}
ranks=4
gpu=0
sets=()
while [ $# -gt 0 ]; do
	case "$1" in
	--ranks) ranks=$2; shift 2 ;;
	--gpu) gpu=$2; shift 2 ;;
	--set) sets+=(--set "$2"); shift 2 ;;
	--) shift; break ;;
	-h | --help) sed -n '3,19p' "$0"; exit 0 ;;
	*) echo "run-gpu-net.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
BIN=${PREBUILT:?PREBUILT=dir with collcd, collc-bench and libcollc.so.1}
export LD_LIBRARY_PATH=$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p "$LOGDIR"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/collc-gpunet-bench-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/collc-gpunet-bench-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d >/dev/null 2>&1 && mps=1 || mps=0

pids=()
socks=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	[ "$mps" = 1 ] && echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
}
trap cleanup EXIT
for i in 0 1; do
	sock=/tmp/collc-gpunet-bench-$i.sock
	rm -f "$sock" "$sock.admin"
	"$BIN/collcd" --backend cuda --socket "$sock" --listen "127.0.0.1:$((7471 + i))" \
		--max-channels 8 --devices $((gpu + 1)) --foreground --log-level info "${sets[@]}" \
		>"$LOGDIR/collcd-$i.log" 2>&1 &
	pids+=($!)
	socks+=("$sock")
	for _ in $(seq 1 400); do
		[ -S "$sock" ] && break
		kill -0 "${pids[i]}" 2>/dev/null || { echo "collcd $i did not start:" >&2; tail -5 "$LOGDIR/collcd-$i.log" >&2; exit 1; }
		sleep 0.05
	done
done
gpus=$gpu
for ((r = 1; r < ranks; r++)); do gpus=$gpus,$gpu; done
echo "# $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nvidia-smi -L | head -1), MPS started here: $mps"
echo "# two collcd on loopback (${sets[*]:-defaults}), $ranks GPU ranks round-robin over them"
"$BIN/collc-bench" --backend cuda --socket "${socks[0]},${socks[1]}" --nranks "$ranks" --gpus "$gpus" "$@"
rc=$?
# How many went eager (net_eager_staged_max_bytes: GPU buffers staged through host memory).
if [ -x "$BIN/collcctl" ]; then
	for i in 0 1; do
		echo "# collcd $i: $("$BIN/collcctl" --socket "${socks[i]}" status --json 2>/dev/null |
			python3 -c 'import json, sys; d = json.load(sys.stdin); n = d.get("net", {}); print("eager", n.get("eager"), "landed in place", n.get("eager_landed"), "GPU buffers staged", d.get("totals", {}).get("net_eager_staged"))' 2>/dev/null)"
	done
fi
exit $rc
