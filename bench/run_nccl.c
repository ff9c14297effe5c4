/* SPDX-License-Identifier: MIT */
/*
 * One NCCL rank (--vs-nccl): GPU `rank`, ncclCommInitRank with the id that
 * rank 0 publishes in shared memory, cudaMalloc'd buffers, one non-blocking
 * stream. End-to-end latency is the call to cudaStreamSynchronize returning;
 * pipelined time is `iters` back-to-back launches timed with two events
 * (nccl-tests' way: the stream is the queue, so --depth only picks how many
 * receive buffers the launches rotate through).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/runner.h"
#include "bench/cudart.h"

struct nccl_rank {
	const struct bench_cfg *cfg;
	struct cudart rt;
	struct nccl nc;
	nccl_comm_t comm;
	cuda_stream_t stream;
	cuda_event_t ev0, ev1;
	int dtype;
	int rank;
	void *send;
	void **recv;
	int nrecv;
	void *bar;
};

static int cuda_fail(struct runner *rn, cuda_err_t e, const char *what)
{
	struct nccl_rank *nr = rn->st;

	snprintf(rn->err, sizeof(rn->err), "%s: %s", what, cudart_strerror(&nr->rt, e));
	return -EIO;
}

static int nccl_fail(struct runner *rn, nccl_result_t r, const char *what)
{
	struct nccl_rank *nr = rn->st;

	snprintf(rn->err, sizeof(rn->err), "%s: %s", what, nr->nc.GetErrorString(r));
	return -EIO;
}

/* All-to-all as grouped sends and receives (block p to and from rank p); else right and left. */
static nccl_result_t p2p(struct nccl_rank *nr, const struct bench_size *sz, void *recv)
{
	const int n = nr->cfg->nranks, me = nr->rank, a2a = nr->cfg->coll == BENCH_ALLTOALL;
	const size_t bytes = sz->count * collc_dtype_bytes(nr->cfg->dtype);
	nccl_result_t r = nr->nc.GroupStart(), r2;

	for (int p = 0; r == 0 && p < (a2a ? n : 1); p++) {
		int to = a2a ? p : (me + 1) % n, from = a2a ? p : (me + n - 1) % n;
		size_t soff = a2a ? (size_t)p * bytes : 0;

		r = nr->nc.Send((const char *)nr->send + soff, sz->count, nr->dtype, to, nr->comm,
				nr->stream);
		if (r == 0)
			r = nr->nc.Recv((char *)recv + soff, sz->count, nr->dtype, from, nr->comm,
					nr->stream);
	}
	r2 = nr->nc.GroupEnd();
	return r ? r : r2;
}

static nccl_result_t launch(struct nccl_rank *nr, const struct bench_size *sz, int slot)
{
	const struct bench_cfg *cfg = nr->cfg;
	void *recv = nr->recv[slot];

	switch (cfg->coll) {
	case BENCH_ALLREDUCE:
		return nr->nc.AllReduce(nr->send, recv, sz->count, nr->dtype, NCCL_SUM, nr->comm,
					nr->stream);
	case BENCH_ALLGATHER:
		return nr->nc.AllGather(nr->send, recv, sz->count, nr->dtype, nr->comm, nr->stream);
	case BENCH_REDUCE_SCATTER:
		return nr->nc.ReduceScatter(nr->send, recv, sz->count, nr->dtype, NCCL_SUM,
					    nr->comm, nr->stream);
	case BENCH_BROADCAST:
		return nr->nc.Broadcast(nr->send, recv, sz->count, nr->dtype, cfg->root, nr->comm,
					nr->stream);
	case BENCH_ALLTOALL:
		if (nr->nc.AlltoAll)
			return nr->nc.AlltoAll(nr->send, recv, sz->count, nr->dtype, nr->comm,
					       nr->stream);
		/* FALLTHROUGH */
	case BENCH_SENDRECV:
		return p2p(nr, sz, recv);
	default:
		return nr->nc.Reduce(nr->send, recv, sz->count, nr->dtype, NCCL_SUM, cfg->root,
				     nr->comm, nr->stream);
	}
}

