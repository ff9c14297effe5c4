# SPDX-License-Identifier: MIT
"""The collc Python package against a real collcd (CPU backend).

    test_collc.py --collcd PATH --lib PATH [--nranks N] [--seed S]

Starts collcd on a temporary socket, then N rank processes (fresh
interpreters: registration re-backs pages with shared memory, so ranks are
never forked from a process that registered). Every rank runs every
collective x every dtype x every op on random data and checks its own result
against a float64 numpy reference (integers exactly), through collc memory
(ctx.empty), registered arrays, views and staged (file-mapped) arrays, with
blocking calls and async handles; then the error cases. numpy is required:
without it the test fails.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
import traceback

try:
    import numpy as np
except ImportError:
    sys.exit("FAIL: numpy is missing: install python3-numpy (scripts/install-deps.sh does)")

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")
RANK_TIMEOUT_S = 120

INTS = ["int8", "uint8", "int32", "uint32", "int64", "uint64"]
FLOATS = ["float16", "float32", "float64"]
CARRIED = {"bfloat16": np.uint16, "float8_e4m3": np.uint8, "float8_e5m2": np.uint8}
DTYPES = INTS + FLOATS + list(CARRIED)
OPS = ["sum", "prod", "max", "min", "avg"]
EPS = {"float16": 2.0**-10, "float32": 2.0**-23, "float64": 2.0**-52, "bfloat16": 2.0**-7,
       "float8_e4m3": 2.0**-3, "float8_e5m2": 2.0**-2}


def _e4m3_table():
    t = np.empty(256, np.float64)
    for b in range(256):
        s, e, m = b >> 7, (b >> 3) & 15, b & 7
        if e == 15 and m == 7:
            v = np.nan
        elif e == 0:
            v = m / 8 * 2.0**-6
        else:
            v = (1 + m / 8) * 2.0**(e - 7)
        t[b] = -v if s else v
    return t


E4M3 = _e4m3_table()


def storage(name):
    return np.dtype(CARRIED.get(name, name))


def decode(a, name):
    """float64 values of an array of collc dtype `name`."""
    if name == "bfloat16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if name == "float8_e4m3":
        return E4M3[a]
    if name == "float8_e5m2":
        return (a.astype(np.uint16) << 8).view(np.float16).astype(np.float64)
    return a.astype(np.float64)


def gen(name, op, count, seed, rank, tag):
    """Rank `rank`'s input of one case: exact in the storage format, every rank can redo it."""
    rng = np.random.default_rng([seed, rank, tag])
    if name in INTS:
        signed = name.startswith("int")
        lo, hi = ((-2, 3) if signed else (0, 4)) if op == "prod" else \
                 ((-20, 21) if signed else (0, 41))
        return rng.integers(lo, hi, count).astype(name)
    sign = rng.choice([-1.0, 1.0], count)
    if name in ("float8_e4m3", "float8_e5m2"):
        bias, mbits = (7, 3) if name == "float8_e4m3" else (15, 2)
        lo = bias - 1 if op == "prod" else bias - 4  # magnitudes in [2^-4, 2) ([0.5, 2) for prod)
        e = rng.integers(lo, bias + 1, count)
        m = rng.integers(0, 1 << mbits, count)
        return (((sign < 0) << 7) | (e << mbits) | m).astype(np.uint8)
    mag = rng.uniform(0.5, 2.0, count) if op == "prod" else 2.0**rng.uniform(-4, 1, count)
    v = (sign * mag).astype(np.float32)
    if name == "bfloat16":
        return (v.view(np.uint32) >> 16).astype(np.uint16)
    return v.astype(name)


def reference(inputs, name, op):
    """The float64 result of reducing inputs (one array per rank) and its error bound."""
    x = np.stack([decode(a, name) for a in inputs])
    n = len(inputs)
    if op in ("sum", "avg"):
        ref = x.sum(axis=0)
        if op == "avg":
            ref = np.trunc(ref / n) if name in INTS else ref / n
    elif op == "prod":
        ref = x.prod(axis=0)
    else:
        ref = x.max(axis=0) if op == "max" else x.min(axis=0)
    if name in INTS or op in ("max", "min"):
        return ref, np.zeros_like(ref)  # exact
    eps = EPS[name]
    if op == "prod":
        tol = 2 * n * eps * np.abs(ref)
    else:
        tol = n * eps * np.abs(x).sum(axis=0) / (n if op == "avg" else 1) + eps * np.abs(ref)
    return ref, tol


