/* SPDX-License-Identifier: MIT */
/*
 * Launch, reap and timeouts: a collective every rank submitted is planned
 * against its executor's config and appended to the device FIFOs; its items'
 * work_consumed turns it into completions; a rank that keeps the others
 * waiting past the timeout ends it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/atomics.h"
#include "common/futex.h"
#include "daemon/log.h"
#include "daemon/node.h"
#include "daemon/sched_int.h"
#include "daemon/sqe_check.h"
#include "daemon/plan.h"
#include "proto/algo_copy.h"
#include "proto/dtype.h"

/* FIFOs */

static uint32_t fifo_channels(const struct fifo_host *fh)
{
	return sched.execs[fh->exec_idx].ex->max_channels;
}

int sched_fifo_has_room(uint32_t dev)
{
	struct fifo_host *fh = &sched.fifos[dev];
	uint64_t need;

	if (fh->tail < COLLC_FIFO_DEPTH)
		return 1;
	need = fh->tail - COLLC_FIFO_DEPTH + 1;
	for (uint32_t ch = 0; ch < fifo_channels(fh); ch++)
		/* F1: pairs with the executor's release of work_consumed after it read the item. */
		if (load_acquire(&fh->f->ctrl.work_consumed[ch].value) < need)
			return 0;
	return 1;
}

int sched_fifo_ready(uint32_t dev)
{
	return sched_fifo_has_room(dev) && !sched.fifos[dev].gated_sl;
}

/*
 * Work batches (proto/work.h): the items written in one pass stay unpublished
 * until batch_publish(), at the end of the pass or when the batch is full.
 */
static void batch_publish(struct fifo_host *fh)
{
	if (!fh->batch_n)
		return;
	/*
	 * B2: the batch's last item says so. The grid's channel blocks publish
	 * work_consumed there (E1) however the poller cut the batch into units.
	 */
	fh->f->items[(fh->batch_first + fh->batch_n - 1) & (COLLC_FIFO_DEPTH - 1)].batch_last = 1;
	for (uint32_t k = 0; k < fh->batch_n; k++) {
		uint64_t pos = fh->batch_first + k;

		/* W1: pairs with the executor's acquire load of seq: the item is whole first. */
		store_release(&fh->f->items[pos & (COLLC_FIFO_DEPTH - 1)].seq, pos + 1);
	}
	/*
	 * B1: every item of the batch, body and seq, before published; pairs
	 * with B1' in the grid's poller, which reads the batch whole after its
	 * acquire of published.
	 */
	store_release(&fh->f->ctrl.published, fh->batch_first + fh->batch_n);
	sched.batches++;
	sched.batch_items += fh->batch_n;
	fh->batch_n = 0;
	sched.execs[fh->exec_idx].ex->kick(fh->dev);
}

/* Counts the item just written at fh->tail into fh's open batch. */
void sched_fifo_append(struct fifo_host *fh)
{
	if (!fh->batch_n)
		fh->batch_first = fh->tail;
	fh->batch_n++;
	fh->tail++;
	fh->used = 1;
	if (fh->batch_n == COLLC_BATCH_MAX)
		batch_publish(fh);
}

/* Publishes every FIFO's open batch: the end of a scheduler pass's launches. */
static void batch_publish_all(void)
{
	for (uint32_t d = 0; d < sched.ndevs; d++)
		batch_publish(&sched.fifos[d]);
}

/* Have the channels [base, base + nchannels) mod C of dev passed position pos? */
int sched_coll_done_on(uint32_t dev, uint64_t pos, uint32_t base, uint32_t nchannels)
{
	struct collc_work_fifo *f = sched.fifos[dev].f;
	uint32_t max = fifo_channels(&sched.fifos[dev]);

	for (uint32_t k = 0; k < nchannels; k++)
		/* F2: pairs with the executor's release after the item's last write to user buffers. */
		if (load_acquire(&f->ctrl.work_consumed[(base + k) % max].value) <= pos)
			return 0;
	return 1;
}

/* Has every rank's item of an in-flight collective been consumed by its executor? */
int sched_slot_executed(const struct comm *cm, const struct slot *sl)
{
	/* Consumed maybe, but as a skip: sched_gated_poll() decides what it was. */
	if (sl->gate_state == GATED_UNDECIDED)
		return 0;
	/* Revoked: the node layer dropped the blocks (node_comm_revoke()), nothing lands. */
	if (sl->net_blocks && !cm->revoked)
		return 0;
	for (uint32_t r = 0; r < cm->nranks; r++)
		if (comm_rank_local(cm, r) &&
		    !sched_coll_done_on(cm->devs[r], sl->ranks[r].fifo_pos, sl->chan_base,
					sl->nchannels))
			return 0;
	return 1;
}

/* All-to-allv: the most bytes one rank receives. */
static uint64_t alltoallv_bytes(const struct slot *sl, uint32_t nranks)
{
	uint64_t most = 0;

	for (uint32_t r = 0; r < nranks; r++) {
		const uint64_t *recvcounts = sl->ranks[r].v + 2 * nranks;
		uint64_t sum = 0, es = collc_dtype_bytes(sl->ranks[r].sqe.dtype);

		/* Ranks of other daemons (a communicator spanning daemons): not known here. */
		if (!sl->ranks[r].v)
			continue;
		/* Each count fits its registration in bytes; their sum may still wrap: saturate. */
		for (uint32_t p = 0; p < nranks; p++)
			if (__builtin_add_overflow(sum, recvcounts[p] * es, &sum))
				sum = UINT64_MAX;
		if (sum > most)
			most = sum;
	}
	return most;
}

static int64_t rank_bytes(const struct slot *sl, uint32_t nranks)
{
	uint32_t first = 0;
	const struct collc_sqe *e;
	uint64_t b;

	/* Across daemons rank 0 may live elsewhere: the first rank that submitted here. */
	while (first + 1 < nranks && !sl->ranks[first].client)
		first++;
	e = &sl->ranks[first].sqe;
	b = e->count * collc_dtype_bytes(e->dtype);

	if (e->opcode == COLLC_OP_ALLTOALLV)
		return (int64_t)alltoallv_bytes(sl, nranks);
	if (e->opcode == COLLC_OP_ALLGATHER || e->opcode == COLLC_OP_REDUCE_SCATTER ||
	    e->opcode == COLLC_OP_ALLTOALL)
		b *= nranks;
	return (int64_t)b;
}

/* All-to-allv: rank i sends rank j what rank j expects from rank i, for every i and j. */
static int alltoallv_agree(const struct comm *cm, const struct slot *sl)
{
	const uint32_t n = cm->nranks;

	for (uint32_t i = 0; i < n; i++)
		for (uint32_t j = 0; j < n; j++)
			/* Pairs across daemons: the root compares digests (net_ask()). */
			if (comm_rank_local(cm, i) && comm_rank_local(cm, j) &&
			    sl->ranks[i].v[j] != sl->ranks[j].v[2 * n + i])
				return 0;
	return 1;
}

/* The ranks agree on what they run; otherwise every one of them fails. */
uint32_t sched_first_local(const struct comm *cm)
{
	uint32_t r = 0;

	while (!comm_rank_local(cm, r))
		r++;
	return r;
}

