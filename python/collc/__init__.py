# SPDX-License-Identifier: MIT
"""collc from Python: collectives on numpy arrays and torch tensors through libcollc (ctypes).

    import collc, numpy as np
    with collc.connect() as ctx:                  # $COLLC_SOCKET or collcd's default
        uid = ctx.unique_id()                     # on one rank; pass the bytes to the others
        comm = ctx.comm(uid, nranks, rank)        # host communicator (device=-1)
        x = ctx.empty(1024, np.float32)           # collc memory: no registration
        x[:] = rank
        comm.all_reduce(x)                        # in place, op="sum"
        h = comm.broadcast(x, root=0, async_op=True)
        h.wait()

Other C-contiguous arrays are registered with collcd on first use (cached per
allocation until it is freed or ctx.close()); memory that cannot be registered
(read-only buffers, file mappings, pages shared with a registration) goes
through a copy in collc memory. Errors from collc raise collc.Error (an
OSError with errno, the errno name and collc's message); bad arguments raise
TypeError or ValueError before anything reaches libcollc.

Registration re-backs the array's pages with shared memory: do not fork (or
use multiprocessing's "fork" start method) after registering, or parent and
child would share those pages.

torch tensors: CPU tensors go through a host communicator like numpy arrays
(a view of the same memory). CUDA tensors need a communicator of their device
(ctx.comm(uid, nranks, rank, device=N)) and use the stream-ordered forms:

    comm.all_reduce(t)                            # enqueued on the current stream; returns
    h = comm.all_reduce(t, async_op=True, stream=s)
    h.wait()                                      # the current stream waits for it (not the host)

The device allocation behind a tensor (the caching allocator's segment) is
registered with collcd on first use and cached. Inside torch.cuda.graph
capture the call records into the graph; a tensor not registered yet raises
there (run the collective once before capturing). Errors of stream-ordered
collectives surface as collc.Error at the next call, wait() or
comm.check_async_error(). One thread driving several ranks on a GPU groups
their dependent calls (a send and its receive) in `with collc.group():`.
`import collc.torch` registers the torch.distributed backend "collc".
"""

import ctypes
import errno as _errno
import math
import sys
import threading
import time
import weakref

import numpy as np

from . import _cuda, _lib

__all__ = ["Error", "Context", "Comm", "Request", "connect", "dtype_size", "group", "library_path",
           "SUM", "PROD", "MAX", "MIN", "AVG"]

_C, library_path = _lib.load()

# collc_dtype and collc_redop, as include/collc.h numbers them.
INT8, UINT8, INT32, UINT32, INT64, UINT64 = 0, 1, 2, 3, 4, 5
FLOAT16, BFLOAT16, FLOAT32, FLOAT64, FLOAT8_E4M3, FLOAT8_E5M2 = 6, 7, 8, 9, 10, 11
SUM, PROD, MAX, MIN, AVG = 0, 1, 2, 3, 4

_NP_DTYPES = {
    np.dtype(np.int8): INT8,
    np.dtype(np.uint8): UINT8,
    np.dtype(np.int32): INT32,
    np.dtype(np.uint32): UINT32,
    np.dtype(np.int64): INT64,
    np.dtype(np.uint64): UINT64,
    np.dtype(np.float16): FLOAT16,
    np.dtype(np.float32): FLOAT32,
    np.dtype(np.float64): FLOAT64,
}
# numpy has no bfloat16 or fp8: their bits travel in arrays of the carrier
# type, named by an explicit dtype= argument.
_CARRIED = {
    "bfloat16": (BFLOAT16, np.dtype(np.uint16)),
    "float8_e4m3": (FLOAT8_E4M3, np.dtype(np.uint8)),
    "float8_e5m2": (FLOAT8_E5M2, np.dtype(np.uint8)),
}
_OPS = {"sum": SUM, "prod": PROD, "max": MAX, "min": MIN, "avg": AVG}

