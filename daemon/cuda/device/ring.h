/* SPDX-License-Identifier: MIT */
/*
 * The ring algorithms: the step sequence of proto/algo_ring.h, each step one
 * of the seven prim<flags> instances (prims.h). No ordering of its own.
 */
#ifndef COLLCD_CUDA_DEVICE_RING_H
#define COLLCD_CUDA_DEVICE_RING_H

#include <stdint.h>

#include "daemon/cuda/device/common.h"
#include "daemon/cuda/device/prims.h"
#include "proto/algo_ring.h"

/* One step: its instance with the buffers its flags name (the others stay NULL, as prim() expects). */
template <int F>
__device__ __forceinline__ int ring_prim(struct blk *b, const char *src, char *dst,
					 const struct collc_ring_step &s)
{
	return prim<F>(b, (F & COLLC_P_SRC) ? src + s.src : NULL,
		       (F & COLLC_P_DST) ? dst + s.dst : NULL, s.nelem);
}

/* The rank at each ring position (blk.order, else the channel's order); NULL: the positions. */
__device__ __forceinline__ const uint8_t *ring_order(const struct blk *b)
{
	if (b->order)
		return b->order;
	return b->ch->ordered ? b->ch->order : NULL;
}

/* One channel's share of a ring collective, with this protocol's chunk; -1 when aborted. */
__device__ int ring_run(struct blk *b, const char *src, char *dst)
{
	struct collc_ring_iter ri;
	struct collc_ring_step s;
	int r = 0;

	if (collc_ring_begin(&ri, b->it->coll, b->it->nranks, b->it->rank, (uint32_t)b->it->root,
			     b->it->nchannels, b->share, b->it->count,
			     chunk_bytes(b->proto) / b->es, b->es) < 0)
		return -1;
	/* Only these two place blocks by rank: the others keep their one load less. */
	if (b->it->coll == COLLC_OP_ALLGATHER || b->it->coll == COLLC_OP_REDUCE_SCATTER)
		collc_ring_order(&ri, ring_order(b));
	while (r == 0 && collc_ring_next(&ri, &s)) {
		switch (s.flags) {
		case COLLC_PRIM_SEND:
			r = ring_prim<COLLC_PRIM_SEND>(b, src, dst, s);
			break;
		case COLLC_PRIM_RECV:
			r = ring_prim<COLLC_PRIM_RECV>(b, src, dst, s);
			break;
		case COLLC_PRIM_COPY_SEND:
			r = ring_prim<COLLC_PRIM_COPY_SEND>(b, src, dst, s);
			break;
		case COLLC_PRIM_RECV_REDUCE_SEND:
			r = ring_prim<COLLC_PRIM_RECV_REDUCE_SEND>(b, src, dst, s);
			break;
		case COLLC_PRIM_RECV_REDUCE_COPY_SEND:
			r = ring_prim<COLLC_PRIM_RECV_REDUCE_COPY_SEND>(b, src, dst, s);
			break;
		case COLLC_PRIM_RECV_REDUCE_COPY:
			r = ring_prim<COLLC_PRIM_RECV_REDUCE_COPY>(b, src, dst, s);
			break;
		case COLLC_PRIM_RECV_COPY_SEND:
			r = ring_prim<COLLC_PRIM_RECV_COPY_SEND>(b, src, dst, s);
			break;
		default:
			r = -1;
			break;
		}
	}
	return r;
}

#endif