static int slot_consistent(const struct comm *cm, const struct slot *sl)
{
	const struct collc_sqe *a = &sl->ranks[sched_first_local(cm)].sqe;

	for (uint32_t r = 0; r < cm->nranks; r++) {
		const struct slot_rank *sr = &sl->ranks[r];

		if (!comm_rank_local(cm, r))
			continue;
		if (sr->err)
			return sr->err;
		if (sr->sqe.opcode != a->opcode || sr->sqe.count != a->count ||
		    sr->sqe.dtype != a->dtype)
			return -EINVAL;
		if (a->opcode != COLLC_OP_ALLGATHER && a->opcode != COLLC_OP_BROADCAST &&
		    a->opcode != COLLC_OP_ALLTOALL && a->opcode != COLLC_OP_ALLTOALLV &&
		    sr->sqe.redop != a->redop)
			return -EINVAL;
		if ((a->opcode == COLLC_OP_BROADCAST || a->opcode == COLLC_OP_REDUCE) &&
		    sr->sqe.root != a->root)
			return -EINVAL;
	}
	if (a->opcode == COLLC_OP_ALLTOALLV && !alltoallv_agree(cm, sl))
		return -EINVAL;
	return 0;
}

static uint64_t buf_addr(const struct mr *m, uint64_t off)
{
	return m ? (uint64_t)(uintptr_t)m->addr + off : 0;
}

/*
 * What the planner must know of the buffers: does some rank's buffer live in
 * memory its peers cannot read directly, and does some rank run in place on
 * an executor whose one-shot cannot?
 */
static uint32_t slot_plan_flags(const struct comm *cm, const struct slot *sl, uint32_t caps)
{
	uint32_t flags = 0;

	for (uint32_t r = 0; r < cm->nranks; r++) {
		const struct slot_rank *sr = &sl->ranks[r];

		if (!comm_rank_local(cm, r))
			continue;
		if ((sr->send_mr && (sr->send_mr->flags & EXEC_MEM_NO_PEER_READ)) ||
		    (sr->recv_mr && (sr->recv_mr->flags & EXEC_MEM_NO_PEER_READ)))
			flags |= PLAN_NO_PEER_READ;
		if (!(caps & EXEC_CAP_ONESHOT_INPLACE) && sr->send_mr &&
		    sr->send_mr == sr->recv_mr && sr->sqe.send_off == sr->sqe.recv_off)
			flags |= PLAN_INPLACE;
	}
	return flags;
}

/* Collectives across daemons below this many bytes a rank run on one channel. */
#define NET_ONE_CHANNEL_BYTES (256u << 10)

/*
 * Rank i's and rank j's blocks of an all-to-all(v) (elements): what i sends
 * j, and what j expects from i, as far as this daemon knows them (its own
 * ranks' counts).
 */
static uint64_t a2a_send_count(const struct slot *sl, uint32_t n, uint32_t i, uint32_t j)
{
	const struct slot_rank *sr = &sl->ranks[i];

	return sr->sqe.opcode == COLLC_OP_ALLTOALL ? sr->sqe.count : sr->v[j];
}

static uint64_t a2a_recv_count(const struct slot *sl, uint32_t n, uint32_t j, uint32_t i)
{
	const struct slot_rank *sr = &sl->ranks[j];

	return sr->sqe.opcode == COLLC_OP_ALLTOALL ? sr->sqe.count : sr->v[2 * n + i];
}

