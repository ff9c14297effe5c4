#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# NCCL's own collectives over collc's tcp transport as an NCCL net plugin
# (libnccl-net-collc.so), on the device machine: tests/gpu/nccl_net_plugin.py
# with PyTorch's NCCL, two ranks on the first GPU under MPS, each on a "host"
# of its own (NCCL_HOSTID) so that NCCL connects them through its network
# transport: collc's plugin first, then NCCL's own Socket transport in the
# same run for comparison. Prints the results and a table last; logs go to
# $OUT and $OUT/nccl-net-plugin-logs.tgz.
#
#   tests/gpu/nccl-net-plugin.sh
#
# Environment: PREBUILT (a directory holding libnccl-net-collc.so; else it is
# built into BUILD, default build-gpu), OUT (logs), MAXBYTES (67108864),
# ITERS (20), MODES (collc,collc-nohelp,socket).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build-gpu}
LOGDIR=${OUT:-/tmp/collc-nccl-net-plugin-logs}
mkdir -p "$LOGDIR"
RES=$LOGDIR/results.txt
: >"$RES"
. "$ROOT/tests/gpu/lib.sh"

if [ -n "${PREBUILT:-}" ]; then
	PLUGIN_DIR=$(cd "$PREBUILT" && pwd)
else
	gpu_build nccl-net-collc
	PLUGIN_DIR=$BUILD/daemon/net
fi
if [ ! -f "$PLUGIN_DIR/libnccl-net-collc.so" ]; then
	result "plugin FAIL no libnccl-net-collc.so in $PLUGIN_DIR"
	exit 1
fi
if ! python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
	result "torch FAIL python3 has no torch with CUDA here"
	exit 1
fi

export CUDA_MPS_PIPE_DIRECTORY=/tmp/collc-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/collc-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
nvidia-cuda-mps-control -d && sleep 0.5

LD_LIBRARY_PATH=$PLUGIN_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
	timeout 500 python3 "$ROOT/tests/gpu/nccl_net_plugin.py" --out "$LOGDIR" \
	--modes "${MODES:-collc,collc-nohelp,socket}" --max-bytes "${MAXBYTES:-67108864}" --iters "${ITERS:-20}" \
	>"$LOGDIR/nccl_net_plugin.out" 2>&1
rc=$?
echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
grep '^RESULT' "$LOGDIR/nccl_net_plugin.out" | sed 's/^RESULT //' >>"$RES"
[ "$rc" = 0 ] || tail -40 "$LOGDIR/nccl_net_plugin.out"
(cd "$LOGDIR" && tar czf nccl-net-plugin-logs.tgz --exclude='*.tgz' -- *.log *.out 2>/dev/null)
echo "== python rc=$rc"
cat "$RES"
sed -n '/^# all_reduce/,$p' "$LOGDIR/nccl_net_plugin.out"
exit "$rc"
