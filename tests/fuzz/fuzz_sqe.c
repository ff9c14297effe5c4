/* SPDX-License-Identifier: MIT */
/*
 * SQE validation: sqe_validate() on arbitrary 64-byte entries.
 *
 * Input: 64 bytes of SQE, then (optional) 4 bytes nranks and 4 bytes rank;
 * a short input is zero-padded. Small communicator sizes are the common
 * case, so nranks and rank are folded into [0, 70) unless the top bit of
 * the raw word asks for the full 32-bit value.
 *
 * Properties (checked against a 128-bit model of the contract in
 * daemon/sqe_check.h):
 *  - it accepts exactly the entries whose opcode, dtype, op, flags, gate,
 *    rank and root are valid and whose byte counts fit in 64 bits;
 *  - on success the send/receive byte counts are what opcode, count, dtype,
 *    nranks, rank and root say (allgather: recv = count * size * nranks;
 *    reduce-scatter: send = that; broadcast/reduce: only the root's side);
 *  - -EOVERFLOW exactly when a byte count does not fit; the output
 *    parameters are untouched on every failure.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "proto/dtype.h"
#include "daemon/sqe_check.h"
#include "fuzz_util.h"
#include "proto/shm.h"

#define UNTOUCHED 0xdeadbeefcafef00dull

static const unsigned dtype_bytes[COLLC_NUM_DTYPES] = { 1, 1, 4, 4, 8, 8, 2, 2, 4, 8, 1, 1 };

static uint32_t fold(uint32_t raw)
{
	return (raw & 0x80000000u) ? raw & 0x7fffffffu : raw % 70u;
}

/* The gate contract of proto/shm.h, written out independently of sqe_flags_valid(). */
static int gate_ok(const struct collc_sqe *e)
{
	int graphable = e->opcode >= COLLC_OP_ALLREDUCE && e->opcode <= COLLC_OP_ALLTOALL;
	int p2p = e->opcode == COLLC_OP_SEND || e->opcode == COLLC_OP_RECV;

	switch (e->flags) {
	case 0:
		return e->gate == 0;
	case COLLC_SQE_STREAM:
		return (graphable || p2p) && e->gate < COLLC_GATES && e->user_data >= 1 &&
		       e->user_data <= UINT32_MAX;
	case COLLC_SQE_GRAPH:
		return graphable && e->gate < COLLC_GATES && e->seq == 0;
	default:
		return 0;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t buf[72] = { 0 };
	struct collc_sqe e;
	uint32_t nranks, rank;
	uint64_t send = UNTOUCHED, recv = UNTOUCHED;
	unsigned __int128 one, s128 = 0, r128 = 0;
	int r, valid;

	memcpy(buf, data, size < sizeof(buf) ? size : sizeof(buf));
	memcpy(&e, buf, sizeof(e));
	memcpy(&nranks, buf + 64, 4);
	memcpy(&rank, buf + 68, 4);
	if (size <= 64) {
		/* No communicator bytes: a plausible one from the entry itself. */
		nranks = 1u + (e.gate & 7u);
		rank = (uint32_t)e.user_data % nranks;
	} else {
		nranks = fold(nranks);
		rank = fold(rank);
	}

	r = sqe_validate(&e, nranks, rank, &send, &recv);

	valid = e.opcode > COLLC_OP_NOP && e.opcode < COLLC_OP_MAX && e.dtype < COLLC_NUM_DTYPES &&
		e.redop < COLLC_NUM_REDOPS && gate_ok(&e) && nranks > 0 && rank < nranks;
	if (valid && (e.opcode == COLLC_OP_BROADCAST || e.opcode == COLLC_OP_REDUCE ||
		      e.opcode == COLLC_OP_SEND || e.opcode == COLLC_OP_RECV))
		valid = e.root >= 0 && (uint32_t)e.root < nranks;
	if (valid && e.opcode == COLLC_OP_ALLTOALLV)
		valid = e.count == 0; /* its sizes travel in the argument area */
	if (!valid) {
		FUZZ_ASSERT(
			r == -EINVAL,
			"op %u dtype %u redop %u flags %u gate %u root %d nranks %u rank %u: "
			"invalid entry, sqe_validate returned %d",
			e.opcode, e.dtype, e.redop, e.flags, e.gate, e.root, nranks, rank, r);
		FUZZ_ASSERT(send == UNTOUCHED && recv == UNTOUCHED, "outputs written on failure");
		return 0;
	}

	FUZZ_ASSERT(collc_dtype_bytes(e.dtype) == dtype_bytes[e.dtype], "dtype %u: size %u",
		    e.dtype, collc_dtype_bytes(e.dtype));
	one = (unsigned __int128)e.count * dtype_bytes[e.dtype];
	switch (e.opcode) {
	case COLLC_OP_ALLREDUCE:
		s128 = r128 = one;
		break;
	case COLLC_OP_ALLGATHER:
		s128 = one;
		r128 = one * nranks;
		break;
	case COLLC_OP_REDUCE_SCATTER:
		s128 = one * nranks;
		r128 = one;
		break;
	case COLLC_OP_BROADCAST:
		s128 = (uint32_t)e.root == rank ? one : 0;
		r128 = one;
		break;
	case COLLC_OP_REDUCE:
		s128 = one;
		r128 = (uint32_t)e.root == rank ? one : 0;
		break;
	case COLLC_OP_ALLTOALL:
		s128 = r128 = one * nranks;
		break;
	case COLLC_OP_ALLTOALLV:
		s128 = r128 = 0;
		break;
	case COLLC_OP_SEND:
		s128 = one;
		break;
	case COLLC_OP_RECV:
		r128 = one;
		break;
	}
	/*
	 * The per-element size can overflow even where this rank's side is 0
	 * (a non-root of broadcast): the contract is about count * size first.
	 */
	if (one > UINT64_MAX || s128 > UINT64_MAX || r128 > UINT64_MAX ||
	    ((e.opcode == COLLC_OP_ALLGATHER || e.opcode == COLLC_OP_REDUCE_SCATTER ||
	      e.opcode == COLLC_OP_ALLTOALL) &&
	     one * nranks > UINT64_MAX)) {
		FUZZ_ASSERT(r == -EOVERFLOW,
			    "op %u count %#" PRIx64 " dtype %u nranks %u: "
			    "byte count overflows, sqe_validate returned %d (send %#" PRIx64
			    " recv %#" PRIx64 ")",
			    e.opcode, e.count, e.dtype, nranks, r, send, recv);
		FUZZ_ASSERT(send == UNTOUCHED && recv == UNTOUCHED, "outputs written on overflow");
		return 0;
	}
	FUZZ_ASSERT(r == 0,
		    "op %u count %#" PRIx64 " dtype %u redop %u root %d nranks %u rank %u: "
		    "valid entry rejected with %d",
		    e.opcode, e.count, e.dtype, e.redop, e.root, nranks, rank, r);
	FUZZ_ASSERT(send == (uint64_t)s128 && recv == (uint64_t)r128,
		    "op %u count %#" PRIx64 " dtype %u nranks %u rank %u root %d: send %#" PRIx64
		    " recv %#" PRIx64 ", expected %#" PRIx64 " / %#" PRIx64,
		    e.opcode, e.count, e.dtype, nranks, rank, e.root, send, recv, (uint64_t)s128,
		    (uint64_t)r128);
	/* Consistency a consumer relies on: a used side covers count elements. */
	if (send)
		FUZZ_ASSERT(send % dtype_bytes[e.dtype] == 0 && send >= e.count,
			    "send not whole elements");
	if (recv)
		FUZZ_ASSERT(recv % dtype_bytes[e.dtype] == 0 && recv >= e.count,
			    "recv not whole elements");
	return 0;
}