_WAIT_SLICE_MS = 200  # a blocking wait returns to Python this often (Ctrl-C works)


class Error(OSError):
    """A collc call failed: .errno, .name (e.g. "EINVAL") and collc's message."""

    def __init__(self, err, what):
        err = abs(int(err))
        self.name = _errno.errorcode.get(err, f"E{err}")
        msg = _C.collc_strerror(-err)
        msg = msg.decode(errors="replace") if msg else "unknown error"
        self.what = what
        super().__init__(err, f"{what}: {self.name}: {msg}")


def _check(r, what):
    if r < 0:
        raise Error(r, what)
    return r


def dtype_size(dtype):
    """Bytes of one element of a collc dtype (a name or a numpy dtype)."""
    if isinstance(dtype, str) and dtype in _CARRIED:
        return int(_C.collc_dtype_size(_CARRIED[dtype][0]))
    return int(_C.collc_dtype_size(_NP_DTYPES[np.dtype(dtype)]))


def _int(v, what):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{what} must be an int, not {type(v).__name__}")
    return int(v)


def _collc_dtype(arr, dtype, what):
    """The collc dtype of arr, checking an explicit dtype= against it."""
    if dtype is None:
        c = _NP_DTYPES.get(arr.dtype)
        if c is None or not arr.dtype.isnative:
            raise TypeError(f"{what}: collc has no dtype for numpy {arr.dtype!s} (use int8, "
                            "uint8, int32, uint32, int64, uint64, float16, float32, float64, "
                            "or dtype='bfloat16'/'float8_e4m3'/'float8_e5m2' on uint16/uint8 "
                            "arrays)")
        return c
    if isinstance(dtype, str) and dtype in _CARRIED:
        c, carrier = _CARRIED[dtype]
        if arr.dtype != carrier:
            raise TypeError(f"{what}: dtype={dtype!r} needs a {carrier} array holding the bits, "
                            f"not {arr.dtype}")
        return c
    try:
        want = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{what}: unknown dtype {dtype!r}") from None
    if want != arr.dtype:
        raise TypeError(f"{what}: dtype={dtype!r} but the array is {arr.dtype}")
    return _collc_dtype(arr, None, what)


def _array(x, what, writable):
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{what} must be a numpy.ndarray, not {type(x).__name__}")
    if not x.flags.c_contiguous:
        raise ValueError(f"{what} must be C-contiguous (numpy.ascontiguousarray makes a copy)")
    if writable and not x.flags.writeable:
        raise ValueError(f"{what} is read-only but collc writes the result into it")
    return x


def _is_tensor(x):
    t = sys.modules.get("torch")  # no tensor exists unless torch was imported
    return t is not None and x is not None and isinstance(x, t.Tensor)


_tensor_mod = None


def _tensors():
    """The torch half of the package (collc/_tensor.py), imported on the first tensor."""
    global _tensor_mod
    if _tensor_mod is None:
        from . import _tensor

        _tensor.bind(sys.modules[__name__])
        _tensor_mod = _tensor
    return _tensor_mod


def _no_stream(stream, what):
    if stream is not None:
        raise TypeError(f"{what}: stream= is for CUDA tensors, not numpy arrays")


def _op(op, what):
    if isinstance(op, str):
        v = _OPS.get(op.lower())
        if v is None:
            raise ValueError(f"{what}: unknown op {op!r} (one of {', '.join(_OPS)})")
        return v
    v = _int(op, f"{what}: op")
    if v not in _OPS.values():
        raise ValueError(f"{what}: unknown op {op!r}")
    return v


class _Alloc:
    """Owns one collc_mem_alloc block; the base of the arrays ctx.empty() returns."""

    def __init__(self, ctx, ptr, size):
        self.ctx = ctx
        self.ptr = ptr
        self.size = size
        self.__array_interface__ = {"shape": (size,), "typestr": "|u1",
                                    "data": (ptr, False), "version": 3}

    def __del__(self):
        ctx, self.ctx = getattr(self, "ctx", None), None
        try:
            if ctx is not None:
                ctx._free(self.ptr)
        except Exception:  # noqa: BLE001: interpreter shutdown; the process exit frees it
            pass


