#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""
NCCL's own collectives over libnccl-net-collc.so (device machine only).

Two ranks, each a process on the first GPU, each told that it runs on a host
of its own (NCCL_HOSTID), with NCCL's shared-memory and P2P transports off:
NCCL then connects them through its network transport. In mode "collc" that
is collc's tcp transport loaded as an NCCL net plugin (NCCL_NET_PLUGIN=collc,
NCCL_NET=collc: NCCL fails rather than fall back) with its defaults (a helper
thread per connection on hosts of more than 4 cores); "collc-nohelp" is the
same with COLLC_NET_HELPERS=0; in mode "socket", for comparison in the same
run, NCCL's own Socket transport. All over loopback.

Every result is checked against a reference computed in float64 from both
ranks' inputs (two float32 summands: a float32 sum is within half a
float32 ulp of it; gathers and broadcasts must be bit for bit), NCCL's log must name the transport on every
channel it opened, and all_reduce is timed with CUDA events.

  nccl_net_plugin.py --out DIR [--modes collc,collc-nohelp,socket] [--max-bytes N] [--iters N]

The plugin must be on LD_LIBRARY_PATH (tests/gpu/nccl-net-plugin.sh sets it).
Prints RESULT lines and a table; exit status 1 when a check failed.
"""
import argparse
import glob
import multiprocessing as mp
import os
import re
import sys
import time
import traceback

NRANKS = 2


def mode_env(mode, out):
    env = {
        "NCCL_SHM_DISABLE": "1",
        "NCCL_P2P_DISABLE": "1",
        "NCCL_NVLS_ENABLE": "0",
        "NCCL_IB_DISABLE": "1",
        "NCCL_SOCKET_IFNAME": "lo",
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET",
        "NCCL_DEBUG_FILE": os.path.join(out, "nccl-%s.%%p.log" % mode),
    }
    if mode in ("collc", "collc-nohelp"):
        env.update({"NCCL_NET_PLUGIN": "collc", "NCCL_NET": "collc", "COLLC_NET_IFNAME": "lo"})
        if mode == "collc-nohelp":
            env["COLLC_NET_HELPERS"] = "0"
    elif mode == "socket":
        env.update({"NCCL_NET_PLUGIN": "none", "NCCL_NET": "Socket"})
    else:
        raise ValueError("unknown mode %r (collc, collc-nohelp, socket)" % mode)
    return env


def rounded_from(torch, x, ref64):
    """x (float32) within half an ulp of float32 of the float64 reference."""
    return bool(((x.double() - ref64).abs() <= ref64.abs() * 2.0 ** -24 + 1e-45).all())


def inputs(torch, seed, count):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(count, generator=g, dtype=torch.float32)


def worker(rank, mode, args, port, q):
    try:
        os.environ.update(mode_env(mode, args.out))
        os.environ["NCCL_HOSTID"] = "collc-net-plugin-host-%d" % rank
        import torch
        import torch.distributed as dist

        torch.cuda.set_device(0)
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % port,
                                rank=rank, world_size=NRANKS)
        dev = torch.device("cuda", 0)
        res = {"rank": rank, "checks": [], "times": []}
        sizes, b = [], 8
        while b <= args.max_bytes:
            sizes.append(b)
            b *= 16
        for si, nbytes in enumerate(sizes):
            c = max(1, nbytes // 4)
            mine = [inputs(torch, 1000 * si + r, c) for r in range(NRANKS)]
            ref64 = mine[0].double() + mine[1].double()

            x = mine[rank].to(dev)
            dist.all_reduce(x)
            ok = rounded_from(torch, x.cpu(), ref64)
            res["checks"].append(("all_reduce sum", nbytes, ok))

            x = mine[rank].to(dev)
            dist.all_reduce(x, op=dist.ReduceOp.MAX)
            ok = torch.equal(x.cpu(), torch.maximum(mine[0], mine[1]))
            res["checks"].append(("all_reduce max", nbytes, ok))

            out = torch.empty(NRANKS * c, dtype=torch.float32, device=dev)
            dist.all_gather_into_tensor(out, mine[rank].to(dev))
            ok = torch.equal(out.cpu(), torch.cat(mine))
            res["checks"].append(("all_gather", nbytes * NRANKS, ok))

            both = [torch.cat([m, m.flip(0)]) for m in mine]
            outs = torch.empty(c, dtype=torch.float32, device=dev)
            dist.reduce_scatter_tensor(outs, both[rank].to(dev))
            want = (both[0].double() + both[1].double())[rank * c:(rank + 1) * c]
            ok = rounded_from(torch, outs.cpu(), want)
            res["checks"].append(("reduce_scatter", nbytes * NRANKS, ok))

            x = mine[rank].to(dev)
            dist.broadcast(x, src=0)
            ok = torch.equal(x.cpu(), mine[0])
            res["checks"].append(("broadcast", nbytes, ok))

        for nbytes in [s for s in (8, 1 << 20, args.max_bytes) if s <= args.max_bytes]:
            x = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=dev)
            for _ in range(5):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            dist.barrier()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(args.iters):
                dist.all_reduce(x)
            e1.record()
            e1.synchronize()
            res["times"].append((nbytes, e0.elapsed_time(e1) * 1e3 / args.iters))
        dist.destroy_process_group()
        q.put(res)
    except Exception:
        q.put({"rank": rank, "error": traceback.format_exc()})


def transport_seen(out, mode):
    """Channels NCCL connected, by transport name, from its logs of this mode."""
    seen = {}
    for f in glob.glob(os.path.join(out, "nccl-%s.*.log" % mode)):
        with open(f, errors="replace") as fh:
            for line in fh:
                m = re.search(r"via (NET/[^/\s]+|P2P|SHM)", line)
                if m:
                    seen[m.group(1)] = seen.get(m.group(1), 0) + 1
    return seen


def run_mode(mode, args, port):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, mode, args, port, q)) for r in range(NRANKS)]
    for p in procs:
        p.start()
    results, deadline = {}, time.time() + args.timeout
    while len(results) < NRANKS and time.time() < deadline:
        try:
            r = q.get(timeout=1)
            results[r["rank"]] = r
        except Exception:
            if not any(p.is_alive() for p in procs) and q.empty():
                break
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--modes", default="collc,socket")
    ap.add_argument("--max-bytes", type=int, default=64 << 20)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--timeout", type=int, default=240)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    failed, table = 0, []
    for i, mode in enumerate(args.modes.split(",")):
        res = run_mode(mode, args, 29600 + i)
        want = "NET/collc" if mode.startswith("collc") else "NET/Socket"
        seen = transport_seen(args.out, mode)
        other = {k: v for k, v in seen.items() if k != want}
        if seen.get(want) and not other:
            print("RESULT %s-transport PASS %d channel connections via %s" % (mode, seen[want], want))
        else:
            failed += 1
            print("RESULT %s-transport FAIL connections seen: %s" % (mode, seen or "none"))
        if len(res) < NRANKS:
            failed += 1
            print("RESULT %s-run FAIL %d of %d ranks reported (timeout %d s)"
                  % (mode, len(res), NRANKS, args.timeout))
            continue
        for r in range(NRANKS):
            if "error" in res[r]:
                failed += 1
                print("RESULT %s-run FAIL rank %d:\n%s" % (mode, r, res[r]["error"]))
        if any("error" in res[r] for r in range(NRANKS)):
            continue
        checks = [c for r in range(NRANKS) for c in res[r]["checks"]]
        bad = [c for c in checks if not c[2]]
        if bad:
            failed += 1
            print("RESULT %s-correct FAIL %d of %d wrong: %s" % (mode, len(bad), len(checks),
                                                               ", ".join("%s %d B" % c[:2] for c in bad)))
        else:
            print("RESULT %s-correct PASS %d checks (all_reduce sum/max, all_gather, reduce_scatter, "
                  "broadcast; 8 B to %d B; against the float64 reference)"
                  % (mode, len(checks), args.max_bytes))
        for (nbytes, t0), (_, t1) in zip(res[0]["times"], res[1]["times"]):
            t = max(t0, t1)
            table.append((mode, nbytes, t, nbytes / t / 1e3))
    print("# all_reduce float32 sum, 2 ranks on one GPU, NCCL's net transport over loopback; "
          "time per collective back to back on one stream (CUDA events, max over ranks); "
          "busbw = bytes / time for 2 ranks")
    print("%-13s %12s %12s %12s" % ("net", "bytes", "us", "busbw GB/s"))
    for mode, nbytes, t, bw in table:
        print("%-13s %12d %12.1f %12.3f" % (mode, nbytes, t, bw))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
