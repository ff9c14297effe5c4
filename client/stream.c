/* SPDX-License-Identifier: MIT */
/*
 * Stream-ordered collectives. Each one goes through a gate of the client
 * region (proto/shm.h): libcollc enqueues on the caller's stream a write of
 * the gate's go word and a wait for its done word (stream memory operations:
 * no kernel; where the driver has none, one launch of a one-thread gate
 * kernel that does the same, client/gate_kernel.cu; gpu.c picks the path per
 * GPU), and posts the collective's SQE naming the gate. collcd starts
 * the collective once go holds the ticket and ends it by storing the result
 * and then done. The stream itself waits on the gate's word in device memory
 * (struct collc_signal, in collc_mem_alloc memory of the communicator's GPU),
 * which collcd's grid stores when the collective's item ends: a stream
 * polling host memory would slow the grid's own reads of host memory, and
 * the host stays off the path back to the stream.
 *
 * A stream being captured into a graph gets a gate of its own instead, armed
 * in collcd with the collective as a template: every replay writes go = 1,
 * collcd fires one collective and sets done = 1, and the replay clears done
 * (wait-then-reset, so nothing captured holds a value of one replay).
 *
 * If collcd goes away, a watcher thread releases every gate (result
 * -ECONNRESET), so no stream waits forever.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/gpu.h"
#include "client/internal.h"
#include "common/atomics.h"
#include "proto/work.h"

enum { GATE_FREE, GATE_STREAM, GATE_GRAPH };

#define SIG_DEVICES 64 /* GPUs of one process with signal words */

struct stream_state {
	pthread_mutex_t lock; /* the gate table below */
	uint64_t dev;         /* device address of ctx->gates[0] */
	/* Per GPU ordinal: the gates' device words (collc_mem_alloc), their registration. */
	struct collc_signal *sig[SIG_DEVICES];
	uint32_t sig_mr[SIG_DEVICES];
	uint64_t sig_off[SIG_DEVICES];
	int gate_device[COLLC_GATES]; /* the GPU whose word gate g used last */
	uint32_t next;                /* where the search for a free stream gate starts */
	uint32_t ticket[COLLC_GATES];
	uint8_t kind[COLLC_GATES];
	struct collc_comm *owner[COLLC_GATES];
	pthread_t watcher;
	int stop;   /* disconnect: the watcher ends */
	int orphan; /* collcd is gone: the watcher releases every gate */
};

/*
 * collc_group_start() .. collc_group_end() of this thread: the stream
 * forms called in between enqueue their write of go at once and their
 * waits only at the group's end, so every go of the group is ahead of
 * every wait in whatever hardware queue the driver maps their streams to.
 * Enqueued one after the other, a rank's wait could sit in front of the go
 * of the peer its collective needs (two ranks of one process on one GPU,
 * or more streams than the GPU has queues) and neither would ever run.
 */
struct group_wait {
	void *stream;
	int device;
	uint64_t done;
	uint32_t done_val;
};

static __thread struct {
	int depth;
	int err; /* the first error of a deferred wait */
	size_t n, cap;
	struct group_wait *w;
} group;

/* Room for one more wait, before anything of the call is enqueued. */
static int group_reserve(void)
{
	struct group_wait *w;
	size_t cap;

	if (group.n < group.cap)
		return 0;
	cap = group.cap ? 2 * group.cap : 16;
	w = realloc(group.w, cap * sizeof(*w));
	if (!w)
		return -ENOMEM;
	group.w = w;
	group.cap = cap;
	return 0;
}

int collc_group_start(void)
{
	if (group.depth == INT_MAX)
		return -EOVERFLOW;
	if (group.depth++ == 0)
		group.err = 0;
	return 0;
}

int collc_group_end(void)
{
	int r;

	if (group.depth <= 0)
		return -EINVAL;
	if (--group.depth > 0)
		return 0;
	/* Every wait, even after one failed: the others' streams must still wait. */
	for (size_t i = 0; i < group.n; i++) {
		const struct group_wait *w = &group.w[i];

		r = collc__gpu_stream_wait(w->stream, w->device, w->done, w->done_val);
		if (r < 0 && group.err == 0)
			group.err = r;
	}
	group.n = 0;
	r = group.err;
	group.err = 0;
	return r;
}

/*
 * Enqueues a stream gate's go and its wait, the wait deferred to the group's
 * end inside a group on the memops path (the kernel path's one launch does
 * both at once, in or out of a group).
 */
