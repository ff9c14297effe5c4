#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The multi-node tests (ctest label `multinode`; tests/multinode/CMakeLists.txt):
# every "node" a network namespace with its own collcd (netns.sh), ranks as
# mn_client processes in their node's namespace.
#
#   mn_test.sh harness               the scaffolding alone (one collcd, no --listen):
#                                    namespaces, links, clients, kill timing
#   mn_test.sh correct NODES PER [rr|block [ARGS0 [ARGS]]]  every collective x dtype x op,
#                                    random sizes; ARGS0: collcd arguments for node 0 (the
#                                    root), ARGS for the others; with net_hier_min_bytes=1
#                                    (0) in ARGS0 every node must have run some (no)
#                                    hierarchical all-reduces; with net_channels in ARGS0
#                                    or ARGS, every node's status must show the least
#                                    channels offered; between two nodes of one rank
#                                    some eager collectives' inputs landed in rank buffers
#   mn_test.sh a2a NODES PER [rr]    all-to-all and all-to-allv x dtype, random counts
#                                    (zeros too), and counts that disagree: -EINVAL everywhere
#   mn_test.sh p2p NODES PER [rr]    send/recv x dtype (fp8 too), random counts (zeros too),
#                                    every rank to every rank and a ring of 16 outstanding
#                                    each way, checked byte for byte; counts that differ
#                                    across nodes: -EINVAL on both sides, nothing written
#   mn_test.sh big NODES PER         every collective once at 4 Mi elements and an all-reduce
#                                    in place, checked; every node received ring steps
#                                    straight into rank buffers (net.received_direct)
#   mn_test.sh congestion            net_tcp_congestion: auto over a namespace on bbr gives
#                                    cubic, a name set is taken; an unknown name stops
#                                    collcd at start
#   mn_test.sh two_comms             two communicators over the same daemons at once
#   mn_test.sh two_comms_late        communicators made while another one runs there
#   mn_test.sh mismatch              -EINVAL on every rank across nodes
#   mn_test.sh kill [V]              kill -9 of node V's daemon mid-collective (2; 0: the root)
#   mn_test.sh kill_a2a [V]          the same in the middle of all-to-alls
#   mn_test.sh kill_p2p [V]          the same in the middle of sends and receives (a ring)
#   mn_test.sh kill_hier [V]         the same in the middle of hierarchical all-reduces (two
#                                    ranks a node, eager collectives off)
#   mn_test.sh linkdown [V]          `ip link set down` on node V's link
#   mn_test.sh restart               a daemon killed, restarted, serving new communicators
#   mn_test.sh secret                an id with a flipped secret byte is refused
#   mn_test.sh garbage               hundreds of hostile connections on the listen port
#   mn_test.sh plugin                the tcp transport through the plugin loader (collectives,
#                                    send/recv)
#   mn_test.sh hostile short|long    node 1's plugin sends one step 8 bytes short or long once
#                                    the links are up: EPROTO or EPIPE, nothing wrong delivered
#   mn_test.sh hostile_direct        node 1's tcp transport sends one header 8 bytes short:
#                                    node 0's proxy refuses the step that lands in a rank's buffer
#   mn_test.sh bench                 collc-bench --socket A,B across two daemons
#
# Fault tests: a communicator X over the nodes runs all-reduces until the
# fault; its ranks must end with -EPIPE or -ETIMEDOUT (ranks on a killed
# daemon's node: also the library's own connection errors) at most
# MN_BOUND_MS (2000, the default net_timeout_ms) after the fault, with every
# earlier result right; a communicator Y over nodes the fault does not touch
# runs checked collectives throughout and must not notice.
#
# MN_SEED=N (default: from the PID) is passed to every rank.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=netns.sh
. "$here/netns.sh"

case_name=${1:-}
shift || true
seed=${MN_SEED:-$$}
bound=${MN_BOUND_MS:-2000}
# The secret's first byte in a network id (struct collc_uid in proto/wire.h).
secret_offset=80
PY=/usr/bin/python3

# rank_start TAG ID NODE RANK NRANKS [ARG]...: one rank of communicator TAG.
rank_start() {
	local tag=$1 id=$2
	shift 2
	MN_RANK_TAG=$tag- MN_ID=$id mn_rank "$@" --seed "$seed"
}

# comm_start TAG NRANKS NODE... -- [ARG]...: rank r of communicator TAG on the
# r-th listed node; rank 0 makes the id (so the first node is the root).
comm_start() {
	local tag=$1 n=$2 r=0 nodes=()
	shift 2
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		nodes+=("$1")
		shift
	done
	shift
	rm -f "$MN_DIR/id-$tag"
	for ((r = 0; r < n; r++)); do
		if [ $r = 0 ]; then
			rank_start "$tag" "$MN_DIR/id-$tag" "${nodes[r]}" $r "$n" --make-id "$@"
		else
			rank_start "$tag" "$MN_DIR/id-$tag" "${nodes[r]}" $r "$n" "$@"
		fi
	done
}

