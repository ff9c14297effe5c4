#!/usr/bin/env bash
# Installs the Debian packages collc needs to build, test and benchmark,
# only those that are missing. Safe to run again.
set -euo pipefail

pkgs=(
	build-essential cmake pkg-config
	libuv1-dev liburcu-dev libcmocka-dev libsystemd-dev libibverbs-dev
	systemd spin clang libclang-rt-14-dev
	openmpi-bin libopenmpi-dev gnuplot-nox python3 python3-prometheus-client
)

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
