/* SPDX-License-Identifier: MIT */
/*
 * libcollc with one rank and no collcd, as collc-bench's self-test of the
 * stream modes sees it (mock.h): buffers are host memory, every collective
 * copies its count elements (times nranks = 1) from send to receive buffer.
 * The stream-ordered forms run at once on a stream of mock_cudart.c, or are
 * recorded while it captures; a graph replays them. What the real library
 * refuses, this one refuses too: a captured call before the ctx's first
 * direct one (it maps memory), a captured send or receive (-EOPNOTSUPP),
 * more captured collectives than its graph gates (-EBUSY).
 * MOCK_COLLC_ASYNC=1 makes every stream-ordered collective fail afterwards
 * (collc_comm_get_async_error() then says -EPIPE).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <collc.h>

#include "bench/selftest/mock.h"
#include "proto/dtype.h"
#include "proto/shm.h"

struct collc_ctx {
	int mapped; /* a direct stream-ordered call ran */
	int graph_gates;
};

struct collc_comm {
	struct collc_ctx *ctx;
	int device;
	int async_err;
	/* send and receive, one rank: the receive waits here for the send to itself */
	void *recv_dst;
	size_t recv_bytes;
};

int collc_connect(const char *socket_path, struct collc_ctx **ret_ctx)
{
	(void)socket_path;
	*ret_ctx = calloc(1, sizeof(**ret_ctx));
	return *ret_ctx ? 0 : -ENOMEM;
}

void collc_disconnect(struct collc_ctx *ctx)
{
	free(ctx);
}

int collc_comm_init(struct collc_ctx *ctx, const struct collc_unique_id *id, int nranks, int rank,
		    int device, struct collc_comm **ret_comm)
{
	(void)id;
	if (!ctx || nranks != 1 || rank != 0)
		return -EINVAL;
	*ret_comm = calloc(1, sizeof(**ret_comm));
	if (!*ret_comm)
		return -ENOMEM;
	(*ret_comm)->ctx = ctx;
	(*ret_comm)->device = device;
	return 0;
}

int collc_comm_destroy(struct collc_comm *comm)
{
	free(comm);
	return 0;
}

int collc_comm_rank(const struct collc_comm *comm)
{
	(void)comm;
	return 0;
}

int collc_mem_alloc(struct collc_ctx *ctx, size_t size, int device, void **ret_ptr)
{
	(void)ctx;
	(void)device;
	*ret_ptr = malloc(size ? size : 1);
	return *ret_ptr ? 0 : -ENOMEM;
}

int collc_mem_free(struct collc_ctx *ctx, void *ptr)
{
	(void)ctx;
	free(ptr);
	return 0;
}

const char *collc_strerror(int err)
{
	return strerror(err < 0 ? -err : err);
}

int collc_wait(struct collc_ctx *ctx, collc_req req, int timeout_ms)
{
	(void)ctx;
	(void)timeout_ms;
	return req ? 0 : -EINVAL;
}

/* Host forms: done when they return. */
static int host(const void *s, void *r, size_t count, collc_dtype dt, collc_req *req)
{
	memmove(r, s, count * collc_dtype_bytes(dt));
	*req = 1;
	return 0;
}

int collc_allreduce(struct collc_comm *comm, const void *s, void *r, size_t count, collc_dtype dt,
		    collc_redop op, collc_req *req)
{
	(void)comm;
	(void)op;
	return host(s, r, count, dt, req);
}

int collc_allgather(struct collc_comm *comm, const void *s, void *r, size_t count, collc_dtype dt,
		    collc_req *req)
{
	(void)comm;
	return host(s, r, count, dt, req);
}

int collc_reduce_scatter(struct collc_comm *comm, const void *s, void *r, size_t count,
			 collc_dtype dt, collc_redop op, collc_req *req)
{
	(void)comm;
	(void)op;
	return host(s, r, count, dt, req);
}

int collc_broadcast(struct collc_comm *comm, const void *s, void *r, size_t count, collc_dtype dt,
		    int root, collc_req *req)
{
	(void)comm;
	(void)root;
	return host(s, r, count, dt, req);
}

int collc_reduce(struct collc_comm *comm, const void *s, void *r, size_t count, collc_dtype dt,
		 collc_redop op, int root, collc_req *req)
{
	(void)comm;
	(void)op;
	(void)root;
	return host(s, r, count, dt, req);
}

int collc_alltoall(struct collc_comm *comm, const void *s, void *r, size_t count, collc_dtype dt,
		   collc_req *req)
{
	(void)comm;
	return host(s, r, count, dt, req);
}

int collc_send(struct collc_comm *comm, const void *buf, size_t count, collc_dtype dt, int peer,
	       collc_req *req)
{
	if (peer != 0 || !comm->recv_dst || comm->recv_bytes != count * collc_dtype_bytes(dt))
		return -EINVAL;
	memmove(comm->recv_dst, buf, comm->recv_bytes);
	comm->recv_dst = NULL;
	*req = 1;
	return 0;
}