# loop_args TAG RANK: the loop mode's files for one rank of communicator TAG.
loop_args() {
	echo --mode loop --marker "$MN_DIR/fault" --ready-file "$MN_DIR/ready-$1-$2" \
		--bound-ms "$bound" --max-s 40 --max-count 131072
}

# fault_when_ready TAG NRANKS: waits until every rank of TAG ran a collective,
# lets the traffic go on a little, then marks the time of the fault.
fault_when_ready() {
	local tag=$1 n=$2 files=() r
	for ((r = 0; r < n; r++)); do
		files+=("$MN_DIR/ready-$tag-$r")
	done
	mn_wait_files 30 "${files[@]}" || mn_fail "communicator $tag never ran (see the rank logs)"
	sleep 0.5
	touch "$MN_DIR/fault"
}

daemons_alive() {
	local i
	for i in "$@"; do
		kill -0 "${MN_DPIDS[i]}" 2>/dev/null || mn_fail "collcd of node $i died"
	done
}

# status_shows NODES QUERY WANT: every peer in each node's status --json has
# mn_status.py QUERY equal to WANT within 3 s, else the case fails.
status_shows() {
	local i t ok vals v seen
	for ((i = 0; i < $1; i++)); do
		ok=0
		seen=
		for ((t = 0; t < 30 && ok == 0; t++)); do
			vals=$(mn_status_json "$i" | $PY "$here/mn_status.py" "$2") ||
				mn_fail "status --json of node $i: a peer without its $2"
			ok=1
			[ -n "$vals" ] || ok=0
			[ -z "$vals" ] || seen=$vals
			for v in $vals; do [ "$v" = "$3" ] || ok=0; done
			[ "$ok" = 1 ] || sleep 0.1
		done
		[ "$ok" = 1 ] || mn_fail "node $i's status showed $2 '$seen' while A ran, want $3"
		echo "node $i's status: $2 $3"
	done
}

# refused_count I: node I's refusals so far (runs in a command substitution: no mn_fail here).
refused_count() {
	local out
	out=$(mn_status_json "$1") || return 1
	echo "$out" | $PY "$here/mn_status.py" refused
}

# hostile_loop [ARG]...: communicator X over nodes 0 and 1 in the loop mode (EPROTO
# accepted, ARGs added) until the hostile step that node 1 sends once the fault
# marker exists; node 0's protocol errors before it go to HOSTILE_BEFORE.
hostile_loop() {
	local out r
	out=$(mn_status_json 0) && HOSTILE_BEFORE=$(echo "$out" | $PY "$here/mn_status.py" protocol_errors) ||
		mn_fail "status --json of node 0 has no net.protocol_errors"
	for r in 0 1; do
		# shellcheck disable=SC2046
		rank_start X "$MN_DIR/id-X" "$r" "$r" 2 $( [ $r = 0 ] && echo --make-id) \
			$(loop_args X "$r") --also-accept EPROTO "$@"
	done
	fault_when_ready X 2
	mn_wait_ranks 60 || mn_fail "ranks after node 1's hostile step"
}

# hostile_after COUNTED: both daemons still serve (a new communicator over them);
# with COUNTED 1, node 0 must have counted a protocol error since hostile_loop.
hostile_after() {
	local out after
	daemons_alive 0 1
	out=$(mn_status_json 0) && after=$(echo "$out" | $PY "$here/mn_status.py" protocol_errors) ||
		mn_fail "status --json of node 0 has no net.protocol_errors"
	mn_log "protocol errors counted by node 0: $HOSTILE_BEFORE before, $after after"
	if [ "$1" = 1 ] && [ "$after" -le "$HOSTILE_BEFORE" ]; then
		mn_fail "node 0 counted no protocol error"
	fi
	comm_start B 2 0 1 -- --mode check
	mn_wait_ranks 120 || mn_fail "a communicator over both daemons after the hostile step"
}

case "$case_name" in
harness)
	# The scaffolding without the inter-node feature: one collcd (node 0), ranks
	# in three namespaces on its socket; then a client killed mid-loop (the
	# single-node contract: -EPIPE for the others) through the marker timing.
	export MN_LOCAL=1
	mn_init harness 3
	mn_daemon_start 0
	comm_start A 4 0 1 2 2 -- --mode check
	mn_wait_ranks 120 || mn_fail "correctness across namespaces on one collcd"
	for r in 0 1 2; do
		# shellcheck disable=SC2046
		rank_start X "$MN_DIR/id-X" "$r" "$r" 4 $( [ $r = 0 ] && echo --make-id) \
			$(loop_args X "$r")
	done
	MN_RANK_TAG=victim- MN_ID=$MN_DIR/id-X mn_rank 2 3 4 --seed "$seed" \
		--mode loop --marker "$MN_DIR/fault" --ready-file "$MN_DIR/ready-X-3" --max-s 40 \
		--max-count 131072
	victim=${MN_RANK_PIDS[3]}
	fault_when_ready X 4
	kill -9 "$victim"
	# The victim's own status is SIGKILL: wait for the others, then reap it.
	unset 'MN_RANK_PIDS[3]' 'MN_RANK_NAMES[3]'
	mn_wait_ranks 30 || mn_fail "ranks after a client was killed"
	wait "$victim" 2>/dev/null
	mn_pass
	;;
