#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""collc's torch.distributed backend on the device machine (run.sh runs it).

    torch_gpu.py ddp|graph|latency --out DIR [--steps N] [--iters N]

Needs a running collcd ($COLLC_SOCKET), torch with CUDA, and the package
(PYTHONPATH=<repo>/python; COLLC_LIB or the newest build*/client/libcollc.so.1).
Ranks are spawned processes (torch.multiprocessing, start method "spawn").
With one GPU the collc ranks share it; the nccl backend needs a GPU per rank,
so on one GPU it runs with world size 1 only (each result line says so).
Every part prints RESULT lines (PASS/FAIL and figures) and exits non-zero on
a failure.
"""

import argparse
import datetime
import json
import os
import socket
import statistics
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "python"))


def die(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    die(f"torch is not importable ({e}): these checks need PyTorch with CUDA")

COLLC = "cuda:collc,cpu:gloo"
EPS32 = 2.0**-23


def result(out, line):
    print("RESULT " + line, flush=True)
    with open(os.path.join(out, "results.txt"), "a") as f:
        f.write("RESULT " + line + "\n")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, fn, world, port, backend, devs, args):
    """One rank: its device, the process group, the part's body, its JSON."""
    torch.cuda.set_device(devs[rank])
    if "collc" in backend:
        import collc.torch  # noqa: F401: registers the backend
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=120))
    try:
        res = fn(rank, world, args)
    finally:
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001: the result is already decided
            pass
    with open(os.path.join(args["out"], f"{args['name']}-rank{rank}.json"), "w") as f:
        json.dump(res, f)


def launch(fn, world, backend, args, timeout_s):
    """Runs fn on `world` ranks; returns their JSON results (rank order) or raises."""
    ngpu = torch.cuda.device_count()
    devs = [r % ngpu for r in range(world)]
    args = dict(args)
    for r in range(world):
        p = os.path.join(args["out"], f"{args['name']}-rank{r}.json")
        if os.path.exists(p):
            os.remove(p)
    ctx = mp.start_processes(_entry, args=(fn, world, free_port(), backend, devs, args),
                             nprocs=world, join=False, start_method="spawn")
    end = time.monotonic() + timeout_s
    while not ctx.join(timeout=1.0):
        if time.monotonic() > end:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
            raise TimeoutError(f"{args['name']}: ranks still running after {timeout_s} s")
    res = []
    for r in range(world):
        with open(os.path.join(args["out"], f"{args['name']}-rank{r}.json")) as f:
            res.append(json.load(f))
    return res


# (a) DDP training: the same model, seed and global batch with collc and nccl.

def _model():
    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                         nn.Linear(64, 1))


def _data(steps, batch):
    g = torch.Generator().manual_seed(99)
    x = torch.randn(steps, batch, 32, generator=g)
    w = torch.randn(32, 1, generator=g)
    return x, torch.sin(x @ w) + 0.1 * torch.randn(steps, batch, 1, generator=g)


def _no_tf32():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def ddp_rank(rank, world, a):
    from torch.nn.parallel import DistributedDataParallel as DDP

    _no_tf32()
    dev = torch.device("cuda", torch.cuda.current_device())
    model = DDP(_model().to(dev), device_ids=[dev.index])
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    xs, ys = _data(a["steps"], a["batch"])
    shard = a["batch"] // world
    losses = []
    for s in range(a["steps"]):
        x = xs[s, rank * shard:(rank + 1) * shard].to(dev)
        y = ys[s, rank * shard:(rank + 1) * shard].to(dev)
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        g = loss.detach().clone()
        dist.all_reduce(g)  # the global batch's loss, through the backend too
        losses.append(g.item() / world)
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double().cpu()
    return {"losses": losses, "params": params.tolist()}


def reference_losses(steps, batch):
    """The same training without DDP on the whole batch (one process)."""
    _no_tf32()
    dev = torch.device("cuda", 0)
    model = _model().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    xs, ys = _data(steps, batch)
    out = []
    for s in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(xs[s].to(dev)), ys[s].to(dev))
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


def rel_diff(a, b):
    return max(abs(x - y) / max(abs(y), 1e-6) for x, y in zip(a, b))


