/* SPDX-License-Identifier: MIT */
/*
 * NCCL with one rank, as collc-bench's self-test sees it (mock.h). Built
 * twice: with symmetric windows (NCCL 2.28), and with -DMOCK_OLD without
 * them (NCCL 2.26: the window mode must skip).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench/selftest/mock.h"

enum { NCCL_INVALID_ARGUMENT = 4, NCCL_INVALID_USAGE = 5 };

struct mock_comm {
	int nwin;
	struct {
		const char *base;
		size_t bytes;
	} win[64];
};

int ncclGetVersion(int *v)
{
#ifdef MOCK_OLD
	*v = 22605;
#else
	*v = 22809;
#endif
	return 0;
}

int ncclGetUniqueId(void *id)
{
	memset(id, 0x5a, 128);
	return 0;
}

int ncclCommInitRank(void **comm, int nranks, char id[128], int rank)
{
	(void)id;
	if (nranks != 1 || rank != 0)
		return NCCL_INVALID_ARGUMENT;
	*comm = calloc(1, sizeof(struct mock_comm));
	return *comm ? 0 : 1;
}

int ncclCommDestroy(void *comm)
{
	free(comm);
	return 0;
}

const char *ncclGetErrorString(int r)
{
	return r ? "mock NCCL error" : "no error";
}

static void run_copy(const struct mock_op *op)
{
	memmove(op->dst, op->src, op->bytes);
}

static size_t dtype_bytes(int dt)
{
	static const size_t sz[] = { 1, 1, 4, 4, 8, 8, 2, 4, 8, 2 };

	return dt >= 0 && dt < 10 ? sz[dt] : 0;
}

static int in_window(const struct mock_comm *c, const void *p, size_t bytes)
{
	for (int i = 0; i < c->nwin; i++)
		if ((const char *)p >= c->win[i].base &&
		    (const char *)p + bytes <= c->win[i].base + c->win[i].bytes)
			return 1;
	return 0;
}

/* One rank: every collective copies count elements; recorded while the stream captures. */
static int coll(const void *s, void *r, size_t count, int dt, void *comm, void *stream)
{
	struct mock_stream *st = stream;
	struct mock_op op = { run_copy, s, r, count * dtype_bytes(dt) };

	if (!comm || !st || !dtype_bytes(dt))
		return NCCL_INVALID_ARGUMENT;
	if (in_window(comm, s, op.bytes) && in_window(comm, r, op.bytes))
		mock_bump(MOCK_WINDOWED);
	if (!st->capturing) {
		mock_bump(MOCK_DIRECT);
		run_copy(&op);
		return 0;
	}
	if (st->nops == st->cap) {
		int cap = st->cap ? 2 * st->cap : 8;
		struct mock_op *ops = realloc(st->ops, sizeof(*ops) * (size_t)cap);

		if (!ops)
			return 1;
		st->ops = ops;
		st->cap = cap;
	}
	st->ops[st->nops++] = op;
	mock_bump(MOCK_CAPTURED);
	return 0;
}

int ncclAllReduce(const void *s, void *r, size_t count, int dt, int op, void *comm, void *st)
{
	return op == 0 ? coll(s, r, count, dt, comm, st) : NCCL_INVALID_ARGUMENT;
}

int ncclAllGather(const void *s, void *r, size_t count, int dt, void *comm, void *st)
{
	return coll(s, r, count, dt, comm, st);
}

int ncclReduceScatter(const void *s, void *r, size_t count, int dt, int op, void *comm, void *st)
{
	return op == 0 ? coll(s, r, count, dt, comm, st) : NCCL_INVALID_ARGUMENT;
}

int ncclBroadcast(const void *s, void *r, size_t count, int dt, int root, void *comm, void *st)
{
	return root == 0 ? coll(s, r, count, dt, comm, st) : NCCL_INVALID_ARGUMENT;
}

int ncclReduce(const void *s, void *r, size_t count, int dt, int op, int root, void *comm, void *st)
{
	return op == 0 && root == 0 ? coll(s, r, count, dt, comm, st) : NCCL_INVALID_ARGUMENT;
}

/* Point to point, one rank: a send to itself is taken by the receive that follows it. */
static const void *p2p_src;
static size_t p2p_count;
static int p2p_dt;

int ncclGroupStart(void)
{
	return 0;
}

int ncclGroupEnd(void)
{
	return 0;
}

int ncclSend(const void *s, size_t count, int dt, int peer, void *comm, void *st)
{
	(void)comm;
	(void)st;
	if (peer != 0)
		return NCCL_INVALID_ARGUMENT;
	p2p_src = s;
	p2p_count = count;
	p2p_dt = dt;
	return 0;
}

int ncclRecv(void *r, size_t count, int dt, int peer, void *comm, void *st)
{
	const void *s = p2p_src;

	if (peer != 0 || !s || count != p2p_count || dt != p2p_dt)
		return NCCL_INVALID_ARGUMENT;
	p2p_src = NULL;
	return coll(s, r, count, dt, comm, st);
}

#ifndef MOCK_OLD
/* ncclMemAlloc'd blocks start on a 4 KiB boundary, as NCCL_WIN_REQUIRED_ALIGNMENT asks. */
int ncclMemAlloc(void **p, size_t bytes)
{
	*p = aligned_alloc(4096, (bytes + 4095) & ~(size_t)4095);
	return *p ? 0 : 1;
}

int ncclMemFree(void *p)
{
	free(p);
	return 0;
}

int ncclCommWindowRegister(void *comm, void *buf, size_t bytes, void **win, int flags)
{
	struct mock_comm *c = comm;

	if (!c || !buf || !bytes || flags != 1 /* NCCL_WIN_COLL_SYMMETRIC */ ||
	    (uintptr_t)buf % 4096)
		return NCCL_INVALID_ARGUMENT;
	if (c->nwin == 64)
		return NCCL_INVALID_USAGE;
	c->win[c->nwin].base = buf;
	c->win[c->nwin].bytes = bytes;
	*win = &c->win[c->nwin++];
	mock_bump(MOCK_WIN_REG);
	return 0;
}

int ncclCommWindowDeregister(void *comm, void *win)
{
	(void)comm;
	if (!win)
		return NCCL_INVALID_ARGUMENT;
	mock_bump(MOCK_WIN_DEREG);
	return 0;
}
#endif /* MOCK_OLD */