class Rank:
    def __init__(self, collc, comm, ctx, seed):
        self.collc, self.comm, self.ctx, self.seed = collc, comm, ctx, seed
        self.n, self.r = comm.nranks, comm.rank
        self.tag = 0
        self.files = 0
        self.checks = 0
        self.failures = []
        self.tmp = tempfile.mkdtemp(prefix="collc-py-")

    def fail(self, msg):
        self.failures.append(f"rank {self.r}: {msg}")

    def expect(self, cond, msg):
        self.checks += 1
        if not cond:
            self.fail(msg)

    def buf(self, shape, name, mem):
        """A destination buffer of `mem` kind: empty, numpy, view or memmap."""
        dt = storage(name)
        if mem == "empty":
            a = self.ctx.empty(shape, name if name in CARRIED else dt)
        elif mem == "numpy":
            a = np.empty(shape, dt)
        elif mem == "view":  # inside a bigger registered array, at an odd offset
            big = np.empty(int(np.prod(shape)) + 3, dt)
            a = big[3:].reshape(shape)
        else:  # a shared file mapping: cannot be registered, goes through a copy
            self.files += 1
            path = os.path.join(self.tmp, f"m{self.files}")
            a = np.memmap(path, dt, "w+", shape=shape)
        a.view(np.uint8)[...] = 0xA5  # poison: a result must overwrite it
        return a

    def filled(self, data, name, mem):
        a = self.buf(data.shape, name, mem)
        a[...] = data
        return a

    def wait(self, h, how):
        if h is None:
            return
        if how == "poll":
            t0 = time.monotonic()
            while not h.is_completed():
                if time.monotonic() - t0 > 30:
                    raise RuntimeError("is_completed() stayed False for 30 s")
            self.expect(h.wait() is True, "wait() after is_completed() is not True")
        else:
            self.expect(h.wait(timeout=30) is True, "wait(timeout=30) did not finish")
            self.expect(h.is_completed() is True, "is_completed() after wait() is not True")

    def check_close(self, got, name, ref, tol, what):
        g = decode(got.reshape(-1), name)
        ok = (g == ref) if not np.any(tol) else (np.abs(g - ref) <= tol)
        bad = np.flatnonzero(~ok)
        self.expect(bad.size == 0,
                    f"{what}: {bad.size} of {g.size} wrong, first [{bad[0] if bad.size else 0}]"
                    f" = {g[bad[0]] if bad.size else 0!r}, expected "
                    f"{ref[bad[0]] if bad.size else 0!r} (tol {tol[bad[0]] if bad.size else 0})")

    def check_bits(self, got, want, what):
        eq = got.reshape(-1).view(np.uint8) == want.reshape(-1).view(np.uint8)
        self.expect(bool(eq.all()), f"{what}: {int((~eq).sum())} bytes differ")

    def case(self, coll, name, op, count, mem, mode):
        """One collective; mode: block, async (wait) or poll (is_completed)."""
        self.tag += 1
        tag, n, r, c = self.tag, self.n, self.r, self.comm
        dt = name if name in CARRIED else None
        asy = mode != "block"
        what = f"{coll} {name} {op or ''} count {count} {mem} {mode}"
        red = op or "sum"
        if coll == "all_reduce":
            ins = [gen(name, red, count, self.seed, q, tag) for q in range(n)]
            x = self.filled(ins[r], name, mem)
            out = None if tag % 2 else self.buf(count, name, mem)
            self.wait(c.all_reduce(x, op, out, dtype=dt, async_op=asy), mode)
            ref, tol = reference(ins, name, red)
            self.check_close(x if out is None else out, name, ref, tol, what)
            if out is not None:
                self.check_bits(x, ins[r], what + " (input kept)")
        elif coll == "reduce_scatter":
            ins = [gen(name, red, count * n, self.seed, q, tag) for q in range(n)]
            x = self.filled(ins[r], name, mem)
            out = self.buf(count, name, mem)
            self.wait(c.reduce_scatter(x, out, op, dtype=dt, async_op=asy), mode)
            ref, tol = reference([a[r * count:(r + 1) * count] for a in ins], name, red)
            self.check_close(out, name, ref, tol, what)
        elif coll == "reduce":
            root = tag % n
            ins = [gen(name, red, count, self.seed, q, tag) for q in range(n)]
            x = self.filled(ins[r], name, mem)
            out = None if tag % 2 else self.buf(count, name, mem)
            self.wait(c.reduce(x, out, op, root=root, dtype=dt, async_op=asy), mode)
            if r == root:
                ref, tol = reference(ins, name, red)
                self.check_close(x if out is None else out, name, ref, tol, what)
            else:
                self.check_bits(x, ins[r], what + " (non-root input kept)")
        elif coll == "all_gather":
            ins = [gen(name, "sum", count, self.seed, q, tag) for q in range(n)]
            x = self.filled(ins[r], name, mem)
            out = self.buf((n, count), name, mem)
            self.wait(c.all_gather(x, out, dtype=dt, async_op=asy), mode)
            self.check_bits(out, np.stack(ins), what)
        elif coll == "broadcast":
            root = tag % n
            data = gen(name, "sum", count, self.seed, root, tag)
            x = self.filled(data, name, mem) if r == root else self.buf(count, name, mem)
            self.wait(c.broadcast(x, root=root, dtype=dt, async_op=asy), mode)
            self.check_bits(x, data, what)
        elif coll == "all_to_all":
            ins = [gen(name, "sum", count * n, self.seed, q, tag) for q in range(n)]
            x = self.filled(ins[r].reshape(n, count), name, mem)
            out = self.buf((n, count), name, mem)
            self.wait(c.all_to_all(x, out, dtype=dt, async_op=asy), mode)
            want = np.stack([ins[q][r * count:(r + 1) * count] for q in range(n)])
            self.check_bits(out, want, what)
        elif coll == "send_recv":  # a ring: send to the next rank, receive from the previous
            nxt, prv = (r + 1) % n, (r - 1) % n
            x = self.filled(gen(name, "sum", count, self.seed, r, tag), name, mem)
            y = self.buf(count, name, mem)
            hs = c.send(x, nxt, dtype=dt, async_op=True)
            hr = c.recv(y, prv, dtype=dt, async_op=asy)
            self.wait(hr, mode)
            self.wait(hs, "async")
            self.check_bits(y, gen(name, "sum", count, self.seed, prv, tag), what)

    def run_all(self):
        mems = ["empty", "numpy", "view"]
        modes = ["block", "async", "poll"]
        k = 0
        for coll in ["all_reduce", "reduce_scatter", "reduce"]:
            for name in DTYPES:
                for op in OPS:
                    k += 1
                    count = [1, 7, 100, 1000][k % 4]
                    self.case(coll, name, op, count, mems[k % 3], modes[k % 3])
        for coll in ["all_gather", "broadcast", "all_to_all", "send_recv"]:
            for name in DTYPES:
                k += 1
                self.case(coll, name, None, [1, 5, 300][k % 3], mems[k % 3], modes[k % 3])
        # Arrays that cannot be registered travel through a copy in collc memory.
        for coll in ["all_reduce", "all_gather", "broadcast", "reduce_scatter"]:
            self.case(coll, "float32", "sum", 64, "memmap", "block")
            self.case(coll, "int32", "max", 64, "memmap", "async")
        # ctx.empty arrays of several shapes, and the same registered array again (cached).
        x = np.ones((4, 8), np.float64)
        for _ in range(3):
            self.comm.all_reduce(x)
        self.expect(bool((x == self.n**3).all()), "repeated all_reduce on one array")

    def errors(self):
        collc, c, n = self.collc, self.comm, self.n
        x = self.ctx.empty(16, np.float32)
        x[:] = 1
        for what, call in [
            ("broadcast root nranks", lambda: c.broadcast(x, root=n)),
            ("reduce root -1", lambda: c.reduce(x, root=-1)),
            ("send to peer nranks", lambda: c.send(x, n)),
        ]:
            try:
                call()
                self.fail(f"{what}: no error")
            except collc.Error as e:
                self.expect(e.errno == 22 and e.name == "EINVAL" and "EINVAL" in str(e)
                            and isinstance(e, OSError), f"{what}: {e!r}")
        # Counts that differ between ranks: EINVAL on every rank, the communicator lives on.
        y = self.ctx.empty(10 + self.r, np.float32)
        y[:] = 1
        try:
            c.all_reduce(y)
            self.fail("mismatched counts: no error")
        except collc.Error as e:
            self.expect(e.errno == 22, f"mismatched counts: {e!r}")
        c.all_reduce(x)
        self.expect(bool((x == n).all()), "all_reduce after the mismatch")

        # Argument errors raise before any C call.
        real = collc._C

        class Spy:
            calls = []

            def __getattr__(self, k):
                Spy.calls.append(k)
                return getattr(real, k)

        f32 = np.zeros(8, np.float32)
        bad = [
            ("bool array", TypeError, lambda: c.all_reduce(np.zeros(8, bool))),
            ("complex array", TypeError, lambda: c.all_reduce(np.zeros(8, np.complex64))),
            ("list", TypeError, lambda: c.all_reduce([1.0, 2.0])),
            ("big-endian", TypeError, lambda: c.all_reduce(np.zeros(8, ">f4"))),
            ("bfloat16 on float32", TypeError, lambda: c.all_reduce(f32, dtype="bfloat16")),
            ("dtype= disagrees", TypeError, lambda: c.all_reduce(f32, dtype="int32")),
            ("out dtype", TypeError, lambda: c.all_reduce(f32, out=np.zeros(8, np.float64))),
            ("gather out dtype", TypeError,
             lambda: c.all_gather(f32, np.zeros(8 * n, np.int32))),
            ("root float", TypeError, lambda: c.broadcast(f32, root=0.0)),
            ("unknown op", ValueError, lambda: c.all_reduce(f32, op="xor")),
            ("strided", ValueError, lambda: c.all_reduce(np.zeros(16, np.float32)[::2])),
            ("read-only", ValueError, lambda: c.all_reduce(np.frombuffer(bytes(32), np.float32))),
            ("out size", ValueError, lambda: c.all_reduce(f32, out=np.zeros(9, np.float32))),
            ("gather out size", ValueError, lambda: c.all_gather(f32, np.zeros(8, np.float32))),
            ("scatter in size", ValueError,
             lambda: c.reduce_scatter(np.zeros(8 * n + 1, np.float32), f32)),
            ("alltoall overlap", ValueError, lambda: c.all_to_all(f32[:4 * n], f32[:4 * n])),
            ("alltoall size", ValueError,
             lambda: c.all_to_all(np.zeros(n * 4 + 1, np.float32),
                                  np.zeros(n * 4 + 1, np.float32))),
            ("stream= on numpy", TypeError, lambda: c.all_reduce(f32, stream=0)),
            ("stream= on numpy broadcast", TypeError, lambda: c.broadcast(f32, stream=0)),
            ("stream= on numpy recv", TypeError, lambda: c.recv(f32, 0, stream=0)),
        ]
        collc._C = Spy()
        try:
            for what, exc, call in bad:
                Spy.calls.clear()
                try:
                    call()
                    self.fail(f"{what}: no error")
                except exc as e:
                    self.expect(not Spy.calls, f"{what}: {exc.__name__} ({e}) after C calls "
                                f"{Spy.calls}")
                except Exception as e:  # noqa: BLE001: report whatever it was
                    self.fail(f"{what}: {type(e).__name__}: {e}, expected {exc.__name__}")
        finally:
            collc._C = real

    def timeouts_and_abort(self, comm2):
        c = self.comm
        c.set_timeout(5000)
        c.set_timeout(-1)
        try:
            c.set_timeout(-2)
            self.fail("set_timeout(-2): no error")
        except self.collc.Error as e:
            self.expect(e.name == "EINVAL", f"set_timeout(-2): {e!r}")
        # wait(timeout) runs out while the other ranks hold back (they wait for rank 0's
        # go on comm2); the handle stays usable.
        x = self.ctx.empty(4, np.int64)
        x[:] = self.r
        go = np.zeros(1, np.int32)
        if self.r == 0:
            h = c.all_reduce(x, async_op=True)
            self.expect(h.wait(timeout=0.05) is False, "wait(timeout) with late peers")
            self.expect(h.is_completed() is False, "is_completed() with late peers")
            go[0] = 1
            comm2.broadcast(go, root=0)
            self.expect(h.wait(timeout=30) is True, "wait after the late peers came")
        else:
            comm2.broadcast(go, root=0)
            self.expect(go[0] == 1, "the go from rank 0")
            c.all_reduce(x)
        self.expect(bool((x == sum(range(self.n))).all()), "late all_reduce result")

    def abort(self, comm2):
        """Rank 0 aborts comm2: every rank's collective on it ends with ECANCELED."""
        if self.r == 0:
            comm2.abort()
        v = np.ones(4, np.float32)
        try:
            comm2.all_reduce(v)
            self.fail("all_reduce on an aborted communicator: no error")
        except self.collc.Error as e:
            self.expect(e.name == "ECANCELED", f"all_reduce on an aborted communicator: {e!r}")


    def torch_cpu(self):
        """CPU torch tensors take the host path: views of the tensors' memory."""
        try:
            import torch
        except ImportError:
            if self.r == 0:
                print("torch is not installed: the CPU tensor cases are skipped", flush=True)
            return
        c, n, r = self.comm, self.n, self.r
        for name, tdt in (("float32", torch.float32), ("int64", torch.int64),
                          ("bfloat16", torch.bfloat16), ("float64", torch.float64)):
            for op in ("sum", "max"):
                self.tag += 1
                ins = [gen(name, op, 37, self.seed, q, self.tag) for q in range(n)]
                x = torch.from_numpy(ins[r].view(np.int16).copy()).view(tdt) \
                    if name == "bfloat16" else torch.from_numpy(ins[r].copy())
                c.all_reduce(x, op=op)
                got = x.view(torch.int16).numpy().view(np.uint16) if name == "bfloat16" \
                    else x.numpy()
                ref, tol = reference(ins, name, op)
                self.check_close(got, name, ref, tol, f"torch CPU all_reduce {name} {op}")
        self.tag += 1
        ins = [gen("float32", "sum", 5, self.seed, q, self.tag) for q in range(n)]
        out = torch.empty(5 * n)
        h = c.all_gather(torch.from_numpy(ins[r]), out, async_op=True)
        self.wait(h, "wait")
        self.check_bits(out.numpy(), np.concatenate(ins), "torch CPU all_gather")
        for what, exc, call in [
            ("dtype= on a tensor", TypeError,
             lambda: c.all_reduce(torch.zeros(4), dtype="float32")),
            ("tensor and numpy", TypeError,
             lambda: c.all_reduce(torch.zeros(4), out=np.zeros(4, np.float32))),
            ("stream= on a CPU tensor", TypeError,
             lambda: c.all_reduce(torch.zeros(4), stream=0)),
            ("strided tensor", ValueError, lambda: c.all_reduce(torch.zeros(8)[::2])),
            ("complex tensor", TypeError,
             lambda: c.all_reduce(torch.zeros(4, dtype=torch.complex64))),
        ]:
            try:
                call()
                self.fail(f"{what}: no error")
            except exc:
                self.checks += 1
            except Exception as e:  # noqa: BLE001: report whatever it was
                self.fail(f"{what}: {type(e).__name__}: {e}, expected {exc.__name__}")


