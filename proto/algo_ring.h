/* SPDX-License-Identifier: MIT */
/*
 * The ring algorithms, written once for every executor: the sequence of
 * primitive calls (proto/prims.h COLLC_PRIM_*) one channel's share of an
 * item makes, with the byte offsets into the send and receive buffers and
 * the element count of each. An executor loops
 *
 *   collc_ring_begin(&it, ...);
 *   while (collc_ring_next(&it, &step))
 *           its_prim(step.flags, src + step.src, dst + step.dst, step.nelem);
 *
 * and keeps only its primitives (how a step waits, moves and reduces).
 *
 * Rank r sends to r + 1 and receives from r - 1, where r is the rank's
 * position on the ring: the communicator's rank, unless the executor runs
 * the ring in another order (collc_ring_order(): across daemons, each
 * daemon's ranks next to each other), when all-gather's and reduce-
 * scatter's blocks still sit in communicator rank order. The buffer is walked in
 * rounds; in each round every channel takes one chunk of `real` elements
 * (all-reduce: one chunk per rank, nranks chunks a channel), where real
 * shrinks in the last round so every channel keeps a share:
 *
 *   all-reduce (2n - 1 steps a round): SEND chunk r-1, RECV_REDUCE_SEND
 *     chunks r-2 .. r-n+1, RECV_REDUCE_COPY_SEND chunk r, RECV_COPY_SEND
 *     chunks r-1 .. r-n+2, RECV chunk r+1;
 *   allgather (n steps): COPY_SEND our block, RECV_COPY_SEND blocks
 *     r-1 .. r-n+2, RECV block r+1;
 *   reduce-scatter (n steps): SEND block r-1, RECV_REDUCE_SEND blocks
 *     r-2 .. r-n+1, RECV_REDUCE_COPY block r into dst;
 *   broadcast (1 step): the root COPY_SEND, the rank before it RECV, the
 *     others RECV_COPY_SEND;
 *   reduce (1 step): the root RECV_REDUCE_COPY, the rank after it SEND, the
 *     others RECV_REDUCE_SEND.
 *
 * Sender and receiver derive each step's count from the same arithmetic, so
 * they agree on the number of protocol steps of every call; an empty call
 * (nelem 0) is still made. Pure arithmetic, no memory access.
 */
#ifndef COLLC_PROTO_ALGO_RING_H
#define COLLC_PROTO_ALGO_RING_H

#include <stddef.h>
#include <stdint.h>

#include "proto/prims.h"
#include "proto/shm.h"

/* A step's offset into a buffer the step does not touch. */
#define COLLC_RING_NONE UINT64_MAX

struct collc_ring_step {
	uint64_t src;  /* byte offset into the send buffer; COLLC_RING_NONE: no COLLC_P_SRC */
	uint64_t dst;  /* byte offset into the receive buffer; COLLC_RING_NONE: no COLLC_P_DST */
	int64_t nelem; /* elements; 0 still makes the call */
	int flags;     /* one of COLLC_PRIM_* */
};

/* Private to collc_ring_begin() / collc_ring_next(). */
struct collc_ring_iter {
	uint64_t count; /* elements (per rank's block for allgather and reduce-scatter) */
	uint64_t chunk; /* elements of a full chunk */
	uint64_t es;    /* bytes of an element */
	uint64_t base;  /* first element of the current round */
	uint64_t real;  /* elements per chunk in the current round */
	uint32_t coll, nranks, rank, root, nch, share;
	uint32_t blocks;      /* chunks a channel takes per round: nranks for all-reduce, else 1 */
	uint32_t k, nk;       /* the step within the round; steps a round */
	const uint8_t *order; /* the rank at each ring position; NULL: the position itself */
};

/* (r - d) mod n for d <= n. */
COLLC_HD uint32_t collc_ring_back(uint32_t r, uint32_t d, uint32_t n)
{
	return (r + n - d) % n;
}

/* The block in all-gather and reduce-scatter buffers of the rank at position p. */
COLLC_HD uint64_t collc_ring_block(const struct collc_ring_iter *it, uint32_t p)
{
	return it->order ? it->order[p] : p;
}

COLLC_HD void collc_ring_round(struct collc_ring_iter *it)
{
	uint64_t per = (uint64_t)it->nch * it->blocks;

	if (it->base < it->count)
		it->real = collc_min_u64(it->chunk, collc_div_up(it->count - it->base, per));
}

/*
 * Starts channel share `share` of nchannels on a ring collective (COLLC_OP_*)
 * of count elements of elem_size bytes, in chunks of chunk_elems (>= 1);
 * rank of nranks (>= 2), root for broadcast and reduce. 0, or -1 for a
 * collective the ring does not run.
 */
