#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# GPU ranks in communicators that span daemons (device machine only): two
# collcd on loopback, each with --backend cuda, its own socket and --listen
# 127.0.0.1:PORT, both on GPU 0 under MPS; collc-gpu-test's net scenario with
# 2 ranks (one per collcd) and 4 ranks (two per collcd: rings inside a daemon
# and across): the five collectives, then all-to-all, all-to-allv (random
# counts, zeros included) and a send/recv ring (every rank sends to its
# right and receives from its left at once, 8 B to 16 MiB) on GPU buffers,
# one RESULT line each (net-2ranks/alltoall, .../alltoallv, .../sendrecv),
# then the stream-ordered forms on GPU buffers (1 to 4 in flight on one
# stream, 8 B to 16 MiB, checked after a stream sync, async error 0): one
# line per collective (net-2ranks/stream-allreduce ... stream-alltoall) and
# the send/recv ring inside a group, on one stream (stream-sendrecv-group)
# and on side streams forked as ncclGroupEnd does (stream-sendrecv-ncclgroup);
# then netkill (kill -9 of the second collcd mid-run, its MPS
# client ended first, KILL_MODE below: -EPIPE on the first one's ranks within
# 2 s, and it keeps serving); then net-hostile: both collcd again on the
# hostile test plugin (tests/multinode/hostile_plugin.c), the second armed
# mid-run to send one step 8 bytes short: both GPU ranks must end with
# -EPROTO within 2 s, no result wrong, and a new communicator over both
# collcd must run. One RESULT line per
# check, a summary last; exit status 0 when all pass.
#
#   PREBUILT=dir tests/gpu/net-daemons.sh [net-2ranks] [net-4ranks] [net-4ranks-flat] [net-4ranks-rr]
#                                         [net-kill-4ranks] [net-hostile]
#
# (net-4ranks and net-4ranks-rr run all-reduces, all-gathers and
# reduce-scatters from 4 KiB hierarchically, on the group rings, and check
# that collcd A's status counted some;
# net-4ranks-flat: net-4ranks with net_hier_min_bytes=0 set on both (the flat
# ring alone, none counted); net-4ranks-rr: net-4ranks with the ranks
# round-robin, 0 and 2 on the first collcd, so the ring runs by daemon, 0 2 1
# 3; both collcd run with net_eager_staged_max_bytes=$STAGED_MAX (default
# 262144; the key's own default is 0), and net-2ranks checks that collcd A
# ran some collectives eagerly, their GPU buffers staged through host
# memory, unless STAGED_MAX or COLLCD_SET is 0;
# no argument: all six; each
# has its own time limit, 180 s each, 120 for the kill and 150 for net-hostile, and a run takes
# about a minute on one H200)
#
# PREBUILT: a directory with collcd, collcctl, collc-gpu-test and libcollc.so.1, and for
# net-hostile libnccl-net-collc.so and libnccl-net-collchostile.so (no build happens here). Environment: OUT (logs, default /tmp/collc-gpunet-logs),
# SEED, PORT_A and PORT_B (default 7461, 7462), GPU (default 0), STAGED_MAX, KILL_MODE,
# ROW_S (the limit of each of the four net rows, default 180 s),
# COLLCD_SET ("KEY=VALUE ...": a --set for each, on both collcd; for A/B runs)
# and COLLCD_BIN (another collcd binary than PREBUILT's, same clients).
#
# KILL_MODE=mps (the default): netkill first ends the second collcd's MPS
# client (`terminate_client`), then sends SIGKILL. Both collcd are clients of
# one MPS server here, and killing a client whose grid is resident, without
# that, is undefined under MPS (NVIDIA's MPS guide, "client early
# termination"): the server may report a fault to every client of the GPU,
# which would end the first collcd for a reason that two nodes never share.
# KILL_MODE=raw sends SIGKILL alone. After netkill the MPS server's log and
# the kernel's Xid lines (if readable) land in the logs folder.
#
# NETNS=1: each collcd in a network namespace of its own instead (the
# multi-node tests' shape: two namespaces on a bridge in a third, veth pairs,
# 10.232.0.1 and .2), listening on its namespace's address, so the daemons'
# traffic crosses veth and bridge as between two nodes; the clients stay in
# the root namespace (they reach their collcd by its Unix socket). Needs root,
# `ip` (IP=path, for instance a wrapper that brings its own libraries where
# the machine lacks iproute2) and nsenter. A namespace that cannot be made is a
# FAIL, not a skip.
set -u
LOGDIR=${OUT:-/tmp/collc-gpunet-logs}
STAGED_MAX=${STAGED_MAX:-262144}
ROW_S=${ROW_S:-180}
SEED=${SEED:-$(date +%s)}
PORT_A=${PORT_A:-7461}
PORT_B=${PORT_B:-7462}
GPU=${GPU:-0}
BIN=${PREBUILT:?PREBUILT=dir with collcd, collc-gpu-test and libcollc.so.1}
export LD_LIBRARY_PATH=$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CUDA_MODULE_LOADING=EAGER
mkdir -p "$LOGDIR"
RES=$LOGDIR/results.txt
: >"$RES"
. "$(dirname "$0")/lib.sh"

