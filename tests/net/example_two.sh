#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The README's example across two daemons: two collcd on loopback with
# --listen (port 0: each takes a free one), collc-example-allreduce with its
# ranks round-robin over them (the id from the first), 2 and 4 ranks, small
# (eager) and large (the ring) counts, every result checked by the example.
#
#   example_two.sh COLLCD EXAMPLE
set -u
collcd=${1:?collcd}
example=${2:?collc-example-allreduce}
dir=$(mktemp -d)
pids=()
cleanup() {
	kill "${pids[@]}" 2>/dev/null
	wait 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT
for d in a b; do
	"$collcd" --socket "$dir/$d.sock" --admin-socket "$dir/$d.admin" --foreground --backend cpu \
		--listen 127.0.0.1:0 >"$dir/$d.log" 2>&1 &
	pids+=($!)
done
for _ in $(seq 1 100); do
	[ -S "$dir/a.sock" ] && [ -S "$dir/b.sock" ] && break
	sleep 0.1
done
[ -S "$dir/a.sock" ] && [ -S "$dir/b.sock" ] || { echo "FAIL: the daemons did not start"; cat "$dir"/*.log; exit 1; }
rc=0
for run in "2 100" "4 100" "2 1000000" "4 1000000"; do
	set -- $run
	echo "--- $1 ranks, $2 floats"
	timeout 120 "$example" --socket "$dir/a.sock,$dir/b.sock" --nranks "$1" --count "$2" --iters 3 || rc=1
done
for i in 0 1; do
	kill -0 "${pids[i]}" 2>/dev/null || { echo "FAIL: a collcd died"; rc=1; }
done
[ "$rc" = 0 ] && echo PASS || { echo FAIL; tail -n 20 "$dir"/*.log; }
exit "$rc"