def rank_main(a):
    sys.path.insert(0, PKG)
    import collc

    with collc.connect(a.socket) as ctx:
        comm = ctx.comm(bytes.fromhex(a.uid), a.nranks, a.rank)
        t = Rank(collc, comm, ctx, a.seed)
        assert comm.rank == a.rank and comm.nranks == a.nranks, repr(comm)
        t.run_all()
        t.errors()
        # A host communicator has no stream-ordered collectives, so no async error.
        t.expect(comm.check_async_error() is None, "check_async_error on a host communicator")
        # Nor a stream path: EINVAL, with collc's message.
        try:
            t.fail(f"stream_path of a host communicator: {comm.stream_path!r}, no error")
        except collc.Error as e:
            t.expect(e.name == "EINVAL", f"stream_path of a host communicator: {e!r}")
        # Groups nest and end cleanly; an end without a start is EINVAL.
        with collc.group():
            with collc.group():
                comm.all_reduce(np.ones(2, np.float32))
        t.checks += 1
        try:
            collc._check(collc._C.collc_group_end(), "collc_group_end")
            t.fail("collc_group_end without a start: no error")
        except collc.Error as e:
            t.expect(e.name == "EINVAL", f"collc_group_end without a start: {e!r}")
        t.torch_cpu()
        # A second communicator on the same context.
        comm2 = ctx.comm(bytes.fromhex(a.uid2), a.nranks, a.rank)
        v = np.full(3, a.rank + 1, np.int32)
        comm2.all_reduce(v, op="max")
        t.expect(bool((v == a.nranks).all()), "second communicator")
        t.timeouts_and_abort(comm2)
        t.abort(comm2)
        comm2.destroy()
        try:
            comm2.all_reduce(v)
            t.fail("all_reduce after destroy: no error")
        except ValueError:
            t.checks += 1
        # The first communicator is unaffected by the abort of the second.
        v[:] = 1
        comm.all_reduce(v)
        t.expect(bool((v == a.nranks).all()), "first communicator after the second's abort")
        keep = ctx.empty(8, np.uint8)
        keep[:] = 7
    # Arrays from ctx.empty outlive close(); then nothing is left.
    t.expect(bool((keep == 7).all()), "ctx.empty array after close")
    del keep
    for f in t.failures:
        print("FAIL", f, flush=True)
    print(f"rank {a.rank}: {t.checks} checks, {len(t.failures)} failures", flush=True)
    return 1 if t.failures else 0


