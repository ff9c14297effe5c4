/* SPDX-License-Identifier: MIT */
/*
 * One collc rank: connect, join the communicator, allocate buffers with
 * collc_mem_alloc (host memory on the CPU backend, device memory of GPU
 * `rank` on the CUDA backend, filled and read back with cudaMemcpy), then run
 * the measurement loop in the run's mode (cfg->collc_mode):
 *   host:   collc_<coll>() and collc_wait(), `depth` requests outstanding;
 *   stream: collc_<coll>_stream() on the rank's non-blocking CUDA stream;
 *           latency = enqueue + cudaStreamSynchronize, pipelined = `iters`
 *           back to back on the stream between two CUDA events (the stream
 *           is the queue: `depth` only sets the receive slots rotated), as
 *           NCCL's ranks measure;
 *   graph:  those calls captured into CUDA graphs once per size (after one
 *           direct call: the first stream-ordered call of a ctx maps memory
 *           and must not be captured), one of a single collective replayed
 *           for latency, one of `depth` (the j-th into slot j) replayed
 *           iters / depth times back to back for pipelined time.
 * The stream modes read collc_comm_get_async_error() after every wait: an
 * error released the stream and left the result undefined.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <collc.h>

#include "bench/proc.h"
#include "bench/runner.h"
#include "bench/cudart.h"
#include "bench/graphs.h"

_Static_assert((int)COLLC_FLOAT32 == (int)COLLC_FLOAT32 &&
		       (int)COLLC_BFLOAT16 == (int)COLLC_BFLOAT16 &&
		       (int)COLLC_FLOAT64 == (int)COLLC_FLOAT64 &&
		       (int)COLLC_INT8 == (int)COLLC_INT8,
	       "bench dtypes follow collc's");

struct collc_rank {
	const struct bench_cfg *cfg;
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	int device; /* -1: host buffers */
	struct cudart rt;
	void *send;
	void **recv; /* depth receive slots */
	int nrecv;
	void *bar_send, *bar_recv;
	collc_req *reqs; /* the pipelined phase's window */
	/* The stream modes */
	int depth;               /* receive slots */
	struct bench_stream bs;  /* the rank's stream, its events and graphs */
	cuda_stream_t stream2;   /* sendrecv: the sends, forked from and joined to bs.stream */
	cuda_event_t fork, join; /* sendrecv */
};

static int fail(struct runner *rn, int r, const char *what)
{
	snprintf(rn->err, sizeof(rn->err), "%s: %s", what, collc_strerror(r));
	return r < 0 ? r : -EIO;
}

/* Requests one iteration takes: send/recv posts a send right and a receive left. */
#define REQS_PER_OP 2

/* Submits one iteration into req[0] (and req[1]; else 0, which no request has). */
static int submit(struct collc_rank *cr, const struct bench_size *sz, int slot, collc_req *req)
{
	const struct bench_cfg *cfg = cr->cfg;
	void *recv = cr->recv[slot];
	int n = cfg->nranks, me = collc_comm_rank(cr->comm), r;

	req[1] = 0;
	switch (cfg->coll) {
	case BENCH_ALLTOALL:
		return collc_alltoall(cr->comm, cr->send, recv, sz->count, cfg->dtype, req);
	case BENCH_SENDRECV:
		r = collc_recv(cr->comm, recv, sz->count, cfg->dtype, (me + n - 1) % n, &req[1]);
		if (r == 0)
			r = collc_send(cr->comm, cr->send, sz->count, cfg->dtype, (me + 1) % n,
				       req);
		return r;
	case BENCH_ALLREDUCE:
		return collc_allreduce(cr->comm, cr->send, recv, sz->count, cfg->dtype, COLLC_SUM,
				       req);
	case BENCH_ALLGATHER:
		return collc_allgather(cr->comm, cr->send, recv, sz->count, cfg->dtype, req);
	case BENCH_REDUCE_SCATTER:
		return collc_reduce_scatter(cr->comm, cr->send, recv, sz->count, cfg->dtype,
					    COLLC_SUM, req);
	case BENCH_BROADCAST:
		return collc_broadcast(cr->comm, cr->send, recv, sz->count, cfg->dtype, cfg->root,
				       req);
	default:
		return collc_reduce(cr->comm, cr->send, recv, sz->count, cfg->dtype, COLLC_SUM,
				    cfg->root, req);
	}
}

