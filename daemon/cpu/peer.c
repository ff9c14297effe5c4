/* SPDX-License-Identifier: MIT */
/*
 * One-shot and two-shot algorithms of the CPU executor: every rank reads its
 * peers' buffers directly (all of them live in collcd's address space).
 * The step sequence (which rank's buffer each step reads, where it writes,
 * where the ranks meet), the shares and one-shot LL's rounds are
 * proto/algo_oneshot.h's, shared with the grid; the barriers, the reductions
 * and the scratch here are the CPU's own.
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
 *
 * One-shot LL (all-reduce, allgather, reduce-scatter) is the exception to
 * all of the above but the fixed order and the in-place rules: no barrier, no
 * peer buffer, ranks push LL lines into each other's inboxes (oneshot_ll()
 * below).
 */
#include <errno.h>
#include <string.h>

#include "common/atomics.h"
#include "daemon/cpu/internal.h"
#include "daemon/log.h"
#include "daemon/cpu/reduce.h"
#include "proto/algo_oneshot.h"
#include "proto/algo_ring.h"
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
			log_err("cpu: channel %u: rank %u meets rank %u in collective %llu, not %llu",
				x->ch, it->rank, p, (unsigned long long)q->coll_id,
				(unsigned long long)it->coll_id);
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

/* This channel's share [lo, hi) of size elements (proto/algo_oneshot.h), in pieces of any length. */
static void share(const struct cpu_run *x, uint64_t size, uint64_t *lo, uint64_t *hi)
{
	collc_oneshot_share(size, x->it->nchannels, x->share, 1, lo, hi);
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
 * dst = the reduction of every rank's src at offset off, n elements, in
 * pieces of the scratch's size. When dst overlaps one of the inputs (in
 * place) each piece goes through the scratch, so no input is overwritten
 * before it was read. Between pieces it looks for a revocation, so a revoked
 * communicator's large reduction stops within one piece: -ECANCELED then, as
 * cpu_wait() returns.
 */
static int reduce_to(const struct cpu_run *x, char *dst, const char *const *src, uint64_t off,
		     uint64_t n)
{
	const uint64_t es = x->es, piece = CPU_ROUND_BYTES / es;
	int alias = 0;

	for (uint32_t k = 0; k < x->it->nranks; k++)
		alias |= overlaps(dst, src[k] + off, n * es);
	for (uint64_t i = 0; i < n; i += piece) {
		uint64_t m = collc_min_u64(piece, n - i);

		if (i && cpu_cancelled(x))
			return -ECANCELED;
		if (!alias) {
			reduce_all(x, dst + i * es, src, off + i * es, m);
			continue;
		}
		reduce_all(x, x->scratch, src, off + i * es, m);
		memcpy(dst + i * es, x->scratch, m * es);
	}
	return 0;
}

static void copy(char *dst, const char *src, uint64_t bytes)
{
	if (bytes && dst != src)
		memmove(dst, src, bytes);
}

/*
 * One-shot LL (proto/prims.h, "One-shot LL"): all-reduce, allgather and
 * reduce-scatter. The channel's share of count elements (count as the call
 * names it: per rank for allgather and reduce-scatter) moves in rounds of at
 * most CPU_OLL_SLOT_LINES lines; each round takes a fresh generation g of the
 * mailbox (my_gen, shared with the items above), and every rank pushes its
 * piece of the round as lines of flag(g) into slot g of every peer's inbox,
 * then takes the lines the peers pushed into its own: all-reduce and
 * reduce-scatter reduce them in rank order with their own piece, allgather
 * stores them. An empty share still runs one round of one line (OLL1).
 */

/* One peer's lines of one round in our inbox, and how many of them were taken. */
struct oll_arg {
	const union collc_ll_line *lines;
	uint32_t flag;
	uint64_t nlines, next; /* lines of the round; lines already taken */
	char *out;             /* their payload, len bytes */
	uint64_t len;
};

