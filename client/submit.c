/* SPDX-License-Identifier: MIT */
/*
 * libcollc's submission side: the five collectives check their buffers
 * against the registrations and fill an SQE of the shared submission ring.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <string.h>

#include "client/internal.h"
#include "common/atomics.h"
#include "common/futex.h"
#include "proto/dtype.h"
#include "proto/work.h"

size_t collc_dtype_size(collc_dtype dtype)
{
	return collc_dtype_bytes(dtype);
}

/* What a collective reads and writes: the buffers resolve to registered regions. */
struct sub {
	uint8_t opcode;
	const void *sendbuf;
	void *recvbuf;
	uint64_t send_bytes, recv_bytes;
};

static int resolve(struct collc_ctx *ctx, const void *p, uint64_t bytes, uint32_t *mr,
		   uint64_t *off)
{
	const struct reg *g;

	*mr = COLLC_MR_NONE;
	*off = 0;
	if (bytes == 0)
		return 0;
	if (!p)
		return -EINVAL;
	g = collc__reg_find(ctx, (uintptr_t)p, bytes);
	if (!g)
		return -EINVAL;
	*mr = g->mr;
	*off = (uintptr_t)p - g->map;
	return 0;
}

static int submit(struct collc_comm *comm, const struct sub *s, size_t count, collc_dtype dtype,
		  collc_redop op, int root, collc_req *ret_req)
{
	struct collc_ctx *ctx;
	struct collc_sqe e = { 0 };
	uint64_t req;
	int r;

	if (!comm || !ret_req || (unsigned)dtype >= COLLC_NUM_DTYPES ||
	    (unsigned)op >= COLLC_NUM_REDOPS)
		return -EINVAL;
	ctx = comm->ctx;
	/* A dead collcd never consumes: notice it (cheaply) before queueing more. */
	if (now_ns() - load_relaxed(&ctx->alive_checked_ns) > 1000000) {
		store_relaxed(&ctx->alive_checked_ns, now_ns());
		if (!collc__daemon_alive(ctx))
			return -ECONNRESET;
	}
	e.opcode = s->opcode;
	e.dtype = (uint8_t)dtype;
	e.redop = (uint8_t)op;
	e.comm = comm->handle;
	e.count = count;
	e.root = root;
	pthread_mutex_lock(&ctx->ring_lock);
	r = resolve(ctx, s->sendbuf, s->send_bytes, &e.send_mr, &e.send_off);
	if (r == 0)
		r = resolve(ctx, s->recvbuf, s->recv_bytes, &e.recv_mr, &e.recv_off);
	while (r == 0) {
		/* A1': pairs with H1 in the scheduler: the slot we reuse was copied out. */
		uint32_t head = load_acquire(&ctx->hdr->sq_head);

		if (load_relaxed(&ctx->broken)) {
			r = -ECONNRESET;
			break;
		}
		if (ctx->sq_tail - head < ctx->sq_entries)
			break;
		/*
		 * The ring is full. collcd stops taking entries while our CQ has no
		 * room, so make room (the completions stay in the request table).
		 */
		collc__reap_cq(ctx);
		pthread_mutex_unlock(&ctx->ring_lock);
		if (!collc__daemon_alive(ctx))
			r = -ECONNRESET;
		else
			sched_yield();
		pthread_mutex_lock(&ctx->ring_lock);
	}
	if (r == 0) {
		req = ++ctx->next_req;
		r = collc__req_insert(ctx, req);
	}
	if (r < 0) {
		pthread_mutex_unlock(&ctx->ring_lock);
		return r;
	}
	e.seq = comm->next_seq++;
	e.user_data = req;
	memcpy(&ctx->sqes[ctx->sq_tail & (ctx->sq_entries - 1)], &e, sizeof(e));
	/* A1: pairs with R1 in the scheduler: the SQE is visible before the tail. */
	store_release(&ctx->hdr->sq_tail, ++ctx->sq_tail);
	/* A2: pairs with S1 in the scheduler: it sets NEED_WAKEUP, fences, re-reads the tail. */
	fence_seq_cst();
	if (load_relaxed(&ctx->hdr->sq_flags) & COLLC_SQ_NEED_WAKEUP)
		collc__ring_doorbell(ctx);
	pthread_mutex_unlock(&ctx->ring_lock);
	*ret_req = req;
	return 0;
}

static int bytes_of(size_t count, collc_dtype dtype, uint64_t mult, uint64_t *ret)
{
	uint64_t es = collc_dtype_bytes(dtype), b;

	if (!es || __builtin_mul_overflow((uint64_t)count, es, &b) ||
	    __builtin_mul_overflow(b, mult, ret))
		return -EINVAL;
	return 0;
}

int collc_allreduce(struct collc_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
		    collc_dtype dtype, collc_redop op, collc_req *ret_req)
{
	struct sub s = { COLLC_OP_ALLREDUCE, sendbuf, recvbuf, 0, 0 };

	if (bytes_of(count, dtype, 1, &s.send_bytes) < 0)
		return -EINVAL;
	s.recv_bytes = s.send_bytes;
	return submit(comm, &s, count, dtype, op, 0, ret_req);
}

int collc_allgather(struct collc_comm *comm, const void *sendbuf, void *recvbuf, size_t sendcount,
		    collc_dtype dtype, collc_req *ret_req)
{
	struct sub s = { COLLC_OP_ALLGATHER, sendbuf, recvbuf, 0, 0 };

	if (!comm || bytes_of(sendcount, dtype, 1, &s.send_bytes) < 0 ||
	    bytes_of(sendcount, dtype, (uint64_t)comm->nranks, &s.recv_bytes) < 0)
		return -EINVAL;
	return submit(comm, &s, sendcount, dtype, COLLC_SUM, 0, ret_req);
}

int collc_reduce_scatter(struct collc_comm *comm, const void *sendbuf, void *recvbuf,
			 size_t recvcount, collc_dtype dtype, collc_redop op, collc_req *ret_req)
{
	struct sub s = { COLLC_OP_REDUCE_SCATTER, sendbuf, recvbuf, 0, 0 };

	if (!comm || bytes_of(recvcount, dtype, (uint64_t)comm->nranks, &s.send_bytes) < 0 ||
	    bytes_of(recvcount, dtype, 1, &s.recv_bytes) < 0)
		return -EINVAL;
	return submit(comm, &s, recvcount, dtype, op, 0, ret_req);
}

int collc_broadcast(struct collc_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
		    collc_dtype dtype, int root, collc_req *ret_req)
{
	struct sub s = { COLLC_OP_BROADCAST, sendbuf, recvbuf, 0, 0 };

	if (!comm || root < 0 || root >= comm->nranks ||
	    bytes_of(count, dtype, 1, &s.recv_bytes) < 0)
		return -EINVAL;
	/* Only the root's send buffer is read. */
	s.send_bytes = root == comm->rank ? s.recv_bytes : 0;
	return submit(comm, &s, count, dtype, COLLC_SUM, root, ret_req);
}

int collc_reduce(struct collc_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
		 collc_dtype dtype, collc_redop op, int root, collc_req *ret_req)
{
	struct sub s = { COLLC_OP_REDUCE, sendbuf, recvbuf, 0, 0 };

	if (!comm || root < 0 || root >= comm->nranks ||
	    bytes_of(count, dtype, 1, &s.send_bytes) < 0)
		return -EINVAL;
	/* Only the root's receive buffer is written. */
	s.recv_bytes = root == comm->rank ? s.send_bytes : 0;
	return submit(comm, &s, count, dtype, op, root, ret_req);
}
