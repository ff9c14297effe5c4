#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Hostile connections to a collcd listen port (tests/multinode).

  garbage.py HOST PORT [--count N] [--seed S] [--hold N]

N connections, one kind each in turn: connect and close (a port scan),
random bytes, an auth frame header with an oversized body length, a
truncated header, a well-formed HELLO for a communicator nobody created,
a header with a wrong version. Then --hold connections kept open at once
without a word, closed together. Every socket call has a short timeout;
nothing waits for the daemon's answer longer than 0.2 s. Prints one line:
"garbage: N connections (K refused at connect)"; exit 0 unless the port
refused every connection (then nothing was tested: exit 1).
"""
import argparse
import random
import socket
import struct
import sys

AUTH_MAGIC = 0x55414C43  # daemon/net/auth.h NET_AUTH_MAGIC
AUTH_VERSION = 1
AUTH_HELLO = 1
AUTH_BODY = 80


def header(version, typ, length, status=0):
    return struct.pack("<IBBBBII", AUTH_MAGIC, version & 0xFF, version >> 8, typ, 0, length, status)


def payload(kind, rng):
    if kind == 0:
        return b""  # port scan: connect, close
    if kind == 1:
        return rng.randbytes(rng.randint(1, 4096))
    if kind == 2:
        return header(AUTH_VERSION, AUTH_HELLO, rng.choice([0xFFFFFFFF, 1 << 30, 4097, 81]))
    if kind == 3:
        return header(AUTH_VERSION, AUTH_HELLO, AUTH_BODY)[: rng.randint(1, 15)]
    if kind == 4:
        return header(AUTH_VERSION, AUTH_HELLO, AUTH_BODY) + rng.randbytes(AUTH_BODY)
    return header(AUTH_VERSION + 1 + rng.randint(0, 100), AUTH_HELLO, AUTH_BODY) + rng.randbytes(AUTH_BODY)


def one(host, port, data, rng):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect((host, port))
    except OSError:
        s.close()
        return False
    try:
        if data:
            s.sendall(data)
        if rng.random() < 0.1:
            s.settimeout(0.2)
            try:
                s.recv(4096)
            except OSError:
                pass
        if rng.random() < 0.5:
            # An abortive close (RST) instead of FIN, as scanners do.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    s.close()
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("--count", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hold", type=int, default=64)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    refused = 0
    for i in range(a.count):
        if not one(a.host, a.port, payload(i % 6, rng), rng):
            refused += 1
    held = []
    for _ in range(a.hold):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(1.0)
        try:
            s.connect((a.host, a.port))
            held.append(s)
        except OSError:
            refused += 1
            s.close()
    for s in held:
        s.close()
    total = a.count + a.hold
    print(f"garbage: {total} connections ({refused} refused at connect)")
    return 1 if refused == total else 0


if __name__ == "__main__":
    sys.exit(main())
