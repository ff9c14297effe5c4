#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# collc's PyTorch backend on the device machine, against a running collcd:
#   (a) DDP training with backend collc and with nccl: the same losses;
#   (b) torch.cuda.graph capture of all_reduce, replayed with new inputs,
#       checked against float64;
#   (c) 8-byte all_reduce latency from Python, collc next to nccl.
# Each part is bounded in time; a short table comes last, logs go to $OUT.
#
#   COLLC_SOCKET=/path/collcd.sock tests/gpu/torch/run.sh [ddp|graph|latency]...
#
# Environment: COLLC_SOCKET (required: collcd's socket), OUT (logs; default
# /tmp/collc-torch-logs), COLLC_LIB (libcollc.so.1; else PREBUILT/libcollc.so.1
# when PREBUILT is set, else the newest build*/client/ of this tree), PYTHON
# (default python3), PART_TIMEOUT (seconds per part, default 300), ITERS
# (latency iterations, default 2000), STEPS (DDP steps, default 30), SEED.
# With one GPU the collc ranks share it and nccl runs with world size 1 only.
set -u
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
HERE=$ROOT/tests/gpu/torch
OUT=${OUT:-/tmp/collc-torch-logs}
PY=${PYTHON:-python3}
PART_TIMEOUT=${PART_TIMEOUT:-300}
mkdir -p "$OUT"
: >"$OUT/results.txt"
T0=$(date +%s)

fail_early() {
	echo "RESULT setup FAIL $*" | tee -a "$OUT/results.txt"
	exit 1
}

[ -n "${COLLC_SOCKET:-}" ] || fail_early "COLLC_SOCKET is not set (start collcd, export its socket)"
[ -S "$COLLC_SOCKET" ] || fail_early "COLLC_SOCKET=$COLLC_SOCKET is not a socket (is collcd running?)"
if [ -z "${COLLC_LIB:-}" ] && [ -n "${PREBUILT:-}" ]; then
	export COLLC_LIB=$PREBUILT/libcollc.so.1
fi
export COLLC_SOCKET
export PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONDONTWRITEBYTECODE=1
export NCCL_NVLS_ENABLE=0 # NVLink multicast stays off on the lent machines

if ! timeout 120 "$PY" - >"$OUT/setup.log" 2>&1 <<'EOF'
import torch, torch.distributed as dist
print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())
assert torch.cuda.is_available(), "torch sees no CUDA device"
assert dist.is_available() and dist.is_nccl_available(), "torch.distributed or nccl missing"
import collc, collc.torch
print("libcollc", collc.library_path)
from collc import _lib
assert _lib.has_stream_forms(collc._C), "this libcollc has no stream-ordered collectives"
with collc.connect() as ctx:
    ctx.unique_id()
print("collcd answers on", __import__("os").environ["COLLC_SOCKET"])
EOF
then
	cat "$OUT/setup.log"
	fail_early "torch, the collc package or collcd is not usable (setup.log above)"
fi
cat "$OUT/setup.log"

PARTS=("$@")
[ ${#PARTS[@]} -gt 0 ] || PARTS=(ddp graph latency)
RC=0
for p in "${PARTS[@]}"; do
	case $p in
	ddp) extra=(--steps "${STEPS:-30}") ;;
	graph) extra=() ;;
	latency) extra=(--iters "${ITERS:-2000}") ;;
	*) fail_early "unknown part $p (ddp, graph, latency)" ;;
	esac
	[ -n "${SEED:-}" ] && extra+=(--seed "$SEED")
	echo "=== $p" | tee -a "$OUT/torch.log"
	# The parent kills ranks after --timeout; timeout(1) bounds the rest.
	timeout -k 10 "$PART_TIMEOUT" "$PY" "$HERE/torch_gpu.py" "$p" --out "$OUT" \
		--timeout $((PART_TIMEOUT / 3)) "${extra[@]}" >"$OUT/$p.log" 2>&1
	rc=$?
	cat "$OUT/$p.log" >>"$OUT/torch.log"
	grep -v '^RESULT' "$OUT/$p.log" | tail -40
	if [ $rc -ne 0 ]; then
		RC=1
		grep -q "^RESULT $p" "$OUT/results.txt" ||
			echo "RESULT $p FAIL exit $rc (124: over $PART_TIMEOUT s); see $p.log" >>"$OUT/results.txt"
	fi
done

echo
echo "collc torch checks ($(($(date +%s) - T0)) s; logs in $OUT)"
sed 's/^RESULT //' "$OUT/results.txt"
exit $RC
