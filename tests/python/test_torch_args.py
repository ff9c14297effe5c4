# SPDX-License-Identifier: MIT
"""The parts of the package's torch and CUDA path that run without a GPU.

    test_torch_args.py --lib PATH

- the device registration cache (collc/_cuda.py) against a fake driver:
  whole allocations registered once, hits by buffer id, a freed and
  replaced allocation deregistered before its successor, nothing registered
  while the stream is being captured (a clear error instead), clear();
- the CUDA tensor path (collc/_tensor.py) with a stand-in torch module when
  torch is absent: which collc_*_stream function gets which pointers,
  counts, dtype, op, root and stream; argument errors raised before any C
  call and before any registration; the async error raised before enqueuing;
  async handles that order streams;
- `import collc.torch` without torch: an ImportError that names PyTorch;
  with torch (CPU): the backend "collc" is registered with torch.distributed.
"""

import argparse
import ctypes
import errno
import os
import subprocess
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")

failures = []
checks = 0


def expect(cond, msg):
    global checks
    checks += 1
    if not cond:
        failures.append(msg)
        print("FAIL", msg, flush=True)


class FakeDriver:
    """Allocations as (base, size, buffer id); lookups count calls."""

    def __init__(self):
        self.allocs = []
        self.next_id = 100
        self.range_calls = 0

    def alloc(self, base, size):
        self.allocs = [a for a in self.allocs if not (a[0] < base + size and base < a[0] + a[1])]
        self.next_id += 1
        self.allocs.append((base, size, self.next_id))
        return self.next_id

    def _find(self, ptr):
        for a in self.allocs:
            if a[0] <= ptr < a[0] + a[1]:
                return a
        raise RuntimeError(f"fake driver: {ptr:#x} is not device memory")

    def buffer_id(self, ptr):
        return self._find(ptr)[2]

    def address_range(self, ptr):
        self.range_calls += 1
        a = self._find(ptr)
        return a[0], a[1]


def test_devregs(collc):
    from collc import _cuda

    calls = []
    drv = FakeDriver()
    regs = _cuda.DevRegs(lambda b, s, d: calls.append(("reg", b, s, d)),
                         lambda b: calls.append(("dereg", b)), drv)
    asked = []

    def capturing(v):
        def f():
            asked.append(v)
            return v
        return f

    MB = 1 << 20
    drv.alloc(0x10000000, 20 * MB)  # a caching-allocator segment
    # A tensor inside the segment: the whole segment is registered, once.
    expect(regs.ensure(0x10000000 + 4096, 1024, 0, capturing(False)) is True,
           "first use did not register")
    expect(calls == [("reg", 0x10000000, 20 * MB, 0)], f"first registration: {calls}")
    calls.clear()
    asked.clear()
    # Another tensor of the same segment: a hit, no driver range lookup, no capture query.
    n = drv.range_calls
    expect(regs.ensure(0x10000000 + 8 * MB, 4 * MB, 0, capturing(True)) is False,
           "a tensor of a registered segment registered again")
    expect(not calls and not asked and drv.range_calls == n,
           f"a hit made calls: {calls}, capture asked {asked}")
    # The segment freed, another mapped overlapping it: the old one goes first.
    drv.alloc(0x10000000 + 2 * MB, 20 * MB)
    regs.ensure(0x10000000 + 3 * MB, 64, 0, capturing(False))
    expect(calls == [("dereg", 0x10000000), ("reg", 0x10000000 + 2 * MB, 20 * MB, 0)],
           f"replaced segment: {calls}")
    expect(len(regs) == 1, f"{len(regs)} registrations after a replacement, not 1")
    calls.clear()
    # Same address, new allocation (same range, new buffer id): registered anew.
    drv.alloc(0x10000000 + 2 * MB, 20 * MB)
    regs.ensure(0x10000000 + 2 * MB, 64, 0, capturing(False))
    expect(calls == [("dereg", 0x10000000 + 2 * MB), ("reg", 0x10000000 + 2 * MB, 20 * MB, 0)],
           f"same range, new allocation: {calls}")
    calls.clear()
    # Not registered while capturing: a clear error, and nothing registered.
    drv.alloc(0x40000000, 2 * MB)
    try:
        regs.ensure(0x40000000, 256, 0, capturing(True))
        expect(False, "registration during capture: no error")
    except RuntimeError as e:
        expect("captur" in str(e) and "before" in str(e), f"capture error says: {e}")
    expect(not calls, f"calls during capture: {calls}")
    # After the capture it registers.
    regs.ensure(0x40000000, 256, 0, capturing(False))
    expect(calls == [("reg", 0x40000000, 2 * MB, 0)], f"after capture: {calls}")
    # A buffer running past its allocation.
    try:
        regs.ensure(0x40000000 + 2 * MB - 128, 256, 0, capturing(False))
        expect(False, "a buffer past its allocation: no error")
    except ValueError as e:
        expect("more than one" in str(e), f"past the allocation: {e}")
    # The same allocation on another device index is another registration.
    calls.clear()
    regs.ensure(0x40000000, 256, 1, capturing(False))
    expect(calls == [("dereg", 0x40000000), ("reg", 0x40000000, 2 * MB, 1)],
           f"another device: {calls}")
    calls.clear()
    regs.clear()
    expect(sorted(calls) == sorted([("dereg", 0x10000000 + 2 * MB), ("dereg", 0x40000000)]),
           f"clear: {calls}")
    expect(len(regs) == 0, "registrations left after clear()")


