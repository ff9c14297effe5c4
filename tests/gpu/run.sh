#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The GPU proof of the CUDA backend (device machine only): builds with
# -arch=sm_90, starts MPS, starts collcd on the GPUs and runs the scenarios of
# collc-gpu-test as separate client processes. Prints a pass/fail table last,
# and under it what the scenarios printed on stderr (FAILED CHECK lines).
#
#   tests/gpu/run.sh [--quick]
#
# Environment: BUILD (build dir, default build-gpu), PREBUILT (a directory with
# collcd, collcctl, collc-gpu-test, collc-example-allreduce, libcollc.so.1 and any libraries they need:
# skips the build), OUT (logs go there when set), SEED.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build-gpu}
LOGDIR=${OUT:-/tmp/collc-gpu-logs}
SEED=${SEED:-$(date +%s)}
QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1
mkdir -p "$LOGDIR"
RES=$LOGDIR/results.txt
TLOG=$LOGDIR/tests.log
DLOG=$LOGDIR/collcd.log
FLOG=$LOGDIR/stderr-lines.txt # what the scenarios said on stderr (failed checks), shown under the table
: >"$RES"; : >"$TLOG"; : >"$DLOG"; : >"$FLOG"
export NCCL_NVLS_ENABLE=0
export CUDA_MODULE_LOADING=EAGER
T_START=$(date +%s)
. "$ROOT/tests/gpu/lib.sh"

