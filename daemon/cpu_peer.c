/* SPDX-License-Identifier: MIT */
/*
 * One-shot and two-shot algorithms of the CPU executor: every rank reads its
 * peers' buffers directly (all of them live in collcd's address space).
 *
 * Ranks meet in their mailboxes (struct cpu_mbox, one per rank and channel).
 * Each channel's share of an item runs:
 *
 *   before:  publish {src, dst, coll_id} under a fresh generation (B1) and
 *            wait until every peer published the same generation (B1');
 *   phases:  read peers' buffers, write our own; after each phase post
 *            done (B2); whoever must know a peer left a phase waits for it
 *            (B2');
 *   after:   wait until every peer posted its last done, so no peer still
 *            reads our buffers when we leave: only then may the client reuse
 *            them, or our next collective overwrite them or our mailbox.
 *
 * Both barriers run even for an empty input (count 0) and on channels whose
 * share is empty: an empty collective skips no guard, and every rank's
 * generation and done counters stay equal.
 *
 * Reductions run in the fixed order rank 0, 1, ..., n-1 from one copy of the
 * inputs, so every rank that computes an element computes it bitwise alike.
 *
 * In-place means sendbuf == recvbuf (or, for allgather and reduce_scatter,
 * the rank's slice of the larger buffer, as NCCL defines it). Buffers of
 * different ranks must not overlap, and other partial overlaps are undefined,
 * as in NCCL.
 */
#include <errno.h>
#include <string.h>

#include "daemon/cpu_int.h"
#include "daemon/log.h"
#include "daemon/reduce.h"
#include "proto/prims.h"
#include "proto/shm.h"

/* What the peers exposed for this item. */
struct peer_view {
	uint64_t done0; /* our done counter when the item began; peers' is the same */
	const char *src[COLLC_MAX_RANKS];
	char *dst[COLLC_MAX_RANKS];
};

static struct cpu_mbox *mbox_of(const struct cpu_run *x, uint32_t rank)
{
	return &x->rk->mbox[(size_t)rank * x->rk->nchan + x->ch];
}

static int barrier_before(const struct cpu_run *x, struct peer_view *pv)
{
	const struct collc_work_item *it = x->it;
	struct cpu_mbox *m = mbox_of(x, it->rank);
	uint64_t g = ++m->my_gen;
	int r;

	/* Peers read these only between our B1 for g and their B2 for this item. */
	m->coll_id = it->coll_id;
	m->src = it->sendbuf;
	m->dst = it->recvbuf;
	/* B1: pairs with B1' in every peer: the addresses (and our earlier writes to the buffers) before gen. */
	cpu_post(&m->gen, g, &m->seq, &m->waiting);
	pv->done0 = m->my_done;
	for (uint32_t p = 0; p < it->nranks; p++) {
		struct cpu_mbox *q = mbox_of(x, p);

		/*
		 * B1': pairs with B1 in peer p. Its gen cannot pass g before we post
		 * our last done of this item, so >= g means == g here.
		 */
		r = cpu_wait_ge(x, &q->gen, g, &q->seq, &q->waiting);
		if (r < 0)
			return r;
		if (q->coll_id != it->coll_id) {
			log_err("cpu: channel %u: rank %u meets rank %u in collective %llu, not %llu", x->ch,
				it->rank, p, (unsigned long long)q->coll_id, (unsigned long long)it->coll_id);
			return -EPROTO;
		}
		pv->src[p] = (const char *)(uintptr_t)q->src;
		pv->dst[p] = (char *)(uintptr_t)q->dst;
	}
	return 0;
}

/* Ends a phase: we are done reading peers' buffers of it, and our writes of it are visible. */
static void phase_done(const struct cpu_run *x)
{
	struct cpu_mbox *m = mbox_of(x, x->it->rank);

	/* B2: pairs with B2' in every peer: our reads and writes of the phase come first. */
	cpu_post(&m->done, ++m->my_done, &m->seq, &m->waiting);
}

static int wait_done(const struct cpu_run *x, uint32_t p, uint64_t value)
{
	struct cpu_mbox *q = mbox_of(x, p);

	/* B2': pairs with B2 in peer p. */
	return cpu_wait_ge(x, &q->done, value, &q->seq, &q->waiting);
}

static int wait_all_done(const struct cpu_run *x, uint64_t value)
{
	int r = 0;

	for (uint32_t p = 0; p < x->it->nranks && r == 0; p++)
		if (p != x->it->rank)
			r = wait_done(x, p, value);
	return r;
}