correct | a2a | p2p)
	nnodes=${1:?nodes}
	per=${2:?ranks per node}
	place=${3:-block}
	mode=check
	[ "$case_name" = a2a ] && mode=a2a
	odd=$((nnodes * per - 1))
	if [ "$case_name" = p2p ]; then
		mode=p2p
		# The refused pair (odd, odd + 1) crosses nodes.
		odd=$((per - 1))
		[ "$place" = rr ] && odd=0
	fi
	# Optional collcd arguments: for node 0 (the root), then for the others.
	read -r -a args0 <<<"${4:-}"
	read -r -a args1 <<<"${5:-}"
	mn_init "${mode:0:1}${nnodes}x$per" "$nnodes"
	mn_daemon_start 0 "${args0[@]}"
	for ((i = 1; i < nnodes; i++)); do mn_daemon_start "$i" "${args1[@]}"; done
	n=$((nnodes * per))
	placement=()
	for ((r = 0; r < n; r++)); do
		if [ "$place" = rr ]; then placement+=($((r % nnodes))); else placement+=($((r / per))); fi
	done
	hier_all=0
	case "${4:-}" in *net_hier_min_bytes=1\ * | *net_hier_min_bytes=1) hier_all=1 ;; esac
	# net_channels named: every daemon offers its own value and the least holds.
	# Its default: 1 on hosts of 4 cores or fewer, else 2 (daemon/config.c).
	want_chan=
	case "${4:-}${5:-}" in *net_channels=*)
		want_chan=2
		host_offer=2
		[ "$(getconf _NPROCESSORS_ONLN)" -le 4 ] && host_offer=1
		for a in "${args0[*]}" "${args1[*]}"; do
			offer=$host_offer
			case "$a" in *net_channels=1*) offer=1 ;; *net_channels=2*) offer=2 ;; esac
			[ "$offer" -lt "$want_chan" ] && want_chan=$offer
		done ;;
	esac
	# Where the status is checked while A runs, A runs for at least 3 s.
	min_s=()
	[ -n "$want_chan" ] || [ "$hier_all" = 1 ] && min_s=(--min-s 3)
	comm_start A "$n" "${placement[@]}" -- --mode "$mode" --odd "$odd" "${min_s[@]}"
	# Every node's status shows the agreed channels, and the group rings (the
	# ranks of a daemon) where all-reduces run hierarchically, once the rank
	# table is known (0 before).
	[ -z "$want_chan" ] || status_shows "$nnodes" channels "$want_chan"
	[ "$hier_all" = 0 ] || status_shows "$nnodes" groups "$per"
	mn_wait_ranks 120 || mn_fail "$mode on $nnodes nodes x $per ranks ($place)"
	daemons_alive $(seq 0 $((nnodes - 1)))
	if [ "$mode" = check ]; then
		# Every daemon ran small collectives eagerly (between two, each computed them
		# itself from the other's inputs), and none did where any daemon turned it off.
		# A ring collective ends on a daemon's ranks once it ran there, without
		# waiting for the other daemons (docs/design.md §6b, "Agreement"): where
		# eager is off on some daemon every collective runs on the ring, and every
		# daemon ended some so.
		for ((i = 0; i < nnodes; i++)); do
			json=$(mn_status_json "$i")
			eager=$($PY "$here/mn_status.py" eager <<<"$json") ||
				mn_fail "status --json of node $i has no net.eager counter"
			early=$($PY "$here/mn_status.py" early_ends <<<"$json") ||
				mn_fail "status --json of node $i has no net.early_ends counter"
			# Host memory goes eager as it is: nothing is staged (that is for GPU buffers).
			staged=$($PY "$here/mn_status.py" eager_staged <<<"$json") ||
				mn_fail "status --json of node $i has no totals.net_eager_staged"
			[ "$staged" = 0 ] || mn_fail "node $i: $staged eager collectives staged, of host memory"
			# Where they went: asked -> GO, -> handed over, -> ran here, -> ALLDONE (ns).
			read -r nph agree _ run alldone < <($PY "$here/mn_status.py" phases <<<"$json") ||
				mn_fail "status --json of node $i has no totals.net_phases_ns"
			case "${4:-}${5:-}" in
			*net_eager_max_bytes=0*)
				[ "$eager" = 0 ] || mn_fail "node $i: $eager eager collectives with eager off"
				[ "$early" -gt 0 ] ||
					mn_fail "node $i: no ring collective ended before every daemon ran it"
				[ "$nph" -gt 0 ] && [ "$agree" -gt 0 ] && [ "$run" -gt 0 ] &&
					[ "$alldone" -gt 0 ] ||
					mn_fail "node $i: ring collectives' phases not counted: $nph $agree $run $alldone" ;;
			*) [ "$eager" -gt 0 ] || mn_fail "node $i: no eager collective among the small ones" ;;
			esac
			echo "node $i: $eager eager collectives, $early ring collectives ended early," \
				"$nph timed ($((agree / 1000)) us agreeing, $((run / 1000)) running," \
				"$((alldone / 1000)) until every daemon ran them, summed)"
		done
		# Between two daemons the other daemon's inputs land in the ranks' result
		# buffers where the daemon's own view came first (daemon/node.h
		# node_coll_ready()): with one rank a daemon (every kind may land; 232 in
		# a run of correct_2x1) some did on one daemon or the other; with three
		# daemons, or eager off, none.
		landed=0
		for ((i = 0; i < nnodes; i++)); do
			l=$(mn_status_json "$i" | $PY "$here/mn_status.py" eager_landed) ||
				mn_fail "status --json of node $i has no net.eager_landed counter"
			landed=$((landed + l))
		done
		case "$nnodes:${4:-}${5:-}" in
		*net_eager_max_bytes=0* | [3-9]:*) [ "$landed" = 0 ] ||
			mn_fail "$landed eager collectives received in place, where none may be" ;;
		2:*) [ "$per" != 1 ] || [ "$landed" -gt 0 ] ||
			mn_fail "no eager collective between two daemons received in place" ;;
		esac
		echo "eager collectives received in place: $landed"
		# Hierarchical all-reduces (docs/design.md §6b): where the root asked for them at
		# every size, every daemon ran some, and none where the root turned them off.
		for ((i = 0; i < nnodes; i++)); do
			hier=$(mn_status_json "$i" | $PY "$here/mn_status.py" algo hier) ||
				mn_fail "status --json of node $i has no totals.by_algo.hier"
			case "${4:-}" in
			*net_hier_min_bytes=1\ * | *net_hier_min_bytes=1) [ "$hier" -gt 0 ] ||
				mn_fail "node $i ran no hierarchical collective with net_hier_min_bytes=1 on the root" ;;
			*net_hier_min_bytes=0*) [ "$hier" = 0 ] ||
				mn_fail "node $i ran $hier hierarchical collectives with them off on the root" ;;
			esac
			echo "hierarchical collectives on node $i: $hier"
		done
	fi
	mn_pass
	;;
