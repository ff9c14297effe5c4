/* SPDX-License-Identifier: MIT */
/*
 * The proxy's view of a grid ring that crosses daemons (grid.h struct
 * cuda_xconn; the orderings X1-X4 are listed in xconn.c). Plain C, no CUDA:
 * tests/unit/test_xlink.c plays the grid's side on a host thread.
 */
#include "daemon/cuda/xlink.h"

#include "common/atomics.h"

/* The proxy's view of one ring (exec.h struct exec_link). */
static uint64_t xl_tail(void *p)
{
	/* X1': pairs with X1 in the grid: the payload and len, then tail. */
	return load_acquire(&((struct cuda_xconn *)p)->tail);
}

static uint64_t xl_head(void *p)
{
	/* X2': pairs with X2 in the grid: the slot was consumed, then head. */
	return load_acquire(&((struct cuda_xconn *)p)->head);
}

static uint32_t xl_len(void *p, uint64_t step)
{
	/* After X1' saw tail pass step: the grid stored len before its fence and tail. */
	return load_relaxed(&((struct cuda_xconn *)p)->len[step % COLLC_STEPS]);
}

static void xl_post_tail(void *p, uint64_t v, uint32_t len)
{
	struct cuda_xconn *x = p;

	store_relaxed(&x->len[(v - 1) % COLLC_STEPS], len);
	/* X3: the landed payload, then tail; the grid acquires it at system scope (R1). */
	store_release(&x->tail, v);
}

static void xl_post_head(void *p, uint64_t v)
{
	/* X4: the slot was sent, it is free; the grid acquires it at system scope (S2). */
	store_release(&((struct cuda_xconn *)p)->head, v);
}

void cuda_xconn_link(struct cuda_xconn *h, struct exec_link *ret)
{
	*ret = (struct exec_link){
		.l = h,
		.buf = (char *)h->buf,
		.slot_bytes = CUDA_SIMPLE_SLOT,
		.nslots = COLLC_STEPS,
		.tail = xl_tail,
		.head = xl_head,
		.len = xl_len,
		.post_tail = xl_post_tail,
		.post_head = xl_post_head,
		/* The grid cannot write an eventfd: the proxy polls (node.c). */
		.watch = NULL,
		/* A receive ring's step of another length than the grid computed (prims.h). */
		.broken = &h->broken,
	};
}
