#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch's nccl backend on libnccl-collc (device machine only; nccl-shim.sh runs it).

    nccl_shim_torch.py --label collc|nccl --world N [--steps 20] [--iters 2000] [--timeout 240]

The caller chooses the library (LD_PRELOAD=libnccl-collc.so for collc: torch's
own libnccl.so.2 then never sees a call). Ranks are spawned processes on
cuda:(rank % GPUs), so with one GPU collc's ranks share it. Prints RESULT lines:
  torch-LABEL-ddp      DDP training of a small model: the losses of every rank and step
                       against the same training in one process without collectives
  torch-LABEL-graph    torch.cuda.graph capture of all_reduce, replayed with new inputs
  torch-LABEL-latency  8-byte eager all_reduce followed by torch.cuda.synchronize()
"""
import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model():
    import torch
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))


def data(steps, world, batch):
    import torch
    g = torch.Generator().manual_seed(1)
    x = torch.randn(steps, world, batch, 32, generator=g)
    y = torch.randn(steps, world, batch, 1, generator=g)
    return x, y


def no_tf32():
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def reference(steps, world, batch):
    """Every rank's loss per step when the gradient is the mean over the ranks' shards."""
    import torch
    no_tf32()
    dev = torch.device("cuda", 0)
    m = model().to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x, y = data(steps, world, batch)
    out = [[] for _ in range(world)]
    for s in range(steps):
        opt.zero_grad()
        losses = [torch.nn.functional.mse_loss(m(x[s, r].to(dev)), y[s, r].to(dev)) for r in range(world)]
        for r in range(world):
            out[r].append(losses[r].item())
        (sum(losses) / world).backward()
        opt.step()
    return out


def rank_main(rank, world, port, a, outdir):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    no_tf32()
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    res = {"rank": rank}
    # DDP
    m = DDP(model().to(dev), device_ids=[dev.index])
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x, y = data(a.steps, world, a.batch)
    losses = []
    for s in range(a.steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(m(x[s, rank].to(dev)), y[s, rank].to(dev))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    res["losses"] = losses
    # Graph capture of all_reduce, replayed with new inputs.
    t = torch.full((1024,), float(rank + 1), device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            dist.all_reduce(t)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        dist.all_reduce(t)
    bad = 0
    for k in range(5):
        t.fill_(float(rank + 1 + k))
        g.replay()
        torch.cuda.synchronize()
        want = world * (1 + k) + world * (world - 1) / 2
        bad += int((t != want).sum().item())
    res["graph_bad"] = bad
    # 8-byte eager all_reduce + synchronize.
    v = torch.zeros(2, device=dev)
    for _ in range(100):
        dist.all_reduce(v)
    torch.cuda.synchronize()
    dist.barrier()
    ts = []
    for _ in range(a.iters):
        t0 = time.perf_counter()
        dist.all_reduce(v)
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    res["lat_p50_us"] = statistics.median(ts) * 1e6
    res["lat_mean_us"] = statistics.fmean(ts) * 1e6
    dist.destroy_process_group()
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--label", required=True)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--timeout", type=int, default=240)
    a = p.parse_args()
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError as e:
        print(f"RESULT torch-{a.label} SKIP no torch ({e})")
        return 0
    L = f"torch-{a.label}"
    with tempfile.TemporaryDirectory() as outdir:
        ctx = mp.start_processes(rank_main, args=(a.world, free_port(), a, outdir), nprocs=a.world,
                                 join=False, start_method="spawn")
        deadline = time.time() + a.timeout
        try:
            while not ctx.join(timeout=max(1, deadline - time.time())):
                if time.time() > deadline:
                    for pr in ctx.processes:
                        pr.kill()
                    print(f"RESULT {L}-ddp FAIL ranks did not finish in {a.timeout} s")
                    return 1
        except Exception as e:  # a rank raised: its traceback is on stderr
            print(f"RESULT {L}-ddp FAIL a rank failed: {str(e).splitlines()[-1][:160]}")
            return 1
        res = []
        for r in range(a.world):
            with open(os.path.join(outdir, f"rank{r}.json")) as f:
                res.append(json.load(f))
    ref = reference(a.steps, a.world, a.batch)
    worst = max(abs(res[r]["losses"][s] - ref[r][s]) / max(abs(ref[r][s]), 1e-12)
                for r in range(a.world) for s in range(a.steps))
    ok = worst < 1e-4
    print(f"RESULT {L}-ddp {'PASS' if ok else 'FAIL'} world {a.world}, {a.steps} steps: max rel loss "
          f"diff to one process {worst:.2e} (tol 1e-4); rank 0 losses {res[0]['losses'][0]:.6f} .. "
          f"{res[0]['losses'][-1]:.6f}")
    bad = sum(r["graph_bad"] for r in res)
    print(f"RESULT {L}-graph {'PASS' if bad == 0 else 'FAIL'} captured all_reduce of 1024 floats, "
          f"5 replays with new inputs: {bad} wrong elements")
    print(f"RESULT {L}-latency INFO 8-byte all_reduce + synchronize, world {a.world}, {a.iters} "
          f"iterations: p50 {res[0]['lat_p50_us']:.1f} us, mean {res[0]['lat_mean_us']:.1f} us")
    return 0 if ok and bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