static int gate_enqueue(void *stream, int device, uint64_t go, uint32_t ticket, uint64_t done)
{
	int r;

	if (group.depth == 0)
		return collc__gpu_stream_gate(stream, device, go, ticket, done, ticket, 0);
	r = group_reserve();
	if (r < 0)
		return r;
	r = collc__gpu_stream_go(stream, device, go, ticket);
	if (r == -EOPNOTSUPP)
		return collc__gpu_stream_gate(stream, device, go, ticket, done, ticket, 0);
	if (r < 0)
		return r;
	group.w[group.n++] = (struct group_wait){ stream, device, done, ticket };
	return 0;
}

static struct collc_gate *gate_of(struct collc_ctx *ctx, uint32_t g)
{
	return &ctx->gates[g];
}

static uint64_t sig_addr(const struct stream_state *st, int device, uint32_t g)
{
	return (uint64_t)(uintptr_t)&st->sig[device][g];
}

/* Releases the gates collcd can no longer answer: results -ECONNRESET. Under st->lock. */
static void release_orphans(struct collc_ctx *ctx, struct stream_state *st)
{
	for (uint32_t g = 0; g < ctx->ngates; g++) {
		struct collc_gate *gt = gate_of(ctx, g);
		int d = st->gate_device[g];

		if (st->kind[g] == GATE_STREAM && load_acquire(&gt->done) != st->ticket[g]) {
			store_relaxed(&gt->res, -ECONNRESET);
			store_release(&gt->done, st->ticket[g]);
			collc__gpu_poke(d, sig_addr(st, d, g), st->ticket[g], 1);
		} else if (st->kind[g] == GATE_GRAPH && load_acquire(&gt->go) == 1) {
			/* A replay fired: answer it as collcd would, with the error. */
			store_relaxed(&gt->go, 0u);
			store_relaxed(&gt->res, -ECONNRESET);
			store_release(&gt->done, 1u);
			collc__gpu_poke(d, sig_addr(st, d, g), 1u, 1);
		}
	}
}

static void *watch(void *arg)
{
	struct collc_ctx *ctx = arg;
	struct stream_state *st = ctx->stream;

	for (;;) {
		struct pollfd p = { .fd = ctx->fd, .events = POLLRDHUP };
		int stop;

		pthread_mutex_lock(&st->lock);
		stop = st->stop;
		if (!stop && st->orphan)
			release_orphans(ctx, st);
		pthread_mutex_unlock(&st->lock);
		if (stop)
			return NULL;
		if (st->orphan) {
			usleep(1000); /* graph replays keep firing: answer them */
			continue;
		}
		if (poll(&p, 1, 100) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR))) {
			store_relaxed(&ctx->broken, 1);
			pthread_mutex_lock(&st->lock);
			st->orphan = 1;
			pthread_mutex_unlock(&st->lock);
		}
	}
}

/* Maps the gates into the GPUs' address space and starts the watcher, once per ctx. */
static int stream_ready(struct collc_ctx *ctx, int device, struct stream_state **ret)
{
	struct stream_state *st;
	int r = 0;

	if (!ctx->gates)
		return -EOPNOTSUPP; /* a collcd without gates */
	pthread_mutex_lock(&ctx->mem_lock);
	st = ctx->stream;
	if (st)
		goto out;
	st = calloc(1, sizeof(*st));
	if (!st) {
		r = -ENOMEM;
		goto out;
	}
	r = collc__gpu_host_map(device, ctx->gates, ctx->ngates * sizeof(struct collc_gate),
				&st->dev);
	if (r < 0)
		goto err_free;
	pthread_mutex_init(&st->lock, NULL);
	ctx->stream = st;
	r = -pthread_create(&st->watcher, NULL, watch, ctx);
	if (r < 0) {
		ctx->stream = NULL;
		pthread_mutex_destroy(&st->lock);
		collc__gpu_host_unmap(ctx->gates);
		goto err_free;
	}
	goto out;

err_free:
	free(st);
	st = NULL;
out:
	pthread_mutex_unlock(&ctx->mem_lock);
	*ret = st;
	return r;
}

/*
 * The gates' device words on GPU device, allocated by collcd once per ctx and
 * zeroed (a word holds the ticket of the last collective of its gate).
 */
