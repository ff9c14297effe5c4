# SPDX-License-Identifier: MIT
# shellcheck shell=bash
#
# Multi-node tests on one machine: each "node" is a network namespace with
# its own collcd; the nodes meet on a bridge that lives in a namespace of its
# own, so no link, address or packet of the test touches the machine's own
# namespace. Sourced by the tests of this folder:
#
#   . netns.sh
#   mn_init NAME NODES         namespaces, bridge, veth pairs, 10.231.0.(i+1)/24 on node i
#   mn_daemon_start I [ARG]...  collcd --backend cpu --listen 10.231.0.(i+1):7400 in node i
#   mn_rank I RANK NRANKS [ARG]...  an mn_client in node i on node i's collcd (background)
#   mn_wait_ranks SECONDS       0 when every rank started since the last wait exited 0
#   mn_pass                     prints PASS and exits 0 (cleanup runs from the EXIT trap)
#
# Names: namespaces "cmn-NAME-PID-N" and "cmn-NAME-PID-br" (unique per run),
# files under one mktemp directory. Every wait is bounded in time; the EXIT
# trap always kills the test's daemons and clients and deletes its namespaces
# (with them their links). Not root or no `ip netns`: exit 77 (skipped).
#
# Also bench/run-multinode.sh's nodes.
#
# Environment: COLLCD, COLLCCTL, MN_CLIENT (binaries; set by ctest),
# MN_SCALE=N (sanitizer builds: every wait N times longer), MN_LOCAL=1 (harness check without the inter-node feature: no --listen, and
# every rank uses node 0's collcd), MN_KEEP=1 (keep the directory and logs),
# MN_DAEMON_ARGS (more collcd arguments for every node), MN_PIN=1 (each node's
# collcd on a CPU slice of its own, mn_cpus: nodes on one machine otherwise
# share every core, which no two real nodes do).

# iproute2 lives in /usr/sbin (/sbin), which a non-login PATH may lack.
case ":$PATH:" in
*:/usr/sbin:*) ;;
*) PATH=$PATH:/usr/sbin:/sbin ;;
esac

MN_PORT=7400
MN_SUBNET=10.231.0
MN_SKIP=77

mn_log() { echo "${MN_NAME:-multinode}: $*" >&2; }

mn_fail() {
	mn_log "FAIL: $*"
	exit 1
}

mn_skip() {
	echo "${MN_NAME:-multinode}: skipped: $*"
	exit $MN_SKIP
}

# Runs a command with a deadline in seconds (timeout(1) when present).
mn_bounded() {
	local s=$1
	shift
	timeout --kill-after=2 "$s" "$@"
}

mn_ns() { echo "${MN_PREFIX}-$1"; }
mn_addr() { echo "$MN_SUBNET.$(($1 + 1))"; }
mn_sock() { echo "$MN_DIR/n$1/collcd.sock"; }

mn_cleanup() {
	local rc=$? pid ns
	trap - EXIT INT TERM
	for pid in "${MN_RANK_PIDS[@]}"; do
		kill -9 "$pid" 2>/dev/null
	done
	mn_stop_daemons
	wait 2>/dev/null
	# Whatever still runs inside the test's own namespaces, then the namespaces.
	for ns in "${MN_NAMESPACES[@]}"; do
		for pid in $(ip netns pids "$ns" 2>/dev/null); do
			kill -9 "$pid" 2>/dev/null
		done
		ip netns del "$ns" 2>/dev/null
	done
	if [ "$rc" != 0 ] && [ "$rc" != "$MN_SKIP" ] && [ -n "$MN_DIR" ]; then
		local f
		for f in "$MN_DIR"/n*/log; do
			[ -f "$f" ] || continue
			mn_log "--- last lines of $(basename "$(dirname "$f")")'s collcd log"
			tail -n 25 "$f" >&2
		done
	fi
	if [ -n "$MN_DIR" ]; then
		if [ "${MN_KEEP:-0}" = 1 ]; then
			mn_log "kept $MN_DIR"
		else
			rm -rf "$MN_DIR"
		fi
	fi
	exit "$rc"
}

# Namespaces "cmn-NAME-PID-X" whose test process is gone (a run killed by
# ctest's TIMEOUT has no EXIT trap): their processes are killed and they go.
mn_reap_stale() {
	local ns pid p
	for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^cmn-/ { print $1 }'); do
		pid=${ns%-*}
		pid=${pid##*-}
		case "$pid" in
		'' | *[!0-9]*) continue ;;
		esac
		kill -0 "$pid" 2>/dev/null && continue
		for p in $(ip netns pids "$ns" 2>/dev/null); do
			kill -9 "$p" 2>/dev/null
		done
		ip netns del "$ns" 2>/dev/null
	done
}