def part_ddp(a):
    ngpu = torch.cuda.device_count()
    steps, batch, tol = a.steps, 64, 1e-3
    args = {"out": a.out, "steps": steps, "batch": batch}
    ref = reference_losses(steps, batch)
    runs = {}
    ok = True
    configs = [("collc", COLLC, 2), ("nccl", "nccl", 2 if ngpu >= 2 else 1)]
    for name, backend, world in configs:
        try:
            res = launch(ddp_rank, world, backend, dict(args, name=f"ddp-{name}"), a.timeout)
        except Exception as e:  # noqa: BLE001: reported, the other backend still runs
            traceback.print_exc()
            result(a.out, f"ddp {name} world {world} FAIL {type(e).__name__}: {e}")
            ok = False
            continue
        runs[name] = (world, res[0]["losses"])
        # DDP keeps the ranks' parameters equal (up to the all-reduce's rounding).
        p0 = torch.tensor(res[0]["params"], dtype=torch.float64)
        spread = max(float((torch.tensor(r["params"], dtype=torch.float64) - p0).abs().max())
                     for r in res) / max(float(p0.abs().max()), 1e-30)
        same = spread <= 1e-5
        d = rel_diff(res[0]["losses"], ref)
        good = same and d <= tol
        ok &= good
        note = " (one GPU: nccl needs a GPU per rank)" if name == "nccl" and world == 1 else ""
        result(a.out, f"ddp {name} world {world} {'PASS' if good else 'FAIL'} {steps} steps, "
               f"loss {res[0]['losses'][0]:.6f} -> {res[0]['losses'][-1]:.6f}, max rel diff "
               f"to the single-process reference {d:.2e} (tol {tol:g}), parameter spread "
               f"across ranks {spread:.1e} (tol 1e-5){note}")
    print("step  reference   " + "  ".join(f"{n} (world {w})" for n, (w, _) in runs.items()))
    for s in range(steps):
        print(f"{s:4d}  {ref[s]:.7f}  " + "  ".join(f"{ls[s]:.7f}" for _, ls in runs.values()))
    if "collc" in runs and "nccl" in runs:
        d = rel_diff(runs["collc"][1], runs["nccl"][1])
        good = d <= tol
        ok &= good
        result(a.out, f"ddp collc-vs-nccl {'PASS' if good else 'FAIL'} max rel loss diff "
               f"{d:.2e} (tol {tol:g}; collc world {runs['collc'][0]}, nccl world "
               f"{runs['nccl'][0]})")
    return ok


# (b) CUDA graph capture of all_reduce, replayed with new inputs.

def _inputs(seed, rank, it, n, tag):
    g = torch.Generator().manual_seed(seed * 1000003 + rank * 10007 + it * 101 + tag)
    return torch.randn(n, generator=g)


def graph_rank(rank, world, a):
    dev = torch.device("cuda", torch.cuda.current_device())
    fails, checks = [], 0
    seed = a["seed"]
    for n in a["sizes"]:
        x = torch.zeros(n, device=dev)
        y = torch.zeros(n, device=dev)
        z = torch.zeros(n, device=dev)
        # Warm-up on a side stream (torch's recipe): registers x and y with collcd.
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                dist.all_reduce(x)
                dist.all_reduce(y)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            dist.all_reduce(x)
            y.add_(x)
            dist.all_reduce(y)
        for it in range(a["replays"]):
            xs = [_inputs(seed, q, it, n, 1) for q in range(world)]
            ys = [_inputs(seed, q, it, n, 2) for q in range(world)]
            zs = [_inputs(seed, q, it, n, 3) for q in range(world)]
            x.copy_(xs[rank])
            y.copy_(ys[rank])
            z.copy_(zs[rank])
            g.replay()
            dist.all_reduce(z)  # an eager one between replays
            torch.cuda.synchronize()
            X = torch.stack(xs).double()
            Y = torch.stack(ys).double()
            Z = torch.stack(zs).double()
            xr = X.sum(0)
            yr = Y.sum(0) + world * xr
            zr = Z.sum(0)
            for what, got, ref, tol in (
                    ("x", x, xr, 2 * world * EPS32 * X.abs().sum(0) + EPS32 * xr.abs()),
                    ("y", y, yr, 8 * world * EPS32 * (Y.abs().sum(0) + world * X.abs().sum(0))
                     + EPS32 * yr.abs()),
                    ("eager z", z, zr, 2 * world * EPS32 * Z.abs().sum(0) + EPS32 * zr.abs())):
                err = (got.double().cpu() - ref).abs()
                checks += 1
                if not bool((err <= tol).all()):
                    i = int((err - tol).argmax())
                    fails.append(f"{n} elements, replay {it}, {what}[{i}] = {float(got[i])}, "
                                 f"expected {float(ref[i])} (tol {float(tol[i]):.3g})")
        del g
    # A tensor first seen inside a capture cannot be registered there: a clear error.
    err = None
    g2 = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g2):
            fresh = torch.ones(4096, device=dev)
            dist.all_reduce(fresh)
    except RuntimeError as e:
        err = str(e)
    del g2
    checks += 1
    if err is None or "not registered with collcd" not in err:
        fails.append(f"all_reduce of an unregistered tensor inside a capture: {err!r}")
    return {"checks": checks, "fails": fails, "capture_error": err}


def part_graph(a):
    args = {"out": a.out, "name": "graph", "sizes": [2, 1024, 262144], "replays": a.replays,
            "seed": a.seed}
    try:
        res = launch(graph_rank, 2, COLLC, args, a.timeout)
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        result(a.out, f"graph collc world 2 FAIL {type(e).__name__}: {e}")
        return False
    fails = [f"rank {r}: {m}" for r, x in enumerate(res) for m in x["fails"]]
    for m in fails[:20]:
        print("FAILED CHECK", m)
    checks = sum(x["checks"] for x in res)
    result(a.out, f"graph collc world 2 {'FAIL' if fails else 'PASS'} {checks} checks "
           f"({len(fails)} failed): all_reduce, add, all_reduce captured; {a.replays} replays "
           "x 8 B/4 KiB/1 MiB with new inputs and an eager all_reduce between, vs float64; "
           "capture of an unregistered tensor raises")
    print("capture error text:", res[0]["capture_error"])
    return not fails