static int op_once(struct runner *rn, const struct bench_size *sz, int slot)
{
	struct nccl_rank *nr = rn->st;
	nccl_result_t r = launch(nr, sz, slot);
	cuda_err_t e;

	if (r)
		return nccl_fail(rn, r, "launch");
	e = nr->rt.StreamSynchronize(nr->stream);
	return e ? cuda_fail(rn, e, "cudaStreamSynchronize") : 0;
}

static int op_batch(struct runner *rn, const struct bench_size *sz, int n, int depth, double *ret_s)
{
	struct nccl_rank *nr = rn->st;
	cuda_err_t e = nr->rt.EventRecord(nr->ev0, nr->stream);
	float ms = 0;

	if (e)
		return cuda_fail(rn, e, "cudaEventRecord");
	for (int j = 0; j < n; j++) {
		nccl_result_t r = launch(nr, sz, j % depth);

		if (r)
			return nccl_fail(rn, r, "launch");
	}
	e = nr->rt.EventRecord(nr->ev1, nr->stream);
	if (e == 0)
		e = nr->rt.EventSynchronize(nr->ev1);
	if (e == 0)
		e = nr->rt.EventElapsedTime(&ms, nr->ev0, nr->ev1);
	if (e)
		return cuda_fail(rn, e, "timing events");
	*ret_s = ms * 1e-3;
	return 0;
}

static int op_barrier(struct runner *rn)
{
	struct nccl_rank *nr = rn->st;
	nccl_result_t r = nr->nc.AllReduce(nr->bar, (char *)nr->bar + 32, 1, 7 /* ncclFloat32 */,
					   NCCL_SUM, nr->comm, nr->stream);
	cuda_err_t e;

	if (r)
		return nccl_fail(rn, r, "barrier allreduce");
	e = nr->rt.StreamSynchronize(nr->stream);
	return e ? cuda_fail(rn, e, "cudaStreamSynchronize") : 0;
}

static int op_upload(struct runner *rn, const void *host, size_t bytes)
{
	struct nccl_rank *nr = rn->st;
	cuda_err_t e = nr->rt.Memcpy(nr->send, host, bytes, CUDA_H2D);

	return e ? cuda_fail(rn, e, "cudaMemcpy to the send buffer") : 0;
}

static int op_download(struct runner *rn, int slot, void *host, size_t bytes)
{
	struct nccl_rank *nr = rn->st;
	cuda_err_t e = nr->rt.Memcpy(host, nr->recv[slot], bytes, CUDA_D2H);

	return e ? cuda_fail(rn, e, "cudaMemcpy from a receive buffer") : 0;
}

static int op_poison(struct runner *rn, int slot, size_t bytes)
{
	struct nccl_rank *nr = rn->st;
	cuda_err_t e = nr->rt.Memset(nr->recv[slot], 0xff, bytes);

	return e ? cuda_fail(rn, e, "cudaMemset") : 0;
}

static const struct runner_ops nccl_ops = {
	.once = op_once,
	.batch = op_batch,
	.barrier = op_barrier,
	.upload = op_upload,
	.download = op_download,
	.poison = op_poison,
};

/* Rank 0 makes the id; the others wait for it (up to 60 s). */
static int exchange_id(struct nccl_rank *nr, int rank, struct shared_results *sr,
		       struct nccl_unique_id *id)
{
	if (rank == 0) {
		nccl_result_t r = nr->nc.GetUniqueId(id);

		if (r) {
			__atomic_store_n(&sr->id_ready, -1, __ATOMIC_RELEASE);
			bench_setup_error(sr, rank, "NCCL rank", "ncclGetUniqueId: %s",
					  nr->nc.GetErrorString(r));
			return -1;
		}
		memcpy(sr->id, id, sizeof(*id));
		/* Release: the id is visible before the flag. */
		__atomic_store_n(&sr->id_ready, 1, __ATOMIC_RELEASE);
		return 0;
	}
	for (int i = 0; i < 60000; i++) {
		int v = __atomic_load_n(&sr->id_ready, __ATOMIC_ACQUIRE);

		if (v == 1) {
			memcpy(id, sr->id, sizeof(*id));
			return 0;
		}
		if (v < 0)
			break;
		usleep(1000);
	}
	bench_setup_error(sr, rank, "NCCL rank", "no NCCL unique id from rank 0");
	return -1;
}