static int oll_ready(void *arg)
{
	struct oll_arg *a = arg;

	for (; a->next < a->nlines; a->next++) {
		uint64_t p;
		uint32_t n =
			collc_oll_line_bytes(a->len, a->next); /* 0 for an empty round's line */

		/* R-LL (cpu_ll_load()): pairs with W-LL in oll_push(). */
		if (!cpu_ll_load(&a->lines[a->next], a->flag, &p))
			return 0;
		if (n)
			memcpy(a->out + a->next * COLLC_LL_LINE_PAYLOAD, &p, n);
	}
	return 1;
}

/* Waits for peer p's lines of round g (len bytes of payload) and copies them to out. */
static int oll_pull(const struct cpu_run *x, uint32_t p, uint64_t g, char *out, uint64_t len)
{
	struct cpu_mbox *m = mbox_of(x, x->it->rank);
	struct oll_arg a = {
		.lines = m->oll + collc_oll_line(g, x->it->nranks, p, 0, CPU_OLL_SLOT_LINES),
		.flag = collc_ll_flag(g),
		.nlines = collc_oll_lines(len),
		.out = out,
		.len = len,
	};

	if (oll_ready(&a))
		return 0;
	/* The pusher wakes our mailbox's sleeper (oll_push()); the lines themselves say when. */
	return cpu_wait(x, oll_ready, &a, &m->seq, &m->waiting);
}

/* Writes our piece of round g (len bytes at in) into peer q's inbox, then wakes q. */
static void oll_push(const struct cpu_run *x, uint32_t q, uint64_t g, const char *in, uint64_t len)
{
	struct cpu_mbox *qm = mbox_of(x, q);
	union collc_ll_line *lines =
		qm->oll + collc_oll_line(g, x->it->nranks, x->it->rank, 0, CPU_OLL_SLOT_LINES);
	uint64_t nlines = collc_oll_lines(len);
	uint32_t flag = collc_ll_flag(g);

	for (uint64_t i = 0; i < nlines; i++) {
		uint64_t p = 0;
		uint32_t n = collc_oll_line_bytes(len, i); /* 0: an empty round */

		if (n)
			memcpy(&p, in + i * COLLC_LL_LINE_PAYLOAD, n);
		/* W-LL (cpu_ll_store()): pairs with R-LL in oll_ready(). */
		cpu_ll_store(&lines[i], p, flag);
	}
	cpu_wake(&qm->seq, &qm->waiting);
}

/* Rank p's piece of buf at byte pos, stride bytes a rank (collc_oll_*_stride()); NULL if empty. */
static char *oll_at(uint64_t buf, uint32_t p, uint64_t stride, uint64_t pos, uint64_t len)
{
	return len ? (char *)(uintptr_t)buf + p * stride + pos : NULL;
}

/*
 * One round: len bytes at byte pos of a rank's block (every block of
 * allgather's dst and reduce-scatter's src; all-reduce has one). We push, and
 * read our own piece, before we write dst, and write no byte that a later
 * round or another channel reads, so in place works: allgather's src is then
 * our block of dst, which peers' pieces never land in, and reduce-scatter's
 * dst our block of src, of which the round writes only the piece it read.
 */
static int oll_round(const struct cpu_run *x, uint64_t g, uint64_t pos, uint64_t len)
{
	const struct collc_work_item *it = x->it;
	uint32_t me = it->rank, n = it->nranks;
	uint64_t ne = len / x->es, bb = it->count * x->es;
	uint64_t ins = collc_oll_in_stride(it->coll, bb), outs = collc_oll_out_stride(it->coll, bb);
	int gather = it->coll == COLLC_OP_ALLGATHER;
	const char *own = oll_at(it->sendbuf, me, ins, pos, len);
	char *acc = x->stage_out;
	int r;

	/*
	 * OLL1: pairs with this fence in every peer. Acquire: a peer wrote its
	 * lines of g - 1, which we read, after this fence and so after its reads
	 * of our g - 2; those reads come before our lines of g overwrite that
	 * slot. Release: in turn, our reads of g - 1 come before our lines of g,
	 * after which a peer may overwrite the slot of g - 1 with g + 1.
	 */
	fence_acq_rel();
	for (uint32_t i = 1; i < n; i++) {
		uint32_t q = (me + i) % n;

		/* Reduce-scatter sends each peer its own block; the others, our piece to all. */
		oll_push(x, q, g, oll_at(it->sendbuf, q, ins, pos, len), len);
	}
	if (gather)
		copy(oll_at(it->recvbuf, me, outs, pos, len), own,
		     len); /* in place: the same bytes */
	/*
	 * Allgather: each peer's piece straight into its block of dst. Else acc =
	 * piece 0 op piece 1 op ... op piece n-1: our own from src, the others as
	 * they land.
	 */
	for (uint32_t p = 0; p < n; p++) {
		char *got = gather ? oll_at(it->recvbuf, p, outs, pos, len) : p ? x->stage_in : acc;

		if (p != me && (r = oll_pull(x, p, g, got, len)) < 0)
			return r;
		if (!gather && p && ne)
			red_reduce(acc, p == 1 && me == 0 ? own : acc, p == me ? own : got, ne,
				   it->dtype, it->redop);
	}
	if (gather || !ne)
		return 0;
	red_finish(acc, ne, it->dtype, it->redop, n);
	memcpy(oll_at(it->recvbuf, 0, outs, pos, len), acc, len);
	return 0;
}