SOCK_A=/tmp/collc-gpunet-a.sock
SOCK_B=/tmp/collc-gpunet-b.sock
PID_A=
PID_B=

# Two grids on one GPU run side by side only under MPS.
export CUDA_MPS_PIPE_DIRECTORY=/tmp/collc-gpunet-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/collc-gpunet-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d >/dev/null 2>&1 && MPS_STARTED=1 || MPS_STARTED=0

IP=${IP:-ip}
NS=(collc-gpunet-a-$$ collc-gpunet-b-$$)
NS_BR=collc-gpunet-br-$$
ADDR_A=127.0.0.1 ADDR_B=127.0.0.1
netns_down() {
	[ "${NETNS:-0}" = 1 ] || return 0
	"$IP" netns del "${NS[0]}" 2>/dev/null
	"$IP" netns del "${NS[1]}" 2>/dev/null
	"$IP" netns del "$NS_BR" 2>/dev/null
}
netns_up() { # 0 with both namespaces joined by the bridge; 1 (said why) otherwise
	local i
	"$IP" netns add "$NS_BR" && "$IP" -n "$NS_BR" link set lo up &&
		"$IP" -n "$NS_BR" link add br0 type bridge && "$IP" -n "$NS_BR" link set br0 up || return 1
	for i in 0 1; do
		"$IP" netns add "${NS[i]}" && "$IP" -n "${NS[i]}" link set lo up &&
			"$IP" -n "$NS_BR" link add "v$i" type veth peer name eth0 netns "${NS[i]}" &&
			"$IP" -n "$NS_BR" link set "v$i" master br0 up &&
			"$IP" -n "${NS[i]}" addr add "10.232.0.$((i + 1))/24" dev eth0 &&
			"$IP" -n "${NS[i]}" link set eth0 up || return 1
	done
	ADDR_A=10.232.0.1 ADDR_B=10.232.0.2
}
if [ "${NETNS:-0}" = 1 ]; then
	trap netns_down EXIT
	if ! netns_up >>"$LOGDIR/netns.log" 2>&1; then
		result "netns FAIL the namespaces could not be made (netns.log: $(tail -n 1 "$LOGDIR/netns.log"))"
		exit 1
	fi
	result "netns PASS collcd A in ${NS[0]} ($ADDR_A), B in ${NS[1]} ($ADDR_B), on a bridge"
fi