# Build
if [ -n "${PREBUILT:-}" ]; then
	BIN=$PREBUILT
	export LD_LIBRARY_PATH=$PREBUILT${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	result "build PASS prebuilt binaries from $PREBUILT (cmake, CUDA_ARCHITECTURES 90)"
else
	gpu_build
	BIN=$BUILD/bin
	mkdir -p "$BIN"
	cp "$BUILD/daemon/collcd" "$BUILD/client/collcctl" "$BUILD/tests/gpu/collc-gpu-test" \
		"$BUILD/collc-example-allreduce" "$BIN/"
	cp -P "$BUILD"/client/libcollc.so* "$BIN/"
	export LD_LIBRARY_PATH=$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
echo "GPUs: $NGPU"; nvidia-smi -L | tee -a "$TLOG"

SOCK=/tmp/collc-gpu-test.sock
BACKEND=cuda # which executors collcd starts
DPID=
start_collcd() { # args: collcd options
	rm -f "$SOCK" "$SOCK.admin"
	echo "=== collcd $* ===" >>"$DLOG"
	"$BIN/collcd" --backend "$BACKEND" --socket "$SOCK" --foreground --log-level info "$@" >>"$DLOG" 2>&1 &
	DPID=$!
	wait_socket "$SOCK" "$DPID" 200 && return 0
	echo "collcd did not start" | tee -a "$TLOG"
	return 1
}
STOP_RC=
stop_collcd() { # sets STOP_RC to collcd's exit status
	STOP_RC=255
	[ -n "$DPID" ] || return
	kill -TERM "$DPID" 2>/dev/null
	for _ in $(seq 1 200); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.05; done
	if kill -0 "$DPID" 2>/dev/null; then kill -KILL "$DPID"; wait "$DPID" 2>/dev/null; STOP_RC=124; DPID=; return; fi
	wait "$DPID"; STOP_RC=$?; DPID=
}
ensure_collcd() { # restarts collcd (same options) if a scenario killed it
	if [ -z "$DPID" ] || ! kill -0 "$DPID" 2>/dev/null; then
		result "collcd-alive FAIL collcd died; restarting"
		wait "$DPID" 2>/dev/null
		start_collcd "${DOPTS[@]}"
	fi
}
ctl() { "$BIN/collcctl" --socket "$SOCK" "$@"; }
export COLLCCTL=$BIN/collcctl # the kill scenario reads status through it
t() { # runs one scenario: label scenario args...
	local label=$1; shift
	local from
	ensure_collcd
	from=$(( $(wc -l <"$TLOG") + 1 ))
	timeout 600 "$BIN/collc-gpu-test" "$@" --socket "$SOCK" --seed "$SEED" --label "$label" \
		2>>"$TLOG" | tee -a "$RES" | grep -v PASS
	local rc=${PIPESTATUS[0]}
	[ "$rc" = 124 ] && result "$label FAIL timed out (hang)"
	# Its stderr but the seed line: which check failed (FAILED CHECK ...), errors; 10 lines at most.
	tail -n +"$from" "$TLOG" | grep -v "^$label: seed [0-9]*\$" | head -10 | sed "s|^|[$label] |" | tee -a "$FLOG"
	return 0
}
planned() { # what the planner chose so far, from the metrics
	ctl metrics 2>/dev/null | awk '/by_(algo|proto)_total\{/ { gsub(/.*="|"\}/, " ", $1); printf "%s=%s ", $1, $2 }'
}

# MPS: --require-mps must refuse to start without it, then it runs for the rest.
export CUDA_MPS_PIPE_DIRECTORY=/tmp/collc-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/collc-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
timeout 60 "$BIN/collcd" --backend cuda --socket /tmp/collc-nomps.sock --require-mps --foreground \
	>"$LOGDIR/nomps.log" 2>&1
rc=$?
if [ "$rc" != 0 ] && grep -q "require-mps" "$LOGDIR/nomps.log"; then
	result "mps-required-without-mps PASS collcd exited $rc: $(grep -m1 -o 'MPS:.*' "$LOGDIR/nomps.log")"
else
	result "mps-required-without-mps FAIL rc=$rc"
fi
nvidia-cuda-mps-control -d && echo "MPS control daemon started" >>"$TLOG"
sleep 0.5; ls -la "$CUDA_MPS_PIPE_DIRECTORY" >>"$TLOG"

# 2 GPUs (or 1 when that is all there is)
G2=0,1; [ "$NGPU" -lt 2 ] && G2=0,0
DOPTS=(--set channels=4)
start_collcd "${DOPTS[@]}" || exit 1
grep -q "MPS: the MPS control daemon serves" "$DLOG" && result "mps-detected PASS $(grep -m1 -o 'MPS:.*' "$DLOG")" \
	|| result "mps-detected FAIL $(grep -m1 -o 'MPS:.*' "$DLOG")"
MODES="auto:auto:auto ring:ring:simple ring-ll:ring:ll ring-ll128:ring:ll128 oneshot:oneshot:simple oneshot-ll:oneshot:ll twoshot:twoshot:simple"
[ "$QUICK" = 1 ] && MODES="auto:auto:auto"
for m in $MODES; do
	IFS=: read -r name algo proto <<<"$m"
	ensure_collcd
	ctl set algo="$algo" proto="$proto" >/dev/null
	t "${NGPU}gpu-$name" sweep --gpus "$G2"
	t "shared-gpu0-$name" sweep --gpus 0,0
	[ "$NGPU" -ge 2 ] && t "3ranks-gpu001-$name" sweep --gpus 0,0,1
	echo "after $name: $(planned)" >>"$RES"
done
ctl set algo=auto proto=auto >/dev/null
# All-to-all(v) and send/recv: across GPUs, two ranks on one GPU, three ranks on two.
t "${NGPU}gpu-copies" copies --gpus "$G2"
t "shared-gpu0-copies" copies --gpus 0,0
[ "$NGPU" -ge 2 ] && t "3ranks-gpu001-copies" copies --gpus 0,0,1
ctl set copy_push=0 >/dev/null
t "${NGPU}gpu-copies-pull" copies --gpus "$G2"
ctl set copy_push=auto >/dev/null
[ "$QUICK" = 1 ] || t "${NGPU}gpu-big" sweep --gpus "$G2" --big
t "${NGPU}gpu" latency --gpus "$G2" --iters 10000
t "${NGPU}gpu" stream --gpus "$G2" --iters 2000
# The same through the gate kernel, the path of drivers without stream memory operations.
COLLC_STREAM_PATH=kernel t "${NGPU}gpu-kernel" stream --gpus "$G2" --iters 2000
ctl set algo=ring proto=ll >/dev/null
t "${NGPU}gpu-ring-ll" latency --gpus "$G2" --iters 10000
ctl set algo=auto proto=auto >/dev/null
t "${NGPU}gpu" interleave --gpus "$G2" --iters 2000
t "${NGPU}gpu" regtraffic --gpus "$G2" --iters 4000
t "${NGPU}gpu" kill --gpus "$G2"
ctl status >>"$LOGDIR/status.txt" 2>&1
stop_collcd
[ "$STOP_RC" = 0 ] && result "collcd-clean-exit PASS quit items ended the grids, exit 0" \
	|| result "collcd-clean-exit FAIL exit status $STOP_RC"

# 1 GPU
if [ "$NGPU" -ge 2 ]; then
	DOPTS=(--devices 1)
	start_collcd "${DOPTS[@]}" || exit 1
	t "1gpu-auto" sweep --gpus 0
	t "1gpu-shared-auto" sweep --gpus 0,0
	t "1gpu-1rank-copies" copies --gpus 0
	ctl set algo=ring proto=ll >/dev/null
	t "1gpu-shared-ring-ll" sweep --gpus 0,0
	ctl set algo=auto proto=auto >/dev/null
	t "1gpu-shared" latency --gpus 0,0 --iters 10000
	stop_collcd
	[ "$STOP_RC" = 0 ] && result "collcd-1gpu-clean-exit PASS exit 0" || result "collcd-1gpu-clean-exit FAIL exit status $STOP_RC"
fi
# Both executors in one collcd (--backend auto): a host-memory communicator on
# the CPU executor and a GPU communicator on the grid, at the same time.
BACKEND=auto
DOPTS=(--set channels=4)
start_collcd "${DOPTS[@]}" || exit 1
# Idle: collcd with both executors and no client, 10 s after a 2 s settle.
cputicks() { awk '{ print $14 + $15 }' "/proc/$DPID/stat"; }
sleep 2
T0=$(cputicks); sleep 10; T1=$(cputicks)
IDLE=$(awk -v t="$(( T1 - T0 ))" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", 100 * t / hz / 10 }')
awk -v p="$IDLE" 'BEGIN { exit !(p < 1.0) }' && result "idle-cpu PASS collcd --backend auto idle: $IDLE% of a core over 10 s (limit 1%)" \
	|| result "idle-cpu FAIL collcd --backend auto idle: $IDLE% of a core over 10 s (limit 1%)"
HOSTLOG=$LOGDIR/host-comm.log
HOSTSTOP=$LOGDIR/host-comm.stop
rm -f "$HOSTSTOP"; : >"$HOSTLOG"
( while [ ! -e "$HOSTSTOP" ]; do
	"$BIN/collc-example-allreduce" --socket "$SOCK" --nranks 4 --count 262144 --iters 100 >>"$HOSTLOG" 2>&1
	echo "exit $?" >>"$HOSTLOG"
  done ) &
HOSTPID=$!
t "auto-backend-gpu" sweep --gpus "$G2"
t "auto-backend-gpu" latency --gpus "$G2" --iters 4000
touch "$HOSTSTOP"
wait "$HOSTPID"
ST=$(ctl status --json 2>/dev/null)
echo "$ST" >"$LOGDIR/status-auto.json"
NCPU_DEV=$(grep -o '"backend": *"cpu"' <<<"$ST" | wc -l)
NGPU_DEV=$(grep -o '"backend": *"cuda"' <<<"$ST" | wc -l)
HOST_RUNS=$(grep -c '^exit' "$HOSTLOG"); HOST_OK=$(grep -c '^exit 0$' "$HOSTLOG")
if [ "$HOST_RUNS" -ge 2 ] && [ "$HOST_OK" = "$HOST_RUNS" ] && [ "$(grep -c '^all ranks correct' "$HOSTLOG")" = "$HOST_RUNS" ]; then
	result "auto-backend-host-comm PASS $HOST_RUNS runs of 4 host ranks x 100 all-reduces of 1 MiB, all correct, during the GPU scenarios"
else
	result "auto-backend-host-comm FAIL $HOST_OK of $HOST_RUNS host runs correct: $(grep -v '^exit\|^all ranks' "$HOSTLOG" | head -3 | tr '\n' ' ')"
fi
[ "$NCPU_DEV" -ge 1 ] && [ "$NGPU_DEV" -ge 1 ] && result "auto-backend-status PASS cpu $NCPU_DEV, cuda $NGPU_DEV devices in one collcd" \
	|| result "auto-backend-status FAIL cpu $NCPU_DEV, cuda $NGPU_DEV devices"
stop_collcd
[ "$STOP_RC" = 0 ] && result "collcd-auto-clean-exit PASS exit 0" || result "collcd-auto-clean-exit FAIL exit status $STOP_RC"
BACKEND=cuda
echo quit | nvidia-cuda-mps-control >/dev/null 2>&1

grep -o 'quiesce window: [0-9.]* ms' "$DLOG" | awk '{ print $3 }' | sort -n | awk '{ v[NR]=$1 } END { if (NR) printf "RESULT quiesce-windows INFO %d windows (IPC import/close), median %.3f ms, max %.3f ms\n", NR, v[int((NR+1)/2)], v[NR] }' | tee -a "$RES"
grep -i "err\|warn" "$DLOG" | head -20 >"$LOGDIR/collcd-errors.txt"
NP=$(grep -c '^RESULT .* PASS' "$RES"); NF=$(grep -c '^RESULT .* FAIL' "$RES")
{
	echo
	echo "collc GPU run: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | sed 's/^ *//' | tr '\n' ' ')"
	echo "seed $SEED, $(( $(date +%s) - T_START )) s"
	printf '%-44s %-5s %s\n' SCENARIO RESULT DETAIL
	grep '^RESULT' "$RES" | sed 's/^RESULT //' | awk '{ s=$1; r=$2; $1=""; $2=""; sub(/^  /, ""); printf "%-44s %-5s %s\n", s, r, $0 }'
	grep '^after' "$RES" | sed 's/^/planner /'
	if [ -s "$FLOG" ]; then
		echo "stderr of the scenarios (first 10 lines each; all in tests.log):"
		head -40 "$FLOG"
	fi
	echo "$NP passed, $NF failed"
} | tee "$LOGDIR/table.txt"
[ "$NF" = 0 ]
