/* SPDX-License-Identifier: MIT */
/*
 * Ring algorithms of the CPU executor, one channel's share, over the
 * primitives of cpu/prims.c; the same code runs Simple, LL and LL128 (the
 * item's protocol picks the links and the step size).
 */
#include <errno.h>
#include <stdint.h>

#include "daemon/cpu/internal.h"
#include "proto/prims.h"
#include "proto/shm.h"

static int64_t clamp_elems(uint64_t size, uint64_t off, uint64_t chunk)
{
	return off >= size ? 0 : (int64_t)collc_min_u64(chunk, size - off);
}

static uint32_t mod(int64_t x, uint32_t n)
{
	return (uint32_t)(((x % n) + n) % n);
}

/* p + off, leaving NULL (a buffer of a rank that has none) alone. */
static const char *cat(const char *p, uint64_t off)
{
	return p ? p + off : NULL;
}

static char *at(char *p, uint64_t off)
{
	return p ? p + off : NULL;
}

static int ring_allreduce(struct cpu_run *x)
{
	const struct collc_work_item *it = x->it;
	const char *src = (const char *)(uintptr_t)it->sendbuf;
	char *dst = (char *)(uintptr_t)it->recvbuf;
	uint32_t n = it->nranks, me = it->rank, nch = it->nchannels, ch = x->share;
	uint64_t chunk = cpu_chunk_elems(x), count = it->count;
	uint64_t loop = (uint64_t)nch * n * chunk;
	int r = 0;

	for (uint64_t base = 0; base < count && r == 0; base += loop) {
		uint64_t real = collc_min_u64(chunk, collc_div_up(count - base, (uint64_t)nch * n));
#define OFF(j) (base + ((uint64_t)ch * n + (j)) * real)
#define NEL(j) clamp_elems(count, OFF(j), real)
#define B(j) (OFF(j) * x->es)
		uint32_t j = mod((int64_t)me - 1, n);

		r = cpu_prim(x, SEND, cat(src, B(j)), NULL, NEL(j));
		for (uint32_t k = 2; k < n && r == 0; k++) {
			j = mod((int64_t)me - k, n);
			r = cpu_prim(x, RECV_REDUCE_SEND, cat(src, B(j)), NULL, NEL(j));
		}
		j = me;
		if (r == 0)
			r = cpu_prim(x, RECV_REDUCE_COPY_SEND, cat(src, B(j)), at(dst, B(j)), NEL(j));
		for (uint32_t k = 1; k + 1 < n && r == 0; k++) {
			j = mod((int64_t)me - k, n);
			r = cpu_prim(x, RECV_COPY_SEND, NULL, at(dst, B(j)), NEL(j));
		}
		j = mod((int64_t)me + 1, n);
		if (r == 0)
			r = cpu_prim(x, RECV, NULL, at(dst, B(j)), NEL(j));
#undef OFF
#undef NEL
#undef B
	}
	return r;
}

/*
 * The collectives that move one per-rank block per step walk it in rounds of
 * nchannels chunks; channel ch takes chunk ch of each round.
 */
struct chunk_iter {
	uint64_t size, chunk, base;
	uint32_t nch, ch;
};

static struct chunk_iter chunks(const struct cpu_run *x, uint64_t size)
{
	return (struct chunk_iter){ .size = size, .chunk = cpu_chunk_elems(x),
				    .nch = x->it->nchannels, .ch = x->share };
}

static int next_chunk(struct chunk_iter *ci, uint64_t *off, int64_t *nel)
{
	uint64_t real;

	if (ci->base >= ci->size)
		return 0;
	real = collc_min_u64(ci->chunk, collc_div_up(ci->size - ci->base, ci->nch));
	*off = ci->base + (uint64_t)ci->ch * real;
	*nel = clamp_elems(ci->size, *off, real);
	ci->base += (uint64_t)ci->nch * ci->chunk;
	return 1;
}