int nccl_rank_main(const struct bench_cfg *cfg, int rank, struct shared_results *sr)
{
	struct nccl_rank nr = { .cfg = cfg };
	struct runner rn = { .ops = &nccl_ops, .st = &nr };
	size_t es = collc_dtype_bytes(cfg->dtype);
	int depth = cfg->depth < cfg->iters ? cfg->depth : cfg->iters;
	struct nccl_unique_id id;
	int status = 1, ver = 0;
	nccl_result_t r;
	cuda_err_t e;
	char msg[256];

	if (cudart_load(&nr.rt, msg, sizeof(msg)) < 0 || nccl_load(&nr.nc, msg, sizeof(msg)) < 0) {
		bench_setup_error(sr, rank, "NCCL rank", "%s", msg);
		if (rank == 0)
			__atomic_store_n(&sr->id_ready, -1, __ATOMIC_RELEASE);
		return 1;
	}
	nr.dtype = nccl_dtype(cfg->dtype);
	nr.rank = rank;
	e = nr.rt.SetDevice(rank);
	if (e) {
		bench_setup_error(sr, rank, "NCCL rank", "cudaSetDevice(%d): %s", rank,
				  cudart_strerror(&nr.rt, e));
		if (rank == 0)
			__atomic_store_n(&sr->id_ready, -1, __ATOMIC_RELEASE);
		return 1;
	}
	if (exchange_id(&nr, rank, sr, &id) < 0)
		return 1;
	nr.nc.GetVersion(&ver);
	if (rank == 0)
		fprintf(stderr, "collc-bench: NCCL %d.%d.%d (%s)\n", ver / 10000, ver / 100 % 100,
			ver % 100, nr.rt.libname);
	r = nr.nc.CommInitRank(&nr.comm, cfg->nranks, id, rank);
	if (r) {
		bench_setup_error(sr, rank, "NCCL rank", "ncclCommInitRank: %s",
				  nr.nc.GetErrorString(r));
		return 1;
	}
	nr.recv = calloc((size_t)depth, sizeof(*nr.recv));
	e = nr.recv ? nr.rt.StreamCreateWithFlags(&nr.stream, CUDA_STREAM_NON_BLOCKING) : 2;
	if (e == 0)
		e = nr.rt.EventCreate(&nr.ev0);
	if (e == 0)
		e = nr.rt.EventCreate(&nr.ev1);
	if (e == 0)
		e = nr.rt.Malloc(&nr.send, cfg->max_send_elems * es);
	for (nr.nrecv = 0; e == 0 && nr.nrecv < depth; nr.nrecv++)
		e = nr.rt.Malloc(&nr.recv[nr.nrecv], cfg->max_recv_elems * es);
	if (e == 0)
		e = nr.rt.Malloc(&nr.bar, 64);
	if (e == 0)
		e = nr.rt.Memset(nr.bar, 0, 64);
	if (e) {
		bench_setup_error(sr, rank, "NCCL rank",
				  "setting up buffers (%d receive slots of %llu bytes): %s", depth,
				  (unsigned long long)(cfg->max_recv_elems * es),
				  cudart_strerror(&nr.rt, e));
		goto out;
	}
	status = bench_rank_loop(cfg, rank, &rn, sr);
out:
	/* Frees are skipped on purpose: the process exits and the context goes with it. */
	if (status == 0)
		nr.nc.CommDestroy(nr.comm);
	free(nr.recv);
	return status;
}