class Request:
    """A collective in flight (async_op=True): wait() or poll is_completed()."""

    def __init__(self, comm, req, keep, finish, what):
        self._comm = comm
        self._req = req
        self._keep = keep  # the arrays collcd reads and writes stay alive
        self._finish = finish
        self._what = what
        self._done = False
        self._status = 0

    def _complete(self, status):
        self._done = True
        self._status = status
        self._comm._ctx._pending.pop(self._req, None)
        if status >= 0 and self._finish is not None:
            self._finish()
        self._keep = self._finish = None

    def _result(self):
        if self._status < 0:
            raise Error(self._status, self._what)
        return True

    def wait(self, timeout=None):
        """Waits for the collective: True once done; False if timeout (seconds) ran out."""
        if self._done:
            return self._result()
        ctx = self._comm._ctx._live("wait")
        end = None if timeout is None else time.monotonic() + max(0.0, float(timeout))
        while True:
            ms = _WAIT_SLICE_MS
            if end is not None:
                ms = min(ms, max(0, math.ceil((end - time.monotonic()) * 1000.0)))
            r = _C.collc_wait(ctx, self._req, ms)
            if r != -_errno.EAGAIN:
                self._complete(r)
                return self._result()
            if end is not None and time.monotonic() >= end:
                return False

    def is_completed(self):
        """True once done (raises collc.Error if it failed), False while pending."""
        if self._done:
            return self._result()
        r = _C.collc_test(self._comm._ctx._live("is_completed"), self._req)
        if r == 0:
            return False
        self._complete(0 if r == 1 else r)
        return self._result()


