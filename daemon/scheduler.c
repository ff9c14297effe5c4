/* SPDX-License-Identifier: MIT */
/*
 * The scheduler: one thread that drains every client's submission ring,
 * matches the ranks of each collective by per-communicator sequence number,
 * plans it against one config snapshot, appends its work items to the device
 * FIFOs in one global order, and turns work_consumed into completions.
 *
 * It is a QSBR RCU reader: a quiescent state per pass, offline while asleep.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <urcu-qsbr.h>

#include "common/atomics.h"
#include "common/futex.h"
#include "daemon/config.h"
#include "daemon/log.h"
#include "daemon/plan.h"
#include "daemon/sched.h"
#include "daemon/sched_int.h"
#include "daemon/sqe_check.h"
#include "daemon/status.h"
#include "proto/dtype.h"

struct sched_state sched;

static pthread_t thread;
static struct sched_params params;
static struct collc_doorbell *doorbell;
static int doorbell_fd = -1;
static uint32_t stop_requested;
static uint32_t sleeping;    /* the scheduler sleeps on the doorbell */
static uint32_t stall;       /* tests: freeze the loop */
static uint64_t loops;
static int execs_stopped;    /* sched_release(): the executors' fini ran */

static pthread_mutex_t cmd_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sched_cmd *cmd_head, **cmd_tail = &cmd_head;
static struct sched_cmd *done_head, **done_tail = &done_head;

/* Counters other threads read (sd_notify, watchdog). */
static struct sched_counters shared_counters;

static void wake_scheduler(void)
{
	fetch_add(&doorbell->seq, 1);
	futex_wake(&doorbell->seq, 1);
}

void sched_notify(void)
{
	/* N1: pairs with S1 below: work_consumed is stored before sleeping is loaded. */
	fence_seq_cst();
	if (load_relaxed(&sleeping))
		wake_scheduler();
}

void sched_post(struct sched_cmd *cmd)
{
	cmd->next = NULL;
	pthread_mutex_lock(&cmd_lock);
	/* Relaxed atomics: the scheduler peeks at cmd_head without the lock. */
	store_relaxed(cmd_tail, cmd);
	cmd_tail = &cmd->next;
	pthread_mutex_unlock(&cmd_lock);
	wake_scheduler();
}

static void cmd_finish(struct sched_cmd *cmd, int result)
{
	cmd->result = result;
	cmd->next = NULL;
	pthread_mutex_lock(&cmd_lock);
	*done_tail = cmd;
	done_tail = &cmd->next;
	pthread_mutex_unlock(&cmd_lock);
	params.notify_done();
}

void sched_run_done(void)
{
	struct sched_cmd *list, *next;

	pthread_mutex_lock(&cmd_lock);
	list = done_head;
	done_head = NULL;
	done_tail = &done_head;
	pthread_mutex_unlock(&cmd_lock);
	for (; list; list = next) {
		next = list->next;
		list->done(list);
	}
}

int sched_doorbell_fd(void)
{
	return doorbell_fd;
}

void sched_counters(struct sched_counters *out)
{
	out->loops = load_relaxed(&loops);
	out->submitted = load_relaxed(&shared_counters.submitted);
	out->completed = load_relaxed(&shared_counters.completed);
	out->errors = load_relaxed(&shared_counters.errors);
	out->clients = load_relaxed(&shared_counters.clients);
	out->comms = load_relaxed(&shared_counters.comms);
	out->inflight = load_relaxed(&shared_counters.inflight);
}

void sched_debug_stall(int on)
{
	store_relaxed(&stall, on ? 1u : 0u);
	wake_scheduler();
}

static void publish_counters(void)
{
	uint32_t nclients = 0, ncomms = 0, inflight = 0;

	for (struct sched_client *c = sched.clients; c; c = c->next)
		nclients += !c->gone;
	for (struct comm *c = sched.comms; c; c = c->next) {
		ncomms++;
		inflight += (uint32_t)c->inflight;
	}
	store_relaxed(&shared_counters.submitted, sched.submitted);
	store_relaxed(&shared_counters.completed, sched.completed);
	store_relaxed(&shared_counters.errors, sched.errors);
	store_relaxed(&shared_counters.clients, nclients);
	store_relaxed(&shared_counters.comms, ncomms);
	store_relaxed(&shared_counters.inflight, inflight);
}

/* Completions */

static void post_cqe(struct sched_client *c, uint64_t user_data, int res)
{
	struct collc_cqe *cqe;

	c->outstanding--;
	if (res == 0)
		c->completed++;
	else
		c->errors++;
	if (c->gone)
		return;
	cqe = &c->cqes[c->cq_tail & (c->cq_entries - 1)];
	cqe->user_data = user_data;
	cqe->res = res;
	cqe->flags = 0;
	c->cq_tail++;
	c->cq_dirty = 1;
}

