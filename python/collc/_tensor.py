# SPDX-License-Identifier: MIT
"""torch tensors in collc.Comm's collectives (imported once a tensor is passed).

CPU tensors take the numpy path of a host communicator (a numpy view of the
same memory). CUDA tensors take the stream-ordered forms (collc_*_stream) on
a communicator of their device: the call enqueues on the stream (the current
one by default) and returns; work enqueued after it on that stream sees the
result, as with NCCL. Inside torch.cuda.graph capture the call records into
the graph; nothing here synchronizes with the host or registers memory then.
"""

import ctypes

import numpy as np
import torch

from . import _lib

_C = None  # libcollc, set by bind()
Error = None
_check = None
_streams = False  # libcollc has the stream-ordered forms

_DTYPES = {}
_CARRIED = {}  # torch dtype -> (numpy carrier view dtype, collc dtype name) for CPU tensors


def bind(pkg):
    """Takes libcollc and the package's helpers (no import cycle with __init__)."""
    global _C, Error, _check, _streams
    _C, Error, _check = pkg._C, pkg.Error, pkg._check
    _streams = _lib.has_stream_forms(_C)
    for name, code in (("int8", pkg.INT8), ("uint8", pkg.UINT8), ("int32", pkg.INT32),
                       ("uint32", pkg.UINT32), ("int64", pkg.INT64), ("uint64", pkg.UINT64),
                       ("float16", pkg.FLOAT16), ("bfloat16", pkg.BFLOAT16),
                       ("float32", pkg.FLOAT32), ("float64", pkg.FLOAT64),
                       ("float8_e4m3fn", pkg.FLOAT8_E4M3), ("float8_e5m2", pkg.FLOAT8_E5M2)):
        dt = getattr(torch, name, None)  # uint32/uint64 and fp8 are newer than torch 2.0
        if dt is not None:
            _DTYPES[dt] = code
    _CARRIED[torch.bfloat16] = (torch.int16, np.uint16, "bfloat16")
    for name, carried in (("float8_e4m3fn", "float8_e4m3"), ("float8_e5m2", "float8_e5m2")):
        dt = getattr(torch, name, None)
        if dt is not None:
            _CARRIED[dt] = (torch.uint8, np.uint8, carried)


def _raw_stream(device):
    get = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if get is not None:
        return get(device)
    return torch.cuda.current_stream(device).cuda_stream


def stream_object(handle, device):
    """A torch stream object for a raw handle (events are recorded on objects)."""
    if handle == 0:
        return torch.cuda.default_stream(device)
    return torch.cuda.ExternalStream(handle, device=torch.device("cuda", device))


def _stream_arg(comm, stream, what):
    """(raw handle, stream object or None) of the stream= argument."""
    if stream is None:
        return _raw_stream(comm.device), None
    if isinstance(stream, torch.cuda.Stream):
        if stream.device.index != comm.device:
            raise ValueError(f"{what}: the stream is on {stream.device} but the communicator "
                             f"is on cuda:{comm.device}")
        return stream.cuda_stream, stream
    if isinstance(stream, int) and not isinstance(stream, bool) and stream >= 0:
        return stream, None  # a cudaStream_t from elsewhere
    raise TypeError(f"{what}: stream must be a torch.cuda.Stream, a cudaStream_t as an int, "
                    f"or None (the current stream), not {type(stream).__name__}")


def _tensor(t, what, name):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{what}: {name} must be a torch.Tensor like the other buffer, "
                        f"not {type(t).__name__}")
    return t


def _cpu_view(t, what, name):
    """(numpy view of t, dtype= for collc) of a CPU tensor."""
    if not t.is_contiguous():
        raise ValueError(f"{what}: {name} must be contiguous (tensor.contiguous() makes a copy)")
    t = t.detach()
    c = _CARRIED.get(t.dtype)
    if c is not None:
        return t.view(c[0]).numpy().view(c[1]), c[2]
    if t.dtype not in _DTYPES:
        raise TypeError(f"{what}: collc has no dtype for {t.dtype}")
    return t.numpy(), None


def _cuda_buf(comm, t, what, name):
    """(pointer, elements, collc dtype) of a CUDA tensor, checked."""
    if not t.is_cuda:
        raise ValueError(f"{what}: {name} is on {t.device} but the other buffer is on CUDA")
    if t.device.index != comm.device:
        raise ValueError(f"{what}: {name} is on {t.device} but the communicator is on "
                         f"cuda:{comm.device}")
    if not t.is_contiguous():
        raise ValueError(f"{what}: {name} must be contiguous (tensor.contiguous() makes a copy)")
    dt = _DTYPES.get(t.dtype)
    if dt is None:
        raise TypeError(f"{what}: collc has no dtype for {t.dtype}")
    return t.data_ptr(), t.numel(), dt


