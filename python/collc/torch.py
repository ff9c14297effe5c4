# SPDX-License-Identifier: MIT
"""The torch.distributed backend "collc".

    import collc.torch                     # registers the backend
    torch.cuda.set_device(local_rank)
    dist.init_process_group("cuda:collc,cpu:gloo", rank=rank, world_size=n)

CUDA tensors run on collcd through the stream-ordered forms, on the current
stream, like the nccl backend: a call returns once enqueued and Work.wait()
makes the current stream wait (not the host). torch.cuda.graph capture of
all_reduce and the other collectives records them into the graph (run each
collective once on its tensors before capturing: memory is registered with
collcd then, never during a capture). CPU tensors go to a gloo process group
made on first use. The connection uses $COLLC_SOCKET (collcd's default
otherwise); the communicator's id travels through the store torch passes.

torch 2.x takes a ProcessGroup made in Python as the whole group, so this
one serves every device: collc for CUDA tensors, gloo for CPU tensors.
"""

import collections
import inspect
import threading

try:
    import torch
    import torch.distributed as dist
except ImportError as e:
    raise ImportError(f"collc.torch needs PyTorch with torch.distributed: {e}") from e
if not dist.is_available():
    raise ImportError("collc.torch: this PyTorch was built without torch.distributed")

import collc

from . import _tensor

collc._tensors()  # binds _tensor to libcollc

_c10d = torch._C._distributed_c10d
_WorkBase = getattr(dist, "_Work", None) or _c10d.Work

BACKEND = "collc"


def _op_table():
    R = dist.ReduceOp
    t = [(R.SUM, "sum"), (R.PRODUCT, "prod"), (R.MIN, "min"), (R.MAX, "max")]
    if hasattr(R, "AVG"):
        t.append((R.AVG, "avg"))
    return t


_OPS = _op_table()


def _op_name(op):
    for ref, name in _OPS:
        try:
            if op == ref:
                return name
        except TypeError:
            continue
    raise ValueError(f"collc: reduce op {op} is not supported (SUM, PRODUCT, MIN, MAX, AVG)")


class CollcWork(_WorkBase):
    """A collective on CUDA tensors, ordered on the stream it was enqueued on.

    wait(): the current stream waits for the collective (the host does not;
    barrier's work waits on the host); is_completed(): its stream work ran;
    get_future(): a CUDA-aware future holding the result tensors. Each checks
    collc_comm_get_async_error and raises collc.Error after a failure.
    """

    def __init__(self, pg, comm, result, stream, host_wait=False):
        super().__init__()
        self._collc_pg = pg
        self._collc_comm = comm
        self._collc_result = result
        self._collc_device = comm.device
        self._collc_stream = stream  # raw cudaStream_t
        self._collc_host_wait = host_wait
        self._collc_event = None
        self._collc_fut = None

    def _collc_record(self):
        # Recorded on first need: it then covers the collective and possibly
        # later work on that stream, never less.
        if self._collc_event is None:
            ev = torch.cuda.Event()
            ev.record(_tensor.stream_object(self._collc_stream, self._collc_device))
            self._collc_event = ev
        return self._collc_event

    def wait(self, timeout=None):
        self._collc_comm.check_async_error()
        if self._collc_host_wait:
            self._collc_record().synchronize()
            self._collc_comm.check_async_error()
        elif _tensor._raw_stream(self._collc_device) != self._collc_stream:
            torch.cuda.current_stream(self._collc_device).wait_event(self._collc_record())
        return True

    def is_completed(self):
        if not self._collc_record().query():
            return False
        self._collc_comm.check_async_error()
        return True

    def is_success(self):
        return self.is_completed()

    def exception(self):
        return None

    def synchronize(self):
        self._collc_record().synchronize()
        self._collc_comm.check_async_error()

    def result(self):
        return self._collc_result

    def get_future(self):
        if self._collc_fut is None:
            fut = torch.futures.Future(devices=[torch.device("cuda", self._collc_device)])
            # A CUDA future records its completion on the current stream: make
            # that the collective's stream.
            s = _tensor.stream_object(self._collc_stream, self._collc_device)
            with torch.cuda.device(self._collc_device), torch.cuda.stream(s):
                fut.set_result(self._collc_result)
            self._collc_fut = fut
        return self._collc_fut