static void flush_cqs(void)
{
	for (struct sched_client *c = sched.clients; c; c = c->next) {
		if (!c->cq_dirty || c->gone)
			continue;
		c->cq_dirty = 0;
		/* C1: pairs with the client's acquire load of cq_tail: CQEs are visible first. */
		store_release(&c->hdr->cq_tail, c->cq_tail);
		/* C2: pairs with W1 in the client: it sets WAITING, fences, re-reads cq_tail. */
		fence_seq_cst();
		if (load_relaxed(&c->hdr->cq_flags) & COLLC_CQ_WAITING)
			futex_wake(&c->hdr->cq_tail, 64);
		if (c->event_fd >= 0) {
			uint64_t one = 1;

			if (write(c->event_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
				log_debug("client %u: eventfd write: %s", c->id, strerror(errno));
		}
	}
}

/* Registrations */

/* Lets go of memory a registration holds: its host mapping, or the executor's memory. */
static void mr_free_mem(const struct exec_backend *ex, void *exec_mem, void *addr, uint64_t size)
{
	if (ex) {
		if (!(execs_stopped && ex->fini_frees))
			ex->mem_release(exec_mem);
	} else
		munmap(addr, size);
}

static void mr_put(struct mr *m)
{
	if (!m || --m->refs > 0 || !m->released)
		return;
	mr_free_mem(m->exec, m->exec_mem, m->addr, m->size);
	free(m);
}

static struct mr *mr_lookup(struct sched_client *c, uint32_t id)
{
	struct mr *m;

	if (id == COLLC_MR_NONE || id > c->nmrs)
		return NULL;
	m = c->mrs[id - 1];
	return m && !m->released ? m : NULL;
}

static void mr_release(struct sched_client *c, uint32_t id)
{
	struct mr *m = mr_lookup(c, id);

	if (!m)
		return;
	c->mrs[id - 1] = NULL;
	c->nmrs_live--;
	c->mr_bytes -= m->size;
	m->released = 1;
	m->refs++;
	mr_put(m);
}

/* Collectives */

static struct slot *slot_of(struct comm *cm, uint64_t seq)
{
	return &cm->slots[seq % COMM_WINDOW];
}

static uint32_t slot_pending_count(const struct comm *cm)
{
	uint32_t n = 0;

	for (uint64_t s = cm->next_launch; s < cm->next_done + COMM_WINDOW; s++) {
		const struct slot *sl = &cm->slots[s % COMM_WINDOW];

		if (sl->state == SLOT_ARRIVING && sl->seq == s)
			n++;
	}
	return n;
}

/* Ends collective seq for every rank that submitted it; frees its references. */
static void slot_finish(struct comm *cm, struct slot *sl, int res)
{
	for (uint32_t r = 0; r < cm->nranks; r++) {
		struct slot_rank *sr = &sl->ranks[r];

		if (!sr->client)
			continue;
		post_cqe(sr->client, sr->user_data, res);
		if (res == 0)
			sched.completed++;
		else
			sched.errors++;
		mr_put(sr->send_mr);
		mr_put(sr->recv_mr);
		sr->client = NULL;
		sr->send_mr = sr->recv_mr = NULL;
	}
	if (res == 0)
		cm->completed++;
	else
		cm->errors++;
	sl->state = SLOT_DONE;
}

static void comm_advance_done(struct comm *cm)
{
	while (cm->slots) {
		struct slot *sl = slot_of(cm, cm->next_done);

		if (sl->state != SLOT_DONE || sl->seq != cm->next_done)
			break;
		sl->state = SLOT_EMPTY;
		sl->arrived = 0;
		cm->next_done++;
		if (cm->next_launch < cm->next_done)
			cm->next_launch = cm->next_done;
	}
}

/*
 * Every collective that can no longer complete ends with err; so do later
 * ones. Those already in the executors are abandoned there (comm_abort) and
 * end with err when their items are consumed (reap).
 */
static void comm_revoke(struct comm *cm, int err)
{
	if (cm->revoked || !cm->slots)
		return;
	cm->revoked = err;
	if (cm->live)
		log_info("communicator %llu revoked: %s", (unsigned long long)cm->id, strerror(-err));
	if (cm->inflight && cm->exec_priv) {
		cm->revoked_inflight = cm->inflight;
		sched.execs[cm->exec_idx].ex->comm_abort(cm->exec_priv);
	}
	for (uint64_t s = cm->next_launch; s < cm->next_done + COMM_WINDOW; s++) {
		struct slot *sl = slot_of(cm, s);

		if (sl->seq == s && sl->state == SLOT_ARRIVING)
			slot_finish(cm, sl, err);
	}
	comm_advance_done(cm);
}

static int resolve_buf(struct sched_client *c, uint32_t id, uint64_t off, uint64_t len,
		       struct mr **ret)
{
	struct mr *m;
	uint64_t end;

	if (len == 0 && id == COLLC_MR_NONE)
		return 0;
	m = mr_lookup(c, id);
	if (!m)
		return -EINVAL;
	if (__builtin_add_overflow(off, len, &end) || end > m->size)
		return -EINVAL;
	m->refs++;
	*ret = m;
	return 0;
}

/* Validates a copied SQE against the client's own registrations. */
static int sqe_check(struct sched_client *c, const struct collc_sqe *e, const struct member *mb,
		     struct slot_rank *sr)
{
	uint64_t send = 0, recv = 0;
	int r = sqe_validate(e, mb->comm->nranks, mb->rank, &send, &recv);

	if (r < 0)
		return r;
	r = resolve_buf(c, e->send_mr, e->send_off, send, &sr->send_mr);
	if (r == 0)
		r = resolve_buf(c, e->recv_mr, e->recv_off, recv, &sr->recv_mr);
	if (r < 0) {
		mr_put(sr->send_mr);
		sr->send_mr = NULL;
	}
	return r;
}

/*
 * Takes one SQE. Returns 0 when consumed, -EAGAIN when it must stay in the
 * ring for now (its communicator's window is full).
 */
static int take_sqe(struct sched_client *c, const struct collc_sqe *e)
{
	struct member *mb = NULL;
	struct comm *cm;
	struct slot *sl;
	struct slot_rank *sr;

	if (e->comm >= 1 && e->comm <= c->nmembers)
		mb = c->members[e->comm - 1];
	if (!mb || mb->left || e->seq != mb->next_seq) {
		/* Not a collective of any communicator: only this client hears of it. */
		c->bad++;
		c->outstanding++;
		sched.bad++;
		sched.errors++;
		post_cqe(c, e->user_data, mb && mb->left ? -EBADF : -EINVAL);
		return 0;
	}
	cm = mb->comm;
	/* A revoked communicator answers at once: its window never moves again. */
	if (e->seq >= cm->next_done + COMM_WINDOW && !cm->revoked)
		return -EAGAIN;
	mb->next_seq++;
	c->outstanding++;
	c->submitted++;
	sched.submitted++;
	if (cm->revoked || e->seq < cm->next_done) {
		/*
		 * Revoked: nothing completes any more. Older than the oldest open
		 * collective: the others gave up on it (timeout), so does this rank.
		 */
		sched.errors++;
		cm->errors++;
		post_cqe(c, e->user_data, cm->revoked ? cm->revoked : -ETIMEDOUT);
		return 0;
	}
	sl = slot_of(cm, e->seq);
	if (sl->state == SLOT_EMPTY || sl->seq != e->seq) {
		sl->state = SLOT_ARRIVING;
		sl->seq = e->seq;
		sl->arrived = 0;
		sl->t_first_ns = now_ns();
	}
	sr = &sl->ranks[mb->rank];
	memset(sr, 0, sizeof(*sr));
	sr->client = c;
	sr->user_data = e->user_data;
	sr->sqe = *e;
	sr->err = sqe_check(c, e, mb, sr);
	if (sr->err) {
		c->bad++;
		sched.bad++;
	}
	sl->arrived++;
	return 0;
}

/* May one more SQE be taken without risking a CQ overflow? */
static int cq_room(const struct sched_client *c)
{
	uint32_t used = c->cq_tail - load_acquire(&c->hdr->cq_head);

	return used <= c->cq_entries && used + c->outstanding < c->cq_entries;
}

static int drain_sq(struct sched_client *c)
{
	uint32_t tail, n, taken = 0;

	/* R1: pairs with A1 in the client: SQEs are visible before the tail. */
	tail = load_acquire(&c->hdr->sq_tail);
	n = tail - c->sq_head;
	if (n > c->sq_entries) {
		/* A tail more than one ring ahead is garbage: take what can be real. */
		if ((uint64_t)tail != c->bad_tail) {
			/* Counted once per garbage value, not once per pass that sees it. */
			c->bad_tail = tail;
			c->bad++;
			sched.bad++;
		}
		n = c->sq_entries;
	}
	c->stall = STALL_NONE;
	while (taken < n) {
		struct collc_sqe e;

		/* Back-pressure: every taken SQE owns a CQ entry until its CQE is posted. */
		if (!cq_room(c)) {
			c->stall = STALL_CQ_FULL;
			break;
		}
		/* Copied once: a client rewriting the entry now changes nothing. */
		memcpy(&e, &c->sqes[c->sq_head & (c->sq_entries - 1)], sizeof(e));
		compiler_barrier();
		if (take_sqe(c, &e) == -EAGAIN) {
			c->stall = STALL_WINDOW;
			break;
		}
		c->sq_head++;
		taken++;
	}
	if (taken)
		/* H1: pairs with the client's acquire load of sq_head: slots are free to reuse. */
		store_release(&c->hdr->sq_head, c->sq_head);
	return taken != 0;
}

/* FIFOs */

static uint32_t fifo_channels(const struct fifo_host *fh)
{
	return sched.execs[fh->exec_idx].ex->max_channels;
}

static int fifo_has_room(uint32_t dev)
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

/* Have the channels [base, base + nchannels) mod C of dev passed position pos? */
static int coll_done_on(uint32_t dev, uint64_t pos, uint32_t base, uint32_t nchannels)
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
static int slot_executed(const struct comm *cm, const struct slot *sl)
{
	for (uint32_t r = 0; r < cm->nranks; r++)
		if (!coll_done_on(cm->devs[r], sl->ranks[r].fifo_pos, sl->chan_base, sl->nchannels))
			return 0;
	return 1;
}

static int64_t rank_bytes(const struct collc_sqe *e, uint32_t nranks)
{
	uint64_t b = e->count * collc_dtype_bytes(e->dtype);

	if (e->opcode == COLLC_OP_ALLGATHER || e->opcode == COLLC_OP_REDUCE_SCATTER)
		b *= nranks;
	return (int64_t)b;
}

/* The ranks agree on what they run; otherwise every one of them fails. */
static int slot_consistent(const struct comm *cm, const struct slot *sl)
{
	const struct collc_sqe *a = &sl->ranks[0].sqe;

	for (uint32_t r = 0; r < cm->nranks; r++) {
		const struct slot_rank *sr = &sl->ranks[r];

		if (sr->err)
			return sr->err;
		if (sr->sqe.opcode != a->opcode || sr->sqe.count != a->count ||
		    sr->sqe.dtype != a->dtype)
			return -EINVAL;
		if (a->opcode != COLLC_OP_ALLGATHER && a->opcode != COLLC_OP_BROADCAST &&
		    sr->sqe.redop != a->redop)
			return -EINVAL;
		if ((a->opcode == COLLC_OP_BROADCAST || a->opcode == COLLC_OP_REDUCE) &&
		    sr->sqe.root != a->root)
			return -EINVAL;
	}
	return 0;
}

static uint64_t buf_addr(const struct mr *m, uint64_t off)
{
	return m ? (uint64_t)(uintptr_t)m->addr + off : 0;
}

/* Does some rank's buffer live in memory its peers cannot read directly? */
static uint32_t slot_plan_flags(const struct comm *cm, const struct slot *sl)
{
	for (uint32_t r = 0; r < cm->nranks; r++) {
		const struct slot_rank *sr = &sl->ranks[r];

		if ((sr->send_mr && (sr->send_mr->flags & EXEC_MEM_NO_PEER_READ)) ||
		    (sr->recv_mr && (sr->recv_mr->flags & EXEC_MEM_NO_PEER_READ)))
			return PLAN_NO_PEER_READ;
	}
	return 0;
}

/* Returns 1 when launched or failed, 0 when the FIFOs have no room yet. */
static int launch(struct comm *cm, struct slot *sl)
{
	const struct collc_sqe *a = &sl->ranks[0].sqe;
	struct sched_exec *se = &sched.execs[cm->exec_idx];
	const struct collc_config *cfg = &se->cfg;
	uint32_t maxch = se->ex->max_channels;
	struct plan p;
	int err = slot_consistent(cm, sl);

	if (err) {
		slot_finish(cm, sl, err);
		return 1;
	}
	for (uint32_t r = 0; r < cm->nranks; r++)
		if (!fifo_has_room(cm->devs[r]))
			return 0;
	plan_coll(cfg, a->opcode, (uint64_t)rank_bytes(a, cm->nranks), cm->nranks,
		  slot_plan_flags(cm, sl), &p);
	sl->coll_id = ++sched.next_coll_id;
	sl->nchannels = p.nchannels;
	/* Every rank's item of one collective starts at the same channel. */
	sl->chan_base = 0;
	if (cfg->rotate_channels) {
		sl->chan_base = (uint8_t)(se->next_chan_base % maxch);
		se->next_chan_base = (se->next_chan_base + p.nchannels) % maxch;
	}
	sl->algo = p.algo;
	sl->proto = p.proto;
	sl->bytes = (uint64_t)rank_bytes(a, cm->nranks);
	sl->t_start_ns = now_ns();
	for (uint32_t r = 0; r < cm->nranks; r++) {
		struct slot_rank *sr = &sl->ranks[r];
		struct fifo_host *fh = &sched.fifos[cm->devs[r]];
		struct collc_work_item *it = &fh->f->items[fh->tail & (COLLC_FIFO_DEPTH - 1)];

		it->kind = COLLC_WORK_COLL;
		it->coll = sr->sqe.opcode;
		it->algo = p.algo;
		it->proto = p.proto;
		it->dtype = sr->sqe.dtype;
		it->redop = sr->sqe.redop;
		it->nchannels = p.nchannels;
		it->chan_base = sl->chan_base;
		it->nranks = cm->nranks;
		it->rank = r;
		it->root = sr->sqe.root;
		it->chunk_bytes = p.chunk_bytes;
		it->count = sr->sqe.count;
		it->sendbuf = buf_addr(sr->send_mr, sr->sqe.send_off);
		it->recvbuf = buf_addr(sr->recv_mr, sr->sqe.recv_off);
		it->comm_dev = cm->comm_dev[r];
		it->comm_id = cm->id;
		it->coll_id = sl->coll_id;
		sr->fifo_pos = fh->tail;
		/* W1: pairs with the executor's acquire load of seq: the item is whole first. */
		store_release(&it->seq, fh->tail + 1);
		fh->tail++;
		fh->used = 1;
	}
	for (uint32_t r = 0; r < cm->nranks; r++)
		se->ex->kick(sched.fifos[cm->devs[r]].dev);
	sl->state = SLOT_INFLIGHT;
	cm->inflight++;
	cm->by_algo[p.algo]++;
	cm->by_proto[p.proto]++;
	sched.by_algo[p.algo]++;
	sched.by_proto[p.proto]++;
	sched.by_op[a->opcode]++;
	return 1;
}

static int launch_ready(void)
{
	int progress = 0;

	for (struct comm *cm = sched.comms; cm; cm = cm->next) {
		while (cm->ready && cm->slots) {
			struct slot *sl = slot_of(cm, cm->next_launch);

			if (sl->seq != cm->next_launch)
				break;
			if (sl->state == SLOT_DONE) {
				cm->next_launch++;
				continue;
			}
			if (sl->state != SLOT_ARRIVING || sl->arrived < cm->nranks)
				break;
			if (!launch(cm, sl))
				break;
			cm->next_launch++;
			progress = 1;
		}
		comm_advance_done(cm);
	}
	return progress;
}

static uint32_t comm_timeout_ms(const struct collc_config *cfg, const struct comm *cm)
{
	return cm->timeout_ms == UINT32_MAX ? cfg->op_timeout_ms : cm->timeout_ms;
}

/*
 * Ends the oldest collective of a communicator when some rank kept the others
 * waiting past the timeout; the missing ranks are remembered for status.
 */
static int expire(const struct collc_config *cfg, uint64_t now)
{
	int progress = 0;

	for (struct comm *cm = sched.comms; cm; cm = cm->next) {
		uint32_t ms = comm_timeout_ms(cfg, cm);
		struct slot *sl;

		if (!cm->ready || !cm->slots || !ms || cm->revoked)
			continue;
		sl = slot_of(cm, cm->next_launch);
		if (sl->seq != cm->next_launch || sl->state != SLOT_ARRIVING ||
		    now - sl->t_first_ns < (uint64_t)ms * 1000000)
			continue;
		cm->timed_out_mask = 0;
		for (uint32_t r = 0; r < cm->nranks; r++)
			if (!sl->ranks[r].client)
				cm->timed_out_mask |= 1ull << r;
		cm->timeouts++;
		log_info("communicator %llu: collective %llu timed out after %u ms waiting for ranks 0x%llx",
			 (unsigned long long)cm->id, (unsigned long long)sl->seq, ms,
			 (unsigned long long)cm->timed_out_mask);
		slot_finish(cm, sl, -ETIMEDOUT);
		cm->next_launch++;
		comm_advance_done(cm);
		progress = 1;
	}
	return progress;
}

/* Does some communicator wait for a rank under a timeout? Then sleep briefly. */
static int timers_armed(const struct collc_config *cfg)
{
	for (struct comm *cm = sched.comms; cm; cm = cm->next) {
		const struct slot *sl;

		if (!cm->ready || !cm->slots || !comm_timeout_ms(cfg, cm))
			continue;
		sl = slot_of(cm, cm->next_launch);
		if (sl->seq == cm->next_launch && sl->state == SLOT_ARRIVING)
			return 1;
	}
	return 0;
}

static void record_latency(const struct slot *sl)
{
	uint64_t ns = now_ns() - sl->t_start_ns;
	uint32_t cls = 0, b = 0;

	for (uint64_t x = sl->bytes; x >= 1024 && cls < 7; x >>= 4)
		cls++;
	for (uint64_t us = ns / 1000; us && b < 16; us >>= 1)
		b++;
	sched.lat_buckets[cls][b]++;
	sched.lat_count[cls]++;
	sched.lat_sum_ns[cls] += ns;
}

static int reap(void)
{
	int progress = 0;

	for (struct comm *cm = sched.comms; cm; cm = cm->next) {
		while (cm->inflight) {
			struct slot *sl = slot_of(cm, cm->next_done);

			if (sl->state == SLOT_DONE) {
				comm_advance_done(cm);
				continue;
			}
			if (sl->state != SLOT_INFLIGHT || sl->seq != cm->next_done || !slot_executed(cm, sl))
				break;
			cm->inflight--;
			if (cm->revoked) {
				/* Abandoned in the executor (or finished just before): not a result. */
				slot_finish(cm, sl, cm->revoked);
			} else {
				record_latency(sl);
				slot_finish(cm, sl, 0);
			}
			comm_advance_done(cm);
			progress = 1;
		}
	}
	return progress;
}

/* Commands */

static void client_free(struct sched_client *c)
{
	for (uint32_t i = 0; i < c->nmembers; i++) {
		struct member *mb = c->members[i];

		if (mb && mb->comm)
			mb->comm->members[mb->rank] = NULL;
	}
	for (uint32_t i = 0; i < c->nmrs; i++)
		if (c->mrs[i])
			mr_release(c, i + 1);
	free(c->mrs);
	for (uint32_t i = 0; i < c->nmembers; i++)
		free(c->members[i]);
	free(c->members);
	munmap(c->shm, c->shm_size);
	close(c->shm_fd);
	if (c->event_fd >= 0)
		close(c->event_fd);
	free(c);
}

static void comm_free(struct comm *cm)
{
	if (cm->exec_priv)
		sched.execs[cm->exec_idx].ex->comm_teardown(cm->exec_priv);
	/*
	 * At shutdown collectives may still be waiting or in flight (the
	 * executors have stopped): drop the registrations they hold.
	 */
	for (uint32_t i = 0; cm->slots && i < COMM_WINDOW; i++) {
		struct slot *sl = &cm->slots[i];

		if (sl->state != SLOT_ARRIVING && sl->state != SLOT_INFLIGHT)
			continue;
		for (uint32_t r = 0; r < cm->nranks; r++) {
			mr_put(sl->ranks[r].send_mr);
			mr_put(sl->ranks[r].recv_mr);
			sl->ranks[r].send_mr = sl->ranks[r].recv_mr = NULL;
		}
	}
	if (cm->slots) {
		free(cm->slots[0].ranks);
		free(cm->slots);
	}
	free(cm->joins);
	free(cm->members);
	free(cm->devs);
	free(cm->comm_dev);
	free(cm);
}

/* Frees communicators nobody uses and clients that are gone and idle. */
static void collect(void)
{
	struct comm **pc = &sched.comms;
	struct sched_client **pcl = &sched.clients;

	while (*pc) {
		struct comm *cm = *pc;

		if ((cm->ready || cm->failed) && cm->live == 0 && cm->inflight == 0) {
			for (uint32_t r = 0; r < cm->nranks; r++)
				if (cm->members[r])
					cm->members[r]->comm = NULL;
			*pc = cm->next;
			comm_free(cm);
			continue;
		}
		pc = &cm->next;
	}
	while (*pcl) {
		struct sched_client *c = *pcl;

		if (c->gone && c->outstanding == 0) {
			*pcl = c->next;
			client_free(c);
			continue;
		}
		pcl = &c->next;
	}
}

static void member_leave(struct member *mb, int err)
{
	struct comm *cm = mb->comm;

	if (!cm || mb->left)
		return;
	mb->left = 1;
	mb->client->nmembers_live--;
	cm->live--;
	/* The others can no longer complete anything that needs this rank. */
	comm_revoke(cm, err);
}

static struct comm *comm_find_init(const uint8_t *nonce)
{
	for (struct comm *cm = sched.comms; cm; cm = cm->next)
		if (!cm->ready && !cm->failed && memcmp(cm->nonce, nonce, sizeof(cm->nonce)) == 0)
			return cm;
	return NULL;
}

static void comm_fail_init(struct comm *cm, int err)
{
	for (uint32_t r = 0; r < cm->nranks; r++)
		if (cm->joins[r]) {
			cmd_finish(cm->joins[r], err);
			cm->joins[r] = NULL;
		}
}

static int member_add(struct sched_client *c, struct comm *cm, uint32_t rank, uint32_t *handle)
{
	struct member *mb = calloc(1, sizeof(*mb));
	struct member **t = realloc(c->members, (c->nmembers + 1) * sizeof(*t));

	if (!mb || !t) {
		free(mb);
		if (t)
			c->members = t;
		return -ENOMEM;
	}
	c->members = t;
	mb->comm = cm;
	mb->client = c;
	mb->rank = rank;
	mb->handle = ++c->nmembers;
	c->members[mb->handle - 1] = mb;
	c->nmembers_live++;
	cm->members[rank] = mb;
	cm->live++;
	*handle = mb->handle;
	return 0;
}

/* The executor of a communicator's ranks: host memory ranks, or GPU ones. */
static int comm_pick_exec(const struct comm *cm, uint32_t *ret_idx)
{
	int32_t dev0 = cm->joins[0]->u.join.req.device;
	uint32_t cap = dev0 == -1 ? EXEC_CAP_HOST_RANKS : EXEC_CAP_DEVICE_RANKS;

	for (uint32_t i = 1; i < cm->nranks; i++)
		if ((cm->joins[i]->u.join.req.device == -1) != (dev0 == -1)) {
			log_warn("communicator %llu: rank 0 uses %s but rank %u %s: one communicator "
				 "runs on host threads or on GPUs, not both",
				 (unsigned long long)cm->id, dev0 == -1 ? "host memory (device -1)" : "a GPU",
				 i, dev0 == -1 ? "a GPU" : "host memory (device -1)");
			return -EINVAL;
		}
	for (uint32_t e = 0; e < sched.nexecs; e++)
		if (sched.execs[e].ex->caps & cap) {
			*ret_idx = e;
			return 0;
		}
	log_warn("communicator %llu: no executor runs %s ranks", (unsigned long long)cm->id,
		 dev0 == -1 ? "host-memory" : "GPU");
	return -ENODEV;
}

/* Places the ranks on its executor's devices and sets up its connections there. */
static int comm_place(struct comm *cm)
{
	const struct collc_msg_comm_init *reqs[COLLC_MAX_RANKS];
	const struct exec_backend *ex;
	uint32_t local[COLLC_MAX_RANKS];
	int r = comm_pick_exec(cm, &cm->exec_idx);

	if (r < 0)
		return r;
	ex = sched.execs[cm->exec_idx].ex;
	for (uint32_t i = 0; i < cm->nranks; i++)
		reqs[i] = &cm->joins[i]->u.join.req;
	r = ex->place(cm->nranks, reqs, local);
	if (r < 0)
		return r;
	for (uint32_t i = 0; i < cm->nranks; i++)
		cm->devs[i] = sched.execs[cm->exec_idx].base + local[i];
	return ex->comm_setup(cm->nranks, local, cm->comm_dev, &cm->exec_priv);
}

static int comm_complete_init(struct comm *cm)
{
	struct slot_rank *ranks;
	int r;

	cm->slots = calloc(COMM_WINDOW, sizeof(*cm->slots));
	ranks = calloc((size_t)COMM_WINDOW * cm->nranks, sizeof(*ranks));
	if (!cm->slots || !ranks) {
		free(ranks);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < COMM_WINDOW; i++) {
		cm->slots[i].ranks = ranks + (size_t)i * cm->nranks;
		cm->slots[i].seq = UINT64_MAX;
	}
	r = comm_place(cm);
	if (r < 0)
		return r;
	for (uint32_t i = 0; i < cm->nranks; i++) {
		struct sched_cmd *j = cm->joins[i];

		r = member_add(j->client, cm, i, &j->u.join.comm);
		if (r < 0)
			return r;
		j->u.join.comm_id = cm->id;
	}
	cm->ready = 1;
	log_info("communicator %llu: %u ranks", (unsigned long long)cm->id, cm->nranks);
	for (uint32_t i = 0; i < cm->nranks; i++) {
		cmd_finish(cm->joins[i], 0);
		cm->joins[i] = NULL;
	}
	return 0;
}

static void cmd_join(struct sched_cmd *cmd)
{
	const struct collc_msg_comm_init *q = &cmd->u.join.req;
	struct comm *cm;
	int r;

	if (q->nranks < 1 || q->nranks > COLLC_MAX_RANKS || q->rank >= q->nranks || q->flags ||
	    q->uid.magic != COLLC_UID_MAGIC) {
		cmd_finish(cmd, -EINVAL);
		return;
	}
	cm = comm_find_init(q->uid.nonce);
	if (!cm) {
		cm = calloc(1, sizeof(*cm));
		if (cm) {
			cm->joins = calloc(q->nranks, sizeof(*cm->joins));
			cm->members = calloc(q->nranks, sizeof(*cm->members));
			cm->devs = calloc(q->nranks, sizeof(*cm->devs));
			cm->comm_dev = calloc(q->nranks, sizeof(*cm->comm_dev));
		}
		if (!cm || !cm->joins || !cm->members || !cm->devs || !cm->comm_dev) {
			if (cm)
				comm_free(cm);
			cmd_finish(cmd, -ENOMEM);
			return;
		}
		cm->id = ++sched.next_comm_id;
		cm->nranks = q->nranks;
		cm->timeout_ms = UINT32_MAX;
		memcpy(cm->nonce, q->uid.nonce, sizeof(cm->nonce));
		cm->next = sched.comms;
		sched.comms = cm;
	}
	if (cm->nranks != q->nranks || cm->joins[q->rank]) {
		/* Ranks that disagree on the size, or a rank taken twice: nobody proceeds. */
		cmd_finish(cmd, -EINVAL);
		return;
	}
	cm->joins[q->rank] = cmd;
	if (++cm->joined < cm->nranks)
		return;
	r = comm_complete_init(cm);
	if (r < 0) {
		log_err("communicator setup failed: %s", strerror(-r));
		comm_fail_init(cm, r);
		for (uint32_t i = 0; i < cm->nranks; i++)
			if (cm->members[i])
				member_leave(cm->members[i], -EPIPE);
		cm->ready = 0;
		cm->failed = 1; /* collect() frees it */
	}
}

static void client_gone(struct sched_client *c)
{
	c->gone = 1;
	for (uint32_t i = 0; i < c->nmembers; i++)
		if (c->members[i])
			member_leave(c->members[i], -EPIPE);
	/* Communicators still gathering ranks lose this client's join. */
	for (struct comm *cm = sched.comms; cm; cm = cm->next) {
		if (cm->ready || cm->failed)
			continue;
		for (uint32_t r = 0; r < cm->nranks; r++)
			if (cm->joins[r] && cm->joins[r]->client == c) {
				comm_fail_init(cm, -EPIPE);
				cm->failed = 1; /* nobody joined for good: collect() frees it */
				break;
			}
	}
}

static struct member *member_of(struct sched_client *c, uint32_t handle)
{
	if (handle < 1 || handle > c->nmembers)
		return NULL;
	return c->members[handle - 1];
}

/* Status */

static uint32_t clamp_depth(uint32_t tail, uint32_t head, uint32_t entries)
{
	uint32_t d = tail - head;

	return d > entries ? entries : d;
}

/* Ranks that have not yet submitted the oldest collective some rank is waiting in. */
static uint64_t lagging_mask(const struct comm *cm)
{
	const struct slot *sl;
	uint64_t mask = 0;

	if (!cm->ready || !cm->slots)
		return 0;
	sl = &cm->slots[cm->next_launch % COMM_WINDOW];
	if (sl->seq != cm->next_launch || sl->state != SLOT_ARRIVING)
		return 0;
	for (uint32_t r = 0; r < cm->nranks; r++)
		if (!sl->ranks[r].client)
			mask |= 1ull << r;
	return mask;
}

static void snapshot_device(uint32_t g, struct status_device *d)
{
	const struct fifo_host *fh = &sched.fifos[g];
	const struct exec_backend *ex = sched.execs[fh->exec_idx].ex;

	d->id = g;
	d->backend = ex->name;
	ex->device_name(fh->dev, d->name, sizeof(d->name));
	d->nchannels = ex->max_channels;
	d->tail = fh->tail;
	for (uint32_t ch = 0; ch < d->nchannels; ch++) {
		d->consumed[ch] = load_acquire(&fh->f->ctrl.work_consumed[ch].value);
		d->aborted[ch] = load_relaxed(&fh->f->ctrl.work_consumed[ch].aborted);
	}
}

/* Fills s from the scheduler's state; the arrays are malloc'ed (snapshot_free). */
static int snapshot_take(const struct collc_config *cfg, struct status_snapshot *s)
{
	uint32_t n = 0;

	memset(s, 0, sizeof(*s));
	s->cfg = cfg;
	s->generation = cfg_generation();
	for (uint32_t e = 0; e < sched.nexecs; e++) {
		s->execs[e].name = sched.execs[e].ex->name;
		s->execs[e].ndevices = sched.execs[e].ex->ndevices;
		s->execs[e].max_channels = sched.execs[e].ex->max_channels;
		s->execs[e].cfg = sched.execs[e].cfg;
	}
	s->nexecs = sched.nexecs;
	for (struct sched_client *c = sched.clients; c; c = c->next)
		n++;
	s->clients = calloc(n ? n : 1, sizeof(*s->clients));
	n = 0;
	for (struct comm *cm = sched.comms; cm; cm = cm->next)
		n++;
	s->comms = calloc(n ? n : 1, sizeof(*s->comms));
	s->devices = calloc(sched.ndevs ? sched.ndevs : 1, sizeof(*s->devices));
	if (!s->clients || !s->comms || !s->devices)
		return -ENOMEM;
	for (const struct sched_client *c = sched.clients; c; c = c->next) {
		struct status_client *v = &s->clients[s->nclients];

		if (c->gone)
			continue;
		v->id = c->id;
		v->pid = (int32_t)c->pid;
		v->uid = (uint32_t)c->uid;
		v->sq_depth = clamp_depth(load_relaxed(&c->hdr->sq_tail), c->sq_head, c->sq_entries);
		v->cq_depth = clamp_depth(c->cq_tail, load_relaxed(&c->hdr->cq_head), c->cq_entries);
		v->inflight = c->outstanding;
		v->submitted = c->submitted;
		v->completed = c->completed;
		v->errors = c->errors;
		v->bad = c->bad;
		s->nclients++;
	}
	for (const struct comm *cm = sched.comms; cm; cm = cm->next) {
		struct status_comm *v = &s->comms[s->ncomms];

		if (!cm->ready)
			continue;
		v->id = cm->id;
		v->backend = sched.execs[cm->exec_idx].ex->name;
		v->nranks = cm->nranks;
		v->live = cm->live;
		v->pending = slot_pending_count(cm);
		v->revoked = cm->revoked;
		v->timeout_ms = cm->timeout_ms == UINT32_MAX ? -1 : (int32_t)cm->timeout_ms;
		v->inflight = cm->inflight;
		v->completed = cm->completed;
		v->errors = cm->errors;
		v->revoked_inflight = cm->revoked_inflight;
		v->timeouts = cm->timeouts;
		v->timed_out_mask = cm->timed_out_mask;
		v->lagging_mask = lagging_mask(cm);
		memcpy(v->by_algo, cm->by_algo, sizeof(v->by_algo));
		memcpy(v->by_proto, cm->by_proto, sizeof(v->by_proto));
		s->ncomms++;
	}
	for (uint32_t g = 0; g < sched.ndevs; g++) {
		struct status_device *d = &s->devices[s->ndevices];

		if (!sched.execs[sched.fifos[g].exec_idx].ex->device_active(sched.fifos[g].dev))
			continue;
		snapshot_device(g, d);
		for (uint32_t ch = 0; ch < d->nchannels; ch++)
			s->aborted += d->aborted[ch];
		s->ndevices++;
	}
	s->submitted = sched.submitted;
	s->completed = sched.completed;
	s->errors = sched.errors;
	s->bad = sched.bad;
	memcpy(s->by_algo, sched.by_algo, sizeof(s->by_algo));
	memcpy(s->by_proto, sched.by_proto, sizeof(s->by_proto));
	memcpy(s->lat_buckets, sched.lat_buckets, sizeof(s->lat_buckets));
	memcpy(s->lat_count, sched.lat_count, sizeof(s->lat_count));
	memcpy(s->lat_sum_ns, sched.lat_sum_ns, sizeof(s->lat_sum_ns));
	return 0;
}

static void snapshot_free(struct status_snapshot *s)
{
	free(s->clients);
	free(s->comms);
	free(s->devices);
}

/* CMD_STATUS and CMD_METRICS: the text, or NULL when out of memory. */
static char *render_status(const struct collc_config *cfg, struct sched_cmd *cmd)
{
	struct status_snapshot *s = malloc(sizeof(*s));
	char *text = NULL;

	if (s && snapshot_take(cfg, s) == 0)
		text = cmd->type == CMD_STATUS ? status_render(s, cmd->u.status.flags, &cmd->u.status.len)
					       : metrics_render(s, &cmd->u.status.len);
	if (s)
		snapshot_free(s);
	free(s);
	return text;
}

static void run_cmd(const struct collc_config *cfg, struct sched_cmd *cmd)
{
	struct sched_client *c = cmd->client;
	struct member *mb;
	struct mr *m;
	struct mr **t;

	switch (cmd->type) {
	case CMD_CLIENT_ADD:
		c = calloc(1, sizeof(*c));
		if (!c) {
			cmd_finish(cmd, -ENOMEM);
			return;
		}
		c->id = ++sched.next_client_id;
		c->pid = cmd->u.add.pid;
		c->uid = cmd->u.add.uid;
		c->gid = cmd->u.add.gid;
		c->shm_fd = cmd->u.add.shm_fd;
		c->shm = cmd->u.add.shm;
		c->shm_size = cmd->u.add.shm_size;
		c->hdr = c->shm;
		c->sq_entries = c->hdr->sq_entries;
		c->cq_entries = c->hdr->cq_entries;
		c->bad_tail = UINT64_MAX;
		c->sqes = (struct collc_sqe *)((char *)c->shm + c->hdr->sqes_off);
		c->cqes = (struct collc_cqe *)((char *)c->shm + c->hdr->cqes_off);
		c->event_fd = -1;
		c->next = sched.clients;
		sched.clients = c;
		cmd->client = c;
		cmd->u.add.client_id = c->id;
		cmd_finish(cmd, 0);
		return;
	case CMD_CLIENT_GONE:
		client_gone(c);
		cmd_finish(cmd, 0);
		return;
	case CMD_MR_ADD:
		if (c->nmrs_live >= QUOTA_MRS || c->mr_bytes + cmd->u.mr.size > QUOTA_BYTES) {
			mr_free_mem(cmd->u.mr.exec, cmd->u.mr.exec_mem, cmd->u.mr.addr, cmd->u.mr.size);
			/* The reply fd goes back to the control thread, which closes it. */
			cmd_finish(cmd, -EDQUOT);
			return;
		}
		m = calloc(1, sizeof(*m));
		t = realloc(c->mrs, (c->nmrs + 1) * sizeof(*t));
		if (t)
			c->mrs = t;
		if (!m || !t) {
			free(m);
			mr_free_mem(cmd->u.mr.exec, cmd->u.mr.exec_mem, cmd->u.mr.addr, cmd->u.mr.size);
			/* The reply fd goes back to the control thread, which closes it. */
			cmd_finish(cmd, -ENOMEM);
			return;
		}
		m->exec = cmd->u.mr.exec;
		m->exec_mem = cmd->u.mr.exec_mem;
		m->flags = cmd->u.mr.flags;
		m->addr = cmd->u.mr.addr;
		m->size = cmd->u.mr.size;
		m->id = ++c->nmrs;
		c->mrs[m->id - 1] = m;
		c->nmrs_live++;
		c->mr_bytes += m->size;
		cmd->u.mr.mr = m->id;
		cmd_finish(cmd, 0);
		return;
	case CMD_MR_RELEASE:
		if (!mr_lookup(c, cmd->u.mr.mr)) {
			cmd_finish(cmd, -EINVAL);
			return;
		}
		mr_release(c, cmd->u.mr.mr);
		cmd_finish(cmd, 0);
		return;
	case CMD_COMM_JOIN:
		if (c->gone) {
			cmd_finish(cmd, -EPIPE);
			return;
		}
		if (c->nmembers_live >= QUOTA_COMMS) {
			cmd_finish(cmd, -EDQUOT);
			return;
		}
		cmd_join(cmd);
		return;
	case CMD_COMM_DESTROY:
	case CMD_COMM_ABORT:
		mb = member_of(c, cmd->u.comm.comm);
		if (!mb || mb->left || !mb->comm) {
			cmd_finish(cmd, -EINVAL);
			return;
		}
		if (cmd->type == CMD_COMM_ABORT)
			comm_revoke(mb->comm, -ECANCELED);
		else
			member_leave(mb, -EPIPE);
		cmd_finish(cmd, 0);
		return;
	case CMD_COMM_TIMEOUT:
		mb = member_of(c, cmd->u.timeout.comm);
		if (!mb || mb->left || !mb->comm) {
			cmd_finish(cmd, -EINVAL);
			return;
		}
		mb->comm->timeout_ms = cmd->u.timeout.ms;
		cmd_finish(cmd, 0);
		return;
	case CMD_SET_EVENTFD:
		if (c->event_fd >= 0)
			close(c->event_fd);
		c->event_fd = cmd->u.efd.fd;
		cmd_finish(cmd, 0);
		return;
	case CMD_STATUS:
	case CMD_METRICS:
		cmd->u.status.text = render_status(cfg, cmd);
		cmd_finish(cmd, cmd->u.status.text ? 0 : -ENOMEM);
		return;
	}
	cmd_finish(cmd, -EINVAL);
}

/* Takes every posted command, oldest first. */
static struct sched_cmd *cmd_take_all(void)
{
	struct sched_cmd *list;

	pthread_mutex_lock(&cmd_lock);
	list = cmd_head;
	store_relaxed(&cmd_head, NULL);
	cmd_tail = &cmd_head;
	pthread_mutex_unlock(&cmd_lock);
	return list;
}

static int run_cmds(const struct collc_config *cfg)
{
	struct sched_cmd *list, *next;

	if (!load_relaxed(&cmd_head))
		return 0;
	list = cmd_take_all();
	for (; list; list = next) {
		next = list->next;
		run_cmd(cfg, list);
	}
	return 1;
}

/* Sleep */

static int work_visible(void)
{
	if (load_relaxed(&cmd_head))
		return 1;
	for (struct sched_client *c = sched.clients; c; c = c->next) {
		if (c->gone || load_acquire(&c->hdr->sq_tail) == c->sq_head)
			continue;
		/*
		 * Entries we cannot take yet are not work: a completion (which
		 * rings us) frees the window, the client's reaping (which rings the
		 * doorbell) frees its CQ.
		 */
		if (c->stall == STALL_WINDOW || (c->stall == STALL_CQ_FULL && !cq_room(c)))
			continue;
		return 1;
	}
	return 0;
}

/* Is the oldest collective of some communicator finished on every device? */
static int completion_visible(int *ret_inflight)
{
	*ret_inflight = 0;
	for (struct comm *cm = sched.comms; cm; cm = cm->next) {
		const struct slot *sl;

		if (!cm->inflight)
			continue;
		*ret_inflight = 1;
		sl = slot_of(cm, cm->next_done);
		if (sl->state != SLOT_INFLIGHT || slot_executed(cm, sl))
			return 1;
	}
	return 0;
}

/*
 * Is some collective, held back because a device FIFO was full, now free to
 * go? Executors ring us after they consume (N1), so checking after S1 closes
 * the race with a consumer that finished just before we went to sleep.
 */
static int launch_unblocked(void)
{
	for (struct comm *cm = sched.comms; cm; cm = cm->next) {
		const struct slot *sl;
		int room = 1;

		if (!cm->ready || !cm->slots)
			continue;
		sl = slot_of(cm, cm->next_launch);
		if (sl->seq != cm->next_launch || sl->state != SLOT_ARRIVING || sl->arrived < cm->nranks)
			continue;
		for (uint32_t r = 0; r < cm->nranks && room; r++)
			room = fifo_has_room(cm->devs[r]);
		if (room)
			return 1;
	}
	return 0;
}

static void set_need_wakeup(uint32_t on)
{
	for (struct sched_client *c = sched.clients; c; c = c->next)
		if (!c->gone)
			store_relaxed(&c->hdr->sq_flags, on ? COLLC_SQ_NEED_WAKEUP : 0u);
}

static void sleep_until_work(int timers)
{
	uint32_t seq = load_acquire(&doorbell->seq);
	int inflight;

	set_need_wakeup(1);
	store_relaxed(&sleeping, 1u);
	/* S1: pairs with A2 in the client (tail store, fence, flags load) and N1 in executors. */
	fence_seq_cst();
	if (!work_visible() && !completion_visible(&inflight) && !launch_unblocked() &&
	    !load_relaxed(&stop_requested)) {
		cfg_reader_quiescent();
		rcu_thread_offline();
		/* Executors ring us when they finish; the timeout only bounds timers. */
		futex_wait(&doorbell->seq, seq, inflight || timers ? 10000000 : 500000000);
		rcu_thread_online();
	}
	store_relaxed(&sleeping, 0u);
	set_need_wakeup(0);
}

/*
 * Resolves this pass's config for every executor (its auto keys), and hands
 * a newly published one to the executors that take it (configure). The
 * generation is read first (G2 in config.c): cfg is at least that new, so
 * no publication goes unseen.
 */
static void exec_configs(const struct collc_config *cfg, uint64_t gen)
{
	static uint64_t configured = UINT64_MAX;

	for (uint32_t e = 0; e < sched.nexecs; e++) {
		struct sched_exec *se = &sched.execs[e];

		cfg_resolve(cfg, &se->ex->defaults, se->ex->max_channels, &se->cfg);
		if (gen != configured && se->ex->configure)
			se->ex->configure(&se->cfg);
	}
	configured = gen;
}

static void *sched_main(void *arg)
{
	uint64_t idle_since = now_ns();

	pthread_setname_np(pthread_self(), "collc-sched");
	rcu_register_thread();
	while (!load_relaxed(&stop_requested)) {
		const struct collc_config *cfg;
		uint64_t gen;
		int progress;

		cfg_reader_quiescent();
		rcu_quiescent_state();
		if (load_relaxed(&stall)) {
			cfg_reader_quiescent();
			rcu_thread_offline();
			usleep(1000);
			rcu_thread_online();
			continue;
		}
		fetch_add_relaxed(&loops, 1);
		gen = cfg_generation();
		cfg = cfg_get(); /* one snapshot plans every collective of this pass */
		exec_configs(cfg, gen);
		progress = run_cmds(cfg);
		for (struct sched_client *c = sched.clients; c; c = c->next)
			if (!c->gone)
				progress |= drain_sq(c);
		progress |= launch_ready();
		progress |= reap();
		progress |= expire(cfg, now_ns());
		flush_cqs();
		collect();
		publish_counters();
		if (progress) {
			idle_since = now_ns();
			continue;
		}
		if (now_ns() - idle_since < (uint64_t)cfg->sched_spin_us * 1000) {
			cpu_relax();
			continue;
		}
		sleep_until_work(timers_armed(cfg));
	}
	rcu_unregister_thread();
	return NULL;
}

int sched_init(const struct sched_params *p)
{
	int r;

	params = *p;
	/* One global device space: executor e's devices follow those of e - 1. */
	for (uint32_t e = 0; e < exec_count() && e < EXEC_MAX; e++) {
		const struct exec_backend *ex = exec_get(e);
		struct sched_exec *se = &sched.execs[sched.nexecs++];

		se->ex = ex;
		se->base = sched.ndevs;
		for (uint32_t d = 0; d < ex->ndevices && sched.ndevs < SCHED_MAX_DEVICES; d++) {
			struct fifo_host *fh = &sched.fifos[sched.ndevs++];

			fh->f = ex->fifo(d);
			fh->exec_idx = e;
			fh->dev = d;
		}
	}
	doorbell_fd = memfd_create("collc-doorbell", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (doorbell_fd < 0)
		return -errno;
	if (ftruncate(doorbell_fd, sizeof(*doorbell)) < 0 ||
	    fcntl(doorbell_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		r = -errno;
		goto err_close;
	}
	doorbell = mmap(NULL, sizeof(*doorbell), PROT_READ | PROT_WRITE, MAP_SHARED, doorbell_fd, 0);
	if (doorbell == MAP_FAILED) {
		r = -errno;
		goto err_close;
	}
	r = -pthread_create(&thread, NULL, sched_main, NULL);
	if (r < 0)
		goto err_unmap;
	return 0;

err_unmap:
	munmap(doorbell, sizeof(*doorbell));
err_close:
	close(doorbell_fd);
	doorbell_fd = -1;
	return r;
}

void sched_fini(void)
{
	struct sched_cmd *list, *next;

	if (doorbell_fd < 0)
		return;
	store_relaxed(&stop_requested, 1u);
	wake_scheduler();
	pthread_join(thread, NULL);
	/* Commands nobody will run end now; the control thread runs their callbacks. */
	for (struct comm *cm = sched.comms; cm; cm = cm->next)
		if (!cm->ready && !cm->failed)
			comm_fail_init(cm, -ECANCELED);
	list = cmd_take_all();
	for (; list; list = next) {
		next = list->next;
		if (list->type == CMD_MR_ADD)
			/* The executors still run: their memory goes back to them now. */
			mr_free_mem(list->u.mr.exec, list->u.mr.exec_mem, list->u.mr.addr, list->u.mr.size);
		cmd_finish(list, -ECANCELED);
	}
}

void sched_release(void)
{
	if (doorbell_fd < 0)
		return;
	/*
	 * The executors have stopped: where a fini released its memory and
	 * connections, the registrations and communicators naming them must not.
	 */
	execs_stopped = 1;
	/* Clients first: client_free() unlinks their members from the communicators. */
	while (sched.clients) {
		struct sched_client *c = sched.clients;

		sched.clients = c->next;
		client_free(c);
	}
	while (sched.comms) {
		struct comm *cm = sched.comms;

		sched.comms = cm->next;
		if (sched.execs[cm->exec_idx].ex->fini_frees)
			cm->exec_priv = NULL; /* execs_stopped */
		comm_free(cm);
	}
	munmap(doorbell, sizeof(*doorbell));
	close(doorbell_fd);
	doorbell_fd = -1;
}
