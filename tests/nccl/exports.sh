#!/bin/sh
# SPDX-License-Identifier: MIT
# libnccl-collc exports exactly the functions of tests/nccl/exports.txt, and
# that list holds every function nccl.h declares (ncclX and pncclX).
#   exports.sh LIBRARY NCCL_H EXPORTS_TXT
set -eu
lib=$1 hdr=$2 list=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVWi]$/ { print $3 }' | LC_ALL=C sort >"$tmp/exported"
LC_ALL=C sort "$list" >"$tmp/claimed"
if ! diff -u "$tmp/claimed" "$tmp/exported"; then
	echo "FAIL: exports differ from $list (- claimed, + exported)"
	exit 1
fi
grep -o '^\(ncclResult_t\|const char\*\) *p\?nccl[A-Za-z]*' "$hdr" | awk '{ print $NF }' |
	sed 's/^\*//' | LC_ALL=C sort -u >"$tmp/declared"
missing=$(LC_ALL=C comm -23 "$tmp/declared" "$tmp/exported")
if [ -n "$missing" ]; then
	echo "FAIL: nccl.h declares functions the library does not export: $missing"
	exit 1
fi
echo "PASS: $(wc -l <"$tmp/exported") functions exported, $(wc -l <"$tmp/declared") declared by nccl.h"