# mn_init NAME NODES: the namespaces, the bridge and the links of NODES nodes.
mn_init() {
	local name=$1 n=$2 i br
	MN_NAME=$name
	MN_NODES=$n
	MN_RANK_PIDS=()
	MN_DPIDS=()
	MN_NAMESPACES=()
	MN_DIR=
	: "${COLLCD:?COLLCD must name collcd}" "${COLLCCTL:?COLLCCTL must name collcctl}"
	if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
		mn_skip "needs root and ip netns"
	fi
	trap mn_cleanup EXIT
	trap 'exit 1' INT TERM
	mn_reap_stale
	MN_DIR=$(mktemp -d /tmp/collc-mn-XXXXXX)
	MN_PREFIX="cmn-$name-$$"
	br=$(mn_ns br)
	if ! ip netns add "$br" 2>"$MN_DIR/ip.err"; then
		mn_skip "needs root and ip netns ($(cat "$MN_DIR/ip.err"))"
	fi
	MN_NAMESPACES+=("$br")
	ip -n "$br" link set lo up || mn_fail "lo in $br"
	# A kernel without bridge or veth support is the machine's limit, not collc's.
	ip -n "$br" link add br0 type bridge 2>"$MN_DIR/ip.err" ||
		mn_skip "needs a bridge in a network namespace ($(cat "$MN_DIR/ip.err"))"
	ip -n "$br" link set br0 up || mn_fail "bridge up"
	for ((i = 0; i < n; i++)); do
		local ns
		ns=$(mn_ns "$i")
		mkdir -p "$MN_DIR/n$i"
		ip netns add "$ns" || mn_fail "ip netns add $ns"
		MN_NAMESPACES+=("$ns")
		ip -n "$ns" link set lo up || mn_fail "lo in $ns"
		# One end in the bridge's namespace, the other (eth0) in the node's.
		ip -n "$br" link add "v$i" type veth peer name eth0 netns "$ns" 2>"$MN_DIR/ip.err" ||
			mn_skip "needs veth pairs between network namespaces ($(cat "$MN_DIR/ip.err"))"
		ip -n "$br" link set "v$i" master br0 up || mn_fail "v$i on the bridge"
		ip -n "$ns" addr add "$(mn_addr "$i")/24" dev eth0 || mn_fail "address of node $i"
		ip -n "$ns" link set eth0 up || mn_fail "eth0 of node $i up"
	done
	# The bridge forwards once its ports are up; wait for node 0 to reach every node.
	for ((i = 1; i < n; i++)); do
		mn_wait_reach 0 "$i" 10 || mn_fail "node 0 cannot reach node $i"
	done
	mn_log "$n nodes in namespaces $MN_PREFIX-{0..$((n - 1))}, bridge in $br, files in $MN_DIR"
}

# mn_wait_reach FROM TO SECONDS: 0 once FROM's namespace reaches TO's address
# (a TCP connection to a closed port there is refused: the path works).
mn_wait_reach() {
	local from=$1 to=$2 s=$3 t
	for ((t = 0; t < s * 5; t++)); do
		mn_bounded 2 ip netns exec "$(mn_ns "$from")" bash -c \
			"exec 3<>/dev/tcp/$(mn_addr "$to")/9" 2>&1 | grep -q refused && return 0
		sleep 0.2
	done
	return 1
}

# mn_daemon_start I [ARG]...: collcd in node I (in MN_LOCAL mode without --listen).
mn_daemon_start() {
	local i=$1 sock t
	shift
	sock=$(mn_sock "$i")
	local args=(--foreground --backend cpu --socket "$sock" --admin-socket "$sock.admin")
	if [ "${MN_LOCAL:-0}" != 1 ]; then
		args+=(--listen "$(mn_addr "$i"):$MN_PORT" --set net_ifname=eth0)
	fi
	# shellcheck disable=SC2206
	args+=(${MN_DAEMON_ARGS:-} "$@")
	local pin=()
	[ "${MN_PIN:-0}" = 1 ] && pin=(taskset -c "$(mn_cpus "$i")")
	echo "--- ${pin[*]} collcd ${args[*]}" >>"$MN_DIR/n$i/log"
	ip netns exec "$(mn_ns "$i")" "${pin[@]}" "$COLLCD" "${args[@]}" >>"$MN_DIR/n$i/log" 2>&1 &
	MN_DPIDS[i]=$!
	for ((t = 0; t < 100 * ${MN_SCALE:-1}; t++)); do
		if ! kill -0 "${MN_DPIDS[i]}" 2>/dev/null; then
			mn_fail "collcd of node $i exited at start: $(tail -n 5 "$MN_DIR/n$i/log")"
		fi
		mn_bounded 5 "$COLLCCTL" --socket "$sock" status >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	mn_fail "collcd of node $i does not answer on $sock after $((10 * ${MN_SCALE:-1})) s"
}