static int wait_one(struct runner *rn, collc_req req)
{
	struct collc_rank *cr = rn->st;
	int r = collc_wait(cr->ctx, req, cr->cfg->timeout_ms);

	if (r == -EAGAIN) {
		snprintf(rn->err, sizeof(rn->err), "collective still not complete after %d ms",
			 cr->cfg->timeout_ms);
		return -ETIMEDOUT;
	}
	return r < 0 ? fail(rn, r, "collc_wait") : 0;
}

/* Waits for an iteration's requests (a 0 is none). */
static int wait_req(struct runner *rn, const collc_req *req)
{
	int r = 0;

	for (int i = 0; i < REQS_PER_OP && r == 0; i++)
		if (req[i])
			r = wait_one(rn, req[i]);
	return r;
}

static int op_once(struct runner *rn, const struct bench_size *sz, int slot)
{
	collc_req req[REQS_PER_OP];
	int r = submit(rn->st, sz, slot, req);

	if (r < 0)
		return fail(rn, r, "submit");
	return wait_req(rn, req);
}

static int op_batch(struct runner *rn, const struct bench_size *sz, int n, int depth, double *ret_s)
{
	struct collc_rank *cr = rn->st;
	double t0 = bench_now();
	int r;

	/* The window is a ring: collective j lives in reqs[j % depth] and recv slot j % depth. */
	for (int j = 0; j < n + depth; j++) {
		int q = j % depth;

		if (j >= depth) {
			r = wait_req(rn, &cr->reqs[q * REQS_PER_OP]);
			if (r < 0)
				return r;
		}
		if (j < n) {
			r = submit(cr, sz, q, &cr->reqs[q * REQS_PER_OP]);
			if (r < 0)
				return fail(rn, r, "submit");
		}
	}
	*ret_s = bench_now() - t0;
	return 0;
}

static int op_barrier(struct runner *rn)
{
	struct collc_rank *cr = rn->st;
	collc_req req;
	int r = collc_allreduce(cr->comm, cr->bar_send, cr->bar_recv, 1, COLLC_FLOAT32, COLLC_SUM,
				&req);

	if (r < 0)
		return fail(rn, r, "barrier allreduce");
	return wait_one(rn, req);
}

static int cuda_fail(struct runner *rn, struct collc_rank *cr, cuda_err_t e, const char *what)
{
	return bench_cuda_fail(rn, &cr->rt, e, what);
}

static int op_upload(struct runner *rn, const void *host, size_t bytes)
{
	struct collc_rank *cr = rn->st;
	cuda_err_t e;

	if (cr->device < 0) {
		memcpy(cr->send, host, bytes);
		return 0;
	}
	e = cr->rt.Memcpy(cr->send, host, bytes, CUDA_H2D);
	if (e)
		return cuda_fail(rn, cr, e, "cudaMemcpy to the send buffer");
	/*
	 * A copy from pageable memory may return before its DMA ends, and collcd's
	 * grid, another process, is not ordered after it: wait for the device.
	 */
	e = cr->rt.DeviceSynchronize();
	return e ? cuda_fail(rn, cr, e, "cudaDeviceSynchronize after the upload") : 0;
}

static int op_download(struct runner *rn, int slot, void *host, size_t bytes)
{
	struct collc_rank *cr = rn->st;
	cuda_err_t e;

	if (cr->device < 0) {
		memcpy(host, cr->recv[slot], bytes);
		return 0;
	}
	e = cr->rt.Memcpy(host, cr->recv[slot], bytes, CUDA_D2H);
	return e ? cuda_fail(rn, cr, e, "cudaMemcpy from a receive buffer") : 0;
}

