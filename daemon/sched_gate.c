/* SPDX-License-Identifier: MIT */
/*
 * Stream gates (proto/shm.h): stream-ordered collectives wait in their slot
 * until every such rank's stream has written its ticket to the gate's go
 * word, and end by storing the result and then done. Graph gates carry a
 * template: each replay that sets go fires one collective, matched across
 * ranks by firing order in a lane of its own (struct fire), apart from the
 * communicator's window.
 *
 * The gates are the client's memory: every value read from them is only
 * compared, never used as an index or a size.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/atomics.h"
#include "common/futex.h"
#include "daemon/log.h"
#include "daemon/sched_int.h"
#include "daemon/sqe_check.h"

/* Graph gates keep the scheduler polling for this long after a replay fired. */
#define GRAPH_HOT_NS 1000000000ull

static uint64_t last_fire_ns;

/* A signal item (COLLC_WORK_SIGNAL) waiting for FIFO room, or in the FIFO until consumed. */
struct sig_item {
	struct sig_item *next;
	uint32_t dev;
	uint32_t val;
	uint64_t addr;
	struct mr *mr; /* keeps the word's memory mapped until the grid wrote it */
	uint64_t pos;
	uint8_t queued; /* not yet in the FIFO */
};

static struct sig_item *sigs;

void sched_sig_take(struct sched_client *c, uint32_t id, uint64_t off, struct mr **ret_mr,
		    uint64_t *ret_off)
{
	struct mr *m = NULL;

	if (!id || sched_resolve_buf(c, id, off, sizeof(struct collc_signal), &m) < 0 || !m)
		return;
	/*
	 * Only collcd's own device memory, which every GPU maps: the grid of any
	 * device may store there. Anything else: the stream waits on the host word.
	 */
	if (!m->exec || (m->flags & EXEC_MEM_NO_PEER_READ) ||
	    ((uintptr_t)m->addr + off) % sizeof(uint64_t)) {
		sched_mr_put(m);
		return;
	}
	*ret_mr = m;
	*ret_off = off;
}

uint32_t sched_signal_value(const struct collc_sqe *e)
{
	return e->flags == COLLC_SQE_STREAM ? (uint32_t)e->user_data : 1u;
}

void sched_signal_unrun(uint32_t dev, struct mr **sig_mr, uint64_t sig_off,
			const struct collc_sqe *e)
{
	struct sig_item *s;

	if (!*sig_mr)
		return;
	s = calloc(1, sizeof(*s));
	if (!s) {
		log_err("out of memory: a stream waiting on device %u is not released", dev);
		sched_mr_put(*sig_mr);
		*sig_mr = NULL;
		return;
	}
	s->dev = dev;
	s->val = sched_signal_value(e);
	s->addr = (uint64_t)(uintptr_t)(*sig_mr)->addr + sig_off;
	s->mr = *sig_mr;
	s->queued = 1;
	*sig_mr = NULL;
	s->next = sigs;
	sigs = s;
}

int sched_signals_flush(void)
{
	struct sig_item **ps = &sigs;
	int progress = 0;

	while (*ps) {
		struct sig_item *s = *ps;

		if (s->queued && sched_fifo_has_room(s->dev) && sched_gated_clear(s->dev, NULL, NULL)) {
			struct fifo_host *fh = &sched.fifos[s->dev];
			struct collc_work_item *it =
				&fh->f->items[fh->tail & (COLLC_FIFO_DEPTH - 1)];

			memset(it, 0, offsetof(struct collc_work_item, seq));
			it->kind = COLLC_WORK_SIGNAL;
			it->nchannels = 1;
			it->signal = s->addr;
			it->signal_val = s->val;
			s->pos = fh->tail;
			sched_fifo_append(fh);
			s->queued = 0;
			progress = 1;
		} else if (!s->queued && sched_coll_done_on(s->dev, s->pos, 0, 1)) {
			*ps = s->next;
			sched_mr_put(s->mr);
			free(s);
			progress = 1;
			continue;
		}
		ps = &s->next;
	}
	return progress;
}