big)
	nnodes=${1:?nodes}
	per=${2:?ranks per node}
	mn_init "big${nnodes}x$per" "$nnodes"
	for ((i = 0; i < nnodes; i++)); do mn_daemon_start "$i"; done
	placement=()
	for ((r = 0; r < nnodes * per; r++)); do placement+=($((r / per))); done
	comm_start A $((nnodes * per)) "${placement[@]}" -- --mode check --rounds 1 \
		--big-count 4194304
	mn_wait_ranks 120 || mn_fail "large collectives on $nnodes nodes x $per ranks"
	daemons_alive $(seq 0 $((nnodes - 1)))
	# Their all-gather steps landed in the ranks' buffers, not the ring's slots.
	for ((i = 0; i < nnodes; i++)); do
		direct=$(mn_status_json "$i" | $PY "$here/mn_status.py" received_direct) ||
			mn_fail "status --json of node $i has no net.received_direct counter"
		[ "$direct" -gt 0 ] || mn_fail "node $i received nothing straight into rank buffers"
		echo "node $i received $direct B straight into rank buffers"
	done
	mn_pass
	;;
congestion)
	# net_tcp_congestion (collcd.conf(5)). Node 0 keeps the default, auto, in a
	# namespace on bbr: its sockets to other daemons take cubic (reno where the
	# kernel lacks cubic). Node 1's namespace is on reno, always allowed there,
	# and its key names another: its sockets take that. A name the kernel lacks
	# stops collcd at start. auto's choice itself is unit_plan's
	# test_congestion_auto, with a stand-in for the kernel's answers.
	mn_init congestion 2
	avail=$(cat /proc/sys/net/ipv4/tcp_available_congestion_control)
	want0=reno
	case " $avail " in *" cubic "*) want0=cubic ;; esac
	if ip netns exec "$(mn_ns 0)" sh -c \
		'echo bbr >/proc/sys/net/ipv4/tcp_congestion_control' 2>/dev/null; then
		ns0=bbr
		echo "node 0's namespace on bbr: auto must give its sockets $want0"
	else
		# Not silently: the run says which case it checked.
		want0=$(ip netns exec "$(mn_ns 0)" cat /proc/sys/net/ipv4/tcp_congestion_control)
		ns0=$want0
		echo "NOTE: bbr cannot be a namespace's default here (available: $avail);" \
			"auto checked on $want0, which it must keep"
	fi
	ip netns exec "$(mn_ns 1)" sh -c 'echo reno >/proc/sys/net/ipv4/tcp_congestion_control' ||
		mn_fail "cannot set node 1's congestion control to reno"
	want1=
	for c in cubic bbr; do
		case " $avail " in *" $c "*) want1=$c && break ;; esac
	done
	[ -n "$want1" ] || mn_fail "neither cubic nor bbr is available (available: $avail)"
	out=$(mn_bounded 10 ip netns exec "$(mn_ns 0)" "$COLLCD" --foreground --backend cpu \
		--socket "$MN_DIR/bad.sock" --admin-socket "$MN_DIR/bad.sock.admin" \
		--listen "$(mn_addr 0):$MN_PORT" --set net_ifname=eth0 \
		--set net_tcp_congestion=nosuchcc 2>&1)
	rc=$?
	[ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$rc" != 137 ] ||
		mn_fail "collcd with net_tcp_congestion=nosuchcc: exit $rc, want a refusal at start"
	case "$out" in *"net_tcp_congestion 'nosuchcc'"*) ;;
	*) mn_fail "collcd refused nosuchcc without naming the key: $(echo "$out" | tail -n 3)" ;;
	esac
	echo "net_tcp_congestion=nosuchcc refused at start (exit $rc)"
	mn_daemon_start 0
	mn_daemon_start 1 --set net_tcp_congestion="$want1"
	comm_start A 2 0 1 -- --mode check --min-s 3
	# While A runs: every established TCP socket of each namespace is collcd's.
	for ((i = 0; i < 2; i++)); do
		want=$want0
		[ "$i" = 1 ] && want=$want1
		ok=0
		for ((t = 0; t < 30 && ok == 0; t++)); do
			ccs=$(ip netns exec "$(mn_ns "$i")" ss -tinH state established |
				grep -owE 'reno|cubic|bbr|dctcp|htcp|vegas|westwood' | sort | uniq -c)
			# Control and data sockets up, and all of them with the wanted one.
			[ -n "$ccs" ] && [ "$(echo "$ccs" | wc -l)" = 1 ] &&
				[ "$(echo "$ccs" | awk '{print $2}')" = "$want" ] &&
				[ "$(echo "$ccs" | awk '{print $1}')" -ge 2 ] && ok=1
			[ "$ok" = 1 ] || sleep 0.1
		done
		[ "$ok" = 1 ] || mn_fail "node $i's sockets: $(echo $ccs), want all $want"
		shown=$(mn_status_json "$i" | $PY "$here/mn_status.py" tcp_congestion) ||
			mn_fail "status --json of node $i has no net.tcp_congestion"
		[ "$shown" = "$want" ] || mn_fail "node $i's status shows $shown, want $want"
		echo "node $i: sockets and status $want: $(echo $ccs)"
	done
	# collcd says at start when auto set aside the namespace's bbr.
	if [ "$ns0" = bbr ]; then
		grep -q "net_tcp_congestion auto: sockets to other daemons take $want0, not the namespace's bbr" \
			"$MN_DIR/n0/log" || mn_fail "node 0's log does not say that auto took $want0"
	fi
	mn_wait_ranks 120 || mn_fail "collectives with net_tcp_congestion on both nodes"
	daemons_alive 0 1
	mn_pass
	;;
