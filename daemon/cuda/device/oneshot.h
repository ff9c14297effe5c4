/* SPDX-License-Identifier: MIT */
/*
 * One-shot and two-shot: every rank reads its peers' buffers directly
 * between flag barriers (os_barrier()), reducing or copying with reduce_n();
 * the step sequence (which rank's buffer each step reads, where it writes,
 * where the ranks meet) is proto/algo_oneshot.h's, shared with the CPU.
 * Also the one-rank case (single_rank()). Orderings: O1 (buffers and
 * pointers, system fence, then the slot flag) pairs with O1' (the flag with
 * acquire, wait_ge(), before peer data is read).
 */
#ifndef COLLCD_CUDA_DEVICE_ONESHOT_H
#define COLLCD_CUDA_DEVICE_ONESHOT_H

#include <stdint.h>

#include "daemon/cuda/device/common.h"
#include "daemon/cuda/device/reduce_kernel.h"
#include "proto/algo_oneshot.h"

/* Peer buffer pointers of the current one-shot op, filled by os_barrier(). */
__shared__ uint64_t sh_send[COLLC_MAX_RANKS], sh_recv[COLLC_MAX_RANKS];

/* U vectors of reduce_n() starting at vector i, T apart: every source's loads before their use. */
template <int U>
__device__ __forceinline__ void reduce_vecs(int dt, int op, uint32_t nr, int fin,
					    const uint64_t *srcs, uint32_t nsrc, uint64_t soff,
					    char *d, uint64_t i, uint64_t T)
{
	uint4 x[U], y[U];

	vecs_ld(x, (const char *)srcs[0] + soff, i, T);
	for (uint32_t p = 1; p < nsrc; p++) {
		vecs_ld(y, (const char *)srcs[p] + soff, i, T);
		vecs_red(x, y, dt, op);
	}
	if (fin)
		vecs_fin(x, dt, nr);
	vecs_st(d, x, i, T);
}

/* Multi-source reduce (or copy, npeers 1) of [lo, hi) bytes: dst = op over srcs, then finish. */
__device__ __noinline__ void reduce_n(struct blk *b, const uint64_t *srcs, uint32_t nsrc,
				      uint64_t soff, char *dst, uint64_t doff, uint64_t len,
				      int finish)
{
	const int dt = b->it->dtype, op = b->it->redop;
	const uint32_t nr = b->it->nranks, es = b->es;
	const int fin = finish && op == COLLC_AVG && nr > 1;
	const uint64_t T = blockDim.x;
	uintptr_t al = (uintptr_t)(dst + doff);
	uint64_t nvec, i = threadIdx.x;

	for (uint32_t p = 0; p < nsrc; p++)
		al |= (uintptr_t)(srcs[p] + soff);
	nvec = (al & 15) ? 0 : len / 16;
	for (; i + (COLLC_VEC_UNROLL - 1) * T < nvec; i += COLLC_VEC_UNROLL * T)
		reduce_vecs<COLLC_VEC_UNROLL>(dt, op, nr, fin, srcs, nsrc, soff, dst + doff, i, T);
	for (; i < nvec; i += T)
		reduce_vecs<1>(dt, op, nr, fin, srcs, nsrc, soff, dst + doff, i, T);
	for (uint64_t o = nvec * 16 + (uint64_t)threadIdx.x * es; o < len; o += T * es) {
		uint64_t x = ld_bytes((const char *)srcs[0] + soff + o, es);

		for (uint32_t p = 1; p < nsrc; p++)
			x = red8(dt, op, x, ld_bytes((const char *)srcs[p] + soff + o, es));
		if (fin)
			x = fin8(dt, nr, x);
		st_bytes(dst + doff + o, es, x);
	}
}

/* The barriers, as proto/algo_oneshot.h names its steps. */
enum { OS_ARRIVE = COLLC_OS_ARRIVE, OS_MID = COLLC_OS_MID, OS_DONE = COLLC_OS_DONE };