void sched_gate_fail(struct sched_client *c, struct member *mb, const struct collc_sqe *e,
		     uint32_t sig_id, uint64_t sig_off, int res)
{
	struct mr *m = NULL;
	uint64_t off = 0;

	sched_complete(c, e, res);
	if (!mb || !mb->comm || !mb->comm->devs || !sqe_flags_valid(e) || e->flags == 0)
		return;
	sched_sig_take(c, sig_id, sig_off, &m, &off);
	sched_signal_unrun(mb->comm->devs[mb->rank], &m, off, e);
}

void sched_sqe_fail(struct sched_client *c, struct member *mb, const struct collc_sqe *e, int res)
{
	uint32_t id = 0;
	uint64_t off = 0;

	if (e->flags == COLLC_SQE_STREAM && sqe_flags_valid(e)) {
		/* A1 covers the gate's fields: the client wrote them before the tail. */
		id = load_relaxed(&c->gates[e->gate].sig_mr);
		off = load_relaxed(&c->gates[e->gate].sig_off);
	}
	sched_gate_fail(c, mb, e, id, off, res);
}

void sched_sqe_sig_take(struct sched_client *c, const struct collc_sqe *e, struct mr **ret_mr,
			uint64_t *ret_off)
{
	if (e->flags == COLLC_SQE_STREAM && sqe_flags_valid(e))
		sched_sig_take(c, load_relaxed(&c->gates[e->gate].sig_mr),
			       load_relaxed(&c->gates[e->gate].sig_off), ret_mr, ret_off);
}

int sched_gate_open(const struct sched_client *c, const struct collc_sqe *e)
{
	/* G1: pairs with the stream's write of go, fenced after its earlier work. */
	return e->flags != COLLC_SQE_STREAM ||
	       load_acquire(&c->gates[e->gate].go) == (uint32_t)e->user_data;
}

void sched_complete(struct sched_client *c, const struct collc_sqe *e, int res)
{
	struct collc_gate *gt;

	/* A graph firing carries user_data 0; an arming (user_data: its request) wants a CQE. */
	if (!sqe_flags_valid(e) || e->flags == 0 ||
	    (e->flags == COLLC_SQE_GRAPH && e->user_data != 0)) {
		sched_post_cqe(c, e->user_data, res);
		return;
	}
	c->outstanding--;
	if (res == 0)
		c->completed++;
	else
		c->errors++;
	if (e->flags == COLLC_SQE_GRAPH && c->arms)
		c->arms[e->gate].firing = 0; /* the gate may fire again */
	if (c->gone)
		return;
	gt = &c->gates[e->gate];
	store_relaxed(&gt->res, res);
	/*
	 * G2: pairs with the client's reads of done (its stream's wait, and
	 * libcollc's acquire before it reads res): the result is visible first.
	 */
	store_release(&gt->done, e->flags == COLLC_SQE_STREAM ? (uint32_t)e->user_data : 1u);
}

int sched_gates_open(const struct comm *cm, struct slot *sl)
{
	int open = 1;

	if (!sl->gated)
		return 1;
	for (uint32_t r = 0; r < cm->nranks; r++) {
		const struct slot_rank *sr = &sl->ranks[r];

		if (!comm_rank_local(cm, r) || sr->sqe.flags != COLLC_SQE_STREAM || sr->err)
			continue;
		if (sched_gate_open(sr->client, &sr->sqe)) {
			if (!sl->t_gate_ns)
				sl->t_gate_ns = now_ns();
		} else {
			open = 0;
		}
	}
	return open;
}

void sched_graph_arm(struct sched_client *c, struct member *mb, const struct collc_sqe *e,
		     uint32_t idx)
{
	struct comm *cm = mb->comm;
	struct slot_rank sr;
	int r;

	c->outstanding++; /* its CQE's */
	memset(&sr, 0, sizeof(sr));
	/* Checked now so that the capture fails at once; each firing checks again. */
	r = sched_sqe_check(c, e, mb, idx, &sr);
	sched_mr_put(sr.send_mr);
	sched_mr_put(sr.recv_mr);
	free(sr.v);
	if (r == 0 && (cm->local || cm->revoked || !cm->ready))
		r = cm->revoked ? cm->revoked : -EOPNOTSUPP; /* graphs stay on one node */
	if (r == 0 && !c->arms) {
		c->arms = calloc(COLLC_GATES, sizeof(*c->arms));
		c->armed = calloc(COLLC_GATES, sizeof(*c->armed));
		if (!c->arms || !c->armed) {
			free(c->arms);
			free(c->armed);
			c->arms = NULL;
			c->armed = NULL;
			r = -ENOMEM;
		}
	}
	if (r == 0) {
		struct graph_arm *a = &c->arms[e->gate];

		if (!a->mb)
			c->armed[c->narmed++] = (uint16_t)e->gate;
		a->mb = mb;
		a->sqe = *e;
		a->sig_mr = load_relaxed(&c->gates[e->gate].sig_mr);
		a->sig_off = load_relaxed(&c->gates[e->gate].sig_off);
		/* A replay captured earlier with this gate must not fire the new template. */
		store_relaxed(&c->gates[e->gate].go, 0u);
	} else {
		c->bad++;
		sched.bad++;
	}
	/* The arming itself is answered with a CQE: the capturing call waits for it. */
	sched_post_cqe(c, e->user_data, r);
}

