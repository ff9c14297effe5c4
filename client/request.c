/* SPDX-License-Identifier: MIT */
/*
 * libcollc's completion side: the table of requests in flight, reaping the
 * completion ring into it, waking collcd, and collc_test / collc_wait /
 * collc_event_fd.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include "client/internal.h"
#include "common/atomics.h"
#include "common/futex.h"
#include "common/host.h"

#define WAIT_SPIN_NS 30000ull    /* collc_wait spins this long before it sleeps (spare cores) */
#define LIVENESS_NS  20000000ull /* a sleeping waiter checks the socket this often */

/* Request table: open addressing on the request id. */

#define REQ_EMPTY   0ull
#define REQ_DELETED UINT64_MAX

static struct req_slot *req_lookup(struct collc_ctx *ctx, uint64_t req)
{
	if (!ctx->req_cap)
		return NULL;
	for (size_t i = req & (ctx->req_cap - 1);; i = (i + 1) & (ctx->req_cap - 1)) {
		struct req_slot *s = &ctx->reqs[i];

		if (s->req == req)
			return s;
		if (s->req == REQ_EMPTY)
			return NULL;
	}
}

static int req_grow(struct collc_ctx *ctx)
{
	size_t cap = ctx->req_cap ? ctx->req_cap * 2 : 1024, used = 0;
	struct req_slot *t;

	/* Rehash at the same size when deleted slots dominate. */
	for (size_t i = 0; i < ctx->req_cap; i++)
		used += ctx->reqs[i].req != REQ_EMPTY && ctx->reqs[i].req != REQ_DELETED;
	if (ctx->req_cap && used * 4 < ctx->req_cap)
		cap = ctx->req_cap;
	t = calloc(cap, sizeof(*t));
	if (!t)
		return -ENOMEM;
	for (size_t i = 0; i < ctx->req_cap; i++) {
		struct req_slot *s = &ctx->reqs[i];

		if (s->req == REQ_EMPTY || s->req == REQ_DELETED)
			continue;
		for (size_t j = s->req & (cap - 1);; j = (j + 1) & (cap - 1))
			if (t[j].req == REQ_EMPTY) {
				t[j] = *s;
				break;
			}
	}
	free(ctx->reqs);
	ctx->reqs = t;
	ctx->req_cap = cap;
	ctx->req_used = used;
	return 0;
}

int collc__req_insert(struct collc_ctx *ctx, uint64_t req)
{
	size_t i;

	if ((ctx->req_used + 1) * 2 > ctx->req_cap && req_grow(ctx) < 0)
		return -ENOMEM;
	for (i = req & (ctx->req_cap - 1);
	     ctx->reqs[i].req != REQ_EMPTY && ctx->reqs[i].req != REQ_DELETED;
	     i = (i + 1) & (ctx->req_cap - 1))
		;
	if (ctx->reqs[i].req == REQ_EMPTY)
		ctx->req_used++;
	ctx->reqs[i] = (struct req_slot){ .req = req };
	return 0;
}

void collc__ring_doorbell(struct collc_ctx *ctx)
{
	fetch_add(&ctx->doorbell->seq, 1);
	futex_wake(&ctx->doorbell->seq, 1);
}

void collc__reap_cq(struct collc_ctx *ctx)
{
	/* C1': pairs with C1 in the scheduler: CQEs are visible before the tail. */
	uint32_t tail = load_acquire(&ctx->hdr->cq_tail);

	if (tail - ctx->cq_head > ctx->cq_entries)
		tail = ctx->cq_head + ctx->cq_entries; /* garbage; take what can be real */
	for (; ctx->cq_head != tail; ctx->cq_head++) {
		const struct collc_cqe *e = &ctx->cqes[ctx->cq_head & (ctx->cq_entries - 1)];
		struct req_slot *s = req_lookup(ctx, e->user_data);

		if (s) {
			s->res = e->res;
			s->done = 1;
		}
	}
	/* The entries are copied: collcd may reuse them. */
	store_release(&ctx->hdr->cq_head, ctx->cq_head);
	/*
	 * A3: pairs with S1 in the scheduler. It may have gone to sleep because
	 * our CQ was full with entries still in our SQ: the room we made is work.
	 */
	fence_seq_cst();
	if ((load_relaxed(&ctx->hdr->sq_flags) & COLLC_SQ_NEED_WAKEUP) &&
	    load_relaxed(&ctx->hdr->sq_head) != ctx->sq_tail)
		collc__ring_doorbell(ctx);
}

int collc__daemon_alive(struct collc_ctx *ctx)
{
	struct pollfd p = { .fd = ctx->fd, .events = POLLRDHUP };

	if (load_relaxed(&ctx->broken))
		return 0;
	if (poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR))) {
		store_relaxed(&ctx->broken, 1);
		return 0;
	}
	return 1;
}

