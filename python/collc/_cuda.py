# SPDX-License-Identifier: MIT
"""Device memory for the stream-ordered path, without torch: the CUDA driver
(ctypes, loaded on first use) and the per-context registration cache.

collcd imports device memory per allocation (cudaMalloc block: CUDA IPC), so
the cache registers the whole allocation a buffer lies in (for torch, the
caching allocator's segment), once. An allocation is known by its driver
buffer id, which is never reused: a segment freed (torch.cuda.empty_cache)
and another mapped at an overlapping address gets a new id, and the old
registration is dropped before the new one is made.
"""

import ctypes
import threading

_CU_POINTER_ATTRIBUTE_BUFFER_ID = 7  # cuda.h CUpointer_attribute

_drv = None
_drv_lock = threading.Lock()


class DriverError(RuntimeError):
    """A CUDA driver call behind the package's device path failed."""


def _driver():
    global _drv
    with _drv_lock:
        if _drv is None:
            try:
                lib = ctypes.CDLL("libcuda.so.1")
            except OSError as e:
                raise DriverError(f"collc: CUDA tensors need the CUDA driver (libcuda.so.1): {e}")
            lib.cuPointerGetAttribute.restype = ctypes.c_int
            lib.cuPointerGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
            lib.cuStreamIsCapturing.restype = ctypes.c_int
            lib.cuStreamIsCapturing.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
            lib.cuMemGetAddressRange_v2.restype = ctypes.c_int
            lib.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64),
                                                    ctypes.POINTER(ctypes.c_size_t),
                                                    ctypes.c_uint64]
            _drv = lib
    return _drv


class Driver:
    """The two driver queries the cache needs (a fake can stand in for tests)."""

    def buffer_id(self, ptr):
        v = ctypes.c_uint64()
        r = _driver().cuPointerGetAttribute(ctypes.byref(v), _CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                            ptr)
        if r != 0:
            raise DriverError(f"collc: cuPointerGetAttribute(BUFFER_ID, {ptr:#x}) failed with "
                              f"CUresult {r}: not CUDA device memory of this process?")
        return v.value

    def address_range(self, ptr):
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        r = _driver().cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ptr)
        if r != 0:
            raise DriverError(f"collc: cuMemGetAddressRange({ptr:#x}) failed with CUresult {r}")
        return base.value, size.value


    def is_capturing(self, stream):
        """Whether the stream (a cudaStream_t as an int) is being captured."""
        st = ctypes.c_int()
        r = _driver().cuStreamIsCapturing(ctypes.c_void_p(stream), ctypes.byref(st))
        if r != 0:
            raise DriverError(f"collc: cuStreamIsCapturing({stream:#x}) failed with CUresult {r}")
        return st.value != 0  # CU_STREAM_CAPTURE_STATUS_NONE is 0


class DevRegs:
    """Registrations of device allocations for one context, by buffer id.

    register(base, size, device) and deregister(base) are the context's
    libcollc calls (they raise collc.Error).
    """

    def __init__(self, register, deregister, driver=None):
        self._register = register
        self._deregister = deregister
        self.driver = self._drv = driver or Driver()
        self._lock = threading.Lock()
        self._by_id = {}  # buffer id -> (base, end, device)
        self._by_base = {}  # base -> buffer id

    def ensure(self, ptr, nbytes, device, capturing):
        """Makes [ptr, ptr + nbytes) visible to collcd. capturing(): whether the
        stream is being captured, asked only when a registration is due."""
        bid = self._drv.buffer_id(ptr)
        hit = self._by_id.get(bid)
        if hit is not None and hit[0] <= ptr and ptr + nbytes <= hit[1] and hit[2] == device:
            return False
        if capturing():
            raise RuntimeError(
                f"collc: the buffer at {ptr:#x} ({nbytes} bytes) is not registered with collcd, "
                "and registering is not allowed while the stream is being captured into a CUDA "
                "graph: run the collective on that tensor once before the capture (warm-up), "
                "or allocate the graph's buffers outside the capture")
        with self._lock:
            hit = self._by_id.get(bid)  # another thread may have registered it meanwhile
            if hit is not None and hit[0] <= ptr and ptr + nbytes <= hit[1] and hit[2] == device:
                return False
            base, size = self._drv.address_range(ptr)
            if not (base <= ptr and ptr + nbytes <= base + size):
                raise ValueError(f"collc: the buffer at {ptr:#x} ({nbytes} bytes) spans more "
                                 "than one device allocation")
            # Live allocations never overlap: an overlapping one of ours was freed.
            for b in [b for b, i in self._by_base.items()
                      if b < base + size and base < self._by_id[i][1]]:
                self._forget(b)
            self._register(base, size, device)
            self._by_id[bid] = (base, base + size, device)
            self._by_base[base] = bid
        return True

    def _forget(self, base):
        bid = self._by_base.pop(base)
        del self._by_id[bid]
        self._deregister(base)

    def clear(self):
        """Drops every registration (the context closes)."""
        with self._lock:
            for b in list(self._by_base):
                self._forget(b)

    def __len__(self):
        return len(self._by_base)