static struct fire *fire_find(struct comm *cm, uint64_t n)
{
	struct fire **pf = &cm->fires, *f;

	for (; *pf; pf = &(*pf)->next)
		if ((*pf)->n == n)
			return *pf;
	f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	f->sl.ranks = calloc(cm->nranks, sizeof(*f->sl.ranks));
	if (!f->sl.ranks) {
		free(f);
		return NULL;
	}
	f->n = n;
	f->sl.state = SLOT_ARRIVING;
	f->sl.seq = n;
	f->sl.t_first_ns = now_ns();
	f->sl.gated = 1; /* open from its first firing on */
	f->sl.t_gate_ns = f->sl.t_first_ns;
	*pf = f; /* every rank fires in order: the list stays sorted */
	return f;
}

/* One replay of rank mb's graph gate a fired: its collective joins firing mb->fired. */
static void fire(struct sched_client *c, struct graph_arm *a)
{
	struct member *mb = a->mb;
	struct comm *cm = mb->comm;
	struct collc_sqe e = a->sqe;
	struct slot_rank *sr;
	struct fire *f;

	e.user_data = 0; /* a firing: its result goes to the gate (sched_complete) */
	c->outstanding++;
	c->submitted++;
	sched.submitted++;
	if (cm->revoked) {
		sched_gate_fail(c, mb, &e, a->sig_mr, a->sig_off, cm->revoked);
		return;
	}
	f = fire_find(cm, mb->fired);
	if (!f) {
		/* Out of memory: the communicator cannot stay in step. */
		sched_gate_fail(c, mb, &e, a->sig_mr, a->sig_off, -ENOMEM);
		sched_comm_revoke(cm, -ENOMEM);
		return;
	}
	mb->fired++;
	sr = &f->sl.ranks[mb->rank];
	memset(sr, 0, sizeof(*sr));
	sr->client = c;
	sr->sqe = e;
	/* The registrations may have gone since the capture. */
	sr->err = sched_sqe_check(c, &e, mb, 0, sr);
	sched_sig_take(c, a->sig_mr, a->sig_off, &sr->sig_mr, &sr->sig_off);
	f->sl.arrived++;
}

int sched_graph_poll(void)
{
	int progress = 0;

	for (struct sched_client *c = sched.clients; c; c = c->next) {
		if (!c->narmed || c->gone)
			continue;
		for (uint32_t i = 0; i < c->narmed; i++) {
			uint32_t g = c->armed[i];
			struct graph_arm *a = &c->arms[g];

			if (a->mb->left || !a->mb->comm) {
				a->mb = NULL; /* its communicator is gone: disarmed */
				c->armed[i--] = c->armed[--c->narmed];
				continue;
			}
			/*
			 * One firing at a time per gate: a replay waits for done before
			 * it clears it, so only a client that skips the wait (its own
			 * loss) finds its next go taken late. G1 as in sched_gates_open().
			 */
			if (a->firing || load_acquire(&c->gates[g].go) != 1u)
				continue;
			/*
			 * Cleared before the collective can end: the replay clears done
			 * only after it saw done, so the next replay's go comes later.
			 */
			store_relaxed(&c->gates[g].go, 0u);
			store_relaxed(&c->gates[g].fired, c->gates[g].fired + 1);
			a->firing = 1;
			fire(c, a);
			sched.graph_fires++;
			last_fire_ns = now_ns();
			progress = 1;
		}
	}
	return progress;
}