int collc_recv(struct collc_comm *comm, void *buf, size_t count, collc_dtype dt, int peer,
	       collc_req *req)
{
	if (peer != 0 || comm->recv_dst)
		return -EINVAL;
	comm->recv_dst = buf;
	comm->recv_bytes = count * collc_dtype_bytes(dt);
	*req = 1;
	return 0;
}

/* Stream-ordered forms. */

static void run_copy(const struct mock_op *op)
{
	memmove(op->dst, op->src, op->bytes);
}

static void run_fail(const struct mock_op *op)
{
	(void)op;
}

static int stream_coll(struct collc_comm *comm, const void *s, void *r, size_t count,
		       collc_dtype dt, struct CUstream_st *stream)
{
	struct mock_stream *st = (struct mock_stream *)stream;
	const char *fail = getenv("MOCK_COLLC_ASYNC");
	struct mock_op op = { run_copy, s, r, count * collc_dtype_bytes(dt) };

	if (!comm || comm->device < 0 || !st || !op.bytes)
		return -EINVAL;
	if (fail && strcmp(fail, "1") == 0) {
		/* The stream goes on, the result is undefined, the error shows later. */
		op.run = run_fail;
		if (!comm->async_err)
			comm->async_err = -EPIPE;
	}
	if (!st->capturing) {
		comm->ctx->mapped = 1;
		mock_bump(MOCK_DIRECT);
		op.run(&op);
		return 0;
	}
	if (!comm->ctx->mapped)
		return -EINVAL; /* the first call maps memory, which capture forbids */
	if (comm->ctx->graph_gates == (int)(COLLC_GATES / 2))
		return -EBUSY;
	if (st->nops == st->cap) {
		int cap = st->cap ? 2 * st->cap : 8;
		struct mock_op *ops = realloc(st->ops, sizeof(*ops) * (size_t)cap);

		if (!ops)
			return -ENOMEM;
		st->ops = ops;
		st->cap = cap;
	}
	st->ops[st->nops++] = op;
	comm->ctx->graph_gates++;
	mock_bump(MOCK_CAPTURED);
	return 0;
}

int collc_allreduce_stream(struct collc_comm *comm, const void *s, void *r, size_t count,
			   collc_dtype dt, collc_redop op, struct CUstream_st *stream)
{
	return op == COLLC_SUM ? stream_coll(comm, s, r, count, dt, stream) : -EINVAL;
}

int collc_allgather_stream(struct collc_comm *comm, const void *s, void *r, size_t count,
			   collc_dtype dt, struct CUstream_st *stream)
{
	return stream_coll(comm, s, r, count, dt, stream);
}

int collc_reduce_scatter_stream(struct collc_comm *comm, const void *s, void *r, size_t count,
				collc_dtype dt, collc_redop op, struct CUstream_st *stream)
{
	return op == COLLC_SUM ? stream_coll(comm, s, r, count, dt, stream) : -EINVAL;
}

int collc_broadcast_stream(struct collc_comm *comm, const void *s, void *r, size_t count,
			   collc_dtype dt, int root, struct CUstream_st *stream)
{
	return root == 0 ? stream_coll(comm, s, r, count, dt, stream) : -EINVAL;
}

int collc_reduce_stream(struct collc_comm *comm, const void *s, void *r, size_t count,
			collc_dtype dt, collc_redop op, int root, struct CUstream_st *stream)
{
	return op == COLLC_SUM && root == 0 ? stream_coll(comm, s, r, count, dt, stream) : -EINVAL;
}

int collc_alltoall_stream(struct collc_comm *comm, const void *s, void *r, size_t count,
			  collc_dtype dt, struct CUstream_st *stream)
{
	return stream_coll(comm, s, r, count, dt, stream);
}

/* One rank: the receive is enqueued first and completed by the send to itself. */
int collc_recv_stream(struct collc_comm *comm, void *buf, size_t count, collc_dtype dt, int peer,
		      struct CUstream_st *stream)
{
	struct mock_stream *st = (struct mock_stream *)stream;

	if (!st || peer != 0 || comm->recv_dst)
		return -EINVAL;
	if (st->capturing)
		return -EOPNOTSUPP;
	comm->recv_dst = buf;
	comm->recv_bytes = count * collc_dtype_bytes(dt);
	return 0;
}

int collc_send_stream(struct collc_comm *comm, const void *buf, size_t count, collc_dtype dt,
		      int peer, struct CUstream_st *stream)
{
	struct mock_stream *st = (struct mock_stream *)stream;
	void *dst = comm->recv_dst;

	if (!st || peer != 0 || !dst || comm->recv_bytes != count * collc_dtype_bytes(dt))
		return -EINVAL;
	if (st->capturing)
		return -EOPNOTSUPP;
	comm->recv_dst = NULL;
	return stream_coll(comm, buf, dst, count, dt, stream);
}

int collc_comm_get_async_error(struct collc_comm *comm)
{
	return comm ? comm->async_err : -EINVAL;
}

/* The mock's stream forms launch nothing: they stand for stream memory operations. */
int collc_comm_get_stream_path(struct collc_comm *comm)
{
	return comm ? COLLC_STREAM_PATH_MEMOPS : -EINVAL;
}