# mn_cpus I: node I's CPUs with MN_PIN=1 (taskset's list): the online CPUs cut
# into one contiguous slice a node, or CPU I modulo their count when there are
# fewer CPUs than nodes. The nodes of run N are mn_init's N.
mn_cpus() {
	local i=$1 n=${MN_NODES:-1} c per
	c=$(getconf _NPROCESSORS_ONLN)
	if [ "$c" -lt "$n" ]; then
		echo $((i % c))
		return
	fi
	per=$((c / n))
	echo "$((i * per))-$((i * per + per - 1))"
}

mn_daemon_kill() {
	local i=$1
	kill -9 "${MN_DPIDS[i]}" 2>/dev/null
	wait "${MN_DPIDS[i]}" 2>/dev/null
	MN_DPIDS[i]=
}

# mn_status_json I: `collcctl status --json` of node I's collcd on stdout.
mn_status_json() {
	mn_bounded 5 "$COLLCCTL" --socket "$(mn_sock "$1")" status --json
}

# mn_rank I RANK NRANKS [ARG]...: rank RANK of NRANKS as an mn_client in node I.
# The id file is $MN_ID (default $MN_DIR/id); its log is $MN_DIR/rank-RANK.log.
mn_rank() {
	local i=$1 rank=$2 nranks=$3 node_sock
	shift 3
	: "${MN_CLIENT:?MN_CLIENT must name mn_client}"
	node_sock=$(mn_sock "$i")
	[ "${MN_LOCAL:-0}" = 1 ] && node_sock=$(mn_sock 0)
	ip netns exec "$(mn_ns "$i")" env COLLC_SOCKET="$node_sock" "$MN_CLIENT" \
		--id-file "${MN_ID:-$MN_DIR/id}" --rank "$rank" --nranks "$nranks" "$@" \
		>"$MN_DIR/rank-${MN_RANK_TAG:-}$rank.log" 2>&1 &
	MN_RANK_PIDS+=($!)
	MN_RANK_NAMES+=("${MN_RANK_TAG:-}$rank")
}

# mn_wait_ranks SECONDS: waits for the ranks started since the last call;
# kills those still running at the deadline. Returns how many failed.
mn_wait_ranks() {
	local s=$(($1 * ${MN_SCALE:-1})) deadline bad=0 k pid st
	deadline=$((SECONDS + s))
	for k in "${!MN_RANK_PIDS[@]}"; do
		pid=${MN_RANK_PIDS[k]}
		while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do
			sleep 0.05
		done
		if kill -0 "$pid" 2>/dev/null; then
			kill -9 "$pid" 2>/dev/null
			mn_log "rank ${MN_RANK_NAMES[k]} still running after ${s} s: killed"
		fi
		wait "$pid"
		st=$?
		if [ $st != 0 ]; then
			bad=$((bad + 1))
			mn_log "rank ${MN_RANK_NAMES[k]} exited $st:"
			sed 's/^/    /' "$MN_DIR/rank-${MN_RANK_NAMES[k]}.log" >&2
		else
			grep -h 'collectives right\|after\|pending\|refused\|-EINVAL' \
				"$MN_DIR/rank-${MN_RANK_NAMES[k]}.log" | sed 's/^/    /' >&2
		fi
	done
	MN_RANK_PIDS=()
	MN_RANK_NAMES=()
	return $bad
}

# mn_wait_files SECONDS FILE...: 0 once every file exists.
mn_wait_files() {
	local s=$1 t f missing
	shift
	for ((t = 0; t < s * 20; t++)); do
		missing=0
		for f in "$@"; do
			[ -e "$f" ] || missing=1
		done
		[ $missing = 0 ] && return 0
		sleep 0.05
	done
	return 1
}

# Stops every daemon (SIGTERM, then SIGKILL after 3 s x MN_SCALE).
mn_stop_daemons() {
	local pid t alive
	for pid in "${MN_DPIDS[@]}"; do
		[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null
	done
	for ((t = 0; t < 30 * ${MN_SCALE:-1}; t++)); do
		alive=0
		for pid in "${MN_DPIDS[@]}"; do
			[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && alive=1
		done
		[ $alive = 0 ] && break
		sleep 0.1
	done
	for pid in "${MN_DPIDS[@]}"; do
		[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	done
	MN_DPIDS=()
}

# Stops the daemons, then fails on a sanitizer report in any daemon's log
# (sanitizer builds: leaks are reported at exit), else prints PASS and exits 0.
mn_pass() {
	local f
	mn_stop_daemons
	for f in "$MN_DIR"/n*/log; do
		[ -f "$f" ] || continue
		if grep -q -e 'ERROR: AddressSanitizer' -e 'ERROR: LeakSanitizer' \
			-e 'ThreadSanitizer: ' -e 'runtime error: ' \
			-e 'SUMMARY: UndefinedBehaviorSanitizer' "$f"; then
			mn_fail "a sanitizer report in $(basename "$(dirname "$f")")'s collcd log"
		fi
	done
	mn_log "PASS"
	exit 0
}