static int sig_ready(struct collc_ctx *ctx, struct stream_state *st, int device)
{
	const struct reg *g;
	void *p = NULL;
	int r = 0;

	if (device < 0 || device >= SIG_DEVICES)
		return -EINVAL;
	pthread_mutex_lock(&st->lock);
	p = st->sig[device];
	pthread_mutex_unlock(&st->lock);
	if (p)
		return 0;
	r = collc_mem_alloc(ctx, ctx->ngates * sizeof(struct collc_signal), device, &p);
	if (r < 0)
		return r;
	r = collc__gpu_poke(device, (uint64_t)(uintptr_t)p, 0u,
			    ctx->ngates * sizeof(struct collc_signal) / sizeof(uint32_t));
	pthread_mutex_lock(&ctx->ring_lock);
	g = collc__reg_find(ctx, (uintptr_t)p, ctx->ngates * sizeof(struct collc_signal));
	pthread_mutex_unlock(&ctx->ring_lock);
	if (r < 0 || !g) {
		collc_mem_free(ctx, p);
		return r < 0 ? r : -EIO;
	}
	pthread_mutex_lock(&st->lock);
	if (st->sig[device]) {
		pthread_mutex_unlock(&st->lock);
		collc_mem_free(ctx, p); /* another thread was first */
		return 0;
	}
	st->sig_mr[device] = g->mr;
	st->sig_off[device] = (uintptr_t)p - g->map;
	st->sig[device] = p;
	pthread_mutex_unlock(&st->lock);
	return 0;
}

/* Folds a finished gate's result into its communicator's async error. Under st->lock. */
static void fold(struct collc_ctx *ctx, struct stream_state *st, uint32_t g)
{
	struct collc_gate *gt = gate_of(ctx, g);
	struct collc_comm *c = st->owner[g];
	int res;

	if (!c || st->kind[g] != GATE_STREAM || load_acquire(&gt->done) != st->ticket[g])
		return;
	/* G2: pairs with collcd's release of done: res was stored before it. */
	res = load_relaxed(&gt->res);
	if (res < 0 && !c->async_err)
		c->async_err = res;
}

/*
 * Stream gates are the lower half of the gates, graph gates the upper half:
 * a gate never changes kind, so a lagging stream's wait never meets a graph.
 */
static uint32_t stream_gates(const struct collc_ctx *ctx)
{
	return ctx->ngates / 2;
}

/* A stream gate whose last collective is done (or never used). Under st->lock. */
static int gate_take(struct collc_ctx *ctx, struct stream_state *st, struct collc_comm *comm,
		     uint32_t *ret_gate, uint32_t *ret_ticket)
{
	uint32_t n = stream_gates(ctx);

	for (uint32_t i = 0; i < n; i++) {
		uint32_t g = (st->next + i) % n;

		if (st->kind[g] == GATE_STREAM &&
		    load_acquire(&gate_of(ctx, g)->done) != st->ticket[g])
			continue;
		fold(ctx, st, g);
		st->kind[g] = GATE_STREAM;
		st->owner[g] = comm;
		st->ticket[g] = st->ticket[g] + 1 ? st->ticket[g] + 1 : 1;
		st->next = (g + 1) % n;
		*ret_gate = g;
		*ret_ticket = st->ticket[g];
		return 0;
	}
	return -EBUSY; /* COLLC_GATES stream collectives not yet run */
}

/*
 * A free graph gate for one captured collective, cleared (its device word
 * too: the caller pokes it). Under st->lock.
 */
static int gate_take_graph(struct collc_ctx *ctx, struct stream_state *st, struct collc_comm *comm,
			   uint32_t *ret_gate)
{
	for (uint32_t i = stream_gates(ctx); i < ctx->ngates; i++) {
		struct collc_gate *gt = gate_of(ctx, i);

		if (st->kind[i] == GATE_GRAPH)
			continue;
		st->kind[i] = GATE_GRAPH;
		st->owner[i] = comm;
		store_relaxed(&gt->go, 0u);
		store_relaxed(&gt->done, 0u);
		*ret_gate = i;
		return 0;
	}
	return -EBUSY;
}

/* The gates mapped and device's words made; st: the ctx's stream state. */
static int stream_prepare(struct collc_ctx *ctx, int device, struct stream_state **ret_st)
{
	int r = stream_ready(ctx, device, ret_st);

	return r < 0 ? r : sig_ready(ctx, *ret_st, device);
}

int collc__stream_prepare(struct collc_ctx *ctx, int device)
{
	struct stream_state *st;
	int r = stream_prepare(ctx, device, &st);

	/* The path chosen, and the gate kernel loaded where it is the path. */
	return r < 0 ? r : collc__gpu_stream_path(device);
}

static int stream_coll(struct collc_comm *comm, uint8_t opcode, const void *sendbuf, void *recvbuf,
		       size_t count, collc_dtype dtype, collc_redop op, int root,
		       struct CUstream_st *stream)
{
	struct collc_ctx *ctx;
	struct stream_state *st;
	struct collc_gate *gt;
	struct sub s;
	collc_req req;
	uint64_t wait;
	uint32_t g, ticket = 0;
	int r, dev, capturing;

