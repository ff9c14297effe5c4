#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# collc-bench across "nodes" on one machine: two (or more) network namespaces
# joined by a bridge, one collcd per namespace (tests/multinode/netns.sh; the
# namespaces and daemons go away at the end), ranks round-robin over the
# daemons, the all-reduce sweep with the raw TCP limit between the first two
# namespaces measured in the same run. Needs root and iproute2. Not part of CI.
#
#   bench/run-multinode.sh [--build DIR] [--nodes N] [--ranks-per-node P] [--mpi | --mpi-local]
#                          [--pin] [--cc NAME] [--collcd PATH] [--daemon-arg ARG]...
#                          [-- collc-bench arguments...]
#
# --mpi adds --vs-mpi --mpi-btl tcp: Open MPI's ob1 over TCP, its ranks placed
# as collc's, round-robin over the nodes' namespaces (mpirun in the first
# starts orted in the others through an rsh agent that enters their
# namespaces), its traffic over the same bridge; --mpi-local puts every MPI
# rank in the first namespace, over its loopback. --collcd runs another collcd binary (an A/B of two
# builds with the same clients). --pin gives each node a slice of the CPUs of
# its own, as separate machines have (tests/multinode/netns.sh mn_cpus): its
# collcd runs there, collc-bench's ranks and raw TCP streams follow their
# daemon, and with --mpi so do Open MPI's ranks of that node. Without it,
# every node's threads share every core. --cc sets the TCP congestion control
# inside the namespaces only (net.ipv4.tcp_congestion_control is per
# namespace; they inherit the host's, which the table's header names: on veth,
# bbr's paced segments leave from both nodes' cores and arrive reordered,
# bench/RESULTS.md). Defaults: build/, 2 nodes, 1 rank per node, sizes
# 8 B to 64 MiB, 20 iterations. After the table: each daemon's net status and its
# CPU time over the run (user + system).
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=$here/../build
nodes=2
per=1
mpi=()
mpi_across=0
collcd=
cc=
daemon_args=()
while [ $# -gt 0 ]; do
	case "$1" in
	--build) build=$2; shift 2 ;;
	--nodes) nodes=$2; shift 2 ;;
	--ranks-per-node) per=$2; shift 2 ;;
	--mpi) mpi=(--vs-mpi --mpi-btl tcp); mpi_across=1; shift ;;
	--mpi-local) mpi=(--vs-mpi --mpi-btl tcp); mpi_across=0; shift ;;
	--collcd) collcd=$2; shift 2 ;;
	--pin) export MN_PIN=1; shift ;;
	--cc) cc=$2; shift 2 ;;
	--daemon-arg) daemon_args+=("$2"); shift 2 ;;
	--) shift; break ;;
	-h | --help) sed -n '3,29p' "$0"; exit 0 ;;
	*) echo "run-multinode.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
build=$(cd "$build" && pwd) || exit 2
export COLLCD=${collcd:-$build/daemon/collcd} COLLCCTL=$build/client/collcctl
bench=$build/bench/collc-bench
[ -x "$bench" ] || { echo "run-multinode.sh: no $bench: build collc-bench first" >&2; exit 2; }

# shellcheck source=../tests/multinode/netns.sh
. "$here/../tests/multinode/netns.sh"
mn_init bench "$nodes"
for ((i = 0; i < nodes && ${#cc}; i++)); do
	ip netns exec "$(mn_ns "$i")" sysctl -qw net.ipv4.tcp_congestion_control="$cc" ||
		mn_fail "congestion control $cc is not available"
done
echo "# tcp congestion control in the namespaces: $(ip netns exec "$(mn_ns 0)" sysctl -n net.ipv4.tcp_congestion_control)"
sockets=
for ((i = 0; i < nodes; i++)); do
	mn_daemon_start "$i" "${daemon_args[@]}"
	sockets=${sockets:+$sockets,}$(mn_sock "$i")
done
if [ "$mpi_across" = 1 ]; then
	# mpirun's rsh agent ("agent HOST COMMAND..."): COMMAND in HOST's namespace.
	agent=$MN_DIR/mpi-agent.sh
	{
		echo '#!/bin/sh'
		echo 'while [ $# -gt 0 ]; do case $1 in -*) shift ;; *) break ;; esac; done'
		echo 'host=$1; shift'
		echo 'case $host in'
		for ((i = 0; i < nodes; i++)); do
			echo "$(mn_addr "$i")) ns=$(mn_ns "$i") cpus=$([ "${MN_PIN:-0}" = 1 ] && mn_cpus "$i") ;;"
		done
		echo '*) echo "mpi-agent: unknown host $host" >&2; exit 1 ;;'
		echo 'esac'
		echo '[ -n "$cpus" ] && exec ip netns exec "$ns" taskset -c "$cpus" /bin/sh -c "$*"'
		echo 'exec ip netns exec "$ns" /bin/sh -c "$*"'
	} >"$agent"
	chmod +x "$agent"
	for ((i = 0; i < nodes; i++)); do echo "$(mn_addr "$i") slots=$per"; done >"$MN_DIR/mpi-hosts"
	subnet=$(mn_addr 0 | sed 's/\.[0-9]*$/.0/')/24
	# The ranks spin as they do in one namespace: collc-bench's --oversubscribe
	# makes them yield when idle, and ranks started through orted then took 8 ms
	# (two scheduler ticks) per collective at every size up to 64 KiB.
	for a in --hostfile "$MN_DIR/mpi-hosts" --map-by node --mca plm_rsh_agent "$agent" \
		--mca oob_tcp_if_include "$subnet" --mca btl_tcp_if_include "$subnet" \
		--mca mpi_yield_when_idle 0 --bind-to none; do
		mpi+=(--mpirun-arg "$a")
	done
fi
# With --pin, collc-bench (and mpirun, with the ranks it starts itself) on node 0's CPUs.
pin0=()
[ "${MN_PIN:-0}" = 1 ] && pin0=(taskset -c "$(mn_cpus 0)")
ip netns exec "$(mn_ns 0)" "${pin0[@]}" "$bench" --socket "$sockets" --nranks $((nodes * per)) \
	--min-bytes 8 --max-bytes 64M --iters 20 "${mpi[@]}" "$@"
rc=$?
tck=$(getconf CLK_TCK)
for ((i = 0; i < nodes; i++)); do
	echo "# node $i: collcctl status (net)"
	# The daemon's CPU time over the run (user + system, all its threads):
	# the cost of the data path for this command, steadier than busbw on a
	# busy machine (compare runs of one command).
	cpu=$(awk -v t="$tck" '{ printf "%.2f", ($14 + $15) / t }' "/proc/${MN_DPIDS[i]}/stat" 2>/dev/null)
	mn_status_json "$i" | /usr/bin/python3 -c '
import json, sys
doc = json.load(sys.stdin)
net = doc.get("net", {})
print("#   transport %s listen %s eager %s (received in place %s)" % (
    net.get("transport"), net.get("listen"), net.get("eager"), net.get("eager_landed")))
ph = doc.get("totals", {}).get("net_phases_ns", {})
if ph.get("collectives"):
    n = ph["collectives"]
    print("#   ring collectives %d, us each: %s" % (n, " ".join(
        "%s %.1f" % (k, ph[k] / 1000.0 / n) for k in ("agree", "to_launch", "run", "alldone"))))
for p in net.get("peers", []):
    print("#   peer " + " ".join("%s=%s" % kv for kv in p.items()))' 2>/dev/null
	echo "#   collcd cpu ${cpu:-?} s (user + system)"
done
exit $rc