static int ring_allgather(struct cpu_run *x)
{
	const struct collc_work_item *it = x->it;
	const char *src = (const char *)(uintptr_t)it->sendbuf;
	char *dst = (char *)(uintptr_t)it->recvbuf;
	uint32_t n = it->nranks, me = it->rank;
	uint64_t bb = it->count * x->es;
	struct chunk_iter ci = chunks(x, it->count);
	uint64_t off;
	int64_t nel;
	int r = 0;

	while (r == 0 && next_chunk(&ci, &off, &nel)) {
		uint64_t ob = off * x->es;

		r = cpu_prim(x, COPY_SEND, cat(src, ob), at(dst, (uint64_t)me * bb + ob), nel);
		for (uint32_t k = 1; k + 1 < n && r == 0; k++)
			r = cpu_prim(x, RECV_COPY_SEND, NULL,
				     at(dst, (uint64_t)mod((int64_t)me - k, n) * bb + ob), nel);
		if (r == 0)
			r = cpu_prim(x, RECV, NULL, at(dst, (uint64_t)mod((int64_t)me + 1, n) * bb + ob), nel);
	}
	return r;
}

static int ring_reduce_scatter(struct cpu_run *x)
{
	const struct collc_work_item *it = x->it;
	const char *src = (const char *)(uintptr_t)it->sendbuf;
	char *dst = (char *)(uintptr_t)it->recvbuf;
	uint32_t n = it->nranks, me = it->rank;
	uint64_t bb = it->count * x->es;
	struct chunk_iter ci = chunks(x, it->count);
	uint64_t off;
	int64_t nel;
	int r = 0;

	while (r == 0 && next_chunk(&ci, &off, &nel)) {
		uint64_t ob = off * x->es;

		r = cpu_prim(x, SEND, cat(src, (uint64_t)mod((int64_t)me - 1, n) * bb + ob), NULL, nel);
		for (uint32_t k = 2; k < n && r == 0; k++)
			r = cpu_prim(x, RECV_REDUCE_SEND,
				     cat(src, (uint64_t)mod((int64_t)me - k, n) * bb + ob), NULL, nel);
		if (r == 0)
			r = cpu_prim(x, RECV_REDUCE_COPY, cat(src, (uint64_t)me * bb + ob), at(dst, ob), nel);
	}
	return r;
}

static int ring_broadcast(struct cpu_run *x)
{
	const struct collc_work_item *it = x->it;
	const char *src = (const char *)(uintptr_t)it->sendbuf;
	char *dst = (char *)(uintptr_t)it->recvbuf;
	uint32_t n = it->nranks, me = it->rank, root = (uint32_t)it->root;
	struct chunk_iter ci = chunks(x, it->count);
	uint64_t off;
	int64_t nel;
	int r = 0;

	while (r == 0 && next_chunk(&ci, &off, &nel)) {
		uint64_t ob = off * x->es;

		if (me == root)
			r = cpu_prim(x, COPY_SEND, cat(src, ob), at(dst, ob), nel);
		else if ((me + 1) % n == root)
			r = cpu_prim(x, RECV, NULL, at(dst, ob), nel);
		else
			r = cpu_prim(x, RECV_COPY_SEND, NULL, at(dst, ob), nel);
	}
	return r;
}

static int ring_reduce(struct cpu_run *x)
{
	const struct collc_work_item *it = x->it;
	const char *src = (const char *)(uintptr_t)it->sendbuf;
	char *dst = (char *)(uintptr_t)it->recvbuf;
	uint32_t n = it->nranks, me = it->rank, root = (uint32_t)it->root;
	struct chunk_iter ci = chunks(x, it->count);
	uint64_t off;
	int64_t nel;
	int r = 0;

	while (r == 0 && next_chunk(&ci, &off, &nel)) {
		uint64_t ob = off * x->es;

		if (me == root)
			r = cpu_prim(x, RECV_REDUCE_COPY, cat(src, ob), at(dst, ob), nel);
		else if (mod((int64_t)me - 1, n) == root)
			r = cpu_prim(x, SEND, cat(src, ob), NULL, nel);
		else
			r = cpu_prim(x, RECV_REDUCE_SEND, cat(src, ob), NULL, nel);
	}
	return r;
}

int cpu_ring(struct cpu_run *x)
{
	int r = cpu_prims_setup(x);

	if (r < 0)
		return r;
	switch (x->it->coll) {
	case COLLC_OP_ALLREDUCE:
		return ring_allreduce(x);
	case COLLC_OP_ALLGATHER:
		return ring_allgather(x);
	case COLLC_OP_REDUCE_SCATTER:
		return ring_reduce_scatter(x);
	case COLLC_OP_BROADCAST:
		return ring_broadcast(x);
	case COLLC_OP_REDUCE:
		return ring_reduce(x);
	}
	return -EINVAL;
}