	if (!comm || comm->device < 0)
		return -EINVAL; /* host communicators have no stream forms */
	ctx = comm->ctx;
	r = collc__coll_sub(comm, opcode, sendbuf, recvbuf, count, dtype, root, &s);
	if (r < 0)
		return r;
	if ((unsigned)op >= COLLC_NUM_REDOPS)
		return -EINVAL;
	r = collc__gpu_stream_device(stream, &dev);
	if (r < 0)
		return r == -ENODEV ? r : -EINVAL;
	if (dev != comm->device)
		return -EINVAL; /* the stream belongs to another GPU */
	/* Done at comm_init already, unless it failed there. */
	r = stream_prepare(ctx, comm->device, &st);
	if (r < 0)
		return r;
	capturing = collc__gpu_capturing(stream);
	if (capturing < 0)
		return -EINVAL; /* an invalidated capture */
	if (capturing && COLLC_OP_IS_P2P(opcode))
		return -EOPNOTSUPP; /* graph replays fire collectives only */
	/* Before a gate is taken or armed: a kernel that cannot be loaded loses nothing. */
	r = collc__gpu_stream_ready(stream, comm->device, capturing);
	if (r < 0)
		return r;
	for (;;) {
		pthread_mutex_lock(&st->lock);
		if (st->orphan) {
			pthread_mutex_unlock(&st->lock);
			return -ECONNRESET;
		}
		r = capturing ? gate_take_graph(ctx, st, comm, &g)
			      : gate_take(ctx, st, comm, &g, &ticket);
		if (r == 0)
			st->gate_device[g] = comm->device;
		pthread_mutex_unlock(&st->lock);
		/*
		 * Every stream gate holds a collective its stream has not reached:
		 * the GPU frees one as it goes on (as NCCL's enqueue waits for its
		 * FIFO). Graph gates are freed only by destroying the communicator.
		 */
		if (r != -EBUSY || capturing)
			break;
		if (!collc__daemon_alive(ctx))
			return -ECONNRESET;
		sched_yield();
	}
	if (r < 0)
		return r;
	gt = gate_of(ctx, g);
	/* Read by collcd with the SQE (A1 orders them before the tail). */
	store_relaxed(&gt->sig_mr, st->sig_mr[comm->device]);
	store_relaxed(&gt->sig_off, st->sig_off[comm->device] + g * sizeof(struct collc_signal));
	wait = sig_addr(st, comm->device, g);
	if (capturing) {
		/*
		 * Nothing here may touch CUDA (capture forbids it): the word is 0,
		 * as every replay leaves it and collc__stream_comm_gone() frees it.
		 * Armed in collcd first: its answer says whether the template is good.
		 */
		s.flags = COLLC_SQE_GRAPH;
		s.gate = g;
		r = collc__submit(comm, &s, count, dtype, op, root, &req);
		if (r == 0)
			r = collc_wait(ctx, req, -1);
		if (r == 0)
			r = collc__gpu_stream_gate(stream, comm->device, st->dev + g * sizeof(*gt),
						   1, wait, 1, 1);
		if (r < 0) {
			pthread_mutex_lock(&st->lock);
			st->kind[g] = GATE_FREE;
			st->owner[g] = NULL;
			pthread_mutex_unlock(&st->lock);
		}
		return r;
	}
	/* The stream's operations first: a failed SQE then releases them itself. */
	r = gate_enqueue(stream, comm->device, st->dev + g * sizeof(*gt), ticket, wait);
	if (r == 0) {
		s.flags = COLLC_SQE_STREAM;
		s.gate = g;
		s.ticket = ticket;
		r = collc__submit(comm, &s, count, dtype, op, root, NULL);
		if (r < 0) {
			/* The stream waits already: release it (its word, then the gate). */
			collc__gpu_poke(comm->device, wait, ticket, 1);
			store_relaxed(&gt->res, r);
			store_release(&gt->done, ticket);
		}
		return r;
	}
	/* Nothing reached the stream: the gate is free again. */
	store_release(&gt->done, ticket);
	return r;
}

int collc_allreduce_stream(struct collc_comm *comm, const void *sendbuf, void *recvbuf,
			   size_t count, collc_dtype dtype, collc_redop op,
			   struct CUstream_st *stream)
{
	return stream_coll(comm, COLLC_OP_ALLREDUCE, sendbuf, recvbuf, count, dtype, op, 0, stream);
}

