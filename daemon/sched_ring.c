/* SPDX-License-Identifier: MIT */
/*
 * The scheduler's side of every client's rings: it takes submissions (copied
 * once, validated against the client's own registrations, matched to their
 * collective's slot) and posts completions.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/atomics.h"
#include "common/futex.h"
#include "daemon/log.h"
#include "daemon/sched_int.h"
#include "daemon/sqe_check.h"
#include "proto/dtype.h"

void sched_post_cqe(struct sched_client *c, uint64_t user_data, int res)
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

void sched_flush_cqs(void)
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

int sched_resolve_buf(struct sched_client *c, uint32_t id, uint64_t off, uint64_t len,
		      struct mr **ret)
{
	struct mr *m;
	uint64_t end;

	if (len == 0 && id == COLLC_MR_NONE)
		return 0;
	m = sched_mr_lookup(c, id);
	if (!m)
		return -EINVAL;
	if (__builtin_add_overflow(off, len, &end) || end > m->size)
		return -EINVAL;
	m->refs++;
	*ret = m;
	return 0;
}

/*
 * All-to-allv: its counts and displacements, copied out of the SQE's slot of
 * the argument area (the client may rewrite that any time), into sr->v.
 */
static int args_take(struct sched_client *c, uint32_t idx, uint32_t nranks, struct slot_rank *sr)
{
	const struct collc_sqe_args *a = &c->args[idx & (c->sq_entries - 1)];
	size_t n = (size_t)nranks * sizeof(uint64_t);

	sr->v = malloc(4 * n);
	if (!sr->v)
		return -ENOMEM;
	memcpy(sr->v, a->sendcounts, n);
	memcpy(sr->v + nranks, a->sdispls, n);
	memcpy(sr->v + 2 * nranks, a->recvcounts, n);
	memcpy(sr->v + 3 * nranks, a->rdispls, n);
	compiler_barrier();
	return 0;
}

/* Do a rank's two buffers share a byte? All-to-all's peers read one while it writes the other. */
static int bufs_meet(const struct collc_sqe *e, uint64_t send, uint64_t recv)
{
	return send && recv && e->send_mr == e->recv_mr && e->send_off < e->recv_off + recv &&
	       e->recv_off < e->send_off + send;
}

/* Validates a copied SQE against the client's own registrations. */
int sched_sqe_check(struct sched_client *c, const struct collc_sqe *e, const struct member *mb,
		    uint32_t idx, struct slot_rank *sr)
{
	uint32_t n = mb->comm->nranks;
	uint64_t send = 0, recv = 0;
	int r = sqe_validate(e, n, mb->rank, &send, &recv);

	if (r < 0)
		return r;
	if (e->opcode == COLLC_OP_ALLTOALLV) {
		struct collc_sqe_args a;

		r = args_take(c, idx, n, sr);
		if (r < 0)
			return r;
		memcpy(a.sendcounts, sr->v, n * sizeof(uint64_t));
		memcpy(a.sdispls, sr->v + n, n * sizeof(uint64_t));
		memcpy(a.recvcounts, sr->v + 2 * n, n * sizeof(uint64_t));
		memcpy(a.rdispls, sr->v + 3 * n, n * sizeof(uint64_t));
		r = sqe_validate_args(&a, n, collc_dtype_bytes(e->dtype), &send, &recv);
		if (r < 0)
			return r;
	}
	if ((e->opcode == COLLC_OP_ALLTOALL || e->opcode == COLLC_OP_ALLTOALLV) &&
	    bufs_meet(e, send, recv))
		return -EINVAL;
	r = sched_resolve_buf(c, e->send_mr, e->send_off, send, &sr->send_mr);
	if (r == 0)
		r = sched_resolve_buf(c, e->recv_mr, e->recv_off, recv, &sr->recv_mr);
	if (r < 0) {
		sched_mr_put(sr->send_mr);
		sr->send_mr = NULL;
	}
	return r;
}

/*
 * Takes one SQE. Returns 0 when consumed, -EAGAIN when it must stay in the
 * ring for now (its communicator's window is full).
 */
static int take_sqe(struct sched_client *c, const struct collc_sqe *e, uint32_t idx)
{
	struct member *mb = NULL;
	struct comm *cm;
	struct slot *sl;
	struct slot_rank *sr;

	if (e->comm >= 1 && e->comm <= c->nmembers)
		mb = c->members[e->comm - 1];
	if (mb && !mb->left && mb->comm && COLLC_OP_IS_P2P(e->opcode) && e->seq == 0) {
		sched_p2p_take(c, mb, e);
		return 0;
	}
	if (mb && !mb->left && mb->comm && e->flags == COLLC_SQE_GRAPH) {
		sched_graph_arm(c, mb, e, idx);
		return 0;
	}
	if (!mb || mb->left || e->seq != mb->next_seq || COLLC_OP_IS_P2P(e->opcode)) {
		/* Not a collective of any communicator: only this client hears of it. */
		c->bad++;
		c->outstanding++;
		sched.bad++;
		sched.errors++;
		sched_sqe_fail(c, mb, e, mb && mb->left ? -EBADF : -EINVAL);
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
		sched_sqe_fail(c, mb, e, cm->revoked ? cm->revoked : -ETIMEDOUT);
		return 0;
	}
	sl = sched_slot_of(cm, e->seq);
	if (sl->state == SLOT_EMPTY || sl->seq != e->seq) {
		sl->state = SLOT_ARRIVING;
		sl->seq = e->seq;
		sl->arrived = 0;
		sl->net = NET_NONE;
		sl->t_first_ns = now_ns();
		sl->t_gate_ns = 0;
		sl->gated = 0;
	}
	sr = &sl->ranks[mb->rank];
	memset(sr, 0, sizeof(*sr));
	sr->client = c;
	sr->user_data = e->user_data;
	sr->sqe = *e;
	sl->gated |= e->flags == COLLC_SQE_STREAM;
	sr->err = sched_sqe_check(c, e, mb, idx, sr);
	sched_sqe_sig_take(c, e, &sr->sig_mr, &sr->sig_off);
	if (sr->err) {
		c->bad++;
		sched.bad++;
	}
	sl->arrived++;
	return 0;
}

/* May one more SQE be taken without risking a CQ overflow? */
int sched_cq_room(const struct sched_client *c)
{
	uint32_t used = c->cq_tail - load_acquire(&c->hdr->cq_head);

	return used <= c->cq_entries && used + c->outstanding < c->cq_entries;
}

int sched_drain_sq(struct sched_client *c)
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
		if (!sched_cq_room(c)) {
			c->stall = STALL_CQ_FULL;
			break;
		}
		/* Copied once: a client rewriting the entry now changes nothing. */
		memcpy(&e, &c->sqes[c->sq_head & (c->sq_entries - 1)], sizeof(e));
		compiler_barrier();
		if (take_sqe(c, &e, c->sq_head) == -EAGAIN) {
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