COLLC_HD int collc_ring_begin(struct collc_ring_iter *it, uint32_t coll, uint32_t nranks,
			      uint32_t rank, uint32_t root, uint32_t nchannels, uint32_t share,
			      uint64_t count, uint64_t chunk_elems, uint64_t elem_size)
{
	it->count = count;
	it->chunk = chunk_elems;
	it->es = elem_size;
	it->base = 0;
	it->real = 0;
	it->coll = coll;
	it->nranks = nranks;
	it->rank = rank;
	it->root = root;
	it->nch = nchannels;
	it->share = share;
	it->blocks = 1;
	it->k = 0;
	it->order = NULL;
	switch (coll) {
	case COLLC_OP_ALLREDUCE:
		it->blocks = nranks;
		it->nk = 2 * nranks - 1;
		break;
	case COLLC_OP_ALLGATHER:
	case COLLC_OP_REDUCE_SCATTER:
		it->nk = nranks;
		break;
	case COLLC_OP_BROADCAST:
	case COLLC_OP_REDUCE:
		it->nk = 1;
		break;
	default:
		return -1;
	}
	collc_ring_round(it);
	return 0;
}

/*
 * After collc_ring_begin(): rank and root were ring positions, and
 * order[p] (nranks entries, kept by the caller) is the rank at position p.
 * All-reduce, broadcast and reduce need no order: their chunks are the
 * ring's own.
 */
COLLC_HD void collc_ring_order(struct collc_ring_iter *it, const uint8_t *order)
{
	it->order = order;
}

/* The next step into *ret_step: 1, or 0 once the share is done. */
COLLC_HD int collc_ring_next(struct collc_ring_iter *it, struct collc_ring_step *ret_step)
{
	const uint32_t n = it->nranks, me = it->rank, k = it->k;
	const uint64_t es = it->es, bb = it->count * es;
	uint64_t e, ob, src = COLLC_RING_NONE, dst = COLLC_RING_NONE;
	uint32_t j;
	int flags;

	if (it->base >= it->count)
		return 0;
	if (it->coll == COLLC_OP_ALLREDUCE) {
		/* j: the chunk of the round's n this step moves. */
		if (k == 0) {
			flags = COLLC_PRIM_SEND;
			j = collc_ring_back(me, 1, n);
		} else if (k < n - 1) {
			flags = COLLC_PRIM_RECV_REDUCE_SEND;
			j = collc_ring_back(me, k + 1, n);
		} else if (k == n - 1) {
			flags = COLLC_PRIM_RECV_REDUCE_COPY_SEND;
			j = me;
		} else if (k < 2 * n - 2) {
			flags = COLLC_PRIM_RECV_COPY_SEND;
			j = collc_ring_back(me, k - n + 1, n);
		} else {
			flags = COLLC_PRIM_RECV;
			j = (me + 1) % n;
		}
		e = it->base + ((uint64_t)it->share * n + j) * it->real;
		if (flags & COLLC_P_SRC)
			src = e * es;
		if (flags & COLLC_P_DST)
			dst = e * es;
	} else {
		/* One chunk of every rank's block: bb bytes apart. */
		e = it->base + (uint64_t)it->share * it->real;
		ob = e * es;
		switch (it->coll) {
		case COLLC_OP_ALLGATHER:
			if (k == 0) {
				flags = COLLC_PRIM_COPY_SEND;
				src = ob;
				j = me;
			} else if (k < n - 1) {
				flags = COLLC_PRIM_RECV_COPY_SEND;
				j = collc_ring_back(me, k, n);
			} else {
				flags = COLLC_PRIM_RECV;
				j = (me + 1) % n;
			}
			dst = collc_ring_block(it, j) * bb + ob;
			break;
		case COLLC_OP_REDUCE_SCATTER:
			if (k == 0) {
				flags = COLLC_PRIM_SEND;
				src = collc_ring_block(it, collc_ring_back(me, 1, n)) * bb + ob;
			} else if (k < n - 1) {
				flags = COLLC_PRIM_RECV_REDUCE_SEND;
				src = collc_ring_block(it, collc_ring_back(me, k + 1, n)) * bb + ob;
			} else {
				flags = COLLC_PRIM_RECV_REDUCE_COPY;
				src = collc_ring_block(it, me) * bb + ob;
				dst = ob;
			}
			break;
		case COLLC_OP_BROADCAST:
			if (me == it->root) {
				flags = COLLC_PRIM_COPY_SEND;
				src = ob;
			} else if ((me + 1) % n == it->root) {
				flags = COLLC_PRIM_RECV;
			} else {
				flags = COLLC_PRIM_RECV_COPY_SEND;
			}
			dst = ob;
			break;
		default: /* COLLC_OP_REDUCE: collc_ring_begin() let no other through */
			if (me == it->root) {
				flags = COLLC_PRIM_RECV_REDUCE_COPY;
				dst = ob;
			} else if (collc_ring_back(me, 1, n) == it->root) {
				flags = COLLC_PRIM_SEND;
			} else {
				flags = COLLC_PRIM_RECV_REDUCE_SEND;
			}
			src = ob;
			break;
		}
	}
	/* The chunk's elements: real, fewer at the end of the buffer, none past it. */
	ret_step->nelem = e >= it->count ? 0 : (int64_t)collc_min_u64(it->real, it->count - e);
	ret_step->src = src;
	ret_step->dst = dst;
	ret_step->flags = flags;
	if (++it->k == it->nk) {
		it->k = 0;
		it->base += (uint64_t)it->nch * it->blocks * it->chunk;
		collc_ring_round(it);
	}
	return 1;
}

#endif /* COLLC_PROTO_ALGO_RING_H */