static int op_poison(struct runner *rn, int slot, size_t bytes)
{
	struct collc_rank *cr = rn->st;
	cuda_err_t e;

	if (cr->device < 0) {
		memset(cr->recv[slot], 0xff, bytes);
		return 0;
	}
	e = cr->rt.Memset(cr->recv[slot], 0xff, bytes);
	if (e)
		return cuda_fail(rn, cr, e, "cudaMemset");
	/* cudaMemset returns before it ends; the grid must not race the poison. */
	e = cr->rt.DeviceSynchronize();
	return e ? cuda_fail(rn, cr, e, "cudaDeviceSynchronize after the poison") : 0;
}

/* The stream modes. */

static int stream_fail(struct runner *rn, int r, const char *call)
{
	struct collc_rank *cr = rn->st;

	snprintf(rn->err, sizeof(rn->err), "%s: %s%s", call, collc_strerror(r),
		 r == -EOPNOTSUPP ? " (no stream memory operations on this GPU, or a collcd "
				    "without gates)"
		 : r == -EBUSY && cr->cfg->collc_mode == CMODE_GRAPH
			 ? " (every graph gate of the connection holds a captured collective)"
			 : "");
	return r < 0 ? r : -EIO;
}

/*
 * Enqueues one iteration on the rank's stream (records it while the stream
 * captures). Send and receive go on two streams forked from the rank's and
 * joined back: on one stream each rank's receive would hold back its send,
 * which the neighbour's receive waits for.
 */
static int enqueue(struct runner *rn, const struct bench_size *sz, int slot)
{
	struct collc_rank *cr = rn->st;
	const struct bench_cfg *cfg = cr->cfg;
	struct CUstream_st *s = cr->bs.stream;
	void *recv = cr->recv[slot];
	int n = cfg->nranks, me = collc_comm_rank(cr->comm), r;
	cuda_err_t e;

	switch (cfg->coll) {
	case BENCH_ALLTOALL:
		r = collc_alltoall_stream(cr->comm, cr->send, recv, sz->count, cfg->dtype, s);
		return r < 0 ? stream_fail(rn, r, "collc_alltoall_stream") : 0;
	case BENCH_SENDRECV:
		e = cr->rt.EventRecord(cr->fork, cr->bs.stream);
		if (e == 0)
			e = cr->rt.StreamWaitEvent(cr->stream2, cr->fork, 0);
		if (e)
			return cuda_fail(rn, cr, e, "forking the send stream");
		r = collc_recv_stream(cr->comm, recv, sz->count, cfg->dtype, (me + n - 1) % n, s);
		if (r < 0)
			return stream_fail(rn, r, "collc_recv_stream");
		r = collc_send_stream(cr->comm, cr->send, sz->count, cfg->dtype, (me + 1) % n,
				      cr->stream2);
		if (r < 0)
			return stream_fail(rn, r, "collc_send_stream");
		e = cr->rt.EventRecord(cr->join, cr->stream2);
		if (e == 0)
			e = cr->rt.StreamWaitEvent(cr->bs.stream, cr->join, 0);
		return e ? cuda_fail(rn, cr, e, "joining the send stream") : 0;
	case BENCH_ALLREDUCE:
		r = collc_allreduce_stream(cr->comm, cr->send, recv, sz->count, cfg->dtype,
					   COLLC_SUM, s);
		return r < 0 ? stream_fail(rn, r, "collc_allreduce_stream") : 0;
	case BENCH_ALLGATHER:
		r = collc_allgather_stream(cr->comm, cr->send, recv, sz->count, cfg->dtype, s);
		return r < 0 ? stream_fail(rn, r, "collc_allgather_stream") : 0;
	case BENCH_REDUCE_SCATTER:
		r = collc_reduce_scatter_stream(cr->comm, cr->send, recv, sz->count, cfg->dtype,
						COLLC_SUM, s);
		return r < 0 ? stream_fail(rn, r, "collc_reduce_scatter_stream") : 0;
	case BENCH_BROADCAST:
		r = collc_broadcast_stream(cr->comm, cr->send, recv, sz->count, cfg->dtype,
					   cfg->root, s);
		return r < 0 ? stream_fail(rn, r, "collc_broadcast_stream") : 0;
	default:
		r = collc_reduce_stream(cr->comm, cr->send, recv, sz->count, cfg->dtype, COLLC_SUM,
					cfg->root, s);
		return r < 0 ? stream_fail(rn, r, "collc_reduce_stream") : 0;
	}
}