/* This channel's share [lo, hi) of size elements. */
static void share(const struct cpu_run *x, uint64_t size, uint64_t *lo, uint64_t *hi)
{
	uint64_t per = collc_div_up(size, x->it->nchannels);

	*lo = collc_min_u64(size, (uint64_t)x->share * per);
	*hi = collc_min_u64(size, *lo + per);
}

static int overlaps(const char *a, const char *b, uint64_t bytes)
{
	return bytes && a < b + bytes && b < a + bytes;
}

/* acc = src[0] op src[1] op ... op src[n-1] (at byte offset off), then the AVG finish. */
static void reduce_all(const struct cpu_run *x, char *acc, const char *const *src, uint64_t off,
		       uint64_t n)
{
	const struct collc_work_item *it = x->it;

	red_reduce(acc, src[0] + off, src[1] + off, n, it->dtype, it->redop);
	for (uint32_t k = 2; k < it->nranks; k++)
		red_reduce(acc, acc, src[k] + off, n, it->dtype, it->redop);
	red_finish(acc, n, it->dtype, it->redop, it->nranks);
}

/*
 * dst = the reduction of every rank's src at offset off, n elements. When dst
 * overlaps one of the inputs (in place) it goes through the scratch in
 * pieces, so no input is overwritten before it was read.
 */
static void reduce_to(const struct cpu_run *x, char *dst, const char *const *src, uint64_t off,
		      uint64_t n)
{
	uint64_t bytes = n * x->es, piece = CPU_SCRATCH_BYTES / x->es;
	int alias = 0;

	if (!n)
		return;
	for (uint32_t k = 0; k < x->it->nranks; k++)
		alias |= overlaps(dst, src[k] + off, bytes);
	if (!alias) {
		reduce_all(x, dst, src, off, n);
		return;
	}
	for (uint64_t i = 0; i < n; i += piece) {
		uint64_t m = collc_min_u64(piece, n - i);

		reduce_all(x, x->scratch, src, off + i * x->es, m);
		memcpy(dst + i * x->es, x->scratch, m * x->es);
	}
}

static void copy(char *dst, const char *src, uint64_t bytes)
{
	if (bytes && dst != src)
		memmove(dst, src, bytes);
}

/*
 * Every rank reduces the whole share from every peer's input, in rounds of
 * one scratch. Out of place the result goes straight to dst. In place, dst is
 * our input that peers are reading: the round's result waits in the scratch
 * until every peer posted done for the round (B2'). Every rank posts done
 * once a round, so the counts agree whoever is in place.
 */
static int oneshot_allreduce(const struct cpu_run *x, const struct peer_view *pv)
{
	const struct collc_work_item *it = x->it;
	uint32_t me = it->rank;
	uint64_t lo, hi, es = x->es, round = CPU_SCRATCH_BYTES / es, nrounds;
	char *dst = pv->dst[me];
	int inplace, r;

	share(x, it->count, &lo, &hi);
	nrounds = hi > lo ? collc_div_up(hi - lo, round) : 1;
	inplace = hi > lo && overlaps(dst + lo * es, pv->src[me] + lo * es, (hi - lo) * es);
	for (uint64_t k = 0; k < nrounds; k++) {
		uint64_t a = collc_min_u64(hi, lo + k * round), n = collc_min_u64(hi, a + round) - a;

		if (n)
			reduce_all(x, inplace ? x->scratch : dst + a * es, pv->src, a * es, n);
		phase_done(x);
		if (!inplace)
			continue;
		r = wait_all_done(x, pv->done0 + k + 1);
		if (r < 0)
			return r;
		copy(dst + a * es, x->scratch, n * es);
	}
	/* The barrier after (in place, the last round's wait was it). */
	return inplace ? 0 : wait_all_done(x, pv->done0 + nrounds);
}

/*
 * Reduce-scatter then all-gather through peer memory. The share splits into
 * nranks segments; rank q reduces segment q into its dst (phase 1), then every
 * rank copies segment q from rank q's dst (phase 2).
 *
 * In place, phase 2 overwrites our segment q, which is rank q's phase-1
 * input: we copy it only after rank q's first done (B2').
 */