static int oneshot_ll(struct cpu_run *x)
{
	struct cpu_mbox *m = mbox_of(x, x->it->rank);
	uint64_t lo, hi, rb = CPU_OLL_SLOT_LINES * COLLC_LL_LINE_PAYLOAD, bytes, nrounds;
	int r;

	share(x, x->it->count, &lo, &hi);
	bytes = (hi - lo) * x->es;
	nrounds = collc_oll_rounds(bytes, rb);
	for (uint64_t k = 0; k < nrounds; k++) {
		uint64_t off = k * rb, len = collc_oll_round_len(bytes, rb, k);

		/* Rounds may never wait long enough to see an abort: look every 16. */
		if ((++x->nsteps & 15) == 0 && cpu_cancelled(x))
			return -ECANCELED;
		r = oll_round(x, ++m->my_gen, lo * x->es + off, len);
		if (r < 0)
			return r;
	}
	return 0;
}

/*
 * One-shot or two-shot: the step sequence of proto/algo_oneshot.h over the
 * mailboxes. A phase ends at MID or DONE with our done posted (B2); at DONE
 * we wait for every peer's, at MID only when a reduction is held, and a COPY
 * from a peer's dst waits for that peer's (B2'). Every rank posts the same
 * number of dones, whoever is in place.
 *
 * In place, a one-shot all-reduce round (step.hold) writes our input while
 * peers read it: its result waits in the scratch (a round is one scratch)
 * until every peer posted done for the round. Other in-place reductions
 * read the range they write only themselves, and go through the scratch in
 * pieces (reduce_to()).
 */
static int group_ring(const struct cpu_run *x, const struct collc_work_item *whole, char *seg,
		      uint64_t n);