class Context:
    """One connection to collcd (collc.connect())."""

    def __init__(self, socket=None):
        if socket is not None and not isinstance(socket, (str, bytes)):
            raise TypeError("socket must be a path (str or bytes) or None")
        if isinstance(socket, str):
            socket = socket.encode()
        h = ctypes.c_void_p()
        _check(_C.collc_connect(socket, ctypes.byref(h)), "collc_connect")
        self._h = h.value
        self._closed = False
        self._lock = threading.RLock()
        self._regs = {}  # start -> [end, finalizer]: registrations of ours
        self._allocs = {}  # ptr -> size: live ctx.empty() blocks
        self._comms = weakref.WeakSet()
        self._pending = {}  # req -> Request: keeps async buffers alive
        self._dev = None  # _cuda.DevRegs: device allocations registered for CUDA tensors

    def _live(self, what):
        if self._closed:
            raise ValueError(f"{what}: the collc context is closed")
        return self._h

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if getattr(self, "_h", None) and not getattr(self, "_closed", True):
                self.close()
        except Exception:  # noqa: BLE001: interpreter shutdown
            pass

    @property
    def event_fd(self):
        """A file descriptor that is readable when completions wait (for select/poll)."""
        return _check(_C.collc_event_fd(self._live("event_fd")), "collc_event_fd")

    def close(self):
        """Destroys this context's communicators, deregisters and disconnects.

        Arrays from empty() stay valid after close(): the connection ends
        when the last of them is gone.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for c in list(self._comms):
                c._release()
            for start, (end, fin) in list(self._regs.items()):
                fin.detach()
                _C.collc_mem_deregister(self._h, start)
            self._regs.clear()
            if self._dev is not None:
                self._dev.clear()
            self._pending.clear()
            if not self._allocs:
                self._disconnect()

    def _devregs(self):
        if self._dev is None:
            with self._lock:
                if self._dev is None:
                    self._dev = _cuda.DevRegs(self._dev_register, self._dev_deregister)
        return self._dev

    def _dev_register(self, base, size, device):
        r = _C.collc_mem_register(self._live("register"), base, size, device)
        if r == -_errno.EEXIST:
            raise Error(r, f"collc_mem_register of the device allocation {base:#x} ({size} "
                           "bytes): it overlaps memory registered by other means")
        _check(r, "collc_mem_register (device memory; CUDA IPC: not VMM memory such as "
                  "PYTORCH_CUDA_ALLOC_CONF=expandable_segments)")

    def _dev_deregister(self, base):
        if self._h:
            _C.collc_mem_deregister(self._h, base)

    def _disconnect(self):
        if self._h:
            _C.collc_disconnect(self._h)
            self._h = None

    def unique_id(self):
        """A new communicator id (128 bytes) to hand to every rank."""
        uid = _lib.UniqueId()
        _check(_C.collc_get_unique_id(self._live("unique_id"), ctypes.byref(uid)),
               "collc_get_unique_id")
        return bytes(uid.bytes)

    def comm(self, uid, nranks, rank, device=-1):
        """Joins rank `rank` of `nranks`; blocks until every rank joined."""
        if not isinstance(uid, (bytes, bytearray)) or len(uid) != 128:
            raise TypeError("uid must be the 128 bytes ctx.unique_id() returned")
        nranks, rank = _int(nranks, "nranks"), _int(rank, "rank")
        device = _int(device, "device")
        if nranks < 1 or not 0 <= rank < nranks:
            raise ValueError(f"rank {rank} of nranks {nranks}: need 0 <= rank < nranks")
        u = _lib.UniqueId.from_buffer_copy(bytes(uid))
        h = ctypes.c_void_p()
        _check(_C.collc_comm_init(self._live("comm"), ctypes.byref(u), nranks, rank, device,
                                  ctypes.byref(h)), "collc_comm_init")
        c = Comm(self, h.value, device)
        self._comms.add(c)
        return c

    def empty(self, shape, dtype=np.float32):
        """An uninitialized array in collc memory (collcd maps it: nothing to register).

        dtype "bfloat16" gives uint16 and "float8_e4m3"/"float8_e5m2" uint8
        arrays: pass the same dtype= to the collectives.
        """
        if isinstance(dtype, str) and dtype in _CARRIED:
            dt = _CARRIED[dtype][1]
        else:
            dt = np.dtype(dtype)
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if n < 0:
            raise ValueError(f"empty: negative shape {shape}")
        p = ctypes.c_void_p()
        size = max(n, 1)  # collc_mem_alloc wants at least one byte
        with self._lock:
            _check(_C.collc_mem_alloc(self._live("empty"), size, -1, ctypes.byref(p)),
                   "collc_mem_alloc")
            self._allocs[p.value] = size
        owner = _Alloc(self, p.value, size)
        return np.asarray(owner)[:n].view(dt).reshape(shape)

    def _free(self, ptr):
        with self._lock:
            if self._allocs.pop(ptr, None) is None or not self._h:
                return
            _C.collc_mem_free(self._h, ptr)
            if self._closed and not self._allocs:
                self._disconnect()

    def _covered(self, a, b):
        for p, size in self._allocs.items():
            if p <= a and b <= p + size:
                return True
        for start, (end, _) in self._regs.items():
            if start <= a and b <= end:
                return True
        return False

    def _deregister(self, start):
        with self._lock:
            if self._regs.pop(start, None) is not None and not self._closed:
                _C.collc_mem_deregister(self._h, start)

    def _mapped(self, arr):
        """True when collcd sees arr's bytes (registering its allocation if needed);
        False when arr's memory cannot be registered (it must be staged)."""
        a = arr.ctypes.data
        b = a + arr.nbytes
        with self._lock:
            self._live("collective")
            if self._covered(a, b):
                return True
            # Register the whole allocation arr lies in, so its other views hit the cache.
            root = arr
            while isinstance(root.base, np.ndarray):
                root = root.base
            ra, rb = root.ctypes.data, root.ctypes.data + root.nbytes
            if not (root.flags.c_contiguous or root.flags.f_contiguous) or not (
                    ra <= a and b <= rb):
                root, ra, rb = arr, a, b
            r = _C.collc_mem_register(self._h, ra, rb - ra, -1)
            if r in (-_errno.EEXIST, -_errno.EINVAL):
                return False  # not private anonymous memory, or pages shared with another
            _check(r, "collc_mem_register")
            self._regs[ra] = [rb, weakref.finalize(root, self._deregister, ra)]
            return True