def fake_torch():
    """Just what collc/_tensor.py touches, recording stream waits and record_stream."""
    t = types.ModuleType("torch")
    t.log = []
    t.cur = {0: 0x5000, 1: 0x5100}  # current stream handle per device

    class dtype:
        def __init__(self, name, size):
            self.name, self.size = name, size

        def __repr__(self):
            return "torch." + self.name

    for name, size in (("int8", 1), ("uint8", 1), ("int16", 2), ("int32", 4), ("int64", 8),
                       ("float16", 2), ("bfloat16", 2), ("float32", 4), ("float64", 8),
                       ("float8_e4m3fn", 1), ("float8_e5m2", 1), ("complex64", 8)):
        setattr(t, name, dtype(name, size))

    class device:
        def __init__(self, type, index=None):
            self.type, self.index = type, index

        def __repr__(self):
            return f"{self.type}:{self.index}" if self.index is not None else self.type

    class Tensor:
        def __init__(self, ptr, n, dt, dev=0, contiguous=True):
            self.ptr, self.n, self.dtype, self.contig = ptr, n, dt, contiguous
            self.device = device("cpu") if dev is None else device("cuda", dev)
            self.is_cuda = dev is not None
            self.recorded = []

        def data_ptr(self):
            return self.ptr

        def numel(self):
            return self.n

        def element_size(self):
            return self.dtype.size

        def is_contiguous(self):
            return self.contig

        def record_stream(self, s):
            self.recorded.append(s.cuda_stream)

    class Stream:
        def __init__(self, dev=0, handle=None):
            self.device = device("cuda", dev)
            self.cuda_stream = t.cur[dev] if handle is None else handle

        def wait_event(self, ev):
            t.log.append(("wait_event", self.cuda_stream, ev.stream))

    class Event:
        def __init__(self):
            self.stream = None
            self.done = False

        def record(self, s):
            self.stream = s.cuda_stream

        def query(self):
            return self.done

        def synchronize(self):
            self.done = True

    cuda = types.SimpleNamespace(Stream=Stream, Event=Event, ExternalStream=None,
                                 current_stream=lambda d: Stream(d),
                                 default_stream=lambda d: Stream(d, 0))
    t.dtype, t.device, t.Tensor, t.cuda = dtype, device, Tensor, cuda
    t._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda d: t.cur[d])
    return t


class SpyC:
    """Stands in for libcollc: records calls, answers 0 (the async error is settable)."""

    def __init__(self):
        self.calls = []
        self.async_error = 0

    def __getattr__(self, name):
        def f(*args):
            args = tuple(a.value if isinstance(a, ctypes.c_void_p) else a for a in args)
            self.calls.append((name, args))
            if name == "collc_comm_get_async_error":
                return self.async_error
            return 0
        return f