class CudaRequest:
    """A stream-ordered collective (async_op=True on CUDA tensors).

    wait() makes the current stream wait for it (no host wait) and raises
    collc.Error if a stream-ordered collective of the communicator failed;
    is_completed() is True once its stream work finished.
    """

    def __init__(self, comm, stream, handle, sobj, keep, what):
        self._comm = comm
        self._what = what
        self._device = comm.device
        if sobj is None:
            sobj = torch.cuda.current_stream(comm.device) if stream is None \
                else stream_object(handle, comm.device)
        self._stream = sobj
        self._event = torch.cuda.Event()
        self._event.record(self._stream)
        self._keep = keep

    def wait(self, timeout=None):
        self._comm.check_async_error()
        torch.cuda.current_stream(self._device).wait_event(self._event)
        return True

    def is_completed(self):
        if not self._event.query():
            return False
        self._keep = None
        self._comm.check_async_error()
        return True

    def synchronize(self):
        """Waits on the host until the collective's stream work finished."""
        self._event.synchronize()
        self._keep = None
        self._comm.check_async_error()
        return True


def _run_cuda(comm, what, fn_name, bufs, args, stream, async_op):
    """bufs: (tensor, name) in the order the C function takes pointers."""
    h = comm._handle(what)
    if comm.device < 0:
        raise ValueError(f"{what}: CUDA tensors need a communicator of their device "
                         "(ctx.comm(uid, nranks, rank, device=N)), not a host communicator")
    if not _streams:
        raise NotImplementedError(
            f"{what}: this libcollc has no stream-ordered collectives ({fn_name} is missing): "
            "CUDA tensors need a libcollc built with them")
    fn = getattr(_C, fn_name)
    handle, sobj = _stream_arg(comm, stream, what)
    ptrs, keep, seen = [], [], set()
    regs = comm._ctx._devregs()
    for t, name in bufs:
        p, n, _ = _cuda_buf(comm, t, what, name)
        if n and p not in seen:
            regs.ensure(p, n * t.element_size(), comm.device,
                        lambda: regs.driver.is_capturing(handle))
            seen.add(p)
        ptrs.append(p)
        if not any(k is t for k in keep):
            keep.append(t)
    comm.check_async_error()
    _check(fn(h, *ptrs, *args, ctypes.c_void_p(handle)), what)
    if sobj is not None:
        for t in keep:
            t.record_stream(sobj)  # the allocator must not reuse it before sobj's work ran
    if async_op:
        return CudaRequest(comm, stream, handle, sobj, keep, what)
    return None


def _no_dtype(dtype, what):
    if dtype is not None:
        raise TypeError(f"{what}: dtype= is for numpy arrays; a tensor's dtype is its own")


def _cpu(comm, what, stream):
    if stream is not None:
        raise TypeError(f"{what}: stream= is for CUDA tensors")
    if comm.device != -1:
        raise ValueError(f"{what}: CPU tensors need a host communicator (device=-1); this one "
                         f"is on cuda:{comm.device}")


def _both(x, out, what):
    _tensor(x, what, "x")
    if out is not None:
        _tensor(out, what, "out")
        if out.dtype != x.dtype:
            raise TypeError(f"{what}: out is {out.dtype} but x is {x.dtype}")
        if x.is_cuda != out.is_cuda:
            raise ValueError(f"{what}: x is on {x.device} but out is on {out.device}")


def _count(t, n, what, name):
    if t.numel() != n:
        raise ValueError(f"{what}: {name} has {t.numel()} elements, needs {n}")


def _optional_out(x, out, what):
    """all_reduce and reduce: out, when given, is like x (else the result goes to x)."""
    _both(x, out, what)
    if out is not None:
        _count(out, x.numel(), what, "out")


def _host(comm, x, out, what, stream):
    """The CPU path: (numpy view of x, of out or None, dtype= for collc) on a host communicator."""
    _cpu(comm, what, stream)
    xa, dn = _cpu_view(x, what, "x")
    oa = None if out is None else _cpu_view(out, what, "out")[0]
    return xa, oa, dn


def all_reduce(comm, x, op, out, dtype, async_op, stream):
    what = "all_reduce"
    _no_dtype(dtype, what)
    _optional_out(x, out, what)
    if not x.is_cuda:
        xa, oa, dn = _host(comm, x, out, what, stream)
        return comm.all_reduce(xa, op, oa, dtype=dn, async_op=async_op)
    o = comm._op_code(op, what)
    out = x if out is None else out
    _, n, dt = _cuda_buf(comm, x, what, "x")
    return _run_cuda(comm, what, "collc_allreduce_stream", [(x, "x"), (out, "out")],
                     (n, dt, o), stream, async_op)


