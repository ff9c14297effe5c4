#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Reads the `net` object of `collcctl status --json` (collcctl(8)) for the
multi-node tests. The JSON comes on stdin.

  mn_status.py refused     refusals counted so far: the sum of every integer
                           under a key of `net` that names a refusal
                           ("refused", "rejected", "auth_fail...") or its
                           per-reason breakdown
  mn_status.py transport   net.transport
  mn_status.py listen      net.listen
  mn_status.py peers       one line per peer: addr state
Exit 1 (with a message) when the JSON has no `net` object.
"""
import json
import re
import sys

REFUSAL = re.compile(r"refus|reject|auth_?fail|denied", re.I)


def ints(v):
    if isinstance(v, bool):
        return 0
    if isinstance(v, int):
        return v
    if isinstance(v, dict):
        return sum(ints(x) for x in v.values())
    if isinstance(v, list):
        return sum(ints(x) for x in v)
    return 0


def refusals(v):
    total = 0
    if isinstance(v, dict):
        for k, x in v.items():
            if k == "peers":
                continue
            total += ints(x) if REFUSAL.search(k) else refusals(x)
    return total


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else "refused"
    doc = json.load(sys.stdin)
    net = doc.get("net") if isinstance(doc, dict) else None
    if not isinstance(net, dict):
        print("mn_status: no net object in status --json", file=sys.stderr)
        return 1
    if what == "refused":
        print(refusals(net))
    elif what in ("transport", "listen"):
        print(net.get(what, ""))
    elif what == "peers":
        for p in net.get("peers", []):
            print(p.get("addr", "?"), p.get("state", "?"))
    else:
        print(f"mn_status: unknown query {what}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