two_comms)
	# Two communicators over the same two daemons at once, rooted on different
	# daemons, each with every collective x dtype x op for at least 5 s.
	mn_init two_comms 2
	mn_daemon_start 0
	mn_daemon_start 1
	comm_start A 2 0 1 -- --mode check --min-s 5
	comm_start B 4 1 0 1 0 -- --mode check --min-s 5
	# Meanwhile (both run for 5 s at least) each daemon's status lists the other
	# as a peer of both communicators, with traffic both ways.
	for i in 0 1; do
		other=$(mn_addr $((1 - i))):$MN_PORT
		for ((t = 0; t < 20; t++)); do
			peers=$(mn_status_json $i | $PY "$here/mn_status.py" peers) ||
				mn_fail "status --json of node $i has no net object"
			n=$(echo "$peers" | awk -v a="$other" '$1 == a && $5 > 0 && $6 > 0' | wc -l)
			[ "$n" -ge 2 ] && break
			sleep 0.2
		done
		mn_log "node $i's peers (addr comm role state sent received inflight errors):"
		echo "$peers" | sed 's/^/    /' >&2
		[ "$n" -ge 2 ] || mn_fail "node $i's status lists $n communicators with traffic to $other, want 2"
	done
	mn_wait_ranks 90 || mn_fail "two communicators over the same daemons"
	daemons_alive 0 1
	mn_pass
	;;
two_comms_late)
	# Communicators made one after the other over the same two daemons while
	# communicator A runs there: A and each of them must go on unhindered.
	mn_init two_comms_late 2
	mn_daemon_start 0
	mn_daemon_start 1
	comm_start A 4 0 1 0 1 -- --mode check --min-s 8
	good=("${MN_RANK_PIDS[@]}")
	good_names=("${MN_RANK_NAMES[@]}")
	for k in 0 1 2; do
		MN_RANK_PIDS=()
		MN_RANK_NAMES=()
		comm_start C$k 2 $((k % 2)) $(((k + 1) % 2)) -- --mode check
		mn_wait_ranks 40 || mn_fail "communicator C$k, made while A runs"
	done
	MN_RANK_PIDS=("${good[@]}")
	MN_RANK_NAMES=("${good_names[@]}")
	mn_wait_ranks 60 || mn_fail "communicator A while C0..C2 were made and ran"
	daemons_alive 0 1
	mn_pass
	;;
