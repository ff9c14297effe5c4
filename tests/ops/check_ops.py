#!/usr/bin/python3
"""Checks a `collcctl status --json` sample for every field the status contract
(docs/design.md, collcctl(8)) names and
parses a `collcctl metrics` sample with the Prometheus text parser.

usage: check_ops.py STATUS.json METRICS.txt
"""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families

status = json.load(open(sys.argv[1]))
need = {
    "config": ["channels", "proto", "algo", "op_timeout_ms"],
    "clients": ["pid", "sq_depth", "cq_depth", "inflight"],
    "comms": ["id", "nranks", "pending", "inflight", "completed", "lagging_ranks"],
    "devices": ["name", "backend", "fifo_depth", "channels"],
    "totals": ["submitted", "completed", "errors"],
}
missing = []
for top, keys in need.items():
    if top not in status:
        missing.append(top)
        continue
    items = status[top] if isinstance(status[top], list) else [status[top]]
    if not items:
        missing.append(top + " (empty)")
    for it in items:
        missing += ["%s.%s" % (top, k) for k in keys if k not in it]
for dev in status.get("devices", []):
    for ch in dev.get("channels", []):
        missing += ["devices[].channels[].%s" % k for k in ("id", "inflight", "work_consumed") if k not in ch]
if missing:
    sys.exit("status is missing: " + ", ".join(sorted(set(missing))))

families = list(text_string_to_metric_families(open(sys.argv[2]).read()))
names = {f.name for f in families}
for want in ("collc_collectives_submitted", "collc_client_sq_depth", "collc_comm_inflight",
             "collc_channel_inflight", "collc_collective_latency_seconds"):
    if want not in names:
        sys.exit("metrics lack %s (have %s)" % (want, sorted(names)))
samples = sum(len(f.samples) for f in families)
print("status has every field; metrics parse: %d families, %d samples" % (len(families), samples))