/* One term of the all-to-allv digests: a mix of (sender, receiver, count). */
static uint64_t a2a_term(uint32_t i, uint32_t j, uint64_t count)
{
	uint64_t z = count + 0x9e3779b97f4a7c15ull * (((uint64_t)i << 8 | j) + 1);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/*
 * Whether collcd's environment sets test hook `name` to `value` (read once,
 * into *cache, which starts at -1): hooks that let CI run paths meant for
 * a GPU on the CPU executor.
 */
static int test_hook(int *cache, const char *name, const char *value)
{
	if (*cache < 0) {
		const char *e = getenv(name);

		*cache = e && !strcmp(e, value);
	}
	return *cache;
}

/*
 * All-to-all(v) across daemons runs as blocks (a2a_blocks()) on an executor
 * without the relay on the ring that can stage its memory (the grid). Every
 * daemon of a communicator runs the same executor (node.c: every rank uses
 * a GPU or none does), so all choose alike.
 */
static int a2a_as_blocks(const struct comm *cm)
{
	static int forced = -1;
	const struct exec_backend *ex = sched.execs[cm->exec_idx].ex;

	/*
	 * Test hook: COLLCD_NET_A2A=blocks in collcd's environment makes the
	 * executors with the relay (the CPU one) run blocks too, so that CI
	 * runs them without a GPU; every daemon of a communicator needs it alike.
	 */
	return cm->local && (test_hook(&forced, "COLLCD_NET_A2A", "blocks") ||
			     (!(ex->caps & EXEC_CAP_NET_RELAY) && ex->copy));
}

/*
 * This daemon's verdict on a collective of a communicator spanning daemons:
 * 0, EINVAL (its ranks disagree), or EOPNOTSUPP (a relay block of 4 GiB or
 * more: the relay's lengths are 32-bit; or an all-to-all on an executor
 * with neither the relay nor blocks). The root ends the collective on
 * every rank with it.
 */
static uint32_t net_verdict(struct comm *cm, const struct slot *sl)
{
	const struct collc_sqe *a = &sl->ranks[sched_first_local(cm)].sqe;
	const uint64_t es = collc_dtype_bytes(a->dtype);

	if (slot_consistent(cm, sl))
		return EINVAL;
	if (a->opcode != COLLC_OP_ALLTOALL && a->opcode != COLLC_OP_ALLTOALLV)
		return collc_copy_coll(a->opcode) ? EOPNOTSUPP : 0;
	if (a2a_as_blocks(cm))
		return 0; /* blocks have 64-bit lengths */
	if (!(sched.execs[cm->exec_idx].ex->caps & EXEC_CAP_NET_RELAY)) {
		if (!cm->warned_relay)
			log_warn("communicator %llu: all-to-all across daemons: the %s executor "
				 "runs neither the relay nor staged blocks: -EOPNOTSUPP",
				 (unsigned long long)cm->id, sched.execs[cm->exec_idx].ex->name);
		cm->warned_relay = 1;
		return EOPNOTSUPP;
	}
	for (uint32_t i = 0; i < cm->nranks; i++)
		for (uint32_t j = 0; j < cm->nranks && comm_rank_local(cm, i); j++)
			if (a2a_send_count(sl, cm->nranks, i, j) > COLLC_RELAY_BLOCK_MAX / es ||
			    a2a_recv_count(sl, cm->nranks, i, j) > COLLC_RELAY_BLOCK_MAX / es)
				return EOPNOTSUPP;
	return 0;
}

/*
 * All-to-allv across daemons: no daemon sees every count, so each sends the
 * root two sums, over its own ranks, of a2a_term() of what they send and of
 * what they expect; the counts agree everywhere when the daemons' send sums
 * add up to their receive sums (node.c root_coll()).
 */
static void net_digests(const struct comm *cm, const struct slot *sl, struct node_coll *d)
{
	const uint32_t n = cm->nranks;

	for (uint32_t i = 0; i < n; i++) {
		if (!comm_rank_local(cm, i))
			continue;
		for (uint32_t j = 0; j < n; j++) {
			d->vsend += a2a_term(i, j, a2a_send_count(sl, n, i, j));
			d->vrecv += a2a_term(j, i, a2a_recv_count(sl, n, i, j));
		}
	}
}

/* What the daemons compare of collective sl (its local ranks agree). */
static struct node_coll net_desc(const struct comm *cm, const struct slot *sl)
{
	const struct collc_sqe *a = &sl->ranks[sched_first_local(cm)].sqe;
	struct node_coll d = {
		.seq = sl->seq, .opcode = a->opcode, .dtype = a->dtype, .count = a->count
	};

	if (a->opcode != COLLC_OP_ALLGATHER && a->opcode != COLLC_OP_BROADCAST &&
	    !collc_copy_coll(a->opcode))
		d.redop = a->redop;
	if (a->opcode == COLLC_OP_BROADCAST || a->opcode == COLLC_OP_REDUCE)
		d.root = a->root;
	return d;
}

/*
 * The bytes of rank r's send and receive buffers in collective sl, as its
 * SQE was checked (sqe_validate()); UINT64_MAX where not known (an SQE that
 * failed, all-to-allv): the rest of the registration.
 */
static void rank_spans(const struct slot *sl, uint32_t r, uint32_t nranks, uint64_t *ret_send,
		       uint64_t *ret_recv)
{
	const struct slot_rank *sr = &sl->ranks[r];

	if (sr->err || sr->sqe.opcode == COLLC_OP_ALLTOALLV ||
	    sqe_validate(&sr->sqe, nranks, r, ret_send, ret_recv) < 0)
		*ret_send = *ret_recv = UINT64_MAX;
}

/* Do [off1, +len1) of m1 and [off2, +len2) of m2 share a byte? */
static int spans_meet(const struct mr *m1, uint64_t off1, uint64_t len1, const struct mr *m2,
		      uint64_t off2, uint64_t len2)
{
	uint64_t end1 = off1 + len1 < off1 ? UINT64_MAX : off1 + len1;
	uint64_t end2 = off2 + len2 < off2 ? UINT64_MAX : off2 + len2;

	return m1 && m1 == m2 && len1 && len2 && off1 < end2 && off2 < end1;
}

/*
 * Eager reads a rank's inputs when it asks (and between two daemons again
 * when the other daemon's come) and writes its result when the answer
 * comes, all possibly before an earlier collective of the
 * communicator ran: so only where no earlier one still pending on a rank
 * here writes what this one reads, or touches what it writes (collectives
 * run in submission order, collc(3)).
 */
static int eager_clear_of_earlier(struct comm *cm, const struct slot *sl)
{
	for (uint64_t s = cm->next_done; s < sl->seq; s++) {
		const struct slot *p = sched_slot_of(cm, s);

		if (p->seq != s || p->state == SLOT_DONE || p->state == SLOT_EMPTY)
			continue;
		for (uint32_t r = 0; r < cm->nranks; r++) {
			const struct slot_rank *a = &sl->ranks[r], *b = &p->ranks[r];
			uint64_t as, ar, bs, br;

			if (!comm_rank_local(cm, r) || !b->client)
				continue;
			rank_spans(sl, r, cm->nranks, &as, &ar);
			rank_spans(p, r, cm->nranks, &bs, &br);
			if (spans_meet(a->send_mr, a->sqe.send_off, as, b->recv_mr, b->sqe.recv_off,
				       br) ||
			    spans_meet(a->recv_mr, a->sqe.recv_off, ar, b->send_mr, b->sqe.send_off,
				       bs) ||
			    spans_meet(a->recv_mr, a->sqe.recv_off, ar, b->recv_mr, b->sqe.recv_off,
				       br))
				return 0;
		}
	}
	return 1;
}

/*
 * Executor memory (a GPU's) that an eager collective stages through host
 * memory: what the scheduler reads it copies out first, what it writes it
 * computes aside and copies in, through the executor's copy door (exec.h
 * copy(), synchronous). 1: m is such memory, 0: host memory collcd maps,
 * -1: memory no copy door reaches.
 *
 * Test hook: COLLCD_NET_EAGER_STAGE=host in collcd's environment stages host
 * memory too (1), copied by memmove where the copy door would copy
 * (eager_copy()), so that CI runs the staged eager path (the stage, the
 * inputs copied out, results computed aside and copied in) without a GPU.
 * Each daemon decides for its own buffers alone.
 */
static int eager_staged(const struct mr *m)
{
	static int stage_host = -1;

	if (!m)
		return 0;
	if (!m->exec)
		return test_hook(&stage_host, "COLLCD_NET_EAGER_STAGE", "host");
	return m->exec->copy ? 1 : -1;
}

static int eager_copy(const struct comm *cm, uint32_t r, const struct mr *m, void *dst,
		      const void *src, uint64_t n)
{
	struct node_p2p d = { 0 };

	if (!m->exec) {
		memmove(dst, src, n); /* host memory, staged by the test hook */
		return 0;
	}
	sched_net_stage(cm, r, m, &d);
	return d.ex->copy(d.dev, dst, src, n);
}

/*
 * Is every buffer of the ranks here host memory or memory the scheduler can
 * stage (1 if some is staged), and has every contributing rank an input?
 * -1: not eager.
 */
static int eager_buffers(const struct comm *cm, const struct slot *sl, const struct node_coll *d)
{
	int staged = 0;

	for (uint32_t r = 0; r < cm->nranks; r++) {
		const struct slot_rank *sr = &sl->ranks[r];
		const int s = eager_staged(sr->send_mr), t = eager_staged(sr->recv_mr);

		if (!comm_rank_local(cm, r))
			continue;
		if (s < 0 || t < 0 || (node_eager_contributes(d, r) && !sr->send_mr))
			return -1;
		staged |= s | t;
	}
	return staged;
}

/*
 * Where rank r's input of eager collective d lies in host memory: its send
 * buffer, or its copy in the slot's stage (the k-th contributing rank here).
 */
static const uint8_t *eager_src(const struct slot *sl, uint32_t r, uint32_t k, uint64_t in)
{
	const struct slot_rank *sr = &sl->ranks[r];

	if (eager_staged(sr->send_mr))
		return sl->stage + (uint64_t)k * in;
	return (const uint8_t *)(uintptr_t)buf_addr(sr->send_mr, sr->sqe.send_off);
}

/*
 * An eager collective's inputs (node.h): those of the ranks here that
 * contribute, in rank order, when every buffer here is host memory that
 * collcd maps or executor memory it stages (the smaller limit, staged_limit,
 * then applies), what it holds fits limit, and no earlier collective stands
 * in the way. Fills parts (one per contributing rank here, where its input
 * lies in host memory: node_coll_ready() reads them before it returns) and
 * returns their count, -1 to ask plainly.
 */
static int net_eager_inputs(struct comm *cm, struct slot *sl, const struct node_coll *d,
			    uint64_t limit, uint64_t staged_limit, struct iovec *parts)
{
	const int staged = sl->gated ? -1 : eager_buffers(cm, sl, d);
	uint64_t in, out;
	uint32_t k = 0;
	int n = 0;

	if (staged < 0 ||
	    !node_eager_sizes(d, cm->nranks, staged ? staged_limit : limit, &in, &out))
		return -1;
	if (!eager_clear_of_earlier(cm, sl))
		return -1;
	for (uint32_t r = 0; r < cm->nranks; r++)
		k += comm_rank_local(cm, r) && node_eager_contributes(d, r);
	if (staged && k && !(sl->stage = malloc(k * in)))
		return -1;
	for (uint32_t r = 0; r < cm->nranks; r++) {
		const struct slot_rank *sr = &sl->ranks[r];
		const void *src;

		if (!comm_rank_local(cm, r) || !node_eager_contributes(d, r))
			continue;
		src = (const void *)(uintptr_t)buf_addr(sr->send_mr, sr->sqe.send_off);
		if (eager_staged(sr->send_mr)) {
			uint8_t *copy = sl->stage + (uint64_t)n * in;

			if (eager_copy(cm, r, sr->send_mr, copy, src, in) < 0) {
				/* The ring runs instead; the executor logged why. */
				sched_slot_unstage(sl);
				return -1;
			}
			src = copy;
		}
		parts[n++] = (struct iovec){ .iov_base = (void *)src, .iov_len = in };
	}
	return n;
}

/*
 * Rank r's result of eager collective d, n bytes at res, into its receive
 * buffer at dst (host memory, or executor memory it is copied into).
 */
static int eager_put(const struct comm *cm, const struct slot *sl, uint32_t r, uint8_t *dst,
		     const uint8_t *res, uint64_t n)
{
	const struct mr *m = sl->ranks[r].recv_mr;

	if (eager_staged(m))
		return eager_copy(cm, r, m, dst, res, n) < 0 ? -EIO : 0;
	memmove(dst, res, n);
	return 0;
}

/* Where rank r takes eager collective d's result: its receive buffer; NULL: not here, or none. */
static uint8_t *eager_dst(const struct comm *cm, const struct slot *sl, const struct node_coll *d,
			  uint32_t r)
{
	const struct slot_rank *sr = &sl->ranks[r];

	if (!comm_rank_local(cm, r) || (d->opcode == COLLC_OP_REDUCE && r != d->root))
		return NULL;
	return (uint8_t *)(uintptr_t)buf_addr(sr->recv_mr, sr->sqe.recv_off);
}

/*
 * Where the other daemon's inputs of eager collective d may land (node.h
 * node_coll_ready()): in the first result buffer here, where the result is
 * then computed in place from them: an all-reduce's or reduce's one other
 * input over that buffer, each other rank's input of an all-gather at its
 * place in the gathered buffer, a broadcast's root's input over it. Fills
 * land in the order the inputs come (rank order) and returns their count;
 * 0 where they may not land: a reduce-scatter, more than one input to
 * reduce from there, more than two daemons, no result here, a buffer here
 * that is not host memory (the node thread writes the places), or a place
 * an input here overlaps.
 */
static uint32_t net_eager_land(const struct comm *cm, const struct slot *sl,
			       const struct node_coll *d, struct iovec *land)
{
	uint8_t *first = NULL;
	uint64_t in, out;
	uint32_t n = 0;

	if (!cm->net_pair || d->opcode == COLLC_OP_REDUCE_SCATTER ||
	    !node_eager_sizes(d, cm->nranks, NODE_EAGER_MAX, &in, &out) ||
	    eager_buffers(cm, sl, d) != 0)
		return 0;
	for (uint32_t r = 0; r < cm->nranks && !first; r++)
		first = eager_dst(cm, sl, d, r);
	if (!first)
		return 0;
	for (uint32_t r = 0; r < cm->nranks; r++) {
		if (comm_rank_local(cm, r) || !node_eager_contributes(d, r))
			continue;
		if (n == NODE_LAND_MAX || (n && d->opcode != COLLC_OP_ALLGATHER))
			return 0;
		land[n++] = (struct iovec){
			.iov_base = d->opcode == COLLC_OP_ALLGATHER ? first + (uint64_t)r * in
								    : first,
			.iov_len = in,
		};
	}
	for (uint32_t r = 0; r < cm->nranks; r++) {
		const struct slot_rank *sr = &sl->ranks[r];
		uintptr_t p;

		if (!comm_rank_local(cm, r) || !node_eager_contributes(d, r))
			continue;
		p = (uintptr_t)buf_addr(sr->send_mr, sr->sqe.send_off);
		for (uint32_t k = 0; k < n; k++) {
			const uintptr_t lo = (uintptr_t)land[k].iov_base;

			if (p < lo + in && lo < p + in)
				return 0;
		}
	}
	return n;
}

/* Across daemons the root compares every daemon's view first (CMD_NET_GO, or eager). */
static void net_ask(struct comm *cm, struct slot *sl)
{
	struct node_coll d = net_desc(cm, sl);
	struct iovec parts[COLLC_MAX_RANKS], land[NODE_LAND_MAX];
	uint32_t nland = 0;
	int n = -1;

	d.bad = net_verdict(cm, sl);
	if (d.opcode == COLLC_OP_ALLTOALLV && !d.bad)
		net_digests(cm, sl, &d);
	if (!d.bad) {
		const struct collc_config *cfg = &sched.execs[cm->exec_idx].cfg;
		const uint64_t staged = cfg->net_eager_staged_max_bytes < cfg->net_eager_max_bytes
						? cfg->net_eager_staged_max_bytes
						: cfg->net_eager_max_bytes;

		/* Inputs received aside and then reduced from there cost more. */
		nland = net_eager_land(cm, sl, &d, land);
		n = net_eager_inputs(cm, sl, &d, node_eager_limit(cfg->net_eager_max_bytes, nland),
				     staged, parts);
	}
	d.eager = n >= 0;
	if (!d.eager)
		nland = 0;
	sl->net = NET_ASKED;
	sl->t_ask_ns = now_ns();
	node_coll_ready(cm->id, &d, parts, n > 0 ? (uint32_t)n : 0, land, nland);
}

int sched_net_eager_done(struct comm *cm, struct slot *sl, const uint8_t *res, uint32_t len)
{
	const struct node_coll d = net_desc(cm, sl);
	uint64_t in, out;

	if (!node_eager_sizes(&d, cm->nranks, NODE_EAGER_MAX, &in, &out) || len != out)
		return -EPROTO;
	for (uint32_t r = 0; r < cm->nranks; r++) {
		uint8_t *dst = eager_dst(cm, sl, &d, r);
		uint64_t from = 0, n = out;

		if (d.opcode == COLLC_OP_REDUCE_SCATTER) {
			n = out / cm->nranks;
			from = r * n;
		}
		if (dst && eager_put(cm, sl, r, dst, res + from, n) < 0)
			return -EIO;
	}
	sched.net_eager_staged += eager_buffers(cm, sl, &d) == 1;
	sched_record_latency(sl->t_first_ns, (uint64_t)rank_bytes(sl, cm->nranks));
	return 0;
}

/*
 * May node_eager_compute() write its n bytes at dst while it reads in[]?
 * Where no input shares a byte with dst, or one lies exactly where its
 * bytes go (a reduction's first two inputs, a gathered or broadcast input
 * in place); otherwise the result is computed aside (a client's buffers
 * overlapping each other some other way).
 */
static int eager_dst_safe(const struct node_coll *d, uint32_t nranks, const uint8_t *const *in,
			  uint64_t in_bytes, const uint8_t *dst, uint64_t n)
{
	const uintptr_t lo = (uintptr_t)dst, hi = lo + n;

	for (uint32_t r = 0; r < nranks; r++) {
		const uintptr_t p = (uintptr_t)in[r];

		if (!in[r] || p >= hi || p + in_bytes <= lo)
			continue;
		if (d->opcode == COLLC_OP_ALLGATHER && p == lo + (uint64_t)r * in_bytes)
			continue;
		if (d->opcode != COLLC_OP_ALLGATHER && p == lo &&
		    (d->opcode == COLLC_OP_BROADCAST || r < 2))
			continue;
		return 0;
	}
	return 1;
}

/* The result (n bytes of it) into dst, or aside and then into dst. */
static int eager_compute_into(const struct node_coll *d, uint32_t nranks, const uint8_t *const *in,
			      uint64_t in_bytes, uint8_t *dst, uint64_t n)
{
	uint8_t *res;

	if (eager_dst_safe(d, nranks, in, in_bytes, dst, n)) {
		node_eager_compute(d, nranks, in, in_bytes, dst);
		return 0;
	}
	res = malloc(n);
	if (!res)
		return -ENOMEM;
	node_eager_compute(d, nranks, in, in_bytes, res);
	memcpy(dst, res, n);
	free(res);
	return 0;
}

/*
 * Rank r's n bytes of eager collective d's result, computed from in[]
 * (in_bytes each) into its receive buffer dst: straight there in host
 * memory, or into aside (n bytes) and copied into executor memory. Returns
 * where the result lies in host memory (dst or aside), NULL on an error
 * (*err set).
 */
static const uint8_t *eager_result(const struct comm *cm, const struct slot *sl, uint32_t r,
				   const struct node_coll *d, const uint8_t *const *in,
				   uint64_t in_bytes, uint8_t *dst, uint64_t n, uint8_t *aside,
				   int *err)
{
	if (!eager_staged(sl->ranks[r].recv_mr)) {
		*err = eager_compute_into(d, cm->nranks, in, in_bytes, dst, n);
		return *err ? NULL : dst;
	}
	node_eager_compute(d, cm->nranks, in, in_bytes, aside);
	*err = eager_put(cm, sl, r, dst, aside, n);
	return *err ? NULL : aside;
}

int sched_net_eager_peer(struct comm *cm, struct slot *sl, const uint8_t *peer, uint32_t len)
{
	const struct node_coll d = net_desc(cm, sl);
	const uint8_t *in[COLLC_MAX_RANKS] = { NULL }, *blk[COLLC_MAX_RANKS];
	struct iovec land[NODE_LAND_MAX];
	uint64_t in_bytes, out, off = 0;
	const uint8_t *first = NULL;
	uint8_t *aside = NULL;
	uint32_t nland = 0, k = 0, kl = 0;
	int staged, err = 0;

	if (!node_eager_sizes(&d, cm->nranks, NODE_EAGER_MAX, &in_bytes, &out))
		return -EPROTO;
	staged = eager_buffers(cm, sl, &d);
	if (staged < 0)
		return -EPROTO;
	/* No data: they landed where net_ask() said they may, and the result is computed there. */
	if (!peer) {
		nland = net_eager_land(cm, sl, &d, land);
		if (!nland)
			return -EPROTO;
	}
	for (uint32_t r = 0; r < cm->nranks; r++) {
		if (!node_eager_contributes(&d, r))
			continue;
		if (comm_rank_local(cm, r)) {
			/*
			 * Inputs here in executor memory were copied out when it
			 * asked (a daemon whose ranks contribute none, a broadcast's
			 * other daemon, has no stage).
			 */
			if (eager_staged(sl->ranks[r].send_mr) && !sl->stage)
				return -EPROTO;
			in[r] = eager_src(sl, r, kl++, in_bytes);
			continue;
		}
		if (len - off < in_bytes || (!peer && k == nland))
			return -EPROTO;
		in[r] = peer ? peer + off : land[k++].iov_base;
		off += in_bytes;
	}
	if (off != len)
		return -EPROTO;
	/* Where results go to executor memory, they are computed aside and copied in. */
	if (staged && !(aside = malloc(out)))
		return -ENOMEM;
	for (uint32_t r = 0; r < cm->nranks && !err; r++) {
		uint8_t *dst = eager_dst(cm, sl, &d, r);
		const uint64_t n = out / cm->nranks;

		if (!dst)
			continue;
		if (d.opcode == COLLC_OP_REDUCE_SCATTER) {
			/* Only this rank's block of the result, from that block of every input. */
			for (uint32_t k = 0; k < cm->nranks; k++)
				blk[k] = in[k] + (uint64_t)r * n;
			eager_result(cm, sl, r, &d, blk, n, dst, n, aside, &err);
		} else if (!first) {
			first = eager_result(cm, sl, r, &d, in, in_bytes, dst, out, aside, &err);
		} else {
			err = eager_put(cm, sl, r, dst, first, out);
		}
	}
	free(aside);
	if (err)
		return err;
	sched.net_eager_staged += (uint64_t)staged;
	sched_record_latency(sl->t_first_ns, (uint64_t)rank_bytes(sl, cm->nranks));
	return 0;
}

/*
 * Asks for every collective all local ranks submitted, not only the next
 * one, so that the root's answers overlap with the collectives in flight.
 */
static void net_ask_ahead(struct comm *cm)
{
	for (uint64_t s = cm->next_launch; s < cm->next_done + COMM_WINDOW; s++) {
		struct slot *sl = sched_slot_of(cm, s);

		if (sl->seq != s || sl->state != SLOT_ARRIVING || sl->arrived < cm->nlocal)
			break;
		if (sl->net == NET_NONE)
			net_ask(cm, sl);
	}
}

/*
 * Collective sl ran here: its ranks here end now (sched_slot_end_early()),
 * and the root hears of it; the slot waits for every daemon's (CMD_NET_DONE)
 * before it is reused, and the communicator for it before its links close.
 */
static void net_ran_here(struct comm *cm, struct slot *sl)
{
	const struct exec_backend *ex = sched.execs[cm->exec_idx].ex;
	/*
	 * A rank that received what the daemons did not agree to ended its
	 * item all the same: the node layer fails the communicator everywhere
	 * instead of reporting it done, and its ranks end with that error.
	 */
	const int ok = !ex->comm_broken || !ex->comm_broken(cm->exec_priv);

	sl->net = NET_EXECUTED;
	sl->t_ran_ns = now_ns();
	if (ok)
		sched_slot_end_early(cm, sl);
	node_coll_done(cm->id, sl->seq, ok);
}

/* A ring collective across daemons got the root's ALLDONE: where its time went. */
static void net_phases_add(const struct slot *sl)
{
	const uint64_t now = now_ns();

	/* Stamped on this thread in this order; any other order is not counted. */
	const uint64_t t[NET_PHASES + 1] = { sl->t_ask_ns, sl->t_go_ns, sl->t_start_ns,
					     sl->t_ran_ns, now };

	for (int p = 0; p < NET_PHASES; p++)
		if (t[p + 1] < t[p])
			return;
	for (int p = 0; p < NET_PHASES; p++)
		sched.net_phase_ns[p] += t[p + 1] - t[p];
	sched.net_phase_n++;
}

/*
 * Reports every collective that ran here, not only the oldest: they run in
 * FIFO order on the same channels, so the first one not yet run ends it.
 */
static void net_report_ahead(struct comm *cm)
{
	for (uint64_t s = cm->next_done; s < cm->next_launch; s++) {
		struct slot *sl = sched_slot_of(cm, s);

		if (sl->seq != s || sl->state == SLOT_DONE)
			continue;
		if (sl->state != SLOT_INFLIGHT || !sched_slot_executed(cm, sl))
			break;
		if (sl->net == NET_GO)
			net_ran_here(cm, sl);
	}
}

int sched_copy_push(int prefer_push, int closed_send, int closed_recv)
{
	if (closed_send && closed_recv)
		return -EOPNOTSUPP;
	if (closed_send || closed_recv)
		return closed_send;
	return prefer_push;
}

/* All-to-all(v)'s direction: sched_copy_push() over every rank's buffers. */
static int alltoall_push(const struct comm *cm, const struct slot *sl, int prefer_push)
{
	int closed_send = 0, closed_recv = 0;

	for (uint32_t r = 0; r < cm->nranks; r++) {
		const struct slot_rank *sr = &sl->ranks[r];

		closed_send |= sr->send_mr && (sr->send_mr->flags & EXEC_MEM_NO_PEER_READ);
		closed_recv |= sr->recv_mr && (sr->recv_mr->flags & EXEC_MEM_NO_PEER_READ);
	}
	return sched_copy_push(prefer_push, closed_send, closed_recv);
}

/*
 * Rank i's block for rank j in i's send buffer and j's block from i in j's
 * receive buffer (elements), and its length, of an all-to-all(v).
 */
static void a2a_block(const struct comm *cm, const struct slot *sl, uint32_t i, uint32_t j,
		      uint64_t *ret_soff, uint64_t *ret_roff, uint64_t *ret_n)
{
	const uint32_t n = cm->nranks;
	const struct collc_sqe *e = &sl->ranks[i].sqe;

	if (e->opcode == COLLC_OP_ALLTOALL) {
		*ret_soff = (uint64_t)j * e->count;
		*ret_roff = (uint64_t)i * e->count;
		*ret_n = e->count;
		return;
	}
	*ret_soff = sl->ranks[i].v[n + j];
	*ret_roff = sl->ranks[j].v[3 * n + i];
	*ret_n = sl->ranks[i].v[j]; /* == rank j's recvcounts[i] (alltoallv_agree()) */
}

/*
 * Rank r's list of an all-to-all(v) across daemons: its own blocks for and
 * from every rank, for the relay on the ring (proto/algo_copy.h).
 */
static void a2a_relay_copies(const struct comm *cm, const struct slot *sl, uint32_t r,
			     struct collc_work_copy *c)
{
	const struct slot_rank *sr = &sl->ranks[r];
	const uint64_t es = collc_dtype_bytes(sr->sqe.dtype), n = cm->nranks;

	for (uint32_t p = 0; p < n; p++) {
		uint64_t soff, roff, sn = a2a_send_count(sl, (uint32_t)n, r, p),
				     rn = a2a_recv_count(sl, (uint32_t)n, r, p);
		struct collc_work_copy *b;

		if (sr->sqe.opcode == COLLC_OP_ALLTOALL) {
			soff = roff = p * sr->sqe.count;
		} else {
			soff = sr->v[n + p];
			roff = sr->v[3 * n + p];
		}
		/* The relay knows its peers by ring position. */
		b = &c[comm_ring_pos(cm, (uint32_t)p)];
		/* Checked against both registrations at submission: sqe_check(). */
		b->src = sn ? (uint64_t)(uintptr_t)sr->send_mr->addr + sr->sqe.send_off + soff * es
			    : 0;
		b->dst = rn ? (uint64_t)(uintptr_t)sr->recv_mr->addr + sr->sqe.recv_off + roff * es
			    : 0;
		/* Below 4 GiB each: net_verdict(). */
		b->bytes = collc_relay_pack(sn * es, rn * es);
	}
}

/*
 * Rank r's copy list of an all-to-all(v): pull from, or push to, every rank
 * (across daemons, every rank of this daemon: a2a_blocks() moves the rest).
 */
static void a2a_copies(const struct comm *cm, const struct slot *sl, uint32_t r, int push,
		       struct collc_work_copy *c)
{
	const uint64_t es = collc_dtype_bytes(sl->ranks[r].sqe.dtype);

	for (uint32_t p = 0; p < cm->nranks; p++) {
		uint32_t from = push ? r : p, to = push ? p : r;
		const struct slot_rank *s = &sl->ranks[from], *d = &sl->ranks[to];
		uint64_t soff, roff, n;

		if (!comm_rank_local(cm, p)) {
			c[p].src = c[p].dst = c[p].bytes = 0;
			continue;
		}
		a2a_block(cm, sl, from, to, &soff, &roff, &n);
		/* Checked against both registrations at submission: sqe_check(). */
		c[p].bytes = n * es;
		c[p].src = n ? (uint64_t)(uintptr_t)s->send_mr->addr + s->sqe.send_off + soff * es
			     : 0;
		c[p].dst = n ? (uint64_t)(uintptr_t)d->recv_mr->addr + d->sqe.recv_off + roff * es
			     : 0;
	}
}

/*
 * All-to-all(v) across daemons as blocks (a2a_as_blocks()): the blocks
 * between ranks of this daemon are the items' copy lists (a2a_copies(), on
 * the device as on one node); every block to or from a rank of another
 * daemon is a send or receive of the node layer (node_p2p.c: through host
 * staging for GPU memory), in the pair's all-to-all place NET_A2A_TAG | seq,
 * which every daemon derives from the agreed seq alike. Blocks of 0
 * elements move on neither side (the daemons agreed on the counts:
 * net_digests()). The collective has run here once the items were consumed
 * and every block of this daemon's ranks ended (sched_slot_executed(): a
 * send ends once its receiver's daemon has it), and is done once it ran on
 * every daemon (CMD_NET_DONE): then every rank's receive buffer is
 * complete. A block failing fails the communicator (every daemon ends its
 * collectives alike, -EPIPE elsewhere); so does a peer's death, through
 * the node layer, as for the ring. Returns 0, or the error of a block that
 * could not start.
 */
static int a2a_blocks(struct comm *cm, struct slot *sl)
{
	const uint32_t n = cm->nranks;
	int r = 0;

	for (uint32_t i = 0; i < n && r == 0; i++) {
		const struct slot_rank *sr = &sl->ranks[i];
		const uint64_t es = collc_dtype_bytes(sr->sqe.dtype);

		if (!comm_rank_local(cm, i))
			continue;
		for (uint32_t p = 0; p < n && r == 0; p++) {
			if (comm_rank_local(cm, p))
				continue;
			for (int send = 1; send >= 0 && r == 0; send--) {
				uint64_t cnt = send ? a2a_send_count(sl, n, i, p)
						    : a2a_recv_count(sl, n, i, p);
				const struct mr *mr = send ? sr->send_mr : sr->recv_mr;
				uint64_t off = send ? sr->sqe.send_off : sr->sqe.recv_off;
				struct node_p2p d = { 0 };

				if (!cnt)
					continue;
				if (sr->sqe.opcode == COLLC_OP_ALLTOALL)
					off += (uint64_t)p * sr->sqe.count * es;
				else
					off += sr->v[(send ? 1 : 3) * n + p] * es;
				d.cookie = d.pseq = NET_A2A_TAG | sl->seq;
				d.sender = send ? i : p;
				d.receiver = send ? p : i;
				d.send = (uint32_t)send;
				d.count = cnt;
				d.dtype = sr->sqe.dtype;
				/* Checked against the registration: sqe_check(). */
				d.bytes = cnt * es;
				d.buf = (char *)mr->addr + off;
				if (mr->exec)
					sched_net_stage(cm, i, mr, &d);
				r = node_p2p_post(cm->id, &d);
				if (r == 0)
					sl->net_blocks++;
			}
		}
	}
	return r;
}

void sched_a2a_block_done(struct comm *cm, uint64_t seq, int err)
{
	struct slot *sl;

	/* Revoked: its collectives end with the revocation's error already. */
	if (cm->revoked || !cm->slots)
		return;
	sl = sched_slot_of(cm, seq);
	if (sl->seq != seq || sl->state != SLOT_INFLIGHT || !sl->net_blocks)
		return;
	sl->net_blocks--;
	if (err) {
		log_warn("communicator %llu: a block of all-to-all %llu across daemons ended "
			 "with %s: the communicator fails",
			 (unsigned long long)cm->id, (unsigned long long)seq, strerror(-err));
		sched_comm_revoke(cm, err);
	}
}

/* Returns 1 when launched or failed, 0 when the FIFOs have no room yet. */
int sched_launch(struct comm *cm, struct slot *sl, uint64_t *inflight)
{
	const struct collc_sqe *a = &sl->ranks[sched_first_local(cm)].sqe;
	struct sched_exec *se = &sched.execs[cm->exec_idx];
	const struct collc_config *cfg = &se->cfg;
	uint32_t maxch = se->ex->max_channels;
	const int blocks = collc_copy_coll(a->opcode) && a2a_as_blocks(cm);
	struct plan p;
	int err, push = 0;

	if (cm->local && sl->net == NET_NONE) {
		net_ask(cm, sl);
		return 0;
	}
	if (cm->local && sl->net != NET_GO)
		return 0;
	err = slot_consistent(cm, sl);
	if (!err && collc_copy_coll(a->opcode) && cm->nranks > 1 && (!cm->local || blocks)) {
		push = alltoall_push(cm, sl, (int)cfg->copy_push);
		if (push < 0)
			err = push;
	}
	if (err) {
		sched_slot_finish(cm, sl, err);
		return 1;
	}
	for (uint32_t r = 0; r < cm->nranks; r++)
		if (comm_rank_local(cm, r) &&
		    (!sched_fifo_has_room(cm->devs[r]) ||
		     !sched_gated_clear(cm->devs[r], cm, inflight == &cm->inflight ? sl : NULL)))
			return 0;
	plan_coll(cfg, a->opcode, (uint64_t)rank_bytes(sl, cm->nranks), cm->nranks,
		  slot_plan_flags(cm, sl, se->ex->caps), &p);
	if (cm->local && blocks) {
		/* This daemon's blocks: copy lists as on one node, on the agreed channels at most. */
		if (p.nchannels > cm->net_nchan)
			p.nchannels = cm->net_nchan;
	} else if (cm->local) {
		/*
		 * Every daemon runs the same ring: Simple, the default chunk, and
		 * the agreed channels, but one for a small collective (its steps
		 * are all latency: a second channel only doubles the messages and
		 * wake-ups) and for the all-to-all relay (share 0 runs it). The
		 * daemons agreed on opcode, dtype and count, so they choose alike.
		 */
		p.algo = COLLC_ALGO_RING;
		p.proto = COLLC_PROTO_SIMPLE;
		p.nchannels = cm->net_nchan;
		if (collc_copy_coll(a->opcode) ||
		    (uint64_t)rank_bytes(sl, cm->nranks) < NET_ONE_CHANNEL_BYTES)
			p.nchannels = 1;
		p.chunk_bytes = 0;
		/* The table gave every daemon the same threshold: all choose alike. */
		if ((a->opcode == COLLC_OP_ALLREDUCE || a->opcode == COLLC_OP_ALLGATHER ||
		     a->opcode == COLLC_OP_REDUCE_SCATTER) &&
		    cm->net_group && (uint64_t)rank_bytes(sl, cm->nranks) >= cm->net_hier_min_bytes)
			p.algo = COLLC_ALGO_HIER;
	}
	sl->coll_id = ++sched.next_coll_id;
	sl->nchannels = p.nchannels;
	/* Every rank's item of one collective starts at the same channel. */
	sl->chan_base = 0;
	if (cfg->rotate_channels && !cm->local) {
		sl->chan_base = (uint8_t)(se->next_chan_base % maxch);
		se->next_chan_base = (se->next_chan_base + p.nchannels) % maxch;
	}
	sl->algo = p.algo;
	sl->proto = p.proto;
	sl->bytes = (uint64_t)rank_bytes(sl, cm->nranks);
	sl->t_start_ns = now_ns();
	sl->net_blocks = 0;
	for (uint32_t r = 0; r < cm->nranks; r++) {
		struct slot_rank *sr = &sl->ranks[r];
		struct fifo_host *fh = &sched.fifos[cm->devs[r]];
		struct collc_work_item *it;

		if (!comm_rank_local(cm, r))
			continue;
		/* A gated item ends a batch of its own: what came before runs and ends first. */
		if (sl->gate_state == GATED_UNDECIDED)
			batch_publish(fh);
		it = &fh->f->items[fh->tail & (COLLC_FIFO_DEPTH - 1)];

		it->kind = COLLC_WORK_COLL;
		it->coll = sr->sqe.opcode;
		it->algo = p.algo;
		it->proto = p.proto;
		it->dtype = sr->sqe.dtype;
		it->redop = sr->sqe.redop;
		it->nchannels = p.nchannels;
		it->chan_base = sl->chan_base;
		it->nranks = cm->nranks;
		it->rank = comm_ring_pos(cm, r);
		/* Broadcast's and reduce's; in range: sqe_check(). */
		it->root = (int32_t)comm_ring_pos(cm, (uint32_t)sr->sqe.root);
		it->chunk_bytes = p.chunk_bytes;
		it->count = sr->sqe.count;
		it->sendbuf = buf_addr(sr->send_mr, sr->sqe.send_off);
		it->recvbuf = buf_addr(sr->recv_mr, sr->sqe.recv_off);
		it->comm_dev = cm->comm_dev[r];
		it->comm_id = cm->id;
		it->coll_id = sl->coll_id;
		it->t_forward = 0;
		it->batch_last = 0;
		/*
		 * A copy list has no closing barrier: one rank's end leaves peers
		 * still reading or writing its buffers, so its stream goes on only
		 * once the whole collective ended (a signal item then).
		 */
		sr->sig_in_item = sr->sig_mr && !collc_copy_coll(it->coll);
		it->signal = sr->sig_in_item ? buf_addr(sr->sig_mr, sr->sig_off) : 0;
		it->signal_val = sched_signal_value(&sr->sqe);
		sched_done_fill(cm, sr, it);
		it->gate = 0;
		if (sl->gate_state == GATED_UNDECIDED) {
			it->gate = COLLC_ITEM_GATED |
				   (cm->devs[r] == sl->gate_dev ? COLLC_ITEM_LEADER : 0u);
			/* Checked by sched_gated_launch(): at most COLLC_GATE_WATCH_MAX go words. */
			(void)sched_gated_fill(cm, sl, r,
					       (struct collc_work_gate *)&fh->f
						       ->copies[fh->tail & (COLLC_FIFO_DEPTH - 1)]);
		}
		if (collc_copy_coll(it->coll) && cm->local && !blocks)
			a2a_relay_copies(cm, sl, r,
					 fh->f->copies[fh->tail & (COLLC_FIFO_DEPTH - 1)].c);
		else if (collc_copy_coll(it->coll))
			a2a_copies(cm, sl, r, push,
				   fh->f->copies[fh->tail & (COLLC_FIFO_DEPTH - 1)].c);
		sr->fifo_pos = fh->tail;
		sched_fifo_append(fh);
		if (sl->gate_state == GATED_UNDECIDED)
			batch_publish(fh);
	}
	sl->state = SLOT_INFLIGHT;
	(*inflight)++;
	if (cm->local)
		node_inflight(cm->id, 1);
	if (blocks) {
		err = a2a_blocks(cm, sl);
		if (err < 0) {
			log_warn("communicator %llu: all-to-all %llu across daemons: a block could "
				 "not start (%s): the communicator fails",
				 (unsigned long long)cm->id, (unsigned long long)sl->seq,
				 strerror(-err));
			sched_comm_revoke(cm, err);
		}
	}
	cm->by_algo[p.algo]++;
	cm->by_proto[p.proto]++;
	sched.by_algo[p.algo]++;
	sched.by_proto[p.proto]++;
	sched.by_op[a->opcode]++;
	return 1;
}

int sched_launch_ready(void)
{
	int progress = sched_gated_poll();

	for (struct comm *cm = sched.comms; cm; cm = cm->next) {
		if (cm->local && cm->ready && cm->slots && !cm->revoked)
			net_ask_ahead(cm);
		while (cm->ready && cm->slots) {
			struct slot *sl = sched_slot_of(cm, cm->next_launch);

			if (sl->seq != cm->next_launch)
				break;
			if (sl->state == SLOT_DONE) {
				cm->next_launch++;
				continue;
			}
			/* After a rank left, only what was in flight finishes. */
			if (sl->state != SLOT_ARRIVING || sl->arrived < cm->nlocal || cm->leave_err)
				break;
			if (!sched_gates_open(cm, sl)) {
				/* Its streams are not there yet: the executors may watch them. */
				if (!sched_gated_launch(cm, sl))
					break;
			} else if (!sched_launch(cm, sl, &cm->inflight)) {
				break;
			}
			cm->next_launch++;
			progress = 1;
		}
		if (cm->ready && cm->p2p_gated.head && !cm->revoked)
			progress |= sched_p2p_net_gates(cm);
		if (cm->ready && cm->p2p_ready)
			progress |= sched_p2p_launch(cm, &sched.execs[cm->exec_idx].cfg);
		if (cm->ready && cm->fires)
			progress |= sched_fires_launch(cm);
		sched_comm_advance_done(cm);
	}
	progress |= sched_signals_flush();
	sched_dones_reap(0);
	batch_publish_all();
	return progress;
}

uint32_t sched_comm_timeout_ms(const struct collc_config *cfg, const struct comm *cm)
{
	return cm->timeout_ms == UINT32_MAX ? cfg->op_timeout_ms : cm->timeout_ms;
}

/*
 * Ends the oldest collective of a communicator when some rank kept the others
 * waiting past the timeout; the missing ranks are remembered for status.
 */
int sched_expire(const struct collc_config *cfg, uint64_t now)
{
	int progress = 0;

	for (struct comm *cm = sched.comms; cm; cm = cm->next) {
		uint32_t ms = sched_comm_timeout_ms(cfg, cm);
		struct slot *sl;

		if (!cm->ready || !cm->slots || !ms || cm->revoked)
			continue;
		progress |= sched_p2p_expire(cm, ms, now);
		progress |= sched_fires_expire(cm, ms, now);
		sl = sched_slot_of(cm, cm->next_launch);
		if (sl->seq != cm->next_launch || sl->state != SLOT_ARRIVING)
			continue;
		/*
		 * Every rank is in and some wait for their streams: the timeout runs
		 * from the first stream that reached the collective (none: no limit).
		 */
		if (sl->gated && sl->arrived == cm->nlocal &&
		    (!sl->t_gate_ns || now - sl->t_gate_ns < (uint64_t)ms * 1000000))
			continue;
		if (now - sl->t_first_ns < (uint64_t)ms * 1000000)
			continue;
		cm->timed_out_mask = 0;
		for (uint32_t r = 0; r < cm->nranks; r++)
			if (comm_rank_local(cm, r) && !sl->ranks[r].client)
				cm->timed_out_mask |= 1ull << r;
		cm->timeouts++;
		log_info(
			"communicator %llu: collective %llu timed out after %u ms waiting for ranks 0x%llx",
			(unsigned long long)cm->id, (unsigned long long)sl->seq, ms,
			(unsigned long long)cm->timed_out_mask);
		sched_slot_finish(cm, sl, -ETIMEDOUT);
		cm->next_launch++;
		sched_comm_advance_done(cm);
		/*
		 * Across daemons the others may still run it: the communicator
		 * ends everywhere rather than lose step with them.
		 */
		if (cm->local)
			sched_comm_revoke(cm, -ETIMEDOUT);
		progress = 1;
	}
	return progress;
}

/* Does some communicator wait for a rank under a timeout? Then sleep briefly. */
int sched_timers_armed(const struct collc_config *cfg)
{
	for (struct comm *cm = sched.comms; cm; cm = cm->next) {
		const struct slot *sl;

		if (!cm->ready || !cm->slots || !sched_comm_timeout_ms(cfg, cm))
			continue;
		if (cm->p2p_wait.head || cm->fires)
			return 1;
		sl = sched_slot_of(cm, cm->next_launch);
		if (sl->seq == cm->next_launch && sl->state == SLOT_ARRIVING)
			return 1;
	}
	return 0;
}

void sched_record_latency(uint64_t t_start_ns, uint64_t bytes)
{
	uint64_t ns = now_ns() - t_start_ns;
	uint32_t cls = 0, b = 0;

	for (uint64_t x = bytes; x >= 1024 && cls < 7; x >>= 4)
		cls++;
	for (uint64_t us = ns / 1000; us && b < 16; us >>= 1)
		b++;
	sched.lat_buckets[cls][b]++;
	sched.lat_count[cls]++;
	sched.lat_sum_ns[cls] += ns;
}

int sched_reap(void)
{
	int progress = 0;

	for (struct comm *cm = sched.comms; cm; cm = cm->next) {
		if (cm->local && cm->inflight && !cm->revoked)
			net_report_ahead(cm);
		if (cm->p2p_run)
			progress |= sched_p2p_reap(cm);
		if (cm->fires)
			progress |= sched_fires_reap(cm);
		while (cm->inflight) {
			struct slot *sl = sched_slot_of(cm, cm->next_done);

			if (sl->state == SLOT_DONE) {
				sched_comm_advance_done(cm);
				continue;
			}
			if (sl->state != SLOT_INFLIGHT || sl->seq != cm->next_done ||
			    !sched_slot_executed(cm, sl))
				break;
			if (cm->local && !cm->revoked && sl->net != NET_DONE) {
				/* Done here; it is done once every daemon ran it (CMD_NET_DONE). */
				if (sl->net == NET_GO)
					net_ran_here(cm, sl);
				break;
			}
			cm->inflight--;
			if (cm->local)
				node_inflight(cm->id, -1);
			if (sl->ended_early) {
				if (sl->net == NET_DONE)
					net_phases_add(sl);
				sched_slot_finish(cm, sl, 0);
			} else if (cm->revoked && !(cm->local && sl->net == NET_DONE)) {
				/* Abandoned in the executor (or finished just before): not a result. */
				sched_slot_finish(cm, sl, cm->revoked);
			} else {
				sched_record_latency(sl->t_start_ns, sl->bytes);
				sched_slot_finish(cm, sl, 0);
			}
			sched_comm_advance_done(cm);
			progress = 1;
		}
	}
	return progress;
}