static int run(const struct cpu_run *x, int twoshot, const struct collc_work_item *whole)
{
	const struct collc_work_item *it = x->it;
	const uint32_t me = it->rank;
	const uint64_t es = x->es;
	struct peer_view pv;
	struct collc_os_iter os;
	struct collc_os_step s;
	uint64_t lo, hi, phases = 0, held_bytes = 0, seg_n = 0;
	char *held = NULL; /* where the scratch's held result goes */
	char *seg = NULL;  /* hierarchical: our segment of dst, reduced in phase 1 */
	int r = 0;

	share(x, it->count, &lo, &hi);
	if (collc_oneshot_begin(&os, it->coll, it->nranks, me, it->root, it->count, lo, hi, 1,
				twoshot, 1, CPU_ROUND_BYTES / es) < 0)
		return -EINVAL;
	while (r == 0 && collc_oneshot_next(&os, &s)) {
		/* An empty step touches no buffer: a rank may pass none for count 0. */
		char *d = s.kind >= COLLC_OS_REDUCE && s.nelem ? pv.dst[me] + s.dst * es : NULL;
		uint64_t bytes = s.nelem * es;

		switch (s.kind) {
		case COLLC_OS_ARRIVE:
			r = barrier_before(x, &pv);
			break;
		case COLLC_OS_REDUCE:
			if (!bytes)
				break;
			if (s.hold && overlaps(d, pv.src[me] + s.src * es, bytes)) {
				reduce_all(x, x->scratch, pv.src, s.src * es, s.nelem);
				held = d;
				held_bytes = bytes;
			} else {
				r = reduce_to(x, d, pv.src, s.src * es, s.nelem);
			}
			seg = d;
			seg_n = s.nelem;
			break;
		case COLLC_OS_COPY:
			/* A peer's dst holds its result once it posted the phase that wrote it. */
			if (s.from_recv)
				r = wait_done(x, s.peer, pv.done0 + phases);
			if (r == 0 && bytes)
				copy(d,
				     (s.from_recv ? pv.dst[s.peer] : pv.src[s.peer]) + s.src * es,
				     bytes);
			break;
		default: /* COLLC_OS_MID, COLLC_OS_DONE */
			/* Hierarchical: the segment across daemons before the peers copy it. */
			if (whole && s.kind == COLLC_OS_MID)
				r = group_ring(x, whole, seg, seg_n);
			if (r < 0)
				break;
			phase_done(x);
			phases++;
			if (held || s.kind == COLLC_OS_DONE)
				r = wait_all_done(x, pv.done0 + phases);
			if (r == 0 && held) {
				copy(held, x->scratch, held_bytes);
				held = NULL;
			}
			break;
		}
	}
	return r;
}

/* One-shot LL carries all-reduce, allgather and reduce-scatter; the others run Simple. */
int cpu_oneshot(struct cpu_run *x)
{
	if (x->it->proto == COLLC_PROTO_LL && collc_oll_coll(x->it->coll))
		return oneshot_ll(x);
	return run(x, 0, NULL);
}

/* Two-shot is an all-reduce algorithm; other collectives that carry it run one-shot. */
int cpu_twoshot(struct cpu_run *x)
{
	return run(x, 1, NULL);
}

/*
 * Hierarchical all-reduce (COLLC_ALGO_HIER) on a communicator spanning
 * daemons whose every daemon holds group consecutive ring positions (the
 * block). It is two-shot among the block, with the daemons in its middle:
 *
 *   phase 1: rank i of the block reduces segment i of the channel's share
 *            from the block's inputs into its own dst (reduce-scatter);
 *   across:  the segment's all-reduce on rank i's group ring, the ranks at
 *            place i of every block (cpu/ring.c over the group connections;
 *            the proxy plays the ends on other daemons), in place in dst;
 *   phase 2: after MID, rank i copies segment q from the dst of rank q of
 *            its block (all-gather).
 *
 * The block's ranks meet in their own mailboxes (the block's first
 * position's mailbox is the view's rank 0). AVG reduces as SUM up to the
 * end of the ring and divides the segment by every rank of the
 * communicator there. Each element is reduced within a block in block
 * order and across daemons by the ring, once, and every rank copies the
 * same bytes: all ranks receive the same result. The group ring crosses
 * daemons, so its steps are Simple whatever the item says.
 */
/*
 * Points y at the group ring of x's rank (item `it`, rank view `rk`, both
 * the caller's): it becomes whole's collective among the ranks at its place
 * of every block, ring, Simple; rk sends and receives on the group
 * connections of x's channel and places blocks by order (NULL: none).
 */
static void group_view(const struct cpu_run *x, const struct collc_work_item *whole,
		       const uint8_t *order, struct collc_work_item *it, struct cpu_rank *rk,
		       struct cpu_run *y)
{
	const uint32_t g = x->rk->group;

	*it = *whole;
	it->algo = COLLC_ALGO_RING;
	it->proto = COLLC_PROTO_SIMPLE;
	it->nranks = whole->nranks / g;
	it->rank = whole->rank / g;
	it->root = 0;
	*rk = *x->rk;
	rk->send[x->ch] = x->rk->gsend[x->ch];
	rk->recv[x->ch] = x->rk->grecv[x->ch];
	rk->order = order;
	*y = *x;
	y->it = it;
	y->rk = rk;
	y->direct_steps = 0;
	y->ahead = NULL; /* cpu_ring() walks its own steps ahead; other calls land in slots */
}

