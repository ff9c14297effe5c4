/* SPDX-License-Identifier: MIT */
/*
 * Ring algorithms of the CPU executor, one channel's share: the step
 * sequence of proto/algo_ring.h over the primitives of cpu/prims.c; the
 * same code runs Simple, LL and LL128 (the item's protocol picks the links
 * and the step size).
 */
#include <errno.h>
#include <stdint.h>

#include "daemon/cpu/internal.h"
#include "proto/algo_ring.h"
#include "proto/prims.h"
#include "proto/shm.h"

/* p + off, leaving NULL (a buffer of a rank that has none) and an unused offset alone. */
static char *at(uint64_t p, uint64_t off)
{
	return p && off != COLLC_RING_NONE ? (char *)(uintptr_t)p + off : NULL;
}

/* The walk ahead (cpu_prims_ahead()): the same steps, from a copy of the iterator. */
static int ring_ahead(struct cpu_run *x, int *ret_flags, char **ret_dst, int64_t *ret_nelem)
{
	struct collc_ring_step s;

	if (!collc_ring_next(x->ahead_arg, &s))
		return 0;
	*ret_flags = s.flags;
	*ret_dst = at(x->it->recvbuf, s.dst);
	*ret_nelem = s.nelem;
	return 1;
}

int cpu_ring(struct cpu_run *x)
{
	const struct collc_work_item *it = x->it;
	struct collc_ring_iter ri, ahead;
	struct collc_ring_step s;
	int r = cpu_prims_setup(x);

	if (r < 0)
		return r;
	if (collc_ring_begin(&ri, it->coll, it->nranks, it->rank, (uint32_t)it->root, it->nchannels,
			     x->share, it->count, cpu_chunk_elems(x), x->es) < 0)
		return -EINVAL;
	collc_ring_order(&ri, x->rk->order);
	/*
	 * The user's buffers: a proxied send may go straight from them, and a
	 * proxied receive straight into them (prims.c).
	 */
	x->direct_ok = 1;
	ahead = ri;
	cpu_prims_ahead(x, ring_ahead, &ahead);
	while (r == 0 && collc_ring_next(&ri, &s))
		r = cpu_prim(x, s.flags, at(it->sendbuf, s.src), at(it->recvbuf, s.dst), s.nelem);
	if (r == 0)
		r = cpu_prims_flush(x);
	return r;
}