/* Publishes flag `which` = gen into every rank's slot for us, then waits for every rank's. */
__device__ int os_barrier(struct blk *b, int which, const char *src, char *dst)
{
	const uint32_t n = b->it->nranks, me = b->it->rank, t = threadIdx.x;
	__shared__ int os_abort;

	if (t == 0)
		os_abort = 0;
	__syncthreads(); /* every thread's stores to our buffers come first */
	if (t < n) {
		struct cuda_chan *peer = (struct cuda_chan *)b->ch->peers[b->peer_base + t];
		struct cuda_os_slot *s = &peer->os[me];
		uint64_t *flag = which == OS_ARRIVE ? &s->arrive
				 : which == OS_MID  ? &s->mid
						    : &s->done;

		if (which == OS_ARRIVE) {
			st_vol64(&s->send, (uint64_t)(uintptr_t)src);
			st_vol64(&s->recv, (uint64_t)(uintptr_t)dst);
		}
		/* O1: buffers and pointers, system fence, then the flag. */
		__threadfence_system();
		st_vol64(flag, b->os_gen);
	}
	if (t < n) {
		struct cuda_os_slot *s = &b->ch->os[t];
		const uint64_t *flag = which == OS_ARRIVE ? &s->arrive
				       : which == OS_MID  ? &s->mid
							  : &s->done;

		/* O1': pairs with O1. */
		if (wait_ge(b, flag, b->os_gen) < 0)
			os_abort = 1;
		else if (which == OS_ARRIVE) {
			sh_send[t] = ld_vol64(&s->send);
			sh_recv[t] = ld_vol64(&s->recv);
		}
	}
	__syncthreads();
	return os_abort ? -1 : 0;
}

/* The block's share [lo, hi) of the item's count elements, in pieces of whole 16-byte vectors. */
__device__ __forceinline__ void oneshot_share(const struct blk *b, uint64_t *lo, uint64_t *hi)
{
	collc_oneshot_share(b->it->count, b->it->nchannels, b->share, 16 / b->es, lo, hi);
}

/* Hierarchical all-reduce: the segment's all-reduce across daemons (hier.h). */
__device__ int hier_across(struct blk *b, const struct collc_work_item *whole, char *seg,
			   uint64_t n);

/*
 * One-shot or two-shot: the step sequence of proto/algo_oneshot.h, in rank
 * order and without rounds; MID and DONE are full barriers. A copy is a
 * one-source reduce_n() straight from the peer's pointer in sh_send /
 * sh_recv, which only ARRIVE writes. whole, where not NULL: a hierarchical
 * all-reduce's two-shot among a daemon's block (hier.h), whose segment
 * crosses the daemons before MID.
 */
__device__ __noinline__ int oneshot(struct blk *b, const char *src, char *dst, int twoshot,
				    const struct collc_work_item *whole)
{
	const uint32_t n = b->it->nranks;
	const uint64_t es = b->es;
	uint64_t lo, hi, seg_n = 0;
	struct collc_os_iter it;
	struct collc_os_step s;
	char *seg = NULL;
	int r = 0;

	oneshot_share(b, &lo, &hi);
	if (collc_oneshot_begin(&it, b->it->coll, n, b->it->rank, b->it->root, b->it->count, lo, hi,
				16 / es, twoshot, 0, 0) < 0)
		return -1;
	b->os_gen++;
	while (r == 0 && collc_oneshot_next(&it, &s)) {
		if (s.kind == COLLC_OS_REDUCE) {
			reduce_n(b, sh_send, n, s.src * es, dst, s.dst * es, s.nelem * es, 1);
			seg = dst + s.dst * es;
			seg_n = s.nelem;
		} else if (s.kind == COLLC_OS_COPY) {
			reduce_n(b, (s.from_recv ? sh_recv : sh_send) + s.peer, 1, s.src * es, dst,
				 s.dst * es, s.nelem * es, 0);
		} else { /* OS_ARRIVE, OS_MID, OS_DONE */
			if (whole && s.kind == OS_MID)
				r = hier_across(b, whole, seg, seg_n);
			if (r == 0)
				r = os_barrier(b, s.kind, src, dst);
		}
	}
	return r;
}

/* One rank alone (cpu/executor.c single_rank). */
__device__ void single_rank(struct blk *b, const char *src, char *dst)
{
	const uint64_t es = b->es, count = b->it->count;
	uint64_t per = collc_div_up(count, b->it->nchannels), off = (uint64_t)b->share * per, n;
	__shared__ uint64_t s1[1];
	int fin = b->it->coll != COLLC_OP_ALLGATHER && b->it->coll != COLLC_OP_BROADCAST;

	if (off >= count || !dst)
		return;
	n = collc_min_u64(per, count - off);
	if (threadIdx.x == 0)
		s1[0] = (uint64_t)(uintptr_t)src;
	__syncthreads();
	reduce_n(b, s1, 1, off * es, dst, off * es, n * es, fin);
}

#endif
