/* SPDX-License-Identifier: MIT */
#include <errno.h>

#include "proto/dtype.h"
#include "daemon/sqe_check.h"

int sqe_validate(const struct collc_sqe *e, uint32_t nranks, uint32_t rank, uint64_t *ret_send,
		 uint64_t *ret_recv)
{
	uint64_t one, send, recv;

	if (e->opcode <= COLLC_OP_NOP || e->opcode >= COLLC_OP_MAX)
		return -EINVAL;
	if (!collc_dtype_op_valid(e->dtype, e->redop) || e->flags != 0 || e->reserved != 0)
		return -EINVAL;
	if (nranks == 0 || rank >= nranks)
		return -EINVAL;
	if ((e->opcode == COLLC_OP_BROADCAST || e->opcode == COLLC_OP_REDUCE) &&
	    (e->root < 0 || (uint32_t)e->root >= nranks))
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
	default: /* COLLC_OP_REDUCE */
		send = one;
		recv = (uint32_t)e->root == rank ? one : 0;
		break;
	}
	*ret_send = send;
	*ret_recv = recv;
	return 0;
}