/*
 * All-gather's and reduce-scatter's start: the block's ranks meet in the
 * block's view v (pv: their buffers), and y becomes x's group ring with
 * order (filled here: the rank at each of its positions, the ranks at our
 * place of every block) placing the blocks.
 */
static int group_meet(const struct cpu_run *x, const struct cpu_run *v, uint8_t *order,
		      struct collc_work_item *it, struct cpu_rank *grk, struct cpu_run *y,
		      struct peer_view *pv)
{
	const uint32_t g = x->rk->group, d = x->it->nranks / g, i = x->it->rank % g;

	for (uint32_t b = 0; b < d; b++)
		order[b] = x->rk->order ? x->rk->order[b * g + i] : (uint8_t)(b * g + i);
	group_view(x, x->it, order, it, grk, y);
	return barrier_before(v, pv);
}

static int group_ring(const struct cpu_run *x, const struct collc_work_item *whole, char *seg,
		      uint64_t n)
{
	struct collc_work_item it;
	struct cpu_rank rk;
	struct cpu_run y;
	int r;

	group_view(x, whole, NULL, &it, &rk, &y);
	/* The segment alone, as one channel: it is this channel's already. */
	it.redop = x->it->redop; /* the block view's: AVG sums until the end below */
	it.nchannels = 1;
	it.count = n;
	it.sendbuf = it.recvbuf = (uint64_t)(uintptr_t)seg;
	y.share = 0;
	r = cpu_ring(&y);
	if (r == 0 && n && whole->redop == COLLC_AVG)
		red_finish(seg, n, whole->dtype, COLLC_AVG, whole->nranks);
	return r;
}

/*
 * Hierarchical all-gather: rank i of the block first gathers, on its group
 * ring, the blocks of the ranks at place i of every daemon (cpu/ring.c, the
 * blocks placed by communicator rank through the group's order); after MID
 * it copies from each peer j of its block the blocks that j gathered so.
 * A channel copies exactly the element ranges its own ring moved (the same
 * ring arithmetic, replayed), since only the channel's peers wrote them
 * before their MID. In place (our block of the output as the input) nothing
 * is read that a peer writes: peers read only the blocks of our place from
 * us, which we wrote before our MID.
 */
static int hier_allgather(const struct cpu_run *x, struct cpu_run *v)
{
	const struct collc_work_item *whole = x->it;
	const uint32_t g = x->rk->group, d = whole->nranks / g, i = whole->rank % g;
	const uint64_t es = x->es, bb = whole->count * es;
	struct collc_work_item it;
	struct cpu_rank grk;
	struct cpu_run y;
	uint8_t order[COLLC_MAX_RANKS];
	struct collc_ring_iter ri;
	struct collc_ring_step s;
	struct peer_view pv;
	char *mine = (char *)(uintptr_t)whole->recvbuf;
	int r;

	r = group_meet(x, v, order, &it, &grk, &y, &pv);
	if (r < 0)
		return r;
	r = cpu_ring(&y);
	if (r < 0)
		return r;
	phase_done(v);
	r = wait_all_done(v, pv.done0 + 1);
	if (r < 0)
		return r;
	if (collc_ring_begin(&ri, COLLC_OP_ALLGATHER, d, it.rank, 0, it.nchannels, y.share,
			     it.count, cpu_chunk_elems(&y), es) < 0)
		return -EINVAL;
	/* Each round's chunk: the step that sends our own block names it. */
	while (collc_ring_next(&ri, &s)) {
		if (s.flags != COLLC_PRIM_COPY_SEND || s.nelem <= 0)
			continue;
		for (uint32_t j = 0; j < g; j++)
			for (uint32_t b = 0; b < d && j != i; b++) {
				uint32_t p = b * g + j;
				uint64_t at = (x->rk->order ? x->rk->order[p] : p) * bb + s.src;

				copy(mine + at, pv.dst[j] + at, (uint64_t)s.nelem * es);
			}
	}
	phase_done(v);
	return wait_all_done(v, pv.done0 + 2);
}