STARTED=
START_ENV=()  # start_one: NAME=VALUE for that collcd's environment
START_ARGS=() # more collcd options, for both
B_ENV=()      # NAME=VALUE for the second collcd's environment alone
start_one() { # sock addr port log [ns]: starts one collcd (its pid in STARTED); 1 if it did not come up
	local in=()
	rm -f "$1" "$1.admin"
	# nsenter, not `ip netns exec`: the network alone (no sysfs remount), and none of IP's environment.
	[ -n "${5:-}" ] && in=(nsenter "--net=/run/netns/$5")
	local set=(--set "net_eager_staged_max_bytes=$STAGED_MAX")
	for kv in ${COLLCD_SET:-}; do set+=(--set "$kv"); done
	"${in[@]}" env "${START_ENV[@]}" "${COLLCD_BIN:-$BIN/collcd}" --backend cuda --socket "$1" --listen "$2:$3" \
		--max-channels 8 --devices $((GPU + 1)) --foreground --log-level info "${set[@]}" \
		"${START_ARGS[@]}" >>"$4" 2>&1 &
	STARTED=$!
	wait_socket "$1" "$STARTED" 400
}
start_both() {
	local na= nb=
	[ "${NETNS:-0}" = 1 ] && na=${NS[0]} nb=${NS[1]}
	start_one "$SOCK_A" "$ADDR_A" "$PORT_A" "$LOGDIR/collcd-a.log" "$na"; local ra=$?
	PID_A=$STARTED
	[ "$ra" = 0 ] || return 1
	START_ENV=("${B_ENV[@]}")
	start_one "$SOCK_B" "$ADDR_B" "$PORT_B" "$LOGDIR/collcd-b.log" "$nb"; local rb=$?
	START_ENV=()
	PID_B=$STARTED
	[ "$rb" = 0 ]
}
STOP_RC=
stop_one() { # pid: SIGTERM, then SIGKILL after 10 s; its exit status in STOP_RC
	local pid=$1
	STOP_RC=255
	[ -n "$pid" ] || return
	kill -TERM "$pid" 2>/dev/null
	for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
	if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; wait "$pid" 2>/dev/null; STOP_RC=124; return; fi
	wait "$pid"
	STOP_RC=$?
}
WANT=" ${*:-net-2ranks net-4ranks net-4ranks-flat net-4ranks-rr net-kill-4ranks net-hostile} "
staged_count() { # sock: eager collectives with GPU buffers staged on that collcd so far (totals.net_eager_staged)
	"$BIN/collcctl" --socket "$1" status --json 2>/dev/null |
		python3 "$(dirname "$0")/../multinode/mn_status.py" eager_staged 2>/dev/null || echo none
}
eager_ran() { # label before: collcd A ran some eagerly since, its GPU buffers staged (net_eager_staged_max_bytes)
	local now
	[[ "$WANT" == *" $1 "* ]] || return 0
	now=$(staged_count "$SOCK_A")
	[ "$now" != none ] && [ "$2" != none ] && [ "$now" -gt "$2" ] &&
		result "$1/eager PASS collcd A ran $((now - $2)) collectives eagerly (GPU buffers staged)" ||
		result "$1/eager FAIL collcd A ran none eagerly (before $2, now $now)"
}
hier_count() { # sock: collectives collcd ran hierarchically so far (status --json totals.by_algo.hier)
	"$BIN/collcctl" --socket "$1" status --json 2>/dev/null |
		python3 "$(dirname "$0")/../multinode/mn_status.py" algo hier 2>/dev/null || echo none
}
phases() { # sock: where its ring collectives' time went (status --json totals.net_phases_ns)
	"$BIN/collcctl" --socket "$1" status --json 2>/dev/null | python3 -c '
import json, sys
p = json.load(sys.stdin).get("totals", {}).get("net_phases_ns", {})
n = p.get("collectives") or 0
print("%d ring collectives across daemons%s" % (n, ", us each: " + " ".join(
    "%s %.1f" % (k, p.get(k, 0) / 1000.0 / n) for k in ("agree", "to_launch", "run", "alldone"))
    if n else ""))' 2>/dev/null || echo "no totals.net_phases_ns"
}
hier_ran() { # label before more|none: collcd A's hierarchical count grew (more) or stayed (none)
	[[ "$WANT" == *" $1 "* ]] || return 0
	local now
	now=$(hier_count "$SOCK_A")
	if [ "$2" = none ] || [ "$now" = none ]; then
		result "$1/hier FAIL no totals.by_algo.hier in collcd A's status (before $2, after $now)"
		return 0
	fi
	case "$3" in
	more) [ "$now" -gt "$2" ] && result "$1/hier PASS collcd A ran $((now - $2)) hierarchical collectives" ||
		result "$1/hier FAIL collcd A ran no hierarchical collective (group rings: 2 GPU ranks a daemon)" ;;
	none) [ "$now" = "$2" ] && result "$1/hier PASS none with net_hier_min_bytes=0" ||
		result "$1/hier FAIL collcd A ran $((now - $2)) hierarchical collectives with net_hier_min_bytes=0" ;;
	esac
}
t() { # limit label scenario args...: one collc-gpu-test run, its RESULT lines kept
	local limit=$1 label=$2; shift 2
	[[ "$WANT" == *" $label "* ]] || return 0
	# A row about to time out leaves both collcd's status (its queues, every slot) in the logs.
	# Killed, the watcher leaves its sleep behind: that must not hold the script's output open.
	(
		sleep $((limit - 5))
		"$BIN/collcctl" --socket "$SOCK_A" status --json >"$LOGDIR/hang-$label-a.json" 2>&1
		"$BIN/collcctl" --socket "$SOCK_B" status --json >"$LOGDIR/hang-$label-b.json" 2>&1
	) </dev/null >/dev/null 2>&1 &
	local watch=$!
	timeout "$limit" "$BIN/collc-gpu-test" "$@" --socket "$SOCK_A" --socket2 "$SOCK_B" \
		--seed "$SEED" --label "$label" 2>>"$LOGDIR/tests.log" | tee -a "$RES"
	local rc=${PIPESTATUS[0]}
	kill "$watch" 2>/dev/null
	wait "$watch" 2>/dev/null
	[ "$rc" = 124 ] && result "$label FAIL timed out after $limit s (hang; both collcd's status: hang-$label-a.json, -b.json)"
	grep "FAILED CHECK $label" "$LOGDIR/tests.log" | head -5 | sed "s|^|[$label] |"
	return 0
}
alive() { # label: both collcd still run (after a scenario that must not kill them)
	[[ "$WANT" == *" $1 "* ]] || return 0
	kill -0 "$PID_A" 2>/dev/null && kill -0 "$PID_B" 2>/dev/null &&
		result "$1/daemons-alive PASS both collcd still run" ||
		result "$1/daemons-alive FAIL a collcd died (see collcd-a.log, collcd-b.log)"
}