class _Staged:
    """Copies arrays collcd cannot map through collc memory for one call."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.back = []  # (user array, staging array) to copy back when done

    def ptr(self, arr, out):
        if arr is None:
            return None, None
        if arr.nbytes == 0 or self.ctx._mapped(arr):
            return arr.ctypes.data, arr
        s = self.ctx.empty(arr.shape, arr.dtype)
        s[...] = arr
        if out:
            self.back.append((arr, s))
        return s.ctypes.data, s

    def finish(self):
        for arr, s in self.back:
            arr[...] = s


class Comm:
    """One rank's handle on a communicator (ctx.comm())."""

    def __init__(self, ctx, handle, device):
        self._ctx = ctx
        self._h = handle
        self.device = device
        self.rank = _C.collc_comm_rank(handle)
        self.nranks = _C.collc_comm_nranks(handle)

    def __repr__(self):
        return f"<collc.Comm rank {self.rank} of {self.nranks}, device {self.device}>"

    def _handle(self, what):
        self._ctx._live(what)
        if self._h is None:
            raise ValueError(f"{what}: the communicator was destroyed")
        return self._h

    def _release(self):
        h, self._h = self._h, None
        if h is not None:
            return _C.collc_comm_destroy(h)
        return 0

    def destroy(self):
        """Leaves the communicator; the handle is gone afterwards."""
        self._handle("destroy")
        self._ctx._comms.discard(self)
        _check(self._release(), "collc_comm_destroy")

    def abort(self):
        """Revokes the communicator for every rank: pending collectives end with ECANCELED."""
        _check(_C.collc_comm_abort(self._handle("abort")), "collc_comm_abort")

    def set_timeout(self, ms):
        """Collectives that wait longer than ms for a rank end with ETIMEDOUT (0: never, -1:
        collcd's op_timeout_ms)."""
        _check(_C.collc_comm_set_timeout(self._handle("set_timeout"), _int(ms, "ms")),
               "collc_comm_set_timeout")

    def check_async_error(self):
        """Raises collc.Error if a stream-ordered collective of this communicator failed
        (the error is sticky, like ncclCommGetAsyncError)."""
        f = getattr(_C, "collc_comm_get_async_error", None)
        if f is not None:
            _check(f(self._handle("check_async_error")), "stream-ordered collective")

    @property
    def stream_path(self):
        """How stream-ordered collectives reach CUDA streams on this communicator's GPU:
        "memops" (stream memory operations, nothing launched) or "kernel" (one tiny kernel
        each, where the driver has no memory operations). Raises collc.Error: EINVAL for a
        host communicator, ENODEV without a CUDA driver."""
        f = getattr(_C, "collc_comm_get_stream_path", None)
        if f is None:
            raise Error(-_errno.EOPNOTSUPP, "stream_path: this libcollc has no stream forms")
        r = _check(f(self._handle("stream_path")), "collc_comm_get_stream_path")
        return {1: "memops", 2: "kernel"}.get(r, str(r))

    @staticmethod
    def _op_code(op, what):
        return _op(op, what)

    @staticmethod
    def _root(root, what):
        return _int(root, f"{what}: root")

    @staticmethod
    def _peer(peer, what):
        return _int(peer, f"{what}: peer")

    def __del__(self):
        ctx = getattr(self, "_ctx", None)
        try:
            if getattr(self, "_h", None) is not None and ctx is not None and not ctx._closed:
                self._release()
        except Exception:  # noqa: BLE001: interpreter shutdown; collcd drops it on disconnect
            pass

    # The collectives: check in Python, map or stage the buffers, submit, wait.
    def _run(self, what, fn, args, bufs, async_op):
        """bufs: (array, is_output) in the order fn takes pointers; args: the rest."""
        h = self._handle(what)
        if self.device != -1:
            raise ValueError(f"{what}: numpy arrays need a host communicator (device=-1)")
        st = _Staged(self._ctx)
        # In place: one buffer for both sides, written back when either side is an output.
        outs = {}
        for arr, out in bufs:
            if arr is not None:
                outs[id(arr)] = outs.get(id(arr), False) or out
        ptrs, keep, seen = [], [], {}
        for arr, _ in bufs:
            if arr is not None and id(arr) not in seen:
                p, k = st.ptr(arr, outs[id(arr)])
                seen[id(arr)] = p
                keep += [arr, k]
            ptrs.append(None if arr is None else seen[id(arr)])
        req = ctypes.c_uint64()
        _check(fn(h, *ptrs, *args, ctypes.byref(req)), what)
        r = Request(self, req.value, keep, st.finish if st.back else None, what)
        self._ctx._pending[req.value] = r
        if async_op:
            return r
        r.wait()
        return None

    def all_reduce(self, x, op="sum", out=None, *, dtype=None, async_op=False, stream=None):
        """Reduces x over all ranks into out (in place into x when out is None)."""
        what = "all_reduce"
        if _is_tensor(x) or _is_tensor(out):
            return _tensors().all_reduce(self, x, op, out, dtype, async_op, stream)
        _no_stream(stream, what)
        x = _array(x, "all_reduce: x", out is None)
        dt = _collc_dtype(x, dtype, what)
        o = _op(op, what)
        if out is None:
            out = x
        else:
            _array(out, "all_reduce: out", True)
            self._same(x, out, what, x.size)
        return self._run(what, _C.collc_allreduce, (x.size, dt, o), [(x, False), (out, True)],
                         async_op)

    def all_gather(self, x, out, *, dtype=None, async_op=False, stream=None):
        """out (nranks * x.size elements) receives every rank's x in rank order."""
        what = "all_gather"
        if _is_tensor(x) or _is_tensor(out):
            return _tensors().all_gather(self, x, out, dtype, async_op, stream)
        _no_stream(stream, what)
        x = _array(x, "all_gather: x", False)
        _array(out, "all_gather: out", True)
        dt = _collc_dtype(x, dtype, what)
        self._same(x, out, what, x.size * self.nranks)
        return self._run(what, _C.collc_allgather, (x.size, dt), [(x, False), (out, True)],
                         async_op)

    def reduce_scatter(self, x, out, op="sum", *, dtype=None, async_op=False, stream=None):
        """Reduces x (nranks * out.size elements); this rank's block lands in out."""
        what = "reduce_scatter"
        if _is_tensor(x) or _is_tensor(out):
            return _tensors().reduce_scatter(self, x, out, op, dtype, async_op, stream)
        _no_stream(stream, what)
        x = _array(x, "reduce_scatter: x", False)
        _array(out, "reduce_scatter: out", True)
        dt = _collc_dtype(x, dtype, what)
        o = _op(op, what)
        self._same(out, x, what, out.size * self.nranks, "x")
        return self._run(what, _C.collc_reduce_scatter, (out.size, dt, o),
                         [(x, False), (out, True)], async_op)

    def broadcast(self, x, root=0, *, dtype=None, async_op=False, stream=None):
        """Copies root's x into every rank's x."""
        what = "broadcast"
        if _is_tensor(x):
            return _tensors().broadcast(self, x, root, dtype, async_op, stream)
        _no_stream(stream, what)
        root = _int(root, "broadcast: root")
        x = _array(x, "broadcast: x", True)
        dt = _collc_dtype(x, dtype, what)
        return self._run(what, _C.collc_broadcast, (x.size, dt, root), [(x, False), (x, True)],
                         async_op)

    def reduce(self, x, out=None, op="sum", root=0, *, dtype=None, async_op=False, stream=None):
        """Reduces x over all ranks into root's out (in place into root's x when out is None)."""
        what = "reduce"
        if _is_tensor(x) or _is_tensor(out):
            return _tensors().reduce(self, x, out, op, root, dtype, async_op, stream)
        _no_stream(stream, what)
        root = _int(root, "reduce: root")
        x = _array(x, "reduce: x", out is None and root == self.rank)
        dt = _collc_dtype(x, dtype, what)
        o = _op(op, what)
        if out is None:
            out = x
        else:
            _array(out, "reduce: out", True)
            self._same(x, out, what, x.size)
        # Only the root's result buffer is written.
        return self._run(what, _C.collc_reduce, (x.size, dt, o, root),
                         [(x, False), (out, root == self.rank)], async_op)

    def all_to_all(self, x, out, *, dtype=None, async_op=False, stream=None):
        """Block p of x (x.size / nranks elements) goes to rank p; out's block r comes from r."""
        what = "all_to_all"
        if _is_tensor(x) or _is_tensor(out):
            return _tensors().all_to_all(self, x, out, dtype, async_op, stream)
        _no_stream(stream, what)
        x = _array(x, "all_to_all: x", False)
        _array(out, "all_to_all: out", True)
        dt = _collc_dtype(x, dtype, what)
        self._same(x, out, what, x.size)
        if x.size % self.nranks:
            raise ValueError(f"all_to_all: x has {x.size} elements, not a multiple of nranks "
                             f"{self.nranks}")
        if x.size and np.shares_memory(x, out):
            raise ValueError("all_to_all: x and out overlap (there is no in-place form)")
        return self._run(what, _C.collc_alltoall, (x.size // self.nranks, dt),
                         [(x, False), (out, True)], async_op)

    def send(self, x, peer, *, dtype=None, async_op=False, stream=None):
        """Sends x to rank peer (matched with its recv in posting order)."""
        what = "send"
        if _is_tensor(x):
            return _tensors().send(self, x, peer, dtype, async_op, stream)
        _no_stream(stream, what)
        peer = _int(peer, "send: peer")
        x = _array(x, "send: x", False)
        dt = _collc_dtype(x, dtype, what)
        return self._run(what, _C.collc_send, (x.size, dt, peer), [(x, False)], async_op)

    def recv(self, x, peer, *, dtype=None, async_op=False, stream=None):
        """Receives into x from rank peer."""
        what = "recv"
        if _is_tensor(x):
            return _tensors().recv(self, x, peer, dtype, async_op, stream)
        _no_stream(stream, what)
        peer = _int(peer, "recv: peer")
        x = _array(x, "recv: x", True)
        dt = _collc_dtype(x, dtype, what)
        return self._run(what, _C.collc_recv, (x.size, dt, peer), [(x, True)], async_op)

    @staticmethod
    def _same(x, other, what, size, name="out"):
        if other.dtype != x.dtype:
            raise TypeError(f"{what}: {name} is {other.dtype} but the other buffer is {x.dtype}")
        if other.size != size:
            raise ValueError(f"{what}: {name} has {other.size} elements, needs {size}")


def connect(socket=None):
    """Connects to collcd: socket path, else $COLLC_SOCKET, else collcd's default."""
    return Context(socket)


class group:
    """with collc.group(): stream-ordered calls of this thread inside the block
    start on their streams at once; their streams' waits for the results are
    enqueued when the outermost block ends (collc_group_start/collc_group_end,
    as ncclGroupStart/ncclGroupEnd). Needed when one thread drives ranks whose
    calls depend on each other (a send and its receive on one GPU). Nests."""

    def __enter__(self):
        _check(_C.collc_group_start(), "collc_group_start")
        return self

    def __exit__(self, *exc):
        r = _C.collc_group_end()
        if exc[0] is None:
            _check(r, "collc_group_end")
        return False
