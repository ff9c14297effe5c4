/* SPDX-License-Identifier: MIT */
/*
 * One collc rank: connect, join the communicator, allocate buffers with
 * collc_mem_alloc (host memory on the CPU backend, device memory of GPU
 * `rank` on the CUDA backend, filled and read back with cudaMemcpy), then run
 * the measurement loop.
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
	snprintf(rn->err, sizeof(rn->err), "%s: %s", what, cudart_strerror(&cr->rt, e));
	return -EIO;
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

static const struct runner_ops collc_ops = {
	.once = op_once,
	.batch = op_batch,
	.barrier = op_barrier,
	.upload = op_upload,
	.download = op_download,
	.poison = op_poison,
};

int collc_rank_main(const struct bench_cfg *cfg, const void *uid, int rank,
		    struct shared_results *sr)
{
	struct collc_rank cr = { .cfg = cfg,
				 .device = !cfg->cuda   ? -1
					   : cfg->ngpus ? cfg->gpu[rank]
							: rank };
	struct runner rn = { .ops = &collc_ops, .st = &cr };
	size_t es = collc_dtype_bytes(cfg->dtype);
	int depth = cfg->depth < cfg->iters ? cfg->depth : cfg->iters;
	int r, status = 1;
	char msg[256];

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
	status = bench_rank_loop(cfg, rank, &rn, sr);
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
