/* SPDX-License-Identifier: MIT */
/*
 * One-shot, two-shot and one-shot LL, written once for every executor: which
 * elements a channel takes, the step sequence of one-shot and two-shot (which
 * rank's buffer each step reads, where it writes, and where the ranks meet),
 * which segment each rank reduces in two-shot, and how one-shot LL cuts a
 * share into rounds and lines. An executor loops
 *
 *   collc_oneshot_begin(&it, ...);
 *   while (collc_oneshot_next(&it, &step))
 *           switch (step.kind) { its barrier, its reduce, its copy }
 *
 * and keeps only its primitives: how ranks meet (the CPU's mailboxes, the
 * grid's flag barriers), how a reduce or a copy moves data.
 *
 * Every rank reads the same element range [lo, hi) of every peer's input:
 *   all-reduce, reduce (the root only): [lo, hi) of every send buffer,
 *     reduced in rank order 0 .. n-1 into [lo, hi) of dst;
 *   reduce-scatter: [lo, hi) of block `rank` of every send buffer, into
 *     [lo, hi) of dst;
 *   broadcast: [lo, hi) of the root's send buffer, into [lo, hi) of dst;
 *   allgather: [lo, hi) of rank p's send buffer, into [lo, hi) of block p
 *     of dst, for every p;
 *   two-shot all-reduce: phase 1 reduces segment `rank` of [lo, hi) from
 *     every send buffer into our dst; after MID, phase 2 copies segment q
 *     from rank q's dst, for every q != rank.
 * Every sequence opens with ARRIVE and closes with DONE.
 *
 * Where the executors differ, the sequence takes a parameter:
 *   align: the grid cuts shares and segments in whole 16-byte vectors, the
 *     CPU in single elements;
 *   rotate: the CPU visits peers from its own rank on, (rank + i) mod n;
 *     the grid in rank order, as each did before they shared this;
 *   round: the CPU reduces a one-shot all-reduce in rounds of its scratch
 *     buffer, each round a phase of its own (MID between rounds), because in
 *     place its result must wait in the scratch until every peer has read
 *     the round's input (step.hold); the grid reduces the share at once.
 * What the executors keep to themselves:
 *   how they meet: the grid's MID and DONE are full barriers; the CPU posts
 *     its phase counter at MID and waits only for the peers it reads next
 *     (a COPY from rank q's dst waits for q's MID), and at DONE for all;
 *   in place: the CPU holds a `hold` reduction in its scratch until the
 *     phase's end and sends other in-place reductions through the scratch in
 *     pieces; the grid reduces straight into dst, loading every source of a
 *     vector before storing it, and stages no `hold` step;
 *   one-shot LL's loops: each of the grid's threads pushes its lines of a
 *     round to every peer, then takes the same lines from every rank; the
 *     CPU pushes all lines of a round to one peer after another, then takes
 *     each peer's in rank order. No common step sequence fits both without
 *     rewriting the grid's loop, so only the rounds, the lines and which
 *     block goes where (collc_oll_*()) are shared.
 * Pure arithmetic, no memory access.
 */
#ifndef COLLC_PROTO_ALGO_ONESHOT_H
#define COLLC_PROTO_ALGO_ONESHOT_H

#include <stdint.h>

#include "proto/prims.h"

/*
 * Channel share `share` of nchannels takes elements [lo, hi) of count, in
 * pieces of a multiple of align elements (the grid: whole 16-byte vectors;
 * the CPU: 1).
 */
COLLC_HD void collc_oneshot_share(uint64_t count, uint32_t nchannels, uint32_t share,
				  uint64_t align, uint64_t *ret_lo, uint64_t *ret_hi)
{
	const uint64_t per = collc_round_up(collc_div_up(count, nchannels), align);
	const uint64_t lo = collc_min_u64(count, (uint64_t)share * per);

	*ret_lo = lo;
	*ret_hi = collc_min_u64(count, lo + per);
}

/* Two-shot: the segment [a, e) of the share [lo, hi) that rank q of nranks reduces. */
COLLC_HD void collc_twoshot_seg(uint64_t lo, uint64_t hi, uint32_t nranks, uint32_t q,
				uint64_t align, uint64_t *ret_a, uint64_t *ret_e)
{
	const uint64_t seg = collc_round_up(collc_div_up(hi - lo, nranks), align);
	const uint64_t a = collc_min_u64(hi, lo + (uint64_t)q * seg);

	*ret_a = a;
	*ret_e = collc_min_u64(hi, a + seg);
}