/* An error of a stream-ordered collective released the stream; it shows here. */
static int async_check(struct runner *rn)
{
	struct collc_rank *cr = rn->st;
	int r = collc_comm_get_async_error(cr->comm);

	return r ? stream_fail(rn, r, "stream-ordered collective (collc_comm_get_async_error)") : 0;
}

static int stream_sync(struct runner *rn)
{
	struct collc_rank *cr = rn->st;
	cuda_err_t e = cr->rt.StreamSynchronize(cr->bs.stream);

	if (e)
		return cuda_fail(rn, cr, e, "cudaStreamSynchronize");
	return async_check(rn);
}

/*
 * The graphs of size sz, captured at its first collective, after one direct
 * stream-ordered call (it maps memory the first time, which capture forbids).
 * That call writes slot 0, poisoned again so that the check that follows
 * sees the graph's result. Each captured collective holds a graph gate of
 * the ctx until the communicator goes (collc-bench checks the count first).
 */
static int graphs_for(struct runner *rn, const struct bench_size *sz)
{
	struct collc_rank *cr = rn->st;
	size_t bytes = sz->recv_elems * collc_dtype_bytes(cr->cfg->dtype);
	int r;

	if (cr->bs.gsz == sz)
		return 0;
	bench_graphs_drop(&cr->bs);
	r = enqueue(rn, sz, 0);
	if (r == 0)
		r = stream_sync(rn);
	if (r == 0)
		r = op_poison(rn, 0, bytes);
	return r < 0 ? r : bench_graphs_capture(rn, &cr->bs, enqueue, sz, cr->depth);
}

static int stream_once(struct runner *rn, const struct bench_size *sz, int slot)
{
	struct collc_rank *cr = rn->st;
	int r;

	if (cr->cfg->collc_mode == CMODE_GRAPH)
		r = bench_graphs_once(rn, &cr->bs, graphs_for, sz, slot);
	else
		r = enqueue(rn, sz, slot);
	return r < 0 ? r : stream_sync(rn);
}

/*
 * Back to back on the stream between two events. Graph mode replays the graph
 * of `depth` collectives n / depth times; the time returned is scaled to n
 * collectives (n is a multiple of depth unless --iters is not).
 */
static int stream_batch(struct runner *rn, const struct bench_size *sz, int n, int depth,
			double *ret_s)
{
	struct collc_rank *cr = rn->st;
	int graph = cr->cfg->collc_mode == CMODE_GRAPH, reps = n / depth, done = n, r;
	float ms = 0;

	if (graph) {
		r = bench_graphs_fit(rn, graphs_for, sz, n, depth, cr->depth);
		if (r < 0)
			return r;
		done = reps * depth;
	}
	r = bench_stream_time(rn, &cr->bs, enqueue, graph, sz, n, depth, &ms);
	if (r == 0)
		r = async_check(rn);
	if (r < 0)
		return r;
	*ret_s = ms * 1e-3 * n / done;
	return 0;
}

static const struct runner_ops collc_ops = {
	.once = op_once,
	.batch = op_batch,
	.barrier = op_barrier,
	.upload = op_upload,
	.download = op_download,
	.poison = op_poison,
};