/* Spinning pays only where cores are to spare; on a small host it starves collcd. */
static uint64_t spin_ns(void)
{
	static int64_t cached = -1;
	int64_t v = load_relaxed(&cached);

	if (v < 0) {
		v = collc_small_host() ? 0 : (int64_t)WAIT_SPIN_NS;
		store_relaxed(&cached, v);
	}
	return (uint64_t)v;
}

/* 1 done (result in *res, request forgotten), 0 pending, -EINVAL unknown. Under ring_lock. */
static int poll_req(struct collc_ctx *ctx, collc_req req, int *res)
{
	struct req_slot *s;

	collc__reap_cq(ctx);
	s = req_lookup(ctx, req);
	if (!s || req == REQ_EMPTY || req == REQ_DELETED)
		return -EINVAL;
	/*
	 * D1': pairs with D1 in the executors (proto/shm.h): our ticket in the
	 * done word means the results are in place; the CQE that follows finds
	 * the request gone and is dropped.
	 */
	if (!s->done && ctx->dones && (uint32_t)req &&
	    load_acquire(&ctx->dones[req % COLLC_DONES]) == (uint32_t)req) {
		s->res = 0;
		s->done = 1;
	}
	if (!s->done)
		return 0;
	*res = s->res;
	s->req = REQ_DELETED;
	return 1;
}

int collc_test(struct collc_ctx *ctx, collc_req req)
{
	int res = 0, r;

	if (!ctx)
		return -EINVAL;
	pthread_mutex_lock(&ctx->ring_lock);
	r = poll_req(ctx, req, &res);
	pthread_mutex_unlock(&ctx->ring_lock);
	if (r == 0 && !collc__daemon_alive(ctx))
		return -ECONNRESET;
	if (r <= 0)
		return r;
	return res < 0 ? res : 1;
}

int collc_wait(struct collc_ctx *ctx, collc_req req, int timeout_ms)
{
	uint64_t t0 = now_ns(), last_check = t0;
	uint64_t limit = timeout_ms < 0 ? UINT64_MAX : (uint64_t)timeout_ms * 1000000ull;
	int res = 0, r;

	if (!ctx)
		return -EINVAL;
	for (;;) {
		uint64_t now;
		uint32_t seen;

		pthread_mutex_lock(&ctx->ring_lock);
		r = poll_req(ctx, req, &res);
		seen = ctx->cq_head;
		pthread_mutex_unlock(&ctx->ring_lock);
		if (r < 0)
			return r;
		if (r == 1)
			return res;
		now = now_ns();
		if (now - t0 >= limit)
			return -EAGAIN;
		if (now - last_check >= LIVENESS_NS) {
			if (!collc__daemon_alive(ctx))
				return -ECONNRESET;
			last_check = now;
		}
		if (now - t0 < spin_ns()) {
			cpu_relax();
			continue;
		}
		fetch_add(&ctx->waiters, 1);
		__atomic_fetch_or(&ctx->hdr->cq_flags, COLLC_CQ_WAITING, __ATOMIC_SEQ_CST);
		/* W1: pairs with C2 in the scheduler: we see the new tail or it sees WAITING. */
		fence_seq_cst();
		if (load_acquire(&ctx->hdr->cq_tail) == seen) {
			uint64_t left = limit == UINT64_MAX ? LIVENESS_NS : limit - (now - t0);

			futex_wait(&ctx->hdr->cq_tail, seen,
				   (int64_t)(left < LIVENESS_NS ? left : LIVENESS_NS));
		}
		if (fetch_add(&ctx->waiters, (uint32_t)-1) == 1)
			__atomic_fetch_and(&ctx->hdr->cq_flags, ~COLLC_CQ_WAITING,
					   __ATOMIC_SEQ_CST);
	}
}

int collc_event_fd(struct collc_ctx *ctx)
{
	struct ctl_reply rep;
	int r;

	if (!ctx)
		return -EINVAL;
	pthread_mutex_lock(&ctx->ring_lock);
	r = ctx->event_fd;
	pthread_mutex_unlock(&ctx->ring_lock);
	if (r >= 0)
		return r;
	r = collc__request(ctx, COLLC_MSG_SET_EVENTFD, NULL, 0, -1, &rep);
	if (r < 0)
		return r;
	r = rep.status;
	if (r == 0 && rep.nfds != 1)
		r = -EPROTO;
	if (r == 0) {
		pthread_mutex_lock(&ctx->ring_lock);
		if (ctx->event_fd < 0) {
			ctx->event_fd = rep.fds[0];
			rep.nfds = 0;
		}
		r = ctx->event_fd;
		pthread_mutex_unlock(&ctx->ring_lock);
	}
	ctl_reply_free(&rep);
	return r;
}
