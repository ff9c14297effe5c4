#!/usr/bin/env python3
"""Writes the seed corpora (a few valid and invalid inputs per target).

Run from anywhere; the files land next to this script. The fuzzers read
these as seeds and the fuzz_* tests replay every one of them first.
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC, VERSION, REPLY = 0x434F4C43, 2, 0x8000
(HELLO, MEM_ALLOC, MEM_REGISTER, MEM_RELEASE, COMM_INIT, COMM_DESTROY, COMM_ABORT,
 SET_EVENTFD, STATUS, GET, SET, METRICS, COMM_TIMEOUT) = range(1, 14)


def put(target, name, data):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def msg(mtype, payload=b"", magic=MAGIC, version=VERSION, length=None, mid=7):
    if length is None:
        length = len(payload)
    return struct.pack("<IHHII", magic, version, mtype, length, mid) + payload


def uid(nonce=b"\x11" * 32):
    return struct.pack("<II", 0x44495543, 1) + b"\x22" * 16 + nonce + b"\x00" * 72


# wire: valid requests of every type, then broken ones
w = "wire"
put(w, "hello", msg(HELLO, struct.pack("<IIQQ", 1, 0, 0, 0)))
put(w, "mem_alloc", msg(MEM_ALLOC, struct.pack("<QiI", 1 << 20, -1, 0) + b"\x00" * 16))
put(w, "mem_register", msg(MEM_REGISTER, struct.pack("<QiI", 4096, -1, 0) + b"\x00" * 16))
# A GPU registration (wire version 2): the memory header, then the CUDA IPC handle, offset, size.
put(w, "mem_register_gpu", msg(MEM_REGISTER, struct.pack("<QiI", 4096, 0, 0) + b"\x00" * 16
                                + b"\x11" * 64 + struct.pack("<QQ", 0, 4096)))
put(w, "mem_release", msg(MEM_RELEASE, struct.pack("<II", 1, 0)))
put(w, "comm_init", msg(COMM_INIT, uid() + struct.pack("<IIiI", 2, 1, -1, 0) + b"\x00" * 16))
put(w, "comm_destroy", msg(COMM_DESTROY, struct.pack("<II", 1, 0)))
put(w, "comm_abort", msg(COMM_ABORT, struct.pack("<II", 1, 0)))
put(w, "set_eventfd", msg(SET_EVENTFD))
put(w, "status_json", msg(STATUS, struct.pack("<II", 1, 0)))
put(w, "get", msg(GET, b"op_timeout_ms"))
put(w, "set", msg(SET, b"channels=2 proto=ll op_timeout_ms=300"))
put(w, "set_bad", msg(SET, b"channels=2 bogus=1"))
put(w, "metrics", msg(METRICS))
put(w, "comm_timeout", msg(COMM_TIMEOUT, struct.pack("<II", 1, 0xFFFFFFFF)))
put(w, "bad_magic", msg(HELLO, struct.pack("<IIQQ", 1, 0, 0, 0), magic=0x12345678))
put(w, "bad_version", msg(HELLO, struct.pack("<IIQQ", 1, 0, 0, 0), version=1))
put(w, "bad_length", msg(HELLO, struct.pack("<IIQQ", 1, 0, 0, 0), length=1000))
put(w, "reply_bit", msg(HELLO | REPLY, struct.pack("<IIQQ", 1, 0, 0, 0)))
put(w, "type_zero", msg(0))
put(w, "type_unknown", msg(99, b"xyz"))
put(w, "hello_short", msg(HELLO, b"\x01" * 23))
put(w, "get_too_long", msg(GET, b"k" * 64))
put(w, "set_too_long", msg(SET, b"channels=1 " * 94))
put(w, "short_datagram", b"CLOC\x01\x00\x01\x00\x18")

# sqe: 64-byte entry, then nranks and rank (u32 each)
def sqe(op, dtype=8, redop=0, flags=0, comm=1, seq=0, count=1024, smr=1, rmr=2, soff=0,
        roff=0, user=1, root=0, reserved=0):
    return struct.pack("<BBBBIQQIIQQQiI", op, dtype, redop, flags, comm, seq, count, smr, rmr,
                       soff, roff, user, root, reserved)


def comm(nranks, rank):
    return struct.pack("<II", nranks, rank)


s = "sqe"
put(s, "allreduce", sqe(1) + comm(2, 0))
put(s, "allgather", sqe(2, dtype=2, count=7) + comm(3, 2))
put(s, "reduce_scatter", sqe(3, dtype=6, redop=4, count=5) + comm(4, 1))
put(s, "broadcast_root", sqe(4, dtype=9, root=1) + comm(2, 1))
put(s, "broadcast_leaf", sqe(4, dtype=9, root=1) + comm(2, 0))
put(s, "reduce_root", sqe(5, dtype=0, redop=2, root=0) + comm(3, 0))
put(s, "count_zero", sqe(1, count=0) + comm(1, 0))
put(s, "overflow_count", sqe(1, dtype=5, count=1 << 62) + comm(2, 0))
put(s, "overflow_allgather", sqe(2, dtype=0, count=1 << 60) + comm(64, 3))
put(s, "bad_opcode", sqe(9) + comm(2, 0))
put(s, "nop", sqe(0) + comm(2, 0))
put(s, "bad_root", sqe(5, root=2) + comm(2, 0))
put(s, "flags_set", sqe(1, flags=1) + comm(2, 0))
put(s, "rank_out_of_range", sqe(1) + comm(2, 2))
put(s, "big_nranks", sqe(2, count=3) + struct.pack("<II", 0x80001000, 0x80000fff))

# config: byte 0 mode (1: file), byte 1 channel count, byte 2 errlen, then text
def cfg(file, text, maxch=4, errlen=255):
    return bytes([1 if file else 0, maxch - 1, errlen - 1]) + text


c = "config"
put(c, "kv_valid", cfg(0, b"channels=2\nproto=ll\nalgo=ring\nop_timeout_ms=500\nll_max_bytes=64K"))
put(c, "kv_invalid", cfg(0, b"channels=0\nbogus=1\nll_max_bytes=2G\nproto=\nchannels=99999999999999999999"))
put(c, "kv_units", cfg(0, b"channel_min_bytes=1\ntwoshot_max_bytes=1024G\nsched_spin_us=1000000"))
put(c, "kv_short_err", cfg(0, b"channels=x", errlen=3))
put(c, "file_valid", cfg(1, b"# collcd.conf\nchannels = 2\n\nalgo = ring # trailing comment\n"
                             b"op_timeout_ms=300\n  proto\t=\tll128  \n"))
put(c, "file_invalid", cfg(1, b"channels = 2\nchannels = 0\n"))
put(c, "file_no_newline", cfg(1, b"exec_spin_us = 10"))
put(c, "file_nul", cfg(1, b"channels = 1\x00garbage\nalgo = oneshot\n"))
# A comment line longer than the parser's 512-byte line buffer: its tail must
# stay a comment (it does not: see the report on cfg_apply_file).
put(c, "file_long_comment", cfg(1, b"# " + b"x" * 600 + b"\nchannels = 2\n"))
