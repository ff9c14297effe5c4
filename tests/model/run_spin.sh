#!/bin/sh
# SPDX-License-Identifier: MIT
#
# run_spin.sh MODEL.pml [-DNAME=VALUE]... [--expect-fail[=assert|deadlock]]
#
# Generates the verifier (spin -a), compiles it for safety checking
# (assertions and invalid end states, i.e. deadlocks), runs an exhaustive
# search in a temporary directory and prints pan's summary.
#
# Exit 0 when the search completed with "errors: 0"; with --expect-fail, exit 0
# only when pan found an error (of the named kind, if one is given), so a
# deliberately broken model proves the check is not vacuous. Exit 1 on a
# mismatch, 2 on a usage or tool problem (never counted as an expected
# failure). $SPIN and $CC override the tools.

set -u

SPIN=${SPIN:-spin}
CC=${CC:-cc}
model=
defs=
expect=pass

usage() {
	echo "usage: $0 MODEL.pml [-DNAME=VALUE]... [--expect-fail[=assert|deadlock]]" >&2
	exit 2
}

for arg in "$@"; do
	case $arg in
	--expect-fail) expect=any ;;
	--expect-fail=assert) expect=assert ;;
	--expect-fail=deadlock) expect=deadlock ;;
	-D*=*)
		# Values stay simple so they can pass through the shell unquoted.
		case $arg in *[!A-Za-z0-9_=-]*) usage ;; esac
		defs="$defs $arg"
		;;
	-*) usage ;;
	*)
		[ -z "$model" ] || usage
		model=$arg
		;;
	esac
done
[ -n "$model" ] || usage
[ -r "$model" ] || { echo "$0: cannot read $model" >&2; exit 2; }

if ! command -v "$SPIN" >/dev/null 2>&1; then
	echo "$0: spin not found (SPIN=$SPIN): install spin (apt-get install spin) and re-run cmake" >&2
	exit 2
fi
if ! command -v "$CC" >/dev/null 2>&1; then
	echo "$0: C compiler not found (CC=$CC)" >&2
	exit 2
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/collc-spin.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT INT TERM
name=$(basename "$model")
cp "$model" "$tmp/$name" || exit 2
cd "$tmp" || exit 2

echo "model: $name$defs (expect: $expect)"
# shellcheck disable=SC2086 # $defs is a list of words
if ! "$SPIN" $defs -a "$name" >spin.log 2>&1; then
	cat spin.log >&2
	echo "$0: spin -a failed" >&2
	exit 2
fi
if ! "$CC" -O2 -DSAFETY -DMEMLIM=2048 -w -o pan pan.c >cc.log 2>&1; then
	cat cc.log >&2
	echo "$0: compiling pan.c failed" >&2
	exit 2
fi
./pan -m200000 >pan.out 2>&1
grep -E "^pan|errors:|states, stored|transitions|elapsed|too small|Search not completed" pan.out

errors=$(sed -n 's/.*errors: \([0-9][0-9]*\).*/\1/p' pan.out | head -n 1)
if [ -z "$errors" ]; then
	cat pan.out >&2
	echo "$0: no result from pan" >&2
	exit 2
fi

if [ "$expect" = pass ]; then
	if [ "$errors" -ne 0 ]; then
		# shellcheck disable=SC2086
		"$SPIN" $defs -t -p -g "$name" 2>&1 | tail -n 60
		echo "FAIL: $name$defs: $errors error(s)"
		exit 1
	fi
	if grep -qE "too small|Search not completed|MEMLIM bound" pan.out; then
		echo "FAIL: $name$defs: the search did not complete"
		exit 1
	fi
	echo "PASS: $name$defs: errors: 0"
	exit 0
fi

if [ "$errors" -eq 0 ]; then
	echo "FAIL: $name$defs: the broken variant passed; the check is vacuous"
	exit 1
fi
case $expect in
assert) pattern="assertion violated" ;;
deadlock) pattern="invalid end state" ;;
*) pattern="" ;;
esac
if ! grep -q "^pan:1: $pattern" pan.out; then
	echo "FAIL: $name$defs: an error, but not the expected kind ($expect)"
	exit 1
fi
# The counterexample, for the log.
# shellcheck disable=SC2086
"$SPIN" $defs -t -p "$name" 2>&1 | tail -n 12
echo "PASS (expected failure found): $name$defs"
exit 0
