#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Reads the `net` object of `collcctl status --json` (collcctl(8)) for the
multi-node tests. The JSON comes on stdin.

  mn_status.py refused     net.refused: handshakes and connections refused so far
  mn_status.py eager       net.eager: collectives a root answered with their result
  mn_status.py eager_landed  net.eager_landed: eager collectives between two daemons
                           whose other daemon's inputs were received straight into
                           the ranks' result buffers
  mn_status.py early_ends  net.early_ends: ring collectives that ended on the ranks
                           before every daemon ran them
  mn_status.py eager_staged  totals.net_eager_staged: eager collectives whose GPU
                           buffers the daemon staged through host memory
  mn_status.py phases      totals.net_phases_ns: ring collectives across daemons
                           that ran to ALLDONE, then ns in agree, to_launch, run,
                           alldone
  mn_status.py received_direct  net.received_direct: bytes received straight into
                           rank buffers
  mn_status.py transport   net.transport
  mn_status.py tcp_congestion  net.tcp_congestion: the congestion control of the
                           daemon's TCP sockets
  mn_status.py listen      net.listen
  mn_status.py peers       one line per peer: addr comm role state bytes_sent
                           bytes_received inflight errors
  mn_status.py algo NAME   totals.by_algo.NAME: collectives launched here with
                           algorithm NAME (ring, oneshot, twoshot, hier)
  mn_status.py groups      one line per peer: its communicator's group (ranks of
                           each daemon with group rings, 0: none)
  mn_status.py channels    one line per peer: its communicator's agreed channels
                           (0 before the rank table is known)
Exit 1 (with a message) when the JSON has no `net` object or lacks the field.
"""
import json
import sys


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else "refused"
    doc = json.load(sys.stdin)
    if what == "algo":
        name = sys.argv[2] if len(sys.argv) > 2 else ""
        by_algo = doc.get("totals", {}).get("by_algo", {}) if isinstance(doc, dict) else {}
        if not isinstance(by_algo.get(name), int):
            print(f"mn_status: no totals.by_algo.{name} in status --json", file=sys.stderr)
            return 1
        print(by_algo[name])
        return 0
    if what == "eager_staged":
        n = doc.get("totals", {}).get("net_eager_staged") if isinstance(doc, dict) else None
        if not isinstance(n, int):
            print("mn_status: no totals.net_eager_staged in status --json", file=sys.stderr)
            return 1
        print(n)
        return 0
    if what == "phases":
        ph = doc.get("totals", {}).get("net_phases_ns", {}) if isinstance(doc, dict) else {}
        keys = ("collectives", "agree", "to_launch", "run", "alldone")
        if not all(isinstance(ph.get(k), int) for k in keys):
            print("mn_status: no totals.net_phases_ns in status --json", file=sys.stderr)
            return 1
        print(" ".join(str(ph[k]) for k in keys))
        return 0
    net = doc.get("net") if isinstance(doc, dict) else None
    if not isinstance(net, dict):
        print("mn_status: no net object in status --json", file=sys.stderr)
        return 1
    if what in ("refused", "eager", "eager_landed", "early_ends", "received_direct",
                "protocol_errors"):
        if not isinstance(net.get(what), int):
            print(f"mn_status: no net.{what} counter in status --json", file=sys.stderr)
            return 1
        print(net[what])
    elif what in ("transport", "listen", "tcp_congestion"):
        print(net.get(what, ""))
    elif what in ("groups", "channels"):
        key = "group" if what == "groups" else "channels"
        for p in net.get("peers", []):
            if not isinstance(p.get(key), int):
                print(f"mn_status: a peer without {key} in status --json", file=sys.stderr)
                return 1
            print(p[key])
    elif what == "peers":
        for p in net.get("peers", []):
            print(*(p.get(k, "?") for k in ("addr", "comm", "role", "state", "bytes_sent",
                                            "bytes_received", "inflight", "errors")))
    else:
        print(f"mn_status: unknown query {what}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