: >"$LOGDIR/collcd-a.log"; : >"$LOGDIR/collcd-b.log"; : >"$LOGDIR/tests.log"
if start_both; then
	result "daemons-started PASS collcd A pid $PID_A ($ADDR_A:$PORT_A), B pid $PID_B ($ADDR_B:$PORT_B), gpu $GPU, MPS started here: $MPS_STARTED"
	EAGER0=$(staged_count "$SOCK_A")
	t "$ROW_S" net-2ranks net --gpus "$GPU,$GPU"
	alive net-2ranks
	case "$STAGED_MAX ${COLLCD_SET:-} " in
	"0 "* | *" net_eager_staged_max_bytes=0 "* | *" net_eager_max_bytes=0 "*) ;;
	*) eager_ran net-2ranks "$EAGER0" ;;
	esac
	# A GPU lane serves one communicator spanning daemons: let the last one's teardown end.
	sleep 2
	HIER0=$(hier_count "$SOCK_A")
	t "$ROW_S" net-4ranks net --gpus "$GPU,$GPU,$GPU,$GPU"
	alive net-4ranks
	hier_ran net-4ranks "$HIER0" more
	sleep 2
	# The same with the key at 0 on both (hot: the next communicators): the flat ring alone.
	if [[ "$WANT" == *" net-4ranks-flat "* ]]; then
		"$BIN/collcctl" --socket "$SOCK_A" set net_hier_min_bytes=0 >>"$LOGDIR/tests.log" 2>&1
		"$BIN/collcctl" --socket "$SOCK_B" set net_hier_min_bytes=0 >>"$LOGDIR/tests.log" 2>&1
	fi
	HIER0=$(hier_count "$SOCK_A")
	t "$ROW_S" net-4ranks-flat net --gpus "$GPU,$GPU,$GPU,$GPU"
	alive net-4ranks-flat
	hier_ran net-4ranks-flat "$HIER0" none
	if [[ "$WANT" == *" net-4ranks-flat "* ]]; then
		"$BIN/collcctl" --socket "$SOCK_A" set net_hier_min_bytes=4096 >>"$LOGDIR/tests.log" 2>&1
		"$BIN/collcctl" --socket "$SOCK_B" set net_hier_min_bytes=4096 >>"$LOGDIR/tests.log" 2>&1
	fi
	sleep 2
	# Ranks round-robin: the ring runs 0 2 1 3, all-gather's and reduce-scatter's blocks by rank.
	HIER0=$(hier_count "$SOCK_A")
	t "$ROW_S" net-4ranks-rr net --gpus "$GPU,$GPU,$GPU,$GPU" --round-robin
	alive net-4ranks-rr
	hier_ran net-4ranks-rr "$HIER0" more
	echo "collcd A: $(phases "$SOCK_A")" | tee -a "$LOGDIR/tests.log"
	echo "collcd B: $(phases "$SOCK_B")" | tee -a "$LOGDIR/tests.log"
	sleep 2
	NETKILL_BEFORE=
	MPS_SERVER=$(echo get_server_list | timeout 5 nvidia-cuda-mps-control 2>/dev/null | head -n 1)
	if [ "${KILL_MODE:-mps}" = mps ] && [ -n "$MPS_SERVER" ]; then
		# Its grid ended by the server, collcd B exits on the sticky error; SIGKILL follows
		# (after at most 0.2 s: an exited B stays a zombie of this shell, kill -0 still sees it).
		NETKILL_BEFORE="echo terminate_client $MPS_SERVER $PID_B | timeout 5 nvidia-cuda-mps-control >>'$LOGDIR/tests.log' 2>&1;
			for _ in \$(seq 1 20); do kill -0 $PID_B 2>/dev/null || break; sleep 0.01; done"
	fi
	[[ "$WANT" == *" net-kill-4ranks "* ]] &&
		echo "net-kill-4ranks: KILL_MODE=${KILL_MODE:-mps}, MPS server ${MPS_SERVER:-none}" >>"$LOGDIR/tests.log"
	export COLLC_NETKILL_BEFORE=$NETKILL_BEFORE
	t 120 net-kill-4ranks netkill --gpus "$GPU,$GPU,$GPU,$GPU" --kill-pid "$PID_B"
	unset COLLC_NETKILL_BEFORE
	cp "$CUDA_MPS_LOG_DIRECTORY/server.log" "$LOGDIR/mps-server.log" 2>/dev/null
	cp "$CUDA_MPS_LOG_DIRECTORY/control.log" "$LOGDIR/mps-control.log" 2>/dev/null
	dmesg 2>/dev/null | grep -i "xid" | tail -n 20 >"$LOGDIR/xid.txt"
	if ! kill -0 "$PID_B" 2>/dev/null; then
		wait "$PID_B" 2>/dev/null
		PID_B=
	fi
	stop_one "$PID_B"
	stop_one "$PID_A"
	[ "$STOP_RC" = 0 ] && result "collcd-a-clean-exit PASS exit 0 at the end" \
		|| result "collcd-a-clean-exit FAIL exit status $STOP_RC"