int collc_allgather_stream(struct collc_comm *comm, const void *sendbuf, void *recvbuf,
			   size_t sendcount, collc_dtype dtype, struct CUstream_st *stream)
{
	return stream_coll(comm, COLLC_OP_ALLGATHER, sendbuf, recvbuf, sendcount, dtype, COLLC_SUM,
			   0, stream);
}

int collc_reduce_scatter_stream(struct collc_comm *comm, const void *sendbuf, void *recvbuf,
				size_t recvcount, collc_dtype dtype, collc_redop op,
				struct CUstream_st *stream)
{
	return stream_coll(comm, COLLC_OP_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype, op, 0,
			   stream);
}

int collc_broadcast_stream(struct collc_comm *comm, const void *sendbuf, void *recvbuf,
			   size_t count, collc_dtype dtype, int root, struct CUstream_st *stream)
{
	return stream_coll(comm, COLLC_OP_BROADCAST, sendbuf, recvbuf, count, dtype, COLLC_SUM,
			   root, stream);
}

int collc_reduce_stream(struct collc_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
			collc_dtype dtype, collc_redop op, int root, struct CUstream_st *stream)
{
	return stream_coll(comm, COLLC_OP_REDUCE, sendbuf, recvbuf, count, dtype, op, root, stream);
}

int collc_alltoall_stream(struct collc_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
			  collc_dtype dtype, struct CUstream_st *stream)
{
	return stream_coll(comm, COLLC_OP_ALLTOALL, sendbuf, recvbuf, count, dtype, COLLC_SUM, 0,
			   stream);
}

int collc_send_stream(struct collc_comm *comm, const void *buf, size_t count, collc_dtype dtype,
		      int peer, struct CUstream_st *stream)
{
	return stream_coll(comm, COLLC_OP_SEND, buf, NULL, count, dtype, COLLC_SUM, peer, stream);
}

int collc_recv_stream(struct collc_comm *comm, void *buf, size_t count, collc_dtype dtype, int peer,
		      struct CUstream_st *stream)
{
	return stream_coll(comm, COLLC_OP_RECV, NULL, buf, count, dtype, COLLC_SUM, peer, stream);
}

int collc_comm_get_async_error(struct collc_comm *comm)
{
	struct stream_state *st;

	if (!comm)
		return -EINVAL;
	st = comm->ctx->stream;
	if (!st)
		return comm->async_err;
	pthread_mutex_lock(&st->lock);
	for (uint32_t g = 0; g < comm->ctx->ngates; g++) {
		struct collc_gate *gt = gate_of(comm->ctx, g);
		int res;

		if (st->owner[g] != comm)
			continue;
		if (st->kind[g] == GATE_STREAM) {
			fold(comm->ctx, st, g);
		} else if (st->kind[g] == GATE_GRAPH && load_acquire(&gt->done) == 1) {
			/* G2: as in fold(); a replay's result stays until the next replay. */
			res = load_relaxed(&gt->res);
			if (res < 0 && !comm->async_err)
				comm->async_err = res;
		}
	}
	if (st->orphan && !comm->async_err)
		comm->async_err = -ECONNRESET;
	pthread_mutex_unlock(&st->lock);
	return comm->async_err;
}

int collc_comm_get_stream_path(struct collc_comm *comm)
{
	if (!comm || comm->device < 0)
		return -EINVAL; /* host communicators have no stream forms */
	return collc__gpu_stream_path(comm->device);
}

void collc__stream_comm_gone(struct collc_comm *comm)
{
	struct stream_state *st = comm->ctx->stream;

	if (!st)
		return;
	pthread_mutex_lock(&st->lock);
	for (uint32_t g = 0; g < comm->ctx->ngates; g++)
		if (st->owner[g] == comm) {
			st->owner[g] = NULL;
			/* collcd disarms a destroyed communicator's graph gates; the word restarts at 0. */
			if (st->kind[g] == GATE_GRAPH) {
				st->kind[g] = GATE_FREE;
				collc__gpu_poke(st->gate_device[g],
						sig_addr(st, st->gate_device[g], g), 0u, 1);
			}
		}
	pthread_mutex_unlock(&st->lock);
}

void collc__stream_fini(struct collc_ctx *ctx)
{
	struct stream_state *st = ctx->stream;

	if (!st)
		return;
	pthread_mutex_lock(&st->lock);
	st->stop = 1;
	pthread_mutex_unlock(&st->lock);
	pthread_join(st->watcher, NULL);
	collc__gpu_host_unmap(ctx->gates);
	pthread_mutex_destroy(&st->lock);
	free(st);
	ctx->stream = NULL;
}
