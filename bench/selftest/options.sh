#!/bin/sh
# SPDX-License-Identifier: MIT
#
# collc-bench's checks of --stream and --graph (and --tcp-row-bytes): each bad combination exits 2
# with a message that names the problem, before any rank, GPU or collcd is
# touched; good ones get past the checks (exit 1 here: no GPU or no collcd).
#
#   options.sh PATH/TO/collc-bench
set -u
BENCH=$1
fails=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# expect STATUS TEXT ARGS...: collc-bench ARGS exits STATUS and prints TEXT.
expect() {
	want=$1 text=$2
	shift 2
	"$BENCH" "$@" >"$out" 2>&1
	got=$?
	if [ "$got" -ne "$want" ] || ! grep -qF -- "$text" "$out"; then
		echo "FAIL: collc-bench $*: exit $got (want $want), output:"
		sed 's/^/  | /' "$out" | head -20
		echo "  (want \"$text\")"
		fails=$((fails + 1))
	fi
}

expect 0 "--stream          collc's ranks use the stream-ordered forms" --help
expect 0 "--graph           collc's stream-ordered calls captured" --help
expect 2 "--stream runs collc's stream-ordered forms, which host communicators lack" \
	--nranks 2 --stream
expect 2 "--graph runs collc's stream-ordered forms" --nranks 2 --graph --backend cpu
expect 2 "one of --stream and --graph per run" --nranks 2 --backend cuda --stream --graph
expect 2 "one of --stream and --graph per run" --nranks 2 --backend cuda --graph --graph
expect 2 "--graph: collc captures no send or receive" \
	--nranks 2 --backend cuda --graph --coll sendrecv
# 28 sizes (8 B .. 1 GiB) x (1 + 64) captured collectives: more than the gates.
expect 2 "collc holds at most 512 captured collectives per connection" \
	--nranks 2 --backend cuda --graph --min-bytes 8 --max-bytes 1G --depth 64
expect 2 "--nccl-modes needs --vs-nccl" --nranks 2 --backend cuda --stream --nccl-modes plain
expect 0 "--tcp-row-bytes (default 16M;" --help
expect 2 "--tcp-row-bytes takes 0, or 1M and more" --nranks 2 --tcp-row-bytes 512K
expect 2 "--tcp-row-bytes takes 0, or 1M and more" --nranks 2 --tcp-row-bytes lots
# Accepted: past the checks, the run itself fails (no GPU, or no collcd at that socket).
for mode in --stream --graph; do
	expect 1 "collc-bench: " --nranks 1 --backend cuda $mode --socket /nonexistent/collcd.sock \
		--min-bytes 8 --max-bytes 8 --iters 1 --warmup 0
	if grep -q "per run\|lack\|captures no" "$out"; then
		echo "FAIL: $mode refused: $(cat "$out")"
		fails=$((fails + 1))
	fi
done
[ "$fails" -eq 0 ] || { echo "options: $fails checks failed"; exit 1; }
echo "options: all checks passed"