# (c) Python-level latency of an 8-byte all_reduce.

def _pct(ts, q):
    ts = sorted(ts)
    return ts[min(len(ts) - 1, int(q * len(ts)))]


def latency_rank(rank, world, a):
    dev = torch.device("cuda", torch.cuda.current_device())
    x = torch.zeros(2, device=dev)  # 8 bytes
    out = {}

    def timed(fn):
        for _ in range(a["warmup"]):
            fn()
        ts = []
        for _ in range(a["iters"]):
            t0 = time.perf_counter_ns()
            fn()
            ts.append((time.perf_counter_ns() - t0) / 1000.0)
        return {"p50": statistics.median(ts), "p99": _pct(ts, 0.99), "n": len(ts)}

    def measure(what, fn):
        # Every rank runs every measure in the same order, so a failure is every rank's.
        try:
            out[what] = fn()
        except Exception as e:  # noqa: BLE001: reported in the table
            traceback.print_exc()
            out[what] = {"error": f"{type(e).__name__}: {e}"}

    def eager():
        dist.all_reduce(x)
        torch.cuda.synchronize()

    measure("eager+sync", lambda: timed(eager))

    def back_to_back():
        # Batches of 64 enqueued back to back on one stream, timed by CUDA events.
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        total, n = 0.0, 0
        for _ in range(max(1, a["iters"] // 64)):
            torch.cuda.synchronize()
            e0.record()
            for _ in range(64):
                dist.all_reduce(x)
            e1.record()
            e1.synchronize()
            total += e0.elapsed_time(e1) * 1000.0
            n += 64
        return {"p50": total / n, "p99": None, "n": n}

    measure("back-to-back (events, mean)", back_to_back)

    def graph():
        # One all_reduce captured in a graph: replay to completion.
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            dist.all_reduce(x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            dist.all_reduce(x)

        def replay():
            g.replay()
            torch.cuda.synchronize()

        return timed(replay)

    measure("graph replay+sync", graph)

    pg = dist.distributed_c10d._get_default_group()
    if "collc" in a["backend"] and hasattr(pg, "_collc_comm"):
        # The package's own call, without torch.distributed's layers.
        comm = pg._collc_comm(dev.index)

        def direct():
            comm.all_reduce(x)
            torch.cuda.synchronize()

        measure("collc.Comm.all_reduce+sync", lambda: timed(direct))
        comm.check_async_error()
    return out


def part_latency(a):
    ngpu = torch.cuda.device_count()
    configs = [("collc", COLLC, 2), ("nccl", "nccl", 2 if ngpu >= 2 else 1)]
    if ngpu < 2:
        configs.insert(1, ("collc", COLLC, 1))  # the like-for-like row to nccl's world 1
    ok = True
    rows = []
    for name, backend, world in configs:
        args = {"out": a.out, "name": f"lat-{name}-{world}", "iters": a.iters,
                "warmup": max(50, a.iters // 10), "backend": backend}
        try:
            res = launch(latency_rank, world, backend, args, a.timeout)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            result(a.out, f"latency {name} world {world} FAIL {type(e).__name__}: {e}")
            ok = False
            continue
        for what, v in res[0].items():
            if "error" in v:
                ok = False
                result(a.out, f"latency {name} world {world} FAIL {what}: {v['error']}")
                continue
            rows.append((name, world, what, v))
            p99 = "" if v["p99"] is None else f", p99 {v['p99']:.2f} us"
            result(a.out, f"latency {name} world {world} PASS {what}: p50 {v['p50']:.2f} us"
                   f"{p99} ({v['n']} iterations, rank 0)")
    if ngpu < 2:
        print("one GPU: the two collc ranks share it; nccl runs with world size 1 only")
    print(f"{'backend':8} {'world':>5}  {'measure':32} {'p50 us':>9} {'p99 us':>9}")
    for name, world, what, v in rows:
        p99 = "-" if v["p99"] is None else f"{v['p99']:.2f}"
        print(f"{name:8} {world:5d}  {what:32} {v['p50']:9.2f} {p99:>9}")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("part", choices=["ddp", "graph", "latency"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per launch")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        die("torch sees no CUDA device")
    if not os.environ.get("COLLC_SOCKET"):
        die("COLLC_SOCKET is not set: start collcd and export its socket")
    if not dist.is_available() or not dist.is_nccl_available():
        die("this torch lacks torch.distributed or nccl")
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"{torch.cuda.device_count()} GPU(s): {torch.cuda.get_device_name(0)}; seed {a.seed}",
          flush=True)
    ok = {"ddp": part_ddp, "graph": part_graph, "latency": part_latency}[a.part](a)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