/* One step of one-shot or two-shot (collc_oneshot_next()). */
enum {
	COLLC_OS_ARRIVE, /* publish our buffers; wait until every peer published its own */
	COLLC_OS_MID,    /* a phase ends: its results are what peers read next */
	COLLC_OS_DONE,   /* the barrier after: no peer reads our buffers once we pass it */
	COLLC_OS_REDUCE, /* dst <- every rank's send buffer at src, reduced in rank order, finished */
	COLLC_OS_COPY,   /* dst <- rank peer's send (or receive) buffer at src */
};

struct collc_os_step {
	uint64_t src;       /* REDUCE, COPY: element offset into the source buffer(s) */
	uint64_t dst;       /* REDUCE, COPY: element offset into our receive buffer */
	uint64_t nelem;     /* REDUCE, COPY: elements; 0 still makes the step */
	uint32_t kind;      /* COLLC_OS_* */
	uint32_t peer;      /* COPY: the rank read */
	uint32_t from_recv; /* COPY: rank peer's receive buffer (two-shot phase 2), else its send */
	uint32_t hold;      /* REDUCE: peers read dst's range as their input in this same phase */
};

/* Private to collc_oneshot_begin() / collc_oneshot_next(). */
struct collc_os_iter {
	uint64_t count;  /* elements (per rank's block for allgather and reduce-scatter) */
	uint64_t lo, hi; /* the channel's share */
	uint64_t align;  /* two-shot segments: in multiples of align elements */
	uint64_t round;  /* one-shot all-reduce: elements a phase; 0: the whole share */
	uint64_t pos;    /* one-shot all-reduce: the next element to reduce */
	uint32_t coll, nranks, rank, root, rotate, twoshot;
	uint32_t state, i; /* where the sequence is; the next peer visit */
};

enum {
	COLLC_OS_S_ARRIVE,
	COLLC_OS_S_BODY,
	COLLC_OS_S_MID,
	COLLC_OS_S_PEERS,
	COLLC_OS_S_DONE,
	COLLC_OS_S_END
};

/*
 * Starts a channel's share [lo, hi) (collc_oneshot_share(), in multiples of
 * align) of a one-shot collective (COLLC_OP_*) of count elements, or of a
 * two-shot all-reduce (twoshot nonzero; it is ignored for other
 * collectives); rank of nranks, root for broadcast and reduce; rotate and
 * round as above. 0, or -1 for a collective one-shot does not run.
 */
COLLC_HD int collc_oneshot_begin(struct collc_os_iter *it, uint32_t coll, uint32_t nranks,
				 uint32_t rank, uint32_t root, uint64_t count, uint64_t lo,
				 uint64_t hi, uint64_t align, int twoshot, int rotate,
				 uint64_t round)
{
	it->count = count;
	it->lo = lo;
	it->hi = hi;
	it->align = align;
	it->round = round;
	it->pos = lo;
	it->coll = coll;
	it->nranks = nranks;
	it->rank = rank;
	it->root = root;
	it->rotate = rotate != 0;
	it->twoshot = twoshot && coll == COLLC_OP_ALLREDUCE;
	it->state = COLLC_OS_S_ARRIVE;
	it->i = 0;
	switch (coll) {
	case COLLC_OP_ALLREDUCE:
	case COLLC_OP_ALLGATHER:
	case COLLC_OP_REDUCE_SCATTER:
	case COLLC_OP_BROADCAST:
	case COLLC_OP_REDUCE:
		return 0;
	default:
		it->state = COLLC_OS_S_END;
		return -1;
	}
}

/* The next peer to visit, or nranks once every one was (two-shot skips our own rank). */
COLLC_HD uint32_t collc_oneshot_peer(struct collc_os_iter *it)
{
	for (; it->i < it->nranks; it->i++) {
		uint32_t p = it->rotate ? (it->rank + it->i) % it->nranks : it->i;

		if (!it->twoshot || p != it->rank) {
			it->i++;
			return p;
		}
	}
	return it->nranks;
}