else
	result "daemons-started FAIL see $LOGDIR/collcd-a.log and collcd-b.log"
	tail -n 5 "$LOGDIR/collcd-a.log" "$LOGDIR/collcd-b.log"
	stop_one "$PID_A"
	stop_one "$PID_B"
fi
# Both collcd again on the hostile test plugin (tests/multinode/hostile_plugin.c),
# B's armed by a file collc-gpu-test creates mid-run: one of B's steps goes out
# 8 bytes short, and the grid that receives it must fail the communicator.
if [[ "$WANT" == *" net-hostile "* ]]; then
	ARM=$LOGDIR/hostile-arm
	rm -f "$ARM"
	START_ARGS=(--net plugin:collchostile)
	B_ENV=(COLLC_HOSTILE_MODE=short "COLLC_HOSTILE_ARM=$ARM")
	start_both; rc=$?
	START_ARGS=() B_ENV=()
	if [ "$rc" = 0 ]; then
		t 150 net-hostile nethostile --gpus "$GPU,$GPU" --arm-file "$ARM"
		alive net-hostile
		grep -h "collchostile: sent" "$LOGDIR/collcd-b.log" >>"$LOGDIR/tests.log"
	else
		result "net-hostile FAIL the collcd on the hostile plugin did not start (collcd-a.log, collcd-b.log)"
	fi
	stop_one "$PID_B"
	stop_one "$PID_A"
fi
[ "$MPS_STARTED" = 1 ] && echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
grep -i "error\|warn" "$LOGDIR/collcd-a.log" "$LOGDIR/collcd-b.log" | head -20 >"$LOGDIR/collcd-warnings.txt"
NP=$(grep -c '^RESULT .* PASS' "$RES"); NF=$(grep -c '^RESULT .* FAIL' "$RES")
echo "seed $SEED: $NP passed, $NF failed (logs in $LOGDIR; collcd warnings: collcd-warnings.txt)"
[ "$NF" = 0 ] && [ "$NP" -gt 0 ]
