/* SPDX-License-Identifier: MIT */
/*
 * Hierarchical collectives across daemons (COLLC_ALGO_HIER), the grid's form
 * of cpu/peer.c cpu_hier(). The daemon's ranks are a block of `group`
 * consecutive ring positions; they meet in one-shot's barriers (oneshot.h)
 * on a view of the item whose ranks are the block's and whose peers start at
 * the block's first position, and each crosses the daemons on its group
 * ring (ring.h or the prims over the group connections, Simple; the proxy
 * plays the other ends):
 *
 *   all-reduce:     two-shot among the block, and before MID the segment's
 *                   all-reduce on the group ring, in place in dst (AVG sums
 *                   until the ring ends and divides the segment there);
 *   all-gather:     the group ring gathers the blocks of the ranks at our
 *                   place of every daemon; after MID each rank copies from
 *                   its block's peers the blocks they gathered, the ranges
 *                   its own channel's ring moved (the ring replayed);
 *   reduce-scatter: the group ring reduce-scatters the blocks of our place,
 *                   and what each step sends or reduces is first summed,
 *                   one slot at a time, from the block's inputs into the
 *                   channel's scratch.
 *
 * No ordering of its own: one-shot's O1/O1' and the ring's S1/R1, R2/S2
 * (X1, X2 across daemons).
 */
#ifndef COLLCD_CUDA_DEVICE_HIER_H
#define COLLCD_CUDA_DEVICE_HIER_H

#include <stdint.h>

#include "daemon/cuda/device/common.h"
#include "daemon/cuda/device/oneshot.h"
#include "daemon/cuda/device/ring.h"

/* The views of the running item: [0] the block's two-shot, [1] the group ring's. */
__shared__ struct collc_work_item hier_view[2];
__shared__ uint64_t hier_seg[1];
/* The group ring's order: the rank at each of its positions (the ranks at our place). */
__shared__ uint8_t hier_order[COLLC_MAX_RANKS];

/* The block's fields of one ring's connections (prims.h uses these). */
struct hier_conns {
	uint64_t send_step, recv_step;
	char *my_simple, *nx_simple;
	uint64_t *next_tail, *prev_head, *my_head, *my_tail;
	uint32_t *next_len;
	struct cuda_xconn *prev_x;
};

/* Swaps the block's ring connections with c. */
__device__ __forceinline__ void hier_swap(struct blk *b, struct hier_conns *c)
{
	struct hier_conns t = { b->send_step, b->recv_step, b->my_simple, b->nx_simple,
				b->next_tail, b->prev_head, b->my_head,   b->my_tail,
				b->next_len,  b->prev_x };

	b->send_step = c->send_step;
	b->recv_step = c->recv_step;
	b->my_simple = c->my_simple;
	b->nx_simple = c->nx_simple;
	b->next_tail = c->next_tail;
	b->prev_head = c->prev_head;
	b->my_head = c->my_head;
	b->my_tail = c->my_tail;
	b->next_len = c->next_len;
	b->prev_x = c->prev_x;
	*c = t;
}

/*
 * The block's connections become the group ring's, as the channel state
 * keeps them; c holds the flat ring's until hier_leave().
 */
__device__ __forceinline__ void hier_enter(struct blk *b, struct hier_conns *c)
{
	const struct cuda_chan *ch = b->ch;

	*c = (struct hier_conns){ ch->g_send_step,
				  ch->g_recv_step,
				  (char *)(uintptr_t)ch->g_buf,
				  (char *)(uintptr_t)ch->g_next_buf,
				  (uint64_t *)(uintptr_t)ch->g_next_tail,
				  (uint64_t *)(uintptr_t)ch->g_head,
				  (uint64_t *)(uintptr_t)ch->g_next_head,
				  (uint64_t *)(uintptr_t)ch->g_tail,
				  (uint32_t *)(uintptr_t)ch->g_next_len,
				  (struct cuda_xconn *)(uintptr_t)ch->g_prev_x };
	hier_swap(b, c);
}

/* The flat ring's connections back; the group ring's steps stored once every thread is done. */
__device__ __forceinline__ void hier_leave(struct blk *b, struct hier_conns *c)
{
	hier_swap(b, c);
	__syncthreads();
	if (threadIdx.x == 0) {
		b->ch->g_send_step = c->send_step;
		b->ch->g_recv_step = c->recv_step;
	}
}