/*
 * Hierarchical reduce-scatter: rank i of the block reduce-scatters, on its
 * group ring, the blocks of the ranks at place i of every daemon, and the
 * ring's input is the block's partial sum, made as the ring needs it: before
 * each step that sends or reduces, one step's elements of that block are
 * reduced from the block's inputs (in block order) into the scratch, and the
 * step reads them from there. So every element crosses daemons once, as the
 * ring's, and the block is read once, with no buffer but the scratch (one
 * step). The steps are cut to the scratch's size alike on every rank of the
 * ring, so sender and receiver agree on them. The block's peers read our
 * input until their rings end: we leave only after every one posted its
 * phase. In place (our block of the input is our output) nothing a peer
 * reads is written: peers read from us only the blocks of their own place.
 */
static int hier_reduce_scatter(const struct cpu_run *x, struct cpu_run *v)
{
	const struct collc_work_item *whole = x->it;
	const uint32_t g = x->rk->group, d = whole->nranks / g;
	const uint64_t es = x->es;
	struct collc_work_item it;
	struct cpu_rank grk;
	struct cpu_run y;
	uint8_t order[COLLC_MAX_RANKS];
	struct collc_ring_iter ri;
	struct collc_ring_step s;
	struct peer_view pv;
	uint64_t piece;
	char *out = (char *)(uintptr_t)whole->recvbuf;
	int r;

	r = group_meet(x, v, order, &it, &grk, &y, &pv);
	if (r < 0)
		return r;
	it.redop = v->it->redop; /* the block view's: AVG sums until the end below */
	r = cpu_prims_setup(&y);
	if (r < 0)
		return r;
	/* The scratch is rewritten every step: no send may go from it later. */
	y.direct_ok = 0;
	piece = collc_min_u64(y.step_bytes, CPU_SCRATCH_BYTES) / es;
	if (collc_ring_begin(&ri, COLLC_OP_REDUCE_SCATTER, d, it.rank, 0, it.nchannels, y.share,
			     it.count, cpu_chunk_elems(&y), es) < 0)
		return -EINVAL;
	collc_ring_order(&ri, order);
	while (r == 0 && collc_ring_next(&ri, &s)) {
		uint64_t n = s.nelem > 0 ? (uint64_t)s.nelem : 0, e = 0;

		do {
			uint64_t m = collc_min_u64(piece, n - e), at = s.src + e * es;
			char *dst = s.dst != COLLC_RING_NONE ? out + s.dst + e * es : NULL;

			/* The block view sums AVG: its finish divides nothing. */
			if (m)
				reduce_all(v, x->scratch, pv.src, at, m);
			r = cpu_prim(&y, s.flags, x->scratch, dst, (int64_t)m);
			if (r == 0 && dst && m && whole->redop == COLLC_AVG)
				red_finish(dst, m, whole->dtype, COLLC_AVG, whole->nranks);
			e += m;
		} while (r == 0 && e < n);
	}
	if (r < 0)
		return r;
	phase_done(v);
	return wait_all_done(v, pv.done0 + 1);
}

int cpu_hier(struct cpu_run *x)
{
	const struct collc_work_item *whole = x->it;
	const uint32_t g = x->rk->group;
	struct collc_work_item it;
	struct cpu_rank rk;
	struct cpu_run y;

	if (!g || whole->nranks % g || whole->nranks / g < 2 ||
	    (whole->coll != COLLC_OP_ALLREDUCE && whole->coll != COLLC_OP_ALLGATHER &&
	     whole->coll != COLLC_OP_REDUCE_SCATTER))
		return -EINVAL;
	it = *whole;
	it.nranks = g;
	it.rank = whole->rank % g;
	if (it.redop == COLLC_AVG)
		it.redop = COLLC_SUM;
	rk = *x->rk;
	rk.mbox = x->rk->mbox + (size_t)(whole->rank - it.rank) * rk.nchan;
	y = *x;
	y.it = &it;
	y.rk = &rk;
	if (whole->coll == COLLC_OP_ALLGATHER)
		return hier_allgather(x, &y);
	if (whole->coll == COLLC_OP_REDUCE_SCATTER)
		return hier_reduce_scatter(x, &y);
	return run(&y, 1, whole);
}