static int twoshot_allreduce(const struct cpu_run *x, const struct peer_view *pv)
{
	const struct collc_work_item *it = x->it;
	uint32_t me = it->rank, n = it->nranks;
	uint64_t lo, hi, es = x->es, seg;
	char *dst = pv->dst[me];
	int r;

	share(x, it->count, &lo, &hi);
	seg = collc_div_up(hi - lo, n);
#define SEG_LO(q) collc_min_u64(hi, lo + (uint64_t)(q) * seg)
#define SEG_HI(q) collc_min_u64(hi, lo + (uint64_t)((q) + 1) * seg)
	if (SEG_HI(me) > SEG_LO(me))
		reduce_to(x, dst + SEG_LO(me) * es, pv->src, SEG_LO(me) * es, SEG_HI(me) - SEG_LO(me));
	phase_done(x);
	for (uint32_t i = 1; i < n; i++) {
		uint32_t q = (me + i) % n;

		r = wait_done(x, q, pv->done0 + 1);
		if (r < 0)
			return r;
		if (SEG_HI(q) > SEG_LO(q))
			copy(dst + SEG_LO(q) * es, pv->dst[q] + SEG_LO(q) * es, (SEG_HI(q) - SEG_LO(q)) * es);
	}
#undef SEG_LO
#undef SEG_HI
	phase_done(x);
	return wait_all_done(x, pv->done0 + 2);
}

/* Every rank copies every rank's input into its block of dst (its own in place: a no-op). */
static void oneshot_allgather(const struct cpu_run *x, const struct peer_view *pv)
{
	const struct collc_work_item *it = x->it;
	uint64_t lo, hi, es = x->es, bb = it->count * es;

	share(x, it->count, &lo, &hi);
	if (hi == lo)
		return;
	for (uint32_t i = 0; i < it->nranks; i++) {
		uint32_t q = (it->rank + i) % it->nranks;

		copy(pv->dst[it->rank] + q * bb + lo * es, pv->src[q] + lo * es, (hi - lo) * es);
	}
}

/* Rank r reduces block r of every rank's input into its dst. */
static void oneshot_reduce_scatter(const struct cpu_run *x, const struct peer_view *pv)
{
	const struct collc_work_item *it = x->it;
	uint64_t lo, hi, es = x->es, bb = it->count * es;

	share(x, it->count, &lo, &hi);
	reduce_to(x, pv->dst[it->rank] + lo * es, pv->src, it->rank * bb + lo * es, hi - lo);
}

/* Every rank copies the root's input. */
static void oneshot_broadcast(const struct cpu_run *x, const struct peer_view *pv)
{
	const struct collc_work_item *it = x->it;
	uint64_t lo, hi, es = x->es;

	share(x, it->count, &lo, &hi);
	if (hi > lo)
		copy(pv->dst[it->rank] + lo * es, pv->src[it->root] + lo * es, (hi - lo) * es);
}

/* The root reduces every rank's input; the others only keep their inputs until it is done. */
static void oneshot_reduce(const struct cpu_run *x, const struct peer_view *pv)
{
	const struct collc_work_item *it = x->it;
	uint64_t lo, hi, es = x->es;

	if (it->rank != (uint32_t)it->root)
		return;
	share(x, it->count, &lo, &hi);
	reduce_to(x, pv->dst[it->rank] + lo * es, pv->src, lo * es, hi - lo);
}

static int run(const struct cpu_run *x, int twoshot)
{
	struct peer_view pv;
	int r = barrier_before(x, &pv);

	if (r < 0)
		return r;
	switch (x->it->coll) {
	case COLLC_OP_ALLREDUCE:
		return twoshot ? twoshot_allreduce(x, &pv) : oneshot_allreduce(x, &pv);
	case COLLC_OP_ALLGATHER:
		oneshot_allgather(x, &pv);
		break;
	case COLLC_OP_REDUCE_SCATTER:
		oneshot_reduce_scatter(x, &pv);
		break;
	case COLLC_OP_BROADCAST:
		oneshot_broadcast(x, &pv);
		break;
	case COLLC_OP_REDUCE:
		oneshot_reduce(x, &pv);
		break;
	}
	/* The barrier after: no peer reads our buffers once we leave. */
	phase_done(x);
	return wait_all_done(x, pv.done0 + 1);
}

int cpu_oneshot(struct cpu_run *x)
{
	return run(x, 0);
}

/* Two-shot is an all-reduce algorithm; other collectives that carry it run one-shot. */
int cpu_twoshot(struct cpu_run *x)
{
	return run(x, 1);
}