/* AVG's end: divides bytes of the result at p by every rank of the item (as whole). */
__device__ void hier_avg(struct blk *b, const struct collc_work_item *whole, char *p,
			 uint64_t bytes)
{
	const struct collc_work_item *view = b->it;

	__syncthreads(); /* every thread's stores of p come first */
	if (threadIdx.x == 0)
		hier_seg[0] = (uint64_t)(uintptr_t)p;
	__syncthreads();
	b->it = whole;
	reduce_n(b, hier_seg, 1, 0, p, 0, bytes, 1);
	__syncthreads();
	b->it = view;
}

/* All-reduce: the segment's all-reduce on the group ring, before MID (oneshot()). */
__device__ int hier_across(struct blk *b, const struct collc_work_item *whole, char *seg,
			   uint64_t n)
{
	const struct collc_work_item *view = b->it;
	const uint32_t share = b->share;
	struct hier_conns c;
	int r;

	if (threadIdx.x == 0) {
		hier_view[1].nchannels = 1;
		hier_view[1].count = n;
		hier_view[1].sendbuf = hier_view[1].recvbuf = (uint64_t)(uintptr_t)seg;
	}
	__syncthreads();
	/* The segment alone, as one channel: it is this channel's already. */
	b->it = &hier_view[1];
	b->share = 0;
	hier_enter(b, &c);
	r = ring_run(b, seg, seg);
	hier_leave(b, &c);
	b->share = share;
	b->it = view;
	if (r == 0 && n && whole->redop == COLLC_AVG)
		hier_avg(b, whole, seg, n * b->es);
	return r;
}

/* All-gather: the group ring's gather, then the block's copies (above). */
__device__ int hier_allgather(struct blk *b, const struct collc_work_item *whole, const char *src,
			      char *dst)
{
	const uint32_t g = b->ch->group, i = whole->rank % g, d = whole->nranks / g;
	const uint64_t es = b->es, bb = whole->count * es;
	struct hier_conns c;
	struct collc_ring_iter ri;
	struct collc_ring_step s;
	int r;

	b->os_gen++;
	r = os_barrier(b, OS_ARRIVE, src, dst);
	if (r < 0)
		return r;
	b->it = &hier_view[1];
	b->order = hier_order;
	hier_enter(b, &c);
	r = ring_run(b, src, dst);
	hier_leave(b, &c);
	b->order = NULL;
	b->it = &hier_view[0];
	if (r == 0)
		r = os_barrier(b, OS_MID, src, dst);
	if (r < 0)
		return r;
	if (collc_ring_begin(&ri, COLLC_OP_ALLGATHER, d, whole->rank / g, 0, whole->nchannels,
			     b->share, whole->count, chunk_bytes(b->proto) / es, es) < 0)
		return -1;
	/* Each round's chunk: the step that sends our own block names it. */
	while (collc_ring_next(&ri, &s)) {
		if (s.flags != COLLC_PRIM_COPY_SEND || s.nelem <= 0)
			continue;
		for (uint32_t j = 0; j < g; j++)
			for (uint32_t k = 0; k < d && j != i; k++) {
				uint32_t p = k * g + j;
				uint64_t at = (b->ch->ordered ? b->ch->order[p] : p) * bb + s.src;

				reduce_n(b, sh_recv + j, 1, at, dst, at, (uint64_t)s.nelem * es, 0);
			}
	}
	return os_barrier(b, OS_DONE, src, dst);
}

/* One piece of a reduce-scatter step: prim<F> from the scratch. */
template <int F>
__device__ __forceinline__ int hier_rs_prim(struct blk *b, const char *scratch, char *dst,
					    int64_t m)
{
	return prim<F>(b, scratch, (F & COLLC_P_DST) ? dst : NULL, m);
}