mismatch)
	mn_init mismatch 2
	mn_daemon_start 0
	mn_daemon_start 1
	comm_start A 4 0 0 1 1 -- --mode mismatch --odd 3
	mn_wait_ranks 60 || mn_fail "mismatch across nodes"
	comm_start B 3 1 0 1 -- --mode mismatch --odd 0
	mn_wait_ranks 60 || mn_fail "mismatch across nodes, odd rank on the root's node"
	mn_pass
	;;
kill | linkdown | kill_a2a | kill_p2p | kill_hier)
	# X spans nodes 0 (its root), 1 and 2; Y only the two nodes the fault
	# spares. The fault hits node V (mn_test.sh kill|linkdown [V], default 2).
	# kill_a2a: X runs all-to-alls (the relay on the ring) instead of all-reduces;
	# kill_p2p: each rank of X sends right and receives left (across nodes);
	# kill_hier: X has two ranks a node and no eager collectives, so its
	# all-reduces from 4 KiB run hierarchically (group rings across the nodes).
	v=${1:-2}
	a2a=()
	per=1
	dargs=()
	if [ "$case_name" = kill_a2a ]; then
		a2a=(--loop-alltoall)
		case_name="kill"
	elif [ "$case_name" = kill_p2p ]; then
		a2a=(--loop-p2p)
		case_name="kill"
	elif [ "$case_name" = kill_hier ]; then
		per=2
		dargs=(--set net_eager_max_bytes=0)
		case_name="kill"
	fi
	case "$v" in 0 | 1 | 2) ;; *) mn_fail "node $v: 0, 1 or 2" ;; esac
	spared=()
	for i in 0 1 2; do [ "$i" != "$v" ] && spared+=("$i"); done
	mn_init "$case_name$v" 3
	for i in 0 1 2; do mn_daemon_start "$i" "${dargs[@]}"; done
	comm_start Y 2 "${spared[@]}" -- --mode check --min-s 6
	nx=$((3 * per))
	for ((r = 0; r < nx; r++)); do
		node=$((r % 3))
		extra=()
		# Ranks on the killed daemon's node lose their own collcd.
		[ "$case_name" = kill ] && [ "$node" = "$v" ] &&
			extra=(--also-accept ECONNRESET --also-accept ENOTCONN --also-accept ESHUTDOWN)
		# shellcheck disable=SC2046
		rank_start X "$MN_DIR/id-X" "$node" "$r" "$nx" $( [ $r = 0 ] && echo --make-id) \
			$(loop_args X "$r") "${extra[@]}" "${a2a[@]}"
	done
	fault_when_ready X "$nx"
	if [ "$per" = 2 ]; then
		hier=$(mn_status_json "${spared[0]}" | $PY "$here/mn_status.py" algo hier) ||
			mn_fail "status --json of node ${spared[0]} has no totals.by_algo.hier"
		[ "$hier" -gt 0 ] || mn_fail "X ran no hierarchical all-reduce before the fault"
		echo "hierarchical all-reduces on node ${spared[0]} before the fault: $hier"
	fi
	if [ "$case_name" = kill ]; then
		mn_daemon_kill "$v"
	else
		ip -n "$(mn_ns br)" link set "v$v" down || mn_fail "link down"
	fi
	mn_wait_ranks 60 || mn_fail "ranks after the $case_name of node $v"
	daemons_alive "${spared[@]}"
	[ "$case_name" = linkdown ] && daemons_alive "$v"
	mn_pass
	;;
restart)
	mn_init restart 2
	mn_daemon_start 0
	mn_daemon_start 1
	# shellcheck disable=SC2046
	rank_start X "$MN_DIR/id-X" 0 0 2 --make-id $(loop_args X 0)
	# shellcheck disable=SC2046
	rank_start X "$MN_DIR/id-X" 1 1 2 $(loop_args X 1) \
		--also-accept ECONNRESET --also-accept ENOTCONN --also-accept ESHUTDOWN
	fault_when_ready X 2
	mn_daemon_kill 1
	mn_wait_ranks 30 || mn_fail "ranks after the kill of node 1"
	mn_daemon_start 1
	# The restarted daemon as root, and as a member of a communicator rooted on node 0.
	comm_start R1 2 1 0 -- --mode check
	comm_start R0 4 0 1 0 1 -- --mode check
	mn_wait_ranks 120 || mn_fail "new communicators after the restart of node 1"
	daemons_alive 0 1
	mn_pass
	;;