int sched_fires_launch(struct comm *cm)
{
	int progress = 0;

	/* In firing order, like the window: every device gets them in the same order. */
	for (struct fire *f = cm->fires; f; f = f->next) {
		if (f->sl.state == SLOT_INFLIGHT || f->sl.state == SLOT_DONE)
			continue;
		if (f->sl.arrived < cm->nlocal || !sched_launch(cm, &f->sl, &cm->fires_inflight))
			break;
		progress = 1;
	}
	return progress;
}

/* Frees the firings that are done; returns whether there were any. */
static int fire_unlink_done(struct comm *cm)
{
	struct fire **pf = &cm->fires;
	int any = 0;

	while (*pf) {
		struct fire *f = *pf;

		if (f->sl.state != SLOT_DONE) {
			pf = &f->next;
			continue;
		}
		*pf = f->next;
		free(f->sl.ranks);
		free(f);
		any = 1;
	}
	return any;
}

int sched_fires_reap(struct comm *cm)
{
	int progress = 0;

	for (struct fire *f = cm->fires; f; f = f->next) {
		if (f->sl.state != SLOT_INFLIGHT || !sched_slot_executed(cm, &f->sl))
			continue;
		cm->fires_inflight--;
		if (cm->revoked) {
			sched_slot_finish(cm, &f->sl, cm->revoked);
		} else {
			sched_record_latency(f->sl.t_start_ns, f->sl.bytes);
			sched_slot_finish(cm, &f->sl, 0);
		}
		progress = 1;
	}
	/* Launched ones that ended at once (an error) are done too. */
	return fire_unlink_done(cm) | progress;
}

int sched_fires_done_visible(const struct comm *cm)
{
	for (const struct fire *f = cm->fires; f; f = f->next)
		if (f->sl.state == SLOT_INFLIGHT && sched_slot_executed(cm, &f->sl))
			return 1;
	return 0;
}

/*
 * A firing some rank never matched: the ranks no longer replay in step, so
 * the communicator ends (a later firing could only pair with the wrong one).
 */
int sched_fires_expire(struct comm *cm, uint32_t ms, uint64_t now)
{
	struct fire *f = cm->fires;

	if (!f || f->sl.state != SLOT_ARRIVING || now - f->sl.t_first_ns < (uint64_t)ms * 1000000)
		return 0;
	cm->timeouts++;
	log_info("communicator %llu: graph replay %llu timed out after %u ms",
		 (unsigned long long)cm->id, (unsigned long long)f->n, ms);
	sched_comm_revoke(cm, -ETIMEDOUT);
	return 1;
}

void sched_fires_revoke(struct comm *cm, int err)
{
	for (struct fire *f = cm->fires; f; f = f->next)
		if (f->sl.state == SLOT_ARRIVING)
			sched_slot_finish(cm, &f->sl, err);
	fire_unlink_done(cm);
}

void sched_fires_free(struct comm *cm)
{
	while (cm->fires) {
		struct fire *f = cm->fires;

		cm->fires = f->next;
		for (uint32_t r = 0; r < cm->nranks; r++) {
			sched_mr_put(f->sl.ranks[r].send_mr);
			sched_mr_put(f->sl.ranks[r].recv_mr);
			sched_mr_put(f->sl.ranks[r].sig_mr);
		}
		free(f->sl.ranks);
		free(f);
	}
}

int sched_graphs_armed(void)
{
	for (struct sched_client *c = sched.clients; c; c = c->next)
		if (c->narmed && !c->gone)
			return 1;
	return 0;
}

int sched_gates_waiting(void)
{
	for (struct comm *cm = sched.comms; cm; cm = cm->next) {
		struct slot *sl;

		if (!cm->ready || !cm->slots || cm->revoked)
			continue;
		sl = sched_slot_of(cm, cm->next_launch);
		if (sl->seq == cm->next_launch && sl->state == SLOT_ARRIVING && sl->gated &&
		    sl->arrived == cm->nlocal)
			return 1;
	}
	if (sigs || sched_gated_pending())
		return 1;
	for (struct comm *cm = sched.comms; cm; cm = cm->next)
		if ((cm->p2p_ready || cm->p2p_gated.head) && sched_p2p_gated(cm))
			return 1;
	return now_ns() - last_fire_ns < GRAPH_HOT_NS && sched_graphs_armed();
}