def all_gather(comm, x, out, dtype, async_op, stream):
    what = "all_gather"
    _no_dtype(dtype, what)
    _both(x, _tensor(out, what, "out"), what)
    _count(out, x.numel() * comm.nranks, what, "out")
    if not x.is_cuda:
        xa, oa, dn = _host(comm, x, out, what, stream)
        return comm.all_gather(xa, oa, dtype=dn, async_op=async_op)
    _, n, dt = _cuda_buf(comm, x, what, "x")
    return _run_cuda(comm, what, "collc_allgather_stream", [(x, "x"), (out, "out")], (n, dt),
                     stream, async_op)


def reduce_scatter(comm, x, out, op, dtype, async_op, stream):
    what = "reduce_scatter"
    _no_dtype(dtype, what)
    _both(x, _tensor(out, what, "out"), what)
    _count(x, out.numel() * comm.nranks, what, "x")
    if not x.is_cuda:
        xa, oa, dn = _host(comm, x, out, what, stream)
        return comm.reduce_scatter(xa, oa, op, dtype=dn, async_op=async_op)
    o = comm._op_code(op, what)
    _, n, dt = _cuda_buf(comm, out, what, "out")
    return _run_cuda(comm, what, "collc_reduce_scatter_stream", [(x, "x"), (out, "out")],
                     (n, dt, o), stream, async_op)


def broadcast(comm, x, root, dtype, async_op, stream):
    what = "broadcast"
    _no_dtype(dtype, what)
    _tensor(x, what, "x")
    if not x.is_cuda:
        xa, _, dn = _host(comm, x, None, what, stream)
        return comm.broadcast(xa, root, dtype=dn, async_op=async_op)
    root = comm._root(root, what)
    _, n, dt = _cuda_buf(comm, x, what, "x")
    return _run_cuda(comm, what, "collc_broadcast_stream", [(x, "x"), (x, "x")], (n, dt, root),
                     stream, async_op)


def reduce(comm, x, out, op, root, dtype, async_op, stream):
    what = "reduce"
    _no_dtype(dtype, what)
    _optional_out(x, out, what)
    if not x.is_cuda:
        xa, oa, dn = _host(comm, x, out, what, stream)
        return comm.reduce(xa, oa, op, root, dtype=dn, async_op=async_op)
    o = comm._op_code(op, what)
    root = comm._root(root, what)
    out = x if out is None else out
    _, n, dt = _cuda_buf(comm, x, what, "x")
    return _run_cuda(comm, what, "collc_reduce_stream", [(x, "x"), (out, "out")],
                     (n, dt, o, root), stream, async_op)


def all_to_all(comm, x, out, dtype, async_op, stream):
    what = "all_to_all"
    _no_dtype(dtype, what)
    _both(x, _tensor(out, what, "out"), what)
    _count(out, x.numel(), what, "out")
    if x.numel() % comm.nranks:
        raise ValueError(f"all_to_all: x has {x.numel()} elements, not a multiple of nranks "
                         f"{comm.nranks}")
    if not x.is_cuda:
        xa, oa, dn = _host(comm, x, out, what, stream)
        return comm.all_to_all(xa, oa, dtype=dn, async_op=async_op)
    nb = x.numel() * x.element_size()
    if nb and x.data_ptr() < out.data_ptr() + nb and out.data_ptr() < x.data_ptr() + nb:
        raise ValueError("all_to_all: x and out overlap (there is no in-place form)")
    _, n, dt = _cuda_buf(comm, x, what, "x")
    return _run_cuda(comm, what, "collc_alltoall_stream", [(x, "x"), (out, "out")],
                     (n // comm.nranks, dt), stream, async_op)


def _p2p(comm, what, x, peer, dtype, async_op, stream):
    """send and recv: one buffer and a peer; what names both the call and collc_<what>_stream."""
    _no_dtype(dtype, what)
    _tensor(x, what, "x")
    if not x.is_cuda:
        xa, _, dn = _host(comm, x, None, what, stream)
        return getattr(comm, what)(xa, peer, dtype=dn, async_op=async_op)
    peer = comm._peer(peer, what)
    _, n, dt = _cuda_buf(comm, x, what, "x")
    return _run_cuda(comm, what, f"collc_{what}_stream", [(x, "x")], (n, dt, peer), stream,
                     async_op)


def send(comm, x, peer, dtype, async_op, stream):
    return _p2p(comm, "send", x, peer, dtype, async_op, stream)


def recv(comm, x, peer, dtype, async_op, stream):
    return _p2p(comm, "recv", x, peer, dtype, async_op, stream)