class ProcessGroupCollc(dist.ProcessGroup):
    """One rank's process group on collcd (made by init_process_group / new_group)."""

    # Work objects handed to C++ (DDP's reducer) must outlive the call that
    # made them until C++ asked for their future: the last ones stay referenced.
    _collc_KEEP = 1024

    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        self._collc_store = store
        self._collc_timeout = timeout
        self._collc_rank = rank
        self._collc_size = size
        self._collc_lock = threading.Lock()
        self._collc_ctx = collc.connect()
        self._collc_comms = {}  # CUDA device index -> collc.Comm
        self._collc_ncomms = 0
        self._collc_gloo = None
        self._collc_gloo_error = None
        self._collc_one = {}  # device -> the one-element tensor barrier reduces
        self._collc_works = collections.deque(maxlen=self._collc_KEEP)
        # gloo serves CPU tensors. Registered as this group's CPU backend, it
        # also gives torch.distributed a device for object collectives and
        # barrier (they look at the group's registered device types).
        try:
            self._collc_cpu("the CPU backend")
            self._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO,
                                   self._collc_gloo)
        except Exception as e:  # noqa: BLE001: CUDA tensors do not need it
            self._collc_gloo_error = e

    def getBackendName(self):
        return BACKEND

    def __repr__(self):
        return f"<collc.torch.ProcessGroupCollc rank {self._collc_rank} of {self._collc_size}>"

    # Communicators and the CPU side.
    def _collc_comm(self, device):
        c = self._collc_comms.get(device)
        if c is not None:
            return c
        with self._collc_lock:
            c = self._collc_comms.get(device)
            if c is None:
                # Every rank makes its n-th communicator at the same collective.
                key = f"collc/uid/{self._collc_ncomms}"
                self._collc_ncomms += 1
                if self._collc_rank == 0:
                    uid = self._collc_ctx.unique_id()
                    self._collc_store.set(key, uid.hex())
                else:
                    uid = bytes.fromhex(bytes(self._collc_store.get(key)).decode())
                c = self._collc_ctx.comm(uid, self._collc_size, self._collc_rank, device)
                self._collc_comms[device] = c
        return c

    def _collc_cpu(self, what):
        if self._collc_gloo is None:
            with self._collc_lock:
                if self._collc_gloo is None:
                    if not dist.is_gloo_available():
                        raise RuntimeError(f"collc.torch: {what} on CPU tensors needs gloo, "
                                           "which this PyTorch lacks")
                    store = dist.PrefixStore("collc-cpu/", self._collc_store)
                    self._collc_gloo = _c10d.ProcessGroupGloo(
                        store, self._collc_rank, self._collc_size, self._collc_timeout)
        return self._collc_gloo

    def _collc_work(self, comm, result, host_wait=False):
        w = CollcWork(self, comm, result, _tensor._raw_stream(comm.device), host_wait)
        self._collc_works.append(w)
        return w

    @staticmethod
    def _collc_one_tensor(tensors, what):
        if len(tensors) != 1:
            raise ValueError(f"collc.torch: {what} takes one tensor per rank, "
                             f"not {len(tensors)}")
        return tensors[0]

    # The collectives torch.distributed calls.
    def allreduce(self, tensors, opts=None):
        t = self._collc_one_tensor(tensors, "allreduce")
        if not t.is_cuda:
            return self._collc_cpu("allreduce").allreduce(tensors,
                                                          opts or _c10d.AllreduceOptions())
        op = "sum" if opts is None else _op_name(opts.reduceOp)
        c = self._collc_comm(t.device.index)
        c.all_reduce(t, op=op)
        return self._collc_work(c, tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        if tensors and not tensors[0].is_cuda:
            return self._collc_cpu("allreduce_coalesced").allreduce_coalesced(tensors, opts)
        op = "sum" if opts is None else _op_name(opts.reduceOp)
        c = None
        for t in tensors:
            c = self._collc_comm(t.device.index)
            c.all_reduce(t, op=op)
        if c is None:
            raise ValueError("collc.torch: allreduce_coalesced of no tensors")
        return self._collc_work(c, tensors)

    def broadcast(self, tensors, opts=None):
        t = self._collc_one_tensor(tensors, "broadcast")
        if not t.is_cuda:
            return self._collc_cpu("broadcast").broadcast(tensors,
                                                          opts or _c10d.BroadcastOptions())
        root = 0 if opts is None else opts.rootRank
        c = self._collc_comm(t.device.index)
        c.broadcast(t, root=root)
        return self._collc_work(c, tensors)

    def reduce(self, tensors, opts=None):
        t = self._collc_one_tensor(tensors, "reduce")
        if not t.is_cuda:
            return self._collc_cpu("reduce").reduce(tensors, opts or _c10d.ReduceOptions())
        op = "sum" if opts is None else _op_name(opts.reduceOp)
        root = 0 if opts is None else opts.rootRank
        c = self._collc_comm(t.device.index)
        c.reduce(t, op=op, root=root)
        return self._collc_work(c, tensors)

    def _allgather_base(self, output, input, opts=None):
        if not input.is_cuda:
            return self._collc_cpu("all_gather_into_tensor")._allgather_base(
                output, input, opts or _c10d.AllgatherOptions())
        c = self._collc_comm(input.device.index)
        c.all_gather(input, output)
        return self._collc_work(c, [output])

    def allgather(self, output_lists, inputs, opts=None):
        x = self._collc_one_tensor(inputs, "allgather")
        if not x.is_cuda:
            return self._collc_cpu("all_gather").allgather(output_lists, inputs,
                                                           opts or _c10d.AllgatherOptions())
        outs = self._collc_one_tensor(output_lists, "allgather")
        if len(outs) != self._collc_size:
            raise ValueError(f"collc.torch: all_gather needs {self._collc_size} output tensors, "
                             f"not {len(outs)}")
        c = self._collc_comm(x.device.index)
        flat = torch.empty(self._collc_size * x.numel(), dtype=x.dtype, device=x.device)
        c.all_gather(x.contiguous(), flat)
        for o, part in zip(outs, flat.chunk(self._collc_size)):
            o.copy_(part.view_as(o))
        return self._collc_work(c, output_lists)

    def _reduce_scatter_base(self, output, input, opts=None):
        if not input.is_cuda:
            return self._collc_cpu("reduce_scatter_tensor")._reduce_scatter_base(
                output, input, opts or _c10d.ReduceScatterOptions())
        op = "sum" if opts is None else _op_name(opts.reduceOp)
        c = self._collc_comm(input.device.index)
        c.reduce_scatter(input, output, op=op)
        return self._collc_work(c, [output])

    def reduce_scatter(self, outputs, input_lists, opts=None):
        out = self._collc_one_tensor(outputs, "reduce_scatter")
        if not out.is_cuda:
            return self._collc_cpu("reduce_scatter").reduce_scatter(
                outputs, input_lists, opts or _c10d.ReduceScatterOptions())
        ins = self._collc_one_tensor(input_lists, "reduce_scatter")
        op = "sum" if opts is None else _op_name(opts.reduceOp)
        c = self._collc_comm(out.device.index)
        flat = torch.cat([i.reshape(-1) for i in ins])
        res = out if out.is_contiguous() else torch.empty(out.shape, dtype=out.dtype,
                                                          device=out.device)
        c.reduce_scatter(flat, res, op=op)
        if res is not out:
            out.copy_(res)
        return self._collc_work(c, outputs)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        if not input.is_cuda:
            return self._collc_cpu("all_to_all_single").alltoall_base(
                output, input, output_split_sizes, input_split_sizes,
                opts or _c10d.AllToAllOptions())
        n = self._collc_size
        for name, splits, t in (("output", output_split_sizes, output),
                                ("input", input_split_sizes, input)):
            if splits and (len(splits) != n or len(set(splits)) != 1
                           or splits[0] * n != t.shape[0]):
                raise ValueError(f"collc.torch: all_to_all_single with uneven {name} split "
                                 f"sizes {list(splits)} is not supported (collc has no "
                                 "stream-ordered all-to-allv): use equal splits")
        c = self._collc_comm(input.device.index)
        c.all_to_all(input, output)
        return self._collc_work(c, [output])

    def send(self, tensors, dst, tag=0):
        t = self._collc_one_tensor(tensors, "send")
        if not t.is_cuda:
            return self._collc_cpu("send").send(tensors, dst, tag)
        c = self._collc_comm(t.device.index)
        c.send(t, dst)  # tags are not matched (as with nccl): posting order is
        return self._collc_work(c, tensors)

    def recv(self, tensors, src, tag=0):
        t = self._collc_one_tensor(tensors, "recv")
        if not t.is_cuda:
            return self._collc_cpu("recv").recv(tensors, src, tag)
        c = self._collc_comm(t.device.index)
        c.recv(t, src)
        return self._collc_work(c, tensors)

    def recv_anysource(self, tensors, tag=0):
        raise ValueError("collc.torch: recv needs src (collc matches a receive to one sender)")

    def barrier(self, opts=None):
        ids = list(getattr(opts, "device_ids", None) or [])
        dev = ids[0] if ids else (next(iter(self._collc_comms)) if self._collc_comms
                                  else torch.cuda.current_device())
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("collc.torch: barrier waits on the host and cannot be captured")
        one = self._collc_one.get(dev)
        if one is None:
            one = self._collc_one[dev] = torch.zeros(1, dtype=torch.float32, device=f"cuda:{dev}")
        c = self._collc_comm(dev)
        c.all_reduce(one)
        return self._collc_work(c, [one], host_wait=True)

    def shutdown(self):
        """Leaves the communicators and disconnects (destroy_process_group)."""
        with self._collc_lock:
            self._collc_comms.clear()
            self._collc_ctx.close()  # destroys the communicators; idempotent

    def _shutdown(self):
        self.shutdown()


def _create(store, rank, size, timeout):
    return ProcessGroupCollc(store, rank, size, timeout)


def _register():
    B = dist.Backend
    if BACKEND.upper() in getattr(B, "_plugins", {}):
        return
    kw = {}
    try:
        if "devices" in inspect.signature(B.register_backend).parameters:
            kw["devices"] = ["cuda"]
    except (TypeError, ValueError):
        pass
    B.register_backend(BACKEND, _create, **kw)


_register()
