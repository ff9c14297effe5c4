/* SPDX-License-Identifier: MIT */
/*
 * libcollc's submission side: the collectives and send/recv check their
 * buffers against the registrations and fill an SQE of the shared submission
 * ring (alltoallv also its slot of the argument area).
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

int collc__submit(struct collc_comm *comm, const struct sub *s, size_t count, collc_dtype dtype,
		  collc_redop op, int root, collc_req *ret_req)
{
	struct collc_ctx *ctx;
	struct collc_sqe e = { 0 };
	uint64_t req;
	int r;

	if (!comm || (!ret_req && s->flags != COLLC_SQE_STREAM) ||
	    (unsigned)dtype >= COLLC_NUM_DTYPES || (unsigned)op >= COLLC_NUM_REDOPS)
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
	e.flags = s->flags;
	e.gate = s->gate;
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
	if (r == 0 && s->flags == COLLC_SQE_STREAM) {
		req = s->ticket; /* no request: the result goes to the gate */
	} else if (r == 0) {
		req = ++ctx->next_req;
		r = collc__req_insert(ctx, req);
	}
	if (r < 0) {
		pthread_mutex_unlock(&ctx->ring_lock);
		return r;
	}
	/* Sends, receives and graph templates stand outside the collectives' sequence. */
	e.seq = COLLC_OP_IS_P2P(s->opcode) || s->flags == COLLC_SQE_GRAPH ? 0 : comm->next_seq++;
	e.user_data = req;
	memcpy(&ctx->sqes[ctx->sq_tail & (ctx->sq_entries - 1)], &e, sizeof(e));
	if (s->args) {
		struct collc_sqe_args *a = &ctx->sqe_args[ctx->sq_tail & (ctx->sq_entries - 1)];
		size_t n = s->nargs * sizeof(uint64_t);

		memcpy(a->sendcounts, s->args->sendcounts, n);
		memcpy(a->sdispls, s->args->sdispls, n);
		memcpy(a->recvcounts, s->args->recvcounts, n);
		memcpy(a->rdispls, s->args->rdispls, n);
	}
	/* A1: pairs with R1 in the scheduler: the SQE is visible before the tail. */
	store_release(&ctx->hdr->sq_tail, ++ctx->sq_tail);
	/* A2: pairs with S1 in the scheduler: it sets NEED_WAKEUP, fences, re-reads the tail. */
	fence_seq_cst();
	if (load_relaxed(&ctx->hdr->sq_flags) & COLLC_SQ_NEED_WAKEUP)
		collc__ring_doorbell(ctx);
	pthread_mutex_unlock(&ctx->ring_lock);
	if (ret_req)
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

/* Do [a, a + an) and [b, b + bn) share a byte? */
static int ranges_meet(const void *a, uint64_t an, const void *b, uint64_t bn)
{
	uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;

	return an && bn && x < y + bn && y < x + an;
}

int collc__coll_sub(struct collc_comm *comm, uint8_t opcode, const void *sendbuf, void *recvbuf,
		    size_t count, collc_dtype dtype, int root, struct sub *s)
{
	uint64_t n, one;

	memset(s, 0, sizeof(*s));
	s->opcode = opcode;
	s->sendbuf = sendbuf;
	s->recvbuf = recvbuf;
	if (!comm || bytes_of(count, dtype, 1, &one) < 0)
		return -EINVAL;
	n = (uint64_t)comm->nranks;
	switch (opcode) {
	case COLLC_OP_ALLREDUCE:
		s->send_bytes = s->recv_bytes = one;
		return 0;
	case COLLC_OP_ALLGATHER:
		s->send_bytes = one;
		return bytes_of(count, dtype, n, &s->recv_bytes);
	case COLLC_OP_REDUCE_SCATTER:
		s->recv_bytes = one;
		return bytes_of(count, dtype, n, &s->send_bytes);
	case COLLC_OP_BROADCAST:
	case COLLC_OP_REDUCE:
		if (root < 0 || root >= comm->nranks)
			return -EINVAL;
		/* Only the root's send buffer (broadcast) or receive buffer (reduce) is used. */
		s->send_bytes = opcode == COLLC_OP_REDUCE || root == comm->rank ? one : 0;
		s->recv_bytes = opcode == COLLC_OP_BROADCAST || root == comm->rank ? one : 0;
		return 0;
	case COLLC_OP_ALLTOALL:
		if (bytes_of(count, dtype, n, &s->send_bytes) < 0)
			return -EINVAL;
		s->recv_bytes = s->send_bytes;
		/* Peers read our send buffer while we write our receive buffer: no in-place form. */
		return ranges_meet(sendbuf, s->send_bytes, recvbuf, s->recv_bytes) ? -EINVAL : 0;
	case COLLC_OP_SEND:
	case COLLC_OP_RECV:
		if (root < 0 || root >= comm->nranks)
			return -EINVAL;
		if (opcode == COLLC_OP_SEND)
			s->send_bytes = one;
		else
			s->recv_bytes = one;
		return 0;
	default:
		return -EINVAL;
	}
}