static const struct runner_ops collc_stream_ops = {
	.once = stream_once,
	.batch = stream_batch,
	.barrier = op_barrier,
	.upload = op_upload,
	.download = op_download,
	.poison = op_poison,
};

/* The stream modes' stream and events (and the send stream of sendrecv). */
static int stream_setup(struct collc_rank *cr, char *msg, size_t len)
{
	const struct bench_cfg *cfg = cr->cfg;
	cuda_err_t e;

	if (cfg->collc_mode == CMODE_GRAPH && cr->rt.graph_missing) {
		snprintf(msg, len, "%s lacks %s: no CUDA graphs (--graph)", cr->rt.libname,
			 cr->rt.graph_missing);
		return -1;
	}
	e = bench_stream_create(&cr->bs);
	if (e == 0 && cfg->coll == BENCH_SENDRECV)
		e = cr->rt.StreamCreateWithFlags(&cr->stream2, CUDA_STREAM_NON_BLOCKING);
	if (e == 0 && cfg->coll == BENCH_SENDRECV)
		e = cr->rt.EventCreate(&cr->fork);
	if (e == 0 && cfg->coll == BENCH_SENDRECV)
		e = cr->rt.EventCreate(&cr->join);
	if (e) {
		snprintf(msg, len, "stream and events (--%s): %s",
			 collc_mode_names[cfg->collc_mode], cudart_strerror(&cr->rt, e));
		return -1;
	}
	return 0;
}

/*
 * No wait for the streams: after a run nothing is left on them, and after an
 * error one may wait for a peer that is gone (destroying it does not wait).
 */
static void stream_teardown(struct collc_rank *cr)
{
	bench_graphs_drop(&cr->bs);
	if (cr->bs.ev0)
		cr->rt.EventDestroy(cr->bs.ev0);
	if (cr->bs.ev1)
		cr->rt.EventDestroy(cr->bs.ev1);
	if (cr->fork)
		cr->rt.EventDestroy(cr->fork);
	if (cr->join)
		cr->rt.EventDestroy(cr->join);
	if (cr->bs.stream)
		cr->rt.StreamDestroy(cr->bs.stream);
	if (cr->stream2)
		cr->rt.StreamDestroy(cr->stream2);
}

int collc_rank_main(const struct bench_cfg *cfg, const void *uid, int rank,
		    struct shared_results *sr)
{
	/* Thread-local capture, as collc's GPU tests capture: libcollc's own threads stay out of it. */
	struct collc_rank cr = { .cfg = cfg,
				 .device = !cfg->cuda   ? -1
					   : cfg->ngpus ? cfg->gpu[rank]
							: rank,
				 .bs = { .rt = &cr.rt,
					 .capture_mode = CUDA_CAPTURE_THREAD_LOCAL } };
	struct runner rn = { .ops = cfg->collc_mode == CMODE_HOST ? &collc_ops : &collc_stream_ops,
			     .st = &cr };
	size_t es = collc_dtype_bytes(cfg->dtype);
	int depth = cfg->depth < cfg->iters ? cfg->depth : cfg->iters;
	int r, status = 1;
	char msg[256];