def test_cuda_path(collc):
    try:
        import torch as real  # noqa: F401

        print("torch is installed: the stand-in CUDA path test is left to tests/gpu/torch")
        return
    except ImportError:
        pass
    from collc import _cuda

    torch = sys.modules["torch"] = fake_torch()
    real_c = collc._C
    spy = SpyC()
    try:
        tm = collc._tensors()
        tm._C, tm._streams = spy, True
        collc._C = spy
        regs_log = []
        drv = FakeDriver()
        drv.capturing = False
        drv.is_capturing = lambda h: drv.capturing
        regs = _cuda.DevRegs(lambda b, s, d: regs_log.append((b, s, d)), lambda b: None, drv)
        ctx = types.SimpleNamespace(_live=lambda what: 1, _devregs=lambda: regs)

        def comm(device=0, nranks=2):
            c = collc.Comm.__new__(collc.Comm)
            c._ctx, c._h, c.device, c.rank, c.nranks = ctx, 0xC0, device, 0, nranks
            return c

        c = comm()
        drv.alloc(0x7000000, 1 << 21)
        T = torch.Tensor
        x = T(0x7000000, 6, torch.float32)
        o = T(0x7000100, 6, torch.float32)
        big = T(0x7000200, 12, torch.float32)
        cur = torch.cur[0]

        def stream_calls():
            return [cl for cl in spy.calls if cl[0].endswith("_stream")]

        cases = [
            ("all_reduce in place", lambda: c.all_reduce(x),
             ("collc_allreduce_stream", (0xC0, x.ptr, x.ptr, 6, collc.FLOAT32, collc.SUM, cur))),
            ("all_reduce out, max", lambda: c.all_reduce(x, op="max", out=o),
             ("collc_allreduce_stream", (0xC0, x.ptr, o.ptr, 6, collc.FLOAT32, collc.MAX, cur))),
            ("all_gather", lambda: c.all_gather(x, big),
             ("collc_allgather_stream", (0xC0, x.ptr, big.ptr, 6, collc.FLOAT32, cur))),
            ("reduce_scatter", lambda: c.reduce_scatter(big, o, op="avg"),
             ("collc_reduce_scatter_stream",
              (0xC0, big.ptr, o.ptr, 6, collc.FLOAT32, collc.AVG, cur))),
            ("broadcast", lambda: c.broadcast(x, root=1),
             ("collc_broadcast_stream", (0xC0, x.ptr, x.ptr, 6, collc.FLOAT32, 1, cur))),
            ("reduce", lambda: c.reduce(x, op="prod", root=1),
             ("collc_reduce_stream",
              (0xC0, x.ptr, x.ptr, 6, collc.FLOAT32, collc.PROD, 1, cur))),
            ("all_to_all", lambda: c.all_to_all(big, T(0x7000300, 12, torch.float32)),
             ("collc_alltoall_stream", (0xC0, big.ptr, 0x7000300, 6, collc.FLOAT32, cur))),
            ("send", lambda: c.send(x, 1),
             ("collc_send_stream", (0xC0, x.ptr, 6, collc.FLOAT32, 1, cur))),
            ("recv bfloat16", lambda: c.recv(T(0x7000400, 3, torch.bfloat16), 1),
             ("collc_recv_stream", (0xC0, 0x7000400, 3, collc.BFLOAT16, 1, cur))),
            ("fp8 all_reduce", lambda: c.all_reduce(T(0x7000500, 5, torch.float8_e4m3fn)),
             ("collc_allreduce_stream",
              (0xC0, 0x7000500, 0x7000500, 5, collc.FLOAT8_E4M3, collc.SUM, cur))),
        ]
        for what, call, want in cases:
            spy.calls.clear()
            r = call()
            expect(r is None, f"{what}: a blocking call returned {r!r}")
            expect(stream_calls() == [want], f"{what}: C calls {stream_calls()}, want {want}")
            expect(("collc_comm_get_async_error", (0xC0,)) in spy.calls,
                   f"{what}: the async error was not checked")
        expect(regs_log == [(0x7000000, 1 << 21, 0)],
               f"one registration of the whole allocation expected, got {regs_log}")

        # An explicit stream: its handle, and the tensors recorded on it.
        s = torch.cuda.Stream(0, 0x9900)
        spy.calls.clear()
        y = T(0x7000600, 4, torch.float32)
        c.all_reduce(y, stream=s)
        expect(stream_calls()[0][1][-1] == 0x9900 and y.recorded == [0x9900],
               f"stream=: {stream_calls()}, recorded {y.recorded}")

        # async_op: an event on the collective's stream; wait() orders the current stream.
        spy.calls.clear()
        h = c.all_reduce(y, async_op=True, stream=s)
        torch.log.clear()
        expect(h.is_completed() is False, "is_completed before the stream work ran")
        expect(h.wait() is True and torch.log == [("wait_event", cur, 0x9900)],
               f"wait(): {torch.log}")
        h._event.done = True
        expect(h.is_completed() is True, "is_completed after the stream work ran")

        # Argument errors: nothing reaches libcollc, nothing is registered.
        drv.alloc(0x8000000, 1 << 20)
        fresh = T(0x8000000, 4, torch.float32)
        bad = [
            ("out size", ValueError, lambda: c.all_reduce(fresh, out=T(0x8000100, 5,
                                                                     torch.float32))),
            ("out dtype", TypeError, lambda: c.all_reduce(fresh, out=T(0x8000100, 4,
                                                                     torch.float64))),
            ("gather out size", ValueError, lambda: c.all_gather(fresh, T(0x8000100, 4,
                                                                        torch.float32))),
            ("scatter in size", ValueError,
             lambda: c.reduce_scatter(T(0x8000100, 7, torch.float32), fresh)),
            ("other device", ValueError, lambda: c.all_reduce(T(0x8000000, 4, torch.float32,
                                                                dev=1))),
            ("CPU tensor on a device comm", ValueError,
             lambda: c.all_reduce(T(0x1000, 4, torch.float32, dev=None))),
            ("CUDA tensor on a host comm", ValueError, lambda: comm(-1).all_reduce(fresh)),
            ("CUDA x, CPU out", ValueError,
             lambda: c.all_reduce(fresh, out=T(0x1000, 4, torch.float32, dev=None))),
            ("strided", ValueError,
             lambda: c.all_reduce(T(0x8000000, 4, torch.float32, contiguous=False))),
            ("complex", TypeError, lambda: c.all_reduce(T(0x8000000, 4, torch.complex64))),
            ("dtype=", TypeError, lambda: c.all_reduce(fresh, dtype="float32")),
            ("unknown op", ValueError, lambda: c.all_reduce(fresh, op="xor")),
            ("root float", TypeError, lambda: c.broadcast(fresh, root=1.0)),
            ("stream on another device", ValueError,
             lambda: c.all_reduce(fresh, stream=torch.cuda.Stream(1))),
            ("stream of a wrong type", TypeError, lambda: c.all_reduce(fresh, stream="s")),
            ("alltoall overlap", ValueError,
             lambda: c.all_to_all(fresh, T(0x8000008, 4, torch.float32))),
            ("alltoall not a multiple", ValueError,
             lambda: c.all_to_all(T(0x8000000, 5, torch.float32),
                                  T(0x8000100, 5, torch.float32))),
        ]
        for what, exc, call in bad:
            spy.calls.clear()
            regs_log.clear()
            try:
                call()
                expect(False, f"{what}: no error")
            except exc as e:
                expect(not spy.calls and not regs_log,
                       f"{what}: {exc.__name__} ({e}) after C calls {spy.calls} / "
                       f"registrations {regs_log}")
            except Exception as e:  # noqa: BLE001: report whatever it was
                expect(False, f"{what}: {type(e).__name__}: {e}, expected {exc.__name__}")

        # Capturing: an unregistered tensor raises, nothing is enqueued or registered.
        drv.capturing = True
        spy.calls.clear()
        try:
            c.all_reduce(fresh)
            expect(False, "unregistered tensor during capture: no error")
        except RuntimeError as e:
            expect("captur" in str(e) and not stream_calls() and not regs_log,
                   f"capture: {e}; calls {spy.calls}, registrations {regs_log}")
        # A registered one records into the graph like any call.
        spy.calls.clear()
        c.all_reduce(x)
        expect(len(stream_calls()) == 1, f"registered tensor during capture: {spy.calls}")
        drv.capturing = False

        # A failed stream-ordered collective: collc.Error before anything is enqueued.
        spy.async_error = -errno.EPIPE
        spy.calls.clear()
        try:
            c.all_reduce(x)
            expect(False, "async error: no exception")
        except collc.Error as e:
            expect(e.errno == errno.EPIPE and not stream_calls(), f"async error: {e!r}, "
                   f"calls {spy.calls}")
        try:
            h.wait()
            expect(False, "async error: wait() raised nothing")
        except collc.Error as e:
            expect(e.errno == errno.EPIPE, f"async error in wait(): {e!r}")
        spy.async_error = 0

        # A libcollc without the stream forms says so.
        tm._streams = False
        try:
            c.all_reduce(x)
            expect(False, "no stream forms: no error")
        except NotImplementedError as e:
            expect("collc_allreduce_stream" in str(e), f"no stream forms: {e}")
    finally:
        collc._C = real_c
        del sys.modules["torch"]


