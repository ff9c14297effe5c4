#!/usr/bin/env bash
# Starts collcd on a temporary socket (CUDA backend where GPUs exist, the CPU
# executor otherwise), runs a 4-process all-reduce, shows `collcctl status`
# while it runs and after, and stops the daemon.
set -euo pipefail
build=${1:-build}
dir=$(mktemp -d /tmp/collc-demo.XXXXXX)
sock=$dir/collcd.sock
"$build/daemon/collcd" --socket "$sock" --foreground --backend cpu 2>"$dir/collcd.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do
	[ -S "$sock" ] && break
	sleep 0.05
done
echo "== collcd (pid $pid) on $sock"
"$build/collc-example-allreduce" --socket "$sock" --nranks 4 --count 262144 --iters 200 &
ex=$!
sleep 1
echo "== collcctl status (during the all-reduces)"
"$build/client/collcctl" --socket "$sock" status
wait $ex
echo "== collcctl status (after)"
"$build/client/collcctl" --socket "$sock" status