secret)
	# Communicator A (nodes 0 and 2) runs throughout. Three times: C's rank 0
	# joins on node 0 (the root) and waits; an attacker on node 2 claims rank 1
	# with C's id but one secret byte flipped: node 2's collcd must fail the
	# mutual challenge with the root, so the attacker's init fails; then the
	# real rank 1 joins from node 1 and C must work. (A and C share node 0
	# only: communicators made while another runs over the same two daemons
	# are two_comms_late's case.)
	mn_init secret 3
	for i in 0 1 2; do mn_daemon_start "$i"; done
	before=$(refused_count 0) || mn_fail "status --json of node 0 has no net counters"
	comm_start A 4 0 2 0 2 -- --mode check --min-s 8
	good=("${MN_RANK_PIDS[@]}")
	good_names=("${MN_RANK_NAMES[@]}")
	for k in 0 1 2; do
		MN_RANK_PIDS=()
		MN_RANK_NAMES=()
		rank_start C$k "$MN_DIR/id-C$k" 0 0 2 --make-id --mode check
		root_pid=${MN_RANK_PIDS[0]}
		root_name=${MN_RANK_NAMES[0]}
		mn_wait_files 20 "$MN_DIR/id-C$k" || mn_fail "communicator C$k made no id"
		MN_RANK_PIDS=()
		MN_RANK_NAMES=()
		rank_start S$k "$MN_DIR/id-C$k" 2 1 2 --mode init-fail \
			--flip-byte $((secret_offset + k * 5))
		mn_wait_ranks 20 ||
			mn_fail "attacker $k (secret byte $((secret_offset + k * 5)) flipped) not refused"
		MN_RANK_PIDS=("$root_pid")
		MN_RANK_NAMES=("$root_name")
		rank_start C$k "$MN_DIR/id-C$k" 1 1 2 --mode check
		mn_wait_ranks 30 || mn_fail "communicator C$k after its attacker"
	done
	MN_RANK_PIDS=("${good[@]}")
	MN_RANK_NAMES=("${good_names[@]}")
	mn_wait_ranks 60 || mn_fail "communicator A next to the attackers"
	after=$(refused_count 0) || mn_fail "status --json of node 0 has no net counters"
	mn_log "refusals counted by node 0: $before before, $after after"
	[ "$after" -ge $((before + 3)) ] || mn_fail "3 wrong secrets, $((after - before)) refusals counted"
	daemons_alive 0 1 2
	# Node 2 still joins a communicator with the right secret.
	comm_start B 3 0 2 1 -- --mode check
	mn_wait_ranks 60 || mn_fail "a communicator with node 2 after the attacks"
	mn_pass
	;;
garbage)
	mn_init garbage 2
	mn_daemon_start 0
	mn_daemon_start 1
	before=$(refused_count 0) || mn_fail "status --json of node 0 has no net counters"
	comm_start A 2 0 1 -- --mode check --min-s 5
	count=400
	hold=64
	mn_bounded 60 ip netns exec "$(mn_ns 1)" $PY "$here/garbage.py" "$(mn_addr 0)" "$MN_PORT" \
		--count $count --hold $hold --seed "$seed" >"$MN_DIR/garbage.log" 2>&1 ||
		mn_fail "garbage.py: $(cat "$MN_DIR/garbage.log")"
	mn_log "$(tail -n 1 "$MN_DIR/garbage.log")"
	mn_wait_ranks 90 || mn_fail "the communicator next to the garbage"
	daemons_alive 0 1
	# Refusals are counted as the daemon gets to them: wait a bounded while.
	want=$((before + count + hold))
	for ((t = 0; t < 50; t++)); do
		after=$(refused_count 0) || mn_fail "status --json of node 0 has no net counters"
		[ "$after" -ge $want ] && break
		sleep 0.1
	done
	mn_log "refusals counted by node 0: $before before, $after after $((count + hold)) connections"
	[ "$after" -ge $want ] || mn_fail "$((count + hold)) hostile connections, $((after - before)) refusals counted"
	comm_start B 2 1 0 -- --mode check
	mn_wait_ranks 60 || mn_fail "a communicator after the garbage"
	mn_pass
	;;
bench)
	# collc-bench across two daemons (the path of bench/run-multinode.sh): ranks
	# round-robin over the sockets, results checked, the raw TCP limit measured.
	: "${COLLC_BENCH:?COLLC_BENCH must name collc-bench}"
	mn_init bench 2
	mn_daemon_start 0
	mn_daemon_start 1
	mn_bounded 120 ip netns exec "$(mn_ns 0)" "$COLLC_BENCH" \
		--socket "$(mn_sock 0),$(mn_sock 1)" --nranks 4 --min-bytes 8 --max-bytes 1M \
		--iters 5 --warmup 1 --tcp-limit-s 0.3 --tcp-row-bytes 1M \
		>"$MN_DIR/bench.out" 2>"$MN_DIR/bench.err" ||
		mn_fail "collc-bench exited $?: $(tail -n 5 "$MN_DIR/bench.err")
$(tail -n 30 "$MN_DIR/bench.out")"
	grep -q '^# ranks round-robin over 2 collcd daemons' "$MN_DIR/bench.out" ||
		mn_fail "collc-bench did not spread the ranks: $(cat "$MN_DIR/bench.out")"
	grep '^# raw TCP: [0-9.]* GB/s' "$MN_DIR/bench.out" >&2 ||
		mn_fail "no raw TCP figure: $(grep -i 'raw TCP' "$MN_DIR/bench.out" "$MN_DIR/bench.err")"
	# Measured again after the collc ranks, the limit the better of the two.
	grep -q 'before the collc ranks ran, [0-9.]* and [0-9.]* after' "$MN_DIR/bench.out" ||
		mn_fail "raw TCP not measured after the collc ranks: $(grep -i 'raw TCP' "$MN_DIR/bench.out" "$MN_DIR/bench.err")"
	# And around the 1 MiB size, on the wire and walking 1 MiB buffers (xMem).
	grep -Eq '^ +1048576( +[0-9]+\.[0-9]+){8}$' "$MN_DIR/bench.out" ||
		mn_fail "raw TCP not measured around the 1 MiB size: $(grep -i -A4 'raw TCP around' "$MN_DIR/bench.out"; grep -i 'raw TCP' "$MN_DIR/bench.err")"
	grep -q '^# *size(B) .* xTCP  xMem' "$MN_DIR/bench.out" ||
		mn_fail "no xMem column: $(grep 'size(B)' "$MN_DIR/bench.out")"
	mn_pass
	;;
