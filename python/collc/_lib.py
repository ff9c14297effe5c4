# SPDX-License-Identifier: MIT
"""Finds and loads libcollc and declares the C functions the package calls."""

import ctypes
import ctypes.util
import glob
import os

SONAME = "libcollc.so.1"
_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


def _candidates():
    """Where to look, in order: (why, path) or (why, None, what was wrong)."""
    env = os.environ.get("COLLC_LIB")
    if env:
        yield "$COLLC_LIB", env
        return  # an explicit choice is the only one tried
    # Installed layout: the package knows the libdir it was installed with.
    try:
        from . import _install  # written by cmake --install

        yield "the install libdir", os.path.join(_install.LIBDIR, SONAME)
    except ImportError:
        pass
    yield "next to the package", os.path.join(_PKG_DIR, SONAME)
    # Source tree: python/collc -> the repository's build*/client/.
    root = os.path.dirname(os.path.dirname(_PKG_DIR))
    builds = glob.glob(os.path.join(root, "build*", "client", SONAME))
    builds.sort(key=lambda p: os.path.getmtime(p), reverse=True)
    for p in builds:
        yield "the build tree", p
    if not builds:
        yield "the build tree", None, f"no build*/client/{SONAME} under {root}"
    found = ctypes.util.find_library("collc")
    yield "ctypes.util.find_library('collc')", found, "found nothing"


def load():
    tried = []
    for why, path, *note in _candidates():
        if not path:
            tried.append(f"{why}: {note[0]}")
            continue
        if os.path.sep in path and not os.path.exists(path):
            tried.append(f"{why}: {path}: no such file")
            continue
        try:
            lib = ctypes.CDLL(path, use_errno=False)
        except OSError as e:
            tried.append(f"{why}: {path}: {e}")
            continue
        _declare(lib)
        return lib, path
    raise ImportError("collc: cannot load libcollc; tried:\n  " + "\n  ".join(tried) +
                      "\nset COLLC_LIB to the path of " + SONAME)


class UniqueId(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_ubyte * 128)]


_p = ctypes.c_void_p
_i = ctypes.c_int
_sz = ctypes.c_size_t
_req = ctypes.POINTER(ctypes.c_uint64)

_PROTOS = {
    "collc_connect": (_i, [ctypes.c_char_p, ctypes.POINTER(_p)]),
    "collc_disconnect": (None, [_p]),
    "collc_get_unique_id": (_i, [_p, ctypes.POINTER(UniqueId)]),
    "collc_comm_init": (_i, [_p, ctypes.POINTER(UniqueId), _i, _i, _i, ctypes.POINTER(_p)]),
    "collc_comm_destroy": (_i, [_p]),
    "collc_comm_abort": (_i, [_p]),
    "collc_comm_set_timeout": (_i, [_p, _i]),
    "collc_comm_rank": (_i, [_p]),
    "collc_comm_nranks": (_i, [_p]),
    "collc_mem_alloc": (_i, [_p, _sz, _i, ctypes.POINTER(_p)]),
    "collc_mem_free": (_i, [_p, _p]),
    "collc_mem_register": (_i, [_p, _p, _sz, _i]),
    "collc_mem_deregister": (_i, [_p, _p]),
    "collc_allreduce": (_i, [_p, _p, _p, _sz, _i, _i, _req]),
    "collc_allgather": (_i, [_p, _p, _p, _sz, _i, _req]),
    "collc_reduce_scatter": (_i, [_p, _p, _p, _sz, _i, _i, _req]),
    "collc_broadcast": (_i, [_p, _p, _p, _sz, _i, _i, _req]),
    "collc_reduce": (_i, [_p, _p, _p, _sz, _i, _i, _i, _req]),
    "collc_alltoall": (_i, [_p, _p, _p, _sz, _i, _req]),
    "collc_send": (_i, [_p, _p, _sz, _i, _i, _req]),
    "collc_recv": (_i, [_p, _p, _sz, _i, _i, _req]),
    "collc_wait": (_i, [_p, ctypes.c_uint64, _i]),
    "collc_test": (_i, [_p, ctypes.c_uint64]),
    "collc_event_fd": (_i, [_p]),
    "collc_strerror": (ctypes.c_char_p, [_i]),
    "collc_dtype_size": (_sz, [_i]),
    "collc_group_start": (_i, []),
    "collc_group_end": (_i, []),
}

# Stream-ordered forms (CUDA tensors): collc_<op>_stream takes the stream
# (a cudaStream_t) where collc_<op> takes the request; declared where the
# library has them, so a libcollc without them still serves host communicators.
_STREAM_OPS = ("collc_allreduce", "collc_allgather", "collc_reduce_scatter", "collc_broadcast",
               "collc_reduce", "collc_alltoall", "collc_send", "collc_recv")
_STREAM_PROTOS = {f"{n}_stream": (_PROTOS[n][0], _PROTOS[n][1][:-1] + [_p]) for n in _STREAM_OPS}
_STREAM_PROTOS["collc_comm_get_async_error"] = (_i, [_p])
_STREAM_PROTOS["collc_comm_get_stream_path"] = (_i, [_p])


def _declare(lib):
    for name, (res, args) in _PROTOS.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    for name, (res, args) in _STREAM_PROTOS.items():
        f = getattr(lib, name, None)
        if f is not None:
            f.restype = res
            f.argtypes = args


def has_stream_forms(lib):
    """True when lib has every stream-ordered form the package calls."""
    return all(hasattr(lib, name) for name in _STREAM_PROTOS)