	/* Across daemons a rank runs on its daemon's CPUs, as a client on that node would. */
	if (cfg->nsockets > 1) {
		pid_t daemon = bench_socket_pid(bench_rank_socket(cfg, rank));

		if (daemon > 0)
			bench_follow_cpus(daemon);
	}
	if (cfg->cuda) {
		cuda_err_t e;

		if (cudart_load(&cr.rt, msg, sizeof(msg)) < 0) {
			bench_setup_error(sr, rank, "rank", "%s", msg);
			return 1;
		}
		/* The client's CUDA context on its GPU, before collc maps device memory into it. */
		e = cr.rt.SetDevice(cr.device);
		if (e == 0)
			e = cr.rt.Free(NULL);
		if (e) {
			bench_setup_error(sr, rank, "rank", "cudaSetDevice(%d): %s", cr.device,
					  cudart_strerror(&cr.rt, e));
			return 1;
		}
	}
	r = collc_connect(bench_rank_socket(cfg, rank), &cr.ctx);
	if (r < 0) {
		bench_setup_error(sr, rank, "rank", "collc_connect(%s): %s",
				  bench_rank_socket(cfg, rank) ? bench_rank_socket(cfg, rank)
							       : "default socket",
				  collc_strerror(r));
		return 1;
	}
	r = collc_comm_init(cr.ctx, uid, cfg->nranks, rank, cr.device, &cr.comm);
	if (r < 0) {
		bench_setup_error(sr, rank, "rank", "collc_comm_init(device %d): %s", cr.device,
				  collc_strerror(r));
		goto out_disconnect;
	}
	/* How the stream forms reach the GPU (memops, or one gate kernel each): said once. */
	if (rank == 0 && (cfg->collc_mode == CMODE_STREAM || cfg->collc_mode == CMODE_GRAPH)) {
		int path = collc_comm_get_stream_path(cr.comm);

		fprintf(stderr, "collc-bench: stream path %s\n",
			path == COLLC_STREAM_PATH_MEMOPS   ? "memops (stream memory operations)"
			: path == COLLC_STREAM_PATH_KERNEL ? "kernel (one gate kernel a collective)"
							   : collc_strerror(path));
	}
	cr.reqs = calloc((size_t)depth * REQS_PER_OP, sizeof(*cr.reqs));
	cr.recv = calloc((size_t)depth, sizeof(*cr.recv));
	r = cr.reqs && cr.recv
		    ? collc_mem_alloc(cr.ctx, cfg->max_send_elems * es, cr.device, &cr.send)
		    : -ENOMEM;
	for (cr.nrecv = 0; r == 0 && cr.nrecv < depth; cr.nrecv++)
		r = collc_mem_alloc(cr.ctx, cfg->max_recv_elems * es, cr.device,
				    &cr.recv[cr.nrecv]);
	if (r == 0)
		r = collc_mem_alloc(cr.ctx, 64, cr.device, &cr.bar_send);
	if (r == 0)
		r = collc_mem_alloc(cr.ctx, 64, cr.device, &cr.bar_recv);
	if (r < 0) {
		bench_setup_error(sr, rank, "rank",
				  "collc_mem_alloc (%s memory, %d receive slots of %llu bytes): %s",
				  cr.device < 0 ? "host" : "device", depth,
				  (unsigned long long)(cfg->max_recv_elems * es),
				  collc_strerror(r));
		goto out_free;
	}
	if (cr.device < 0) {
		memset(cr.bar_send, 0, 64);
	} else if (cr.rt.Memset(cr.bar_send, 0, 64)) {
		bench_setup_error(sr, rank, "rank",
				  "cudaMemset on memory from collc_mem_alloc failed");
		goto out_free;
	}
	cr.depth = depth;
	if (cfg->collc_mode != CMODE_HOST && stream_setup(&cr, msg, sizeof(msg)) < 0) {
		bench_setup_error(sr, rank, "rank", "%s", msg);
		goto out_stream;
	}
	status = bench_rank_loop(cfg, rank, &rn, sr);
out_stream:
	if (cfg->collc_mode != CMODE_HOST)
		stream_teardown(&cr);
out_free:
	for (int q = 0; q < cr.nrecv; q++)
		if (cr.recv[q])
			collc_mem_free(cr.ctx, cr.recv[q]);
	if (cr.send)
		collc_mem_free(cr.ctx, cr.send);
	if (cr.bar_send)
		collc_mem_free(cr.ctx, cr.bar_send);
	if (cr.bar_recv)
		collc_mem_free(cr.ctx, cr.bar_recv);
	free(cr.reqs);
	free(cr.recv);
	collc_comm_destroy(cr.comm);
out_disconnect:
	collc_disconnect(cr.ctx);
	return status;
}
