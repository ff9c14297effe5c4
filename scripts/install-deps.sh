#!/usr/bin/env bash
# Installs the Debian packages collc needs, only those that are missing, and
# does nothing (no sudo, no apt) when every one is installed. Safe to run again.
#
#   scripts/install-deps.sh build   what building needs (make build, make demo)
#   scripts/install-deps.sh [all]   also what the tests and benchmarks need (make test)
#
# COLLC_NO_DEPS=1 skips the check (a non-Debian system with the tools installed).
set -euo pipefail

build_pkgs=(
	build-essential cmake pkg-config
	libuv1-dev liburcu-dev libcmocka-dev libsystemd-dev libibverbs-dev libssl-dev
)
test_pkgs=(
	systemd spin clang libclang-rt-14-dev
	openmpi-bin libopenmpi-dev gnuplot-nox python3 python3-numpy python3-prometheus-client iproute2 gdb
)

case "${1:-all}" in
build) pkgs=("${build_pkgs[@]}") ;;
all) pkgs=("${build_pkgs[@]}" "${test_pkgs[@]}") ;;
*)
	echo "usage: $0 [build|all]" >&2
	exit 2
	;;
esac

if [ "${COLLC_NO_DEPS:-0}" = 1 ]; then
	exit 0
fi
if ! command -v dpkg-query >/dev/null; then
	echo "install-deps: not a Debian system; install the equivalents of: ${pkgs[*]}" >&2
	exit 0
fi

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=()
if [ "$(id -u)" -ne 0 ]; then
	if ! command -v sudo >/dev/null; then
		echo "install-deps: missing packages and no sudo; as root, run:" >&2
		echo "  apt-get install --no-install-recommends ${missing[*]}" >&2
		exit 1
	fi
	SUDO=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
