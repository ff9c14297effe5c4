/* SPDX-License-Identifier: MIT */
/*
 * Hierarchical all-reduce across daemons (COLLC_ALGO_HIER), the grid's form
 * of cpu/peer.c cpu_hier(): two-shot among the daemon's block of `group`
 * consecutive ring positions (oneshot.h, on a view of the item whose ranks
 * are the block's, and whose peers start at the block's first position),
 * and in its middle, before MID, the segment's all-reduce on the rank's
 * group ring (ring.h over the group connections, Simple, in place in dst;
 * the proxy plays its other ends). AVG sums until the ring ends and divides
 * the segment by every rank there. No ordering of its own: the two-shot's
 * O1/O1' and the ring's S1/R1, R2/S2 (X1, X2 across daemons).
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

/* The block's fields of one ring's connections (prims.h uses these). */
struct hier_conns {
	uint64_t send_step, recv_step;
	char *my_simple, *nx_simple;
	uint64_t *next_tail, *prev_head, *my_head, *my_tail;
	uint32_t *next_len;
};

__device__ __forceinline__ void hier_swap(struct blk *b, struct hier_conns *c)
{
	struct hier_conns t = { b->send_step, b->recv_step, b->my_simple,
				b->nx_simple, b->next_tail, b->prev_head,
				b->my_head,   b->my_tail,   b->next_len };

	b->send_step = c->send_step;
	b->recv_step = c->recv_step;
	b->my_simple = c->my_simple;
	b->nx_simple = c->nx_simple;
	b->next_tail = c->next_tail;
	b->prev_head = c->prev_head;
	b->my_head = c->my_head;
	b->my_tail = c->my_tail;
	b->next_len = c->next_len;
	*c = t;
}

__device__ int hier_across(struct blk *b, const struct collc_work_item *whole, char *seg,
			   uint64_t n)
{
	const struct collc_work_item *view = b->it;
	struct cuda_chan *ch = b->ch;
	struct hier_conns g = { ch->g_send_step,
				ch->g_recv_step,
				(char *)(uintptr_t)ch->g_buf,
				(char *)(uintptr_t)ch->g_next_buf,
				(uint64_t *)(uintptr_t)ch->g_next_tail,
				(uint64_t *)(uintptr_t)ch->g_head,
				(uint64_t *)(uintptr_t)ch->g_next_head,
				(uint64_t *)(uintptr_t)ch->g_tail,
				(uint32_t *)(uintptr_t)ch->g_next_len };
	const uint32_t share = b->share;
	int r;

	if (threadIdx.x == 0) {
		hier_view[1].count = n;
		hier_view[1].sendbuf = hier_view[1].recvbuf = (uint64_t)(uintptr_t)seg;
		hier_seg[0] = (uint64_t)(uintptr_t)seg;
	}
	__syncthreads();
	/* The segment alone, as one channel: it is this channel's already. */
	b->it = &hier_view[1];
	b->share = 0;
	hier_swap(b, &g);
	r = ring_run(b, seg, seg);
	hier_swap(b, &g);
	b->share = share;
	__syncthreads();
	if (threadIdx.x == 0) {
		ch->g_send_step = g.send_step;
		ch->g_recv_step = g.recv_step;
	}
	if (r == 0 && n && whole->redop == COLLC_AVG) {
		b->it = whole;
		reduce_n(b, hier_seg, 1, 0, seg, 0, n * b->es, 1);
		__syncthreads();
	}
	b->it = view;
	return r;
}

/* One channel's share of a hierarchical all-reduce; -1 when aborted or not one. */
__device__ int hier_run(struct blk *b, const char *src, char *dst)
{
	const struct collc_work_item *whole = b->it;
	const uint32_t g = b->ch->group;
	int r;

	if (!g || whole->nranks % g || whole->nranks / g < 2 || whole->coll != COLLC_OP_ALLREDUCE)
		return -1;
	if (threadIdx.x == 0) {
		hier_view[0] = *whole;
		hier_view[0].nranks = g;
		hier_view[0].rank = whole->rank % g;
		if (whole->redop == COLLC_AVG)
			hier_view[0].redop = COLLC_SUM;
		hier_view[1] = hier_view[0];
		hier_view[1].algo = COLLC_ALGO_RING;
		hier_view[1].proto = COLLC_PROTO_SIMPLE;
		hier_view[1].nranks = whole->nranks / g;
		hier_view[1].rank = whole->rank / g;
		hier_view[1].root = 0;
		hier_view[1].nchannels = 1;
	}
	__syncthreads();
	b->it = &hier_view[0];
	b->peer_base = whole->rank - whole->rank % g;
	r = oneshot(b, src, dst, 1, whole);
	b->peer_base = 0;
	b->it = whole;
	return r;
}

#endif