def wait_daemon(collc, sock, proc):
    t0 = time.monotonic()
    while True:
        if proc.poll() is not None:
            sys.exit(f"FAIL: collcd exited with {proc.returncode} before it accepted connections")
        try:
            return collc.connect(sock)
        except collc.Error:
            if time.monotonic() - t0 > 20:
                sys.exit(f"FAIL: collcd did not accept connections on {sock} within 20 s")
            time.sleep(0.01)


def main_test(a):
    os.environ["COLLC_LIB"] = a.lib
    env = dict(os.environ, PYTHONPATH=PKG, COLLC_LIB=a.lib, PYTHONDONTWRITEBYTECODE="1")
    fails = 0
    # Without a loadable library the import says what it tried.
    p = subprocess.run([sys.executable, "-c", "import collc"], env=dict(env, COLLC_LIB="/nonexistent/libcollc.so.1"),
                       capture_output=True, text=True, timeout=60)
    if p.returncode == 0 or "/nonexistent/libcollc.so.1" not in p.stderr or "COLLC_LIB" not in p.stderr:
        print("FAIL: import with a bad COLLC_LIB:", p.returncode, p.stderr[-500:])
        fails += 1
    sys.path.insert(0, PKG)
    import collc

    with tempfile.TemporaryDirectory(prefix="collc-pytest-") as tmp:
        sock = os.path.join(tmp, "collcd.sock")
        try:
            collc.connect(sock)
            print("FAIL: connect without collcd succeeded")
            fails += 1
        except collc.Error as e:
            print(f"connect without collcd: {e}")
        log = open(os.path.join(tmp, "collcd.log"), "w")
        d = subprocess.Popen([a.collcd, "--socket", sock, "--foreground", "--backend", "cpu"],
                             stdout=log, stderr=subprocess.STDOUT)
        try:
            ctx = wait_daemon(collc, sock, d)
            uid, uid2 = ctx.unique_id(), ctx.unique_id()
            assert isinstance(uid, bytes) and len(uid) == 128 and uid != uid2
            ranks = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--nranks",
                                       str(a.nranks), "--socket", sock, "--uid", uid.hex(),
                                       "--uid2", uid2.hex(), "--seed", str(a.seed)], env=env)
                     for r in range(a.nranks)]
            t0 = time.monotonic()
            for r, p in enumerate(ranks):
                try:
                    rc = p.wait(timeout=max(1, RANK_TIMEOUT_S - (time.monotonic() - t0)))
                except subprocess.TimeoutExpired:
                    p.kill()
                    rc = "killed after a timeout"
                if rc != 0:
                    print(f"FAIL: rank {r}: exit {rc}")
                    fails += 1
            ctx.close()
        finally:
            d.terminate()
            try:
                d.wait(timeout=10)
            except subprocess.TimeoutExpired:
                d.kill()
            log.close()
            if fails:
                print("collcd log (tail):")
                print(open(os.path.join(tmp, "collcd.log")).read()[-3000:])
    print(f"{a.nranks} ranks, seed {a.seed}: {'FAIL' if fails else 'ok'}")
    return 1 if fails else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--collcd")
    ap.add_argument("--lib")
    ap.add_argument("--nranks", type=int, default=3)
    ap.add_argument("--seed", type=int, default=int(os.environ.get("COLLC_TEST_SEED", "0")) or
                    int(time.time()) % 100000)
    ap.add_argument("--rank", type=int)
    ap.add_argument("--socket")
    ap.add_argument("--uid")
    ap.add_argument("--uid2")
    a = ap.parse_args()
    if a.rank is not None:
        try:
            return rank_main(a)
        except Exception:  # noqa: BLE001: a rank reports and fails
            traceback.print_exc()
            print(f"FAIL rank {a.rank} (seed {a.seed})", flush=True)
            return 1
    if not a.collcd or not a.lib:
        ap.error("--collcd and --lib are needed")
    print(f"seed {a.seed} (COLLC_TEST_SEED={a.seed} replays)")
    return main_test(a)


if __name__ == "__main__":
    sys.exit(main())