plugin)
	: "${MN_PLUGIN_DIR:?MN_PLUGIN_DIR must name the folder of libnccl-net-collc.so}"
	mn_init plugin 2
	export LD_LIBRARY_PATH=$MN_PLUGIN_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	mn_daemon_start 0 --net plugin:collc
	mn_daemon_start 1 --net plugin:collc
	comm_start A 2 0 1 -- --mode check
	mn_wait_ranks 120 || mn_fail "correctness over the plugin transport"
	# Send/recv too: a transport without pollable sockets polls while they wait.
	comm_start B 3 0 1 1 -- --mode p2p --odd 0
	mn_wait_ranks 120 || mn_fail "send/recv over the plugin transport"
	for i in 0 1; do
		t=$(mn_status_json $i | $PY "$here/mn_status.py" transport) ||
			mn_fail "status --json of node $i"
		mn_log "node $i: net transport '$t'"
		case "$t" in
		*collc*) ;;
		*) mn_fail "node $i reports transport '$t', not the collc plugin" ;;
		esac
	done
	mn_pass
	;;
hostile)
	# A peer daemon whose data links break the agreement once they are up
	# (hostile_plugin.c through the plugin loader, eager collectives off so
	# every all-reduce runs the ring): once the fault marker exists, node 1
	# sends its next step HOW (short: 8 bytes short; long: 8 bytes long).
	# Communicator X's ranks must end with EPROTO (a rank received a step of
	# a length no daemon agreed to, and X failed everywhere) or EPIPE (the
	# transport refused a message longer than the receive) within the bound,
	# every earlier result right; both daemons keep serving a new
	# communicator.
	: "${MN_PLUGIN_DIR:?MN_PLUGIN_DIR must name the folder of the net plugins}"
	how=${1:?short or long}
	mn_init "hostile_$how" 2
	export LD_LIBRARY_PATH=$MN_PLUGIN_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	mn_daemon_start 0 --net plugin:collchostile --set net_eager_max_bytes=0
	export COLLC_HOSTILE_MODE=$how COLLC_HOSTILE_ARM=$MN_DIR/fault
	mn_daemon_start 1 --net plugin:collchostile --set net_eager_max_bytes=0
	unset COLLC_HOSTILE_MODE COLLC_HOSTILE_ARM
	hostile_loop
	grep -h "collchostile: sent" "$MN_DIR/n1/log" >&2 ||
		mn_fail "node 1's plugin sent no $how step"
	hostile_after "$([ "$how" = short ] && echo 1 || echo 0)"
	mn_pass
	;;
hostile_direct)
	# Node 1's built-in tcp transport lies about one message's length once the
	# links are up (hostile_send.c, preloaded): the header of its next step
	# says 8 bytes fewer than follow. Communicator X runs all-gathers (eager
	# off), whose steps across daemons land straight in the ranks' buffers, so
	# node 0's proxy finds the step shorter than its rank named: EPROTO on
	# every rank within the bound, nothing wrong delivered, the error logged
	# and counted there; both daemons serve a new communicator.
	: "${MN_HOSTILE_SEND:?MN_HOSTILE_SEND must name libcollc-hostile-send.so}"
	mn_init hostile_direct 2
	mn_daemon_start 0 --set net_eager_max_bytes=0
	export LD_PRELOAD=$MN_HOSTILE_SEND COLLC_HOSTILE_ARM=$MN_DIR/fault
	mn_daemon_start 1 --set net_eager_max_bytes=0
	unset LD_PRELOAD COLLC_HOSTILE_ARM
	hostile_loop --loop-allgather
	grep -h "collc-hostile-send: a header said" "$MN_DIR/n1/log" >&2 ||
		mn_fail "node 1 sent no short header"
	grep -h "landed with another length" "$MN_DIR/n0/log" >&2 ||
		mn_fail "node 0's proxy did not refuse the short step"
	hostile_after 1
	mn_pass
	;;
*)
	echo "usage: $0 harness|correct NODES PER [rr|block [ARGS0 [ARGS]]]|a2a NODES PER [rr]|p2p NODES PER [rr]|congestion|two_comms|two_comms_late|mismatch|kill [V]|kill_a2a [V]|kill_p2p [V]|kill_hier [V]|linkdown [V]|restart|secret|garbage|plugin|hostile short|long|hostile_direct|bench" >&2
	exit 2
	;;
esac