def test_torch_module(lib):
    env = dict(os.environ, PYTHONPATH=PKG, COLLC_LIB=lib, PYTHONDONTWRITEBYTECODE="1")
    try:
        import torch  # noqa: F401: only whether it imports

        have = True
    except ImportError:
        have = False
    if not have:
        p = subprocess.run([sys.executable, "-c", "import collc.torch"], env=env,
                           capture_output=True, text=True, timeout=60)
        expect(p.returncode != 0 and "ImportError" in p.stderr and "PyTorch" in p.stderr,
               f"import collc.torch without torch: rc {p.returncode}, {p.stderr[-300:]}")
        print("torch is not installed: its backend registration is not checked here")
        return
    p = subprocess.run([sys.executable, "-c",
                        "import collc.torch, torch.distributed as dist; "
                        "assert 'COLLC' in dist.Backend._plugins; "
                        "assert dist.Backend('collc') == 'collc'; print('registered')"],
                       env=env, capture_output=True, text=True, timeout=120)
    expect(p.returncode == 0 and "registered" in p.stdout,
           f"import collc.torch with torch: rc {p.returncode}, {p.stderr[-600:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    a = ap.parse_args()
    os.environ["COLLC_LIB"] = a.lib
    sys.path.insert(0, PKG)
    import collc

    test_devregs(collc)
    test_cuda_path(collc)
    test_torch_module(a.lib)
    print(f"{checks} checks, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