static int coll(struct collc_comm *comm, uint8_t opcode, const void *sendbuf, void *recvbuf,
		size_t count, collc_dtype dtype, collc_redop op, int root, collc_req *ret_req)
{
	struct sub s;
	int r = collc__coll_sub(comm, opcode, sendbuf, recvbuf, count, dtype, root, &s);

	return r < 0 ? r : collc__submit(comm, &s, count, dtype, op, root, ret_req);
}

int collc_allreduce(struct collc_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
		    collc_dtype dtype, collc_redop op, collc_req *ret_req)
{
	return coll(comm, COLLC_OP_ALLREDUCE, sendbuf, recvbuf, count, dtype, op, 0, ret_req);
}

int collc_allgather(struct collc_comm *comm, const void *sendbuf, void *recvbuf, size_t sendcount,
		    collc_dtype dtype, collc_req *ret_req)
{
	return coll(comm, COLLC_OP_ALLGATHER, sendbuf, recvbuf, sendcount, dtype, COLLC_SUM, 0,
		    ret_req);
}

int collc_reduce_scatter(struct collc_comm *comm, const void *sendbuf, void *recvbuf,
			 size_t recvcount, collc_dtype dtype, collc_redop op, collc_req *ret_req)
{
	return coll(comm, COLLC_OP_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype, op, 0,
		    ret_req);
}

int collc_broadcast(struct collc_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
		    collc_dtype dtype, int root, collc_req *ret_req)
{
	return coll(comm, COLLC_OP_BROADCAST, sendbuf, recvbuf, count, dtype, COLLC_SUM, root,
		    ret_req);
}

int collc_reduce(struct collc_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
		 collc_dtype dtype, collc_redop op, int root, collc_req *ret_req)
{
	return coll(comm, COLLC_OP_REDUCE, sendbuf, recvbuf, count, dtype, op, root, ret_req);
}

int collc_alltoall(struct collc_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
		   collc_dtype dtype, collc_req *ret_req)
{
	return coll(comm, COLLC_OP_ALLTOALL, sendbuf, recvbuf, count, dtype, COLLC_SUM, 0, ret_req);
}

/*
 * Bytes from buf's start to the end of the furthest non-empty block of n
 * (counts[p] elements at displs[p]); blocks of count 0 reach nowhere.
 */
static int extent_of(const size_t *counts, const size_t *displs, uint32_t n, uint64_t es,
		     uint64_t *ret)
{
	uint64_t ext = 0, end;

	for (uint32_t p = 0; p < n; p++) {
		if (!counts[p])
			continue;
		if (__builtin_add_overflow((uint64_t)displs[p], (uint64_t)counts[p], &end) ||
		    __builtin_mul_overflow(end, es, &end))
			return -EINVAL;
		if (end > ext)
			ext = end;
	}
	*ret = ext;
	return 0;
}

int collc_alltoallv(struct collc_comm *comm, const void *sendbuf, const size_t *sendcounts,
		    const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
		    const size_t *rdispls, collc_dtype dtype, collc_req *ret_req)
{
	struct collc_sqe_args args;
	struct sub s = { COLLC_OP_ALLTOALLV, sendbuf, recvbuf, 0, 0, &args, 0, 0, 0, 0 };
	uint64_t es = collc_dtype_bytes(dtype);
	uint32_t n;

	if (!comm || !sendcounts || !sdispls || !recvcounts || !rdispls || !es ||
	    comm->nranks < 1 || (uint32_t)comm->nranks > COLLC_SQE_ARGS_RANKS)
		return -EINVAL;
	if (!comm->ctx->sqe_args)
		return -EOPNOTSUPP; /* a collcd without the argument area */
	n = (uint32_t)comm->nranks;
	if (extent_of(sendcounts, sdispls, n, es, &s.send_bytes) < 0 ||
	    extent_of(recvcounts, rdispls, n, es, &s.recv_bytes) < 0 ||
	    ranges_meet(sendbuf, s.send_bytes, recvbuf, s.recv_bytes))
		return -EINVAL;
	for (uint32_t p = 0; p < n; p++) {
		args.sendcounts[p] = sendcounts[p];
		args.sdispls[p] = sendcounts[p] ? sdispls[p] : 0;
		args.recvcounts[p] = recvcounts[p];
		args.rdispls[p] = recvcounts[p] ? rdispls[p] : 0;
	}
	s.nargs = n;
	return collc__submit(comm, &s, 0, dtype, COLLC_SUM, 0, ret_req);
}

int collc_send(struct collc_comm *comm, const void *buf, size_t count, collc_dtype dtype, int peer,
	       collc_req *ret_req)
{
	return coll(comm, COLLC_OP_SEND, buf, NULL, count, dtype, COLLC_SUM, peer, ret_req);
}

int collc_recv(struct collc_comm *comm, void *buf, size_t count, collc_dtype dtype, int peer,
	       collc_req *ret_req)
{
	return coll(comm, COLLC_OP_RECV, NULL, buf, count, dtype, COLLC_SUM, peer, ret_req);
}