/* The next step into *ret_step: 1, or 0 once the share is done. */
COLLC_HD int collc_oneshot_next(struct collc_os_iter *it, struct collc_os_step *ret_step)
{
	const uint64_t lo = it->lo, hi = it->hi;
	uint64_t a, e;
	uint32_t p;

	ret_step->src = lo;
	ret_step->dst = lo;
	ret_step->nelem = hi - lo;
	ret_step->peer = it->rank;
	ret_step->from_recv = 0;
	ret_step->hold = 0;
	switch (it->state) {
	case COLLC_OS_S_ARRIVE:
		ret_step->kind = COLLC_OS_ARRIVE;
		it->state = COLLC_OS_S_BODY;
		/* Reduce: only the root reads; the others go straight to the barrier after. */
		if (it->coll == COLLC_OP_REDUCE && it->rank != it->root)
			it->state = COLLC_OS_S_DONE;
		/* Allgather visits every rank; broadcast only the root. */
		if (it->coll == COLLC_OP_ALLGATHER || it->coll == COLLC_OP_BROADCAST)
			it->state = COLLC_OS_S_PEERS;
		return 1;
	case COLLC_OS_S_BODY:
		ret_step->kind = COLLC_OS_REDUCE;
		it->state = COLLC_OS_S_DONE;
		if (it->twoshot) {
			collc_twoshot_seg(lo, hi, it->nranks, it->rank, it->align, &a, &e);
			ret_step->src = a;
			ret_step->dst = a;
			ret_step->nelem = e - a;
			it->state = COLLC_OS_S_MID;
		} else if (it->coll == COLLC_OP_ALLREDUCE) {
			/* In rounds of `round` (an empty share: one empty round), a phase each. */
			a = it->pos;
			e = it->round ? collc_min_u64(hi, a + it->round) : hi;
			ret_step->src = a;
			ret_step->dst = a;
			ret_step->nelem = e - a;
			ret_step->hold = 1;
			it->pos = e;
			if (e < hi)
				it->state = COLLC_OS_S_MID;
		} else if (it->coll == COLLC_OP_REDUCE_SCATTER) {
			ret_step->src = (uint64_t)it->rank * it->count + lo;
		}
		return 1;
	case COLLC_OS_S_MID:
		ret_step->kind = COLLC_OS_MID;
		it->state = it->twoshot ? COLLC_OS_S_PEERS : COLLC_OS_S_BODY;
		return 1;
	case COLLC_OS_S_PEERS:
		if (it->coll == COLLC_OP_BROADCAST) {
			ret_step->kind = COLLC_OS_COPY;
			ret_step->peer = it->root;
			it->state = COLLC_OS_S_DONE;
			return 1;
		}
		p = collc_oneshot_peer(it);
		if (p < it->nranks) {
			ret_step->kind = COLLC_OS_COPY;
			ret_step->peer = p;
			if (it->twoshot) {
				/* Segment p, reduced by rank p into its dst in phase 1. */
				collc_twoshot_seg(lo, hi, it->nranks, p, it->align, &a, &e);
				ret_step->src = a;
				ret_step->dst = a;
				ret_step->nelem = e - a;
				ret_step->from_recv = 1;
			} else {
				ret_step->dst = (uint64_t)p * it->count + lo;
			}
			return 1;
		}
		/* Every peer visited: the barrier after. */
		ret_step->kind = COLLC_OS_DONE;
		it->state = COLLC_OS_S_END;
		return 1;
	case COLLC_OS_S_DONE:
		ret_step->kind = COLLC_OS_DONE;
		it->state = COLLC_OS_S_END;
		return 1;
	default:
		return 0;
	}
}

/*
 * One-shot LL (proto/prims.h): a share of `bytes` moves in rounds of at
 * most round_bytes; an empty share still runs one (empty) round (OLL1).
 */
COLLC_HD uint64_t collc_oll_rounds(uint64_t bytes, uint64_t round_bytes)
{
	return bytes ? collc_div_up(bytes, round_bytes) : 1;
}

/* Payload bytes of round k. */
COLLC_HD uint64_t collc_oll_round_len(uint64_t bytes, uint64_t round_bytes, uint64_t k)
{
	return bytes ? collc_min_u64(round_bytes, bytes - k * round_bytes) : 0;
}

/*
 * Where one-shot LL's pieces come from and go, as byte strides between
 * ranks: we send rank q the piece at q * in_stride of our input
 * (reduce-scatter: block q; all-reduce and allgather: every rank the same
 * piece), and store rank p's piece at p * out_stride of our output
 * (allgather: block p; all-reduce and reduce-scatter reduce every piece, in
 * rank order, into the one block).
 */
COLLC_HD uint64_t collc_oll_in_stride(uint32_t coll, uint64_t block_bytes)
{
	return coll == COLLC_OP_REDUCE_SCATTER ? block_bytes : 0;
}

COLLC_HD uint64_t collc_oll_out_stride(uint32_t coll, uint64_t block_bytes)
{
	return coll == COLLC_OP_ALLGATHER ? block_bytes : 0;
}

/* Payload bytes line i of a round of len bytes carries: 8, fewer at the end, 0 in an empty round. */
COLLC_HD uint32_t collc_oll_line_bytes(uint64_t len, uint64_t i)
{
	const uint64_t off = i * COLLC_LL_LINE_PAYLOAD;

	return (uint32_t)(len > off ? collc_min_u64(COLLC_LL_LINE_PAYLOAD, len - off) : 0);
}

#endif /* COLLC_PROTO_ALGO_ONESHOT_H */