/* Reduce-scatter: the group ring's, over the block's partial sums (above). */
__device__ int hier_reduce_scatter(struct blk *b, const struct collc_work_item *whole,
				   const char *src, char *dst)
{
	const uint32_t g = b->ch->group;
	const uint64_t es = b->es, piece = CUDA_SIMPLE_SLOT / es;
	char *scratch = (char *)(uintptr_t)b->ch->g_scratch;
	struct hier_conns c;
	struct collc_ring_iter ri;
	struct collc_ring_step s;
	int r;

	b->os_gen++;
	r = os_barrier(b, OS_ARRIVE, src, dst);
	if (r < 0)
		return r;
	if (collc_ring_begin(&ri, COLLC_OP_REDUCE_SCATTER, whole->nranks / g, whole->rank / g, 0,
			     whole->nchannels, b->share, whole->count, chunk_bytes(b->proto) / es,
			     es) < 0)
		return -1;
	collc_ring_order(&ri, hier_order);
	b->it = &hier_view[1];
	hier_enter(b, &c);
	while (r == 0 && collc_ring_next(&ri, &s)) {
		uint64_t n = s.nelem > 0 ? (uint64_t)s.nelem : 0, e = 0;

		do {
			uint64_t m = collc_min_u64(piece, n - e);
			char *d = s.dst != COLLC_RING_NONE ? dst + s.dst + e * es : NULL;

			/* The scratch's last reader, the previous piece's prim, ended in a barrier. */
			if (m)
				reduce_n(b, sh_send, g, s.src + e * es, scratch, 0, m * es, 0);
			__syncthreads();
			if (s.flags == COLLC_PRIM_SEND)
				r = hier_rs_prim<COLLC_PRIM_SEND>(b, scratch, d, (int64_t)m);
			else if (s.flags == COLLC_PRIM_RECV_REDUCE_SEND)
				r = hier_rs_prim<COLLC_PRIM_RECV_REDUCE_SEND>(b, scratch, d,
									      (int64_t)m);
			else
				r = hier_rs_prim<COLLC_PRIM_RECV_REDUCE_COPY>(b, scratch, d,
									      (int64_t)m);
			if (r == 0 && d && m && whole->redop == COLLC_AVG)
				hier_avg(b, whole, d, m * es);
			__syncthreads();
			e += m;
		} while (r == 0 && e < n);
	}
	hier_leave(b, &c);
	b->it = &hier_view[0];
	if (r < 0)
		return r;
	return os_barrier(b, OS_DONE, src, dst);
}

/* One channel's share of a hierarchical collective; -1 when aborted or not one. */
__device__ int hier_run(struct blk *b, const char *src, char *dst)
{
	const struct collc_work_item *whole = b->it;
	const uint32_t g = b->ch->group;
	int r;

	if (!g || whole->nranks % g || whole->nranks / g < 2 ||
	    (whole->coll != COLLC_OP_ALLREDUCE && whole->coll != COLLC_OP_ALLGATHER &&
	     whole->coll != COLLC_OP_REDUCE_SCATTER))
		return -1;
	if (threadIdx.x == 0) {
		const uint32_t i = whole->rank % g;

		hier_view[0] = *whole;
		hier_view[0].nranks = g;
		hier_view[0].rank = i;
		if (whole->redop == COLLC_AVG)
			hier_view[0].redop = COLLC_SUM;
		hier_view[1] = hier_view[0];
		hier_view[1].algo = COLLC_ALGO_RING;
		hier_view[1].proto = COLLC_PROTO_SIMPLE;
		hier_view[1].nranks = whole->nranks / g;
		hier_view[1].rank = whole->rank / g;
		hier_view[1].root = 0;
		/* All-gather and reduce-scatter place blocks by rank: the ranks at our place. */
		if (whole->coll != COLLC_OP_ALLREDUCE)
			for (uint32_t k = 0; k < whole->nranks / g; k++)
				hier_order[k] = b->ch->ordered ? b->ch->order[k * g + i]
							       : (uint8_t)(k * g + i);
	}
	__syncthreads();
	b->it = &hier_view[0];
	b->peer_base = whole->rank - whole->rank % g;
	if (whole->coll == COLLC_OP_ALLGATHER)
		r = hier_allgather(b, whole, src, dst);
	else if (whole->coll == COLLC_OP_REDUCE_SCATTER)
		r = hier_reduce_scatter(b, whole, src, dst);
	else
		r = oneshot(b, src, dst, 1, whole);
	b->peer_base = 0;
	b->it = whole;
	return r;
}

#endif
