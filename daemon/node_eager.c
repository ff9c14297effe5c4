/* SPDX-License-Identifier: MIT */
/*
 * Eager collectives across daemons (node.h): which collectives may ride on
 * the agreement, and the result a daemon computes from every contributing
 * rank's input. Pure functions of the agreed descriptor: every daemon and
 * the root size a collective alike, and a hostile descriptor (any count,
 * dtype, op or root) only makes it ineligible.
 */
#include <string.h>

#include "daemon/cpu/reduce.h"
#include "daemon/node.h"
#include "proto/dtype.h"

int node_eager_sizes(const struct node_coll *d, uint32_t nranks, uint64_t limit, uint64_t *ret_in,
		     uint64_t *ret_out)
{
	const uint64_t es = collc_dtype_bytes((int)d->dtype);
	uint64_t v, in, out, held;

	if (d->bad || !es || !d->count || d->count > NODE_EAGER_MAX || nranks < 2 ||
	    nranks > COLLC_MAX_RANKS)
		return 0;
	v = d->count * es;
	switch (d->opcode) {
	case COLLC_OP_ALLREDUCE:
	case COLLC_OP_REDUCE:
		in = out = v;
		held = nranks * v;
		break;
	case COLLC_OP_REDUCE_SCATTER:
		in = out = nranks * v;
		held = nranks * in;
		break;
	case COLLC_OP_ALLGATHER:
		in = v;
		out = held = nranks * v;
		break;
	case COLLC_OP_BROADCAST:
		in = out = held = v;
		break;
	default:
		return 0;
	}
	if (d->opcode != COLLC_OP_ALLGATHER && d->opcode != COLLC_OP_BROADCAST &&
	    !collc_dtype_op_valid((int)d->dtype, (int)d->redop))
		return 0;
	if ((d->opcode == COLLC_OP_BROADCAST || d->opcode == COLLC_OP_REDUCE) && d->root >= nranks)
		return 0;
	if (held > limit || out > limit || held > NODE_EAGER_MAX || out > NODE_EAGER_MAX)
		return 0;
	*ret_in = in;
	*ret_out = out;
	return 1;
}

int node_eager_pair(const struct node_coll *d, uint32_t ndaemons, uint32_t nranks)
{
	uint64_t in, out;

	return ndaemons == 2 && node_eager_sizes(d, nranks, NODE_EAGER_MAX, &in, &out) &&
	       in * nranks <= NODE_PAIR_MAX;
}

void node_eager_compute(const struct node_coll *d, uint32_t nranks, const uint8_t *const *in,
			uint64_t in_bytes, uint8_t *out)
{
	const size_t n = in_bytes / collc_dtype_bytes((int)d->dtype);

	switch (d->opcode) {
	case COLLC_OP_BROADCAST:
		if (out != in[d->root])
			memmove(out, in[d->root], in_bytes);
		return;
	case COLLC_OP_ALLGATHER:
		/* An input already in its place (in place, or received there) stays. */
		for (uint32_t r = 0; r < nranks; r++)
			if (out + (uint64_t)r * in_bytes != in[r])
				memmove(out + (uint64_t)r * in_bytes, in[r], in_bytes);
		return;
	default: /* all-reduce, reduce, reduce-scatter: in rank order, one result for every rank */
		if (nranks < 2) {
			memmove(out, in[0], in_bytes);
			return;
		}
		red_reduce(out, in[0], in[1], n, (int)d->dtype, (int)d->redop);
		for (uint32_t r = 2; r < nranks; r++)
			red_reduce(out, out, in[r], n, (int)d->dtype, (int)d->redop);
		red_finish(out, n, (int)d->dtype, (int)d->redop, nranks);
	}
}
