/* SPDX-License-Identifier: MIT */
#include <errno.h>

#include "proto/dtype.h"
#include "daemon/sqe_check.h"

int sqe_flags_valid(const struct collc_sqe *e)
{
	if (e->flags == 0)
		return e->gate == 0;
	/*
	 * Stream forms: the five collectives, all-to-all, send and receive;
	 * graphs capture the first six (their firings run in a slot).
	 */
	if (e->flags == COLLC_SQE_STREAM)
		return ((e->opcode >= COLLC_OP_ALLREDUCE && e->opcode <= COLLC_OP_ALLTOALL) ||
			COLLC_OP_IS_P2P(e->opcode)) &&
		       e->gate < COLLC_GATES && (uint32_t)e->user_data != 0 &&
		       (e->user_data >> 32) == 0;
	if (e->flags == COLLC_SQE_GRAPH)
		return e->opcode >= COLLC_OP_ALLREDUCE && e->opcode <= COLLC_OP_ALLTOALL &&
		       e->gate < COLLC_GATES && e->seq == 0;
	return 0;
}

int sqe_validate(const struct collc_sqe *e, uint32_t nranks, uint32_t rank, uint64_t *ret_send,
		 uint64_t *ret_recv)
{
	uint64_t one, send, recv;

	if (e->opcode <= COLLC_OP_NOP || e->opcode >= COLLC_OP_MAX)
		return -EINVAL;
	if (!collc_dtype_op_valid(e->dtype, e->redop) || !sqe_flags_valid(e))
		return -EINVAL;
	if (nranks == 0 || rank >= nranks)
		return -EINVAL;
	if ((e->opcode == COLLC_OP_BROADCAST || e->opcode == COLLC_OP_REDUCE ||
	     COLLC_OP_IS_P2P(e->opcode)) &&
	    (e->root < 0 || (uint32_t)e->root >= nranks))
		return -EINVAL;
	/* All-to-allv's sizes are in its argument area (sqe_validate_args()). */
	if (e->opcode == COLLC_OP_ALLTOALLV && e->count != 0)
		return -EINVAL;
	if (__builtin_mul_overflow(e->count, (uint64_t)collc_dtype_bytes(e->dtype), &one))
		return -EOVERFLOW;
	switch (e->opcode) {
	case COLLC_OP_ALLREDUCE:
		send = recv = one;
		break;
	case COLLC_OP_ALLGATHER:
		send = one;
		if (__builtin_mul_overflow(one, nranks, &recv))
			return -EOVERFLOW;
		break;
	case COLLC_OP_REDUCE_SCATTER:
		recv = one;
		if (__builtin_mul_overflow(one, nranks, &send))
			return -EOVERFLOW;
		break;
	case COLLC_OP_BROADCAST:
		send = (uint32_t)e->root == rank ? one : 0;
		recv = one;
		break;
	case COLLC_OP_ALLTOALL:
		if (__builtin_mul_overflow(one, nranks, &send))
			return -EOVERFLOW;
		recv = send;
		break;
	case COLLC_OP_ALLTOALLV:
		send = recv = 0;
		break;
	case COLLC_OP_SEND:
		send = one;
		recv = 0;
		break;
	case COLLC_OP_RECV:
		send = 0;
		recv = one;
		break;
	default: /* COLLC_OP_REDUCE */
		send = one;
		recv = (uint32_t)e->root == rank ? one : 0;
		break;
	}
	*ret_send = send;
	*ret_recv = recv;
	return 0;
}

/* Bytes to the end of the furthest non-empty block; -EINVAL when that overflows. */
static int extent(const uint64_t *counts, const uint64_t *displs, uint32_t n, uint64_t es,
		  uint64_t *ret)
{
	uint64_t ext = 0, end;

	for (uint32_t p = 0; p < n; p++) {
		if (!counts[p])
			continue;
		if (__builtin_add_overflow(displs[p], counts[p], &end) ||
		    __builtin_mul_overflow(end, es, &end))
			return -EINVAL;
		if (end > ext)
			ext = end;
	}
	*ret = ext;
	return 0;
}

int sqe_validate_args(const struct collc_sqe_args *a, uint32_t nranks, uint32_t es,
		      uint64_t *ret_send, uint64_t *ret_recv)
{
	uint64_t send, recv;

	if (nranks == 0 || nranks > COLLC_SQE_ARGS_RANKS || es == 0)
		return -EINVAL;
	if (extent(a->sendcounts, a->sdispls, nranks, es, &send) < 0 ||
	    extent(a->recvcounts, a->rdispls, nranks, es, &recv) < 0)
		return -EINVAL;
	*ret_send = send;
	*ret_recv = recv;
	return 0;
}
