/* SPDX-License-Identifier: MIT */
/*
 * One NCCL rank (--vs-nccl): GPU `rank`, ncclCommInitRank with the id that
 * rank 0 publishes in shared memory, one non-blocking stream. End-to-end
 * latency is the call to cudaStreamSynchronize returning; pipelined time is
 * `iters` back-to-back launches timed with two events (nccl-tests' way: the
 * stream is the queue, so --depth only picks how many receive buffers the
 * launches rotate through). The mode (cfg->nccl_mode) picks the buffers,
 * cudaMalloc'd or ncclMemAlloc'd and registered as symmetric windows, and
 * the launches, direct or replayed from CUDA graphs: one graph of one
 * collective for latency, one of `depth` collectives (the j-th into slot j)
 * replayed iters / depth times for pipelined time. A mode the loaded
 * libraries lack is skipped (RES_SKIPPED on every size), not failed.
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
#include "bench/graphs.h"

struct nccl_rank {
	const struct bench_cfg *cfg;
	struct cudart rt;
	struct nccl nc;
	nccl_comm_t comm;
	struct bench_stream bs; /* the stream, its events and graph mode's graphs */
	int dtype;
	int rank;
	int win, graph; /* the mode: symmetric windows, CUDA graphs */
	int depth;      /* receive slots */
	void *send;
	void **recv;
	int nrecv;
	nccl_window_t *wins; /* win: the send buffer's, then each receive slot's */
	int nwin;
	void *bar;
};

static int cuda_fail(struct runner *rn, cuda_err_t e, const char *what)
{
	struct nccl_rank *nr = rn->st;

	return bench_cuda_fail(rn, &nr->rt, e, what);
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
				nr->bs.stream);
		if (r == 0)
			r = nr->nc.Recv((char *)recv + soff, sz->count, nr->dtype, from, nr->comm,
					nr->bs.stream);
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
					nr->bs.stream);
	case BENCH_ALLGATHER:
		return nr->nc.AllGather(nr->send, recv, sz->count, nr->dtype, nr->comm,
					nr->bs.stream);
	case BENCH_REDUCE_SCATTER:
		return nr->nc.ReduceScatter(nr->send, recv, sz->count, nr->dtype, NCCL_SUM,
					    nr->comm, nr->bs.stream);
	case BENCH_BROADCAST:
		return nr->nc.Broadcast(nr->send, recv, sz->count, nr->dtype, cfg->root, nr->comm,
					nr->bs.stream);
	case BENCH_ALLTOALL:
		if (nr->nc.AlltoAll)
			return nr->nc.AlltoAll(nr->send, recv, sz->count, nr->dtype, nr->comm,
					       nr->bs.stream);
		/* FALLTHROUGH */
	case BENCH_SENDRECV:
		return p2p(nr, sz, recv);
	default:
		return nr->nc.Reduce(nr->send, recv, sz->count, nr->dtype, NCCL_SUM, cfg->root,
				     nr->comm, nr->bs.stream);
	}
}

/*
 * Poisons a receive slot. cudaMemset runs on the legacy default stream, which
 * does not order the non-blocking stream: wait for it before the next launch.
 */
static int poison(struct runner *rn, int slot, size_t bytes)
{
	struct nccl_rank *nr = rn->st;
	cuda_err_t e = nr->rt.Memset(nr->recv[slot], 0xff, bytes);

	if (e == 0)
		e = nr->rt.DeviceSynchronize();
	return e ? cuda_fail(rn, e, "cudaMemset") : 0;
}

/* One launch, as graphs.h enqueues it: direct, or recorded while the stream captures. */
static int enqueue(struct runner *rn, const struct bench_size *sz, int slot)
{
	nccl_result_t r = launch(rn->st, sz, slot);

	return r ? nccl_fail(rn, r, "launch") : 0;
}

static int enqueue_captured(struct runner *rn, const struct bench_size *sz, int slot)
{
	nccl_result_t r = launch(rn->st, sz, slot);

	return r ? nccl_fail(rn, r, "launch while capturing a CUDA graph") : 0;
}

/*
 * The graphs of size sz, captured at its first collective. One direct
 * collective first sets up what NCCL sets up lazily (nccl-tests warms up
 * before capturing too); it writes slot 0, which is poisoned again so that
 * the check that follows sees the graph's result.
 */
static int graphs_for(struct runner *rn, const struct bench_size *sz)
{
	struct nccl_rank *nr = rn->st;
	size_t bytes = sz->recv_elems * collc_dtype_bytes(nr->cfg->dtype);
	nccl_result_t r;
	cuda_err_t e;
	int rc;

	if (nr->bs.gsz == sz)
		return 0;
	bench_graphs_drop(&nr->bs);
	r = launch(nr, sz, 0);
	if (r)
		return nccl_fail(rn, r, "launch before capturing");
	e = nr->rt.StreamSynchronize(nr->bs.stream);
	if (e)
		return cuda_fail(rn, e, "cudaStreamSynchronize");
	rc = poison(rn, 0, bytes);
	return rc < 0 ? rc : bench_graphs_capture(rn, &nr->bs, enqueue_captured, sz, nr->depth);
}

static int op_once(struct runner *rn, const struct bench_size *sz, int slot)
{
	struct nccl_rank *nr = rn->st;
	cuda_err_t e;
	int rc;

	rc = nr->graph ? bench_graphs_once(rn, &nr->bs, graphs_for, sz, slot)
		       : enqueue(rn, sz, slot);
	if (rc < 0)
		return rc;
	e = nr->rt.StreamSynchronize(nr->bs.stream);
	return e ? cuda_fail(rn, e, "cudaStreamSynchronize") : 0;
}

/*
 * Graph mode replays the graph of `depth` collectives n / depth times; the
 * time returned is scaled to n collectives (n is a multiple of depth unless
 * --iters is not).
 */
static int op_batch(struct runner *rn, const struct bench_size *sz, int n, int depth, double *ret_s)
{
	struct nccl_rank *nr = rn->st;
	int reps = n / depth, done = n, rc;
	float ms = 0;

	if (nr->graph) {
		rc = bench_graphs_fit(rn, graphs_for, sz, n, depth, nr->depth);
		if (rc < 0)
			return rc;
		done = reps * depth;
	}
	rc = bench_stream_time(rn, &nr->bs, enqueue, nr->graph, sz, n, depth, &ms);
	if (rc < 0)
		return rc;
	*ret_s = ms * 1e-3 * n / done;
	return 0;
}

static int op_barrier(struct runner *rn)
{
	struct nccl_rank *nr = rn->st;
	nccl_result_t r = nr->nc.AllReduce(nr->bar, (char *)nr->bar + 32, 1, 7 /* ncclFloat32 */,
					   NCCL_SUM, nr->comm, nr->bs.stream);
	cuda_err_t e;

	if (r)
		return nccl_fail(rn, r, "barrier allreduce");
	e = nr->rt.StreamSynchronize(nr->bs.stream);
	return e ? cuda_fail(rn, e, "cudaStreamSynchronize") : 0;
}

static int op_upload(struct runner *rn, const void *host, size_t bytes)
{
	struct nccl_rank *nr = rn->st;
	cuda_err_t e = nr->rt.Memcpy(nr->send, host, bytes, CUDA_H2D);

	if (e)
		return cuda_fail(rn, e, "cudaMemcpy to the send buffer");
	/* A pageable copy may return before its DMA ends; our stream is non-blocking. */
	e = nr->rt.DeviceSynchronize();
	return e ? cuda_fail(rn, e, "cudaDeviceSynchronize after the upload") : 0;
}

static int op_download(struct runner *rn, int slot, void *host, size_t bytes)
{
	struct nccl_rank *nr = rn->st;
	cuda_err_t e = nr->rt.Memcpy(host, nr->recv[slot], bytes, CUDA_D2H);

	return e ? cuda_fail(rn, e, "cudaMemcpy from a receive buffer") : 0;
}

static int op_poison(struct runner *rn, int slot, size_t bytes)
{
	return poison(rn, slot, bytes);
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

/* Why this mode cannot run with the libraries loaded, in buf; NULL when it can. */
static const char *mode_missing(const struct nccl_rank *nr, int ver, char *buf, size_t len)
{
	if (nr->win && nr->nc.win_missing)
		snprintf(buf, len,
			 "NCCL %d.%d.%d lacks %s (symmetric windows need NCCL >= 2.27): mode %s "
			 "skipped",
			 ver / 10000, ver / 100 % 100, ver % 100, nr->nc.win_missing,
			 nccl_mode_names[nr->cfg->nccl_mode]);
	else if (nr->graph && nr->rt.graph_missing)
		snprintf(buf, len, "%s lacks %s (CUDA graphs): mode %s skipped", nr->rt.libname,
			 nr->rt.graph_missing, nccl_mode_names[nr->cfg->nccl_mode]);
	else
		return NULL;
	return buf;
}

/* Every size of this rank: skipped, with why. */
static void mark_skipped(const struct bench_cfg *cfg, int rank, struct shared_results *sr,
			 const char *why)
{
	for (int s = 0; s < cfg->nsizes; s++) {
		struct rank_result *res = &sr->res[s * cfg->nranks + rank];

		res->status = RES_SKIPPED;
		snprintf(res->msg, sizeof(res->msg), "%s", why);
	}
}

/* One buffer of the mode: cudaMalloc'd, or ncclMemAlloc'd and registered as a symmetric window. */
static int buffer_new(struct nccl_rank *nr, size_t bytes, void **ret, char *msg, size_t len)
{
	nccl_result_t r;
	cuda_err_t e;

	if (!nr->win) {
		e = nr->rt.Malloc(ret, bytes);
		if (e)
			snprintf(msg, len, "cudaMalloc(%zu): %s", bytes,
				 cudart_strerror(&nr->rt, e));
		return e ? -1 : 0;
	}
	r = nr->nc.MemAlloc(ret, bytes);
	if (r) {
		snprintf(msg, len, "ncclMemAlloc(%zu): %s", bytes, nr->nc.GetErrorString(r));
		return -1;
	}
	/* Collective: every rank registers the same sizes in the same order. */
	r = nr->nc.CommWindowRegister(nr->comm, *ret, bytes, &nr->wins[nr->nwin],
				      NCCL_WIN_COLL_SYMMETRIC);
	if (r) {
		snprintf(msg, len, "ncclCommWindowRegister(%zu bytes, NCCL_WIN_COLL_SYMMETRIC): %s",
			 bytes, nr->nc.GetErrorString(r));
		return -1;
	}
	nr->nwin++;
	return 0;
}

static int setup_buffers(struct nccl_rank *nr, char *msg, size_t len)
{
	const struct bench_cfg *cfg = nr->cfg;
	size_t es = collc_dtype_bytes(cfg->dtype);
	cuda_err_t e;

	nr->recv = calloc((size_t)nr->depth, sizeof(*nr->recv));
	nr->wins = calloc((size_t)nr->depth + 1, sizeof(*nr->wins));
	if (!nr->recv || !nr->wins) {
		snprintf(msg, len, "out of memory");
		return -1;
	}
	e = bench_stream_create(&nr->bs);
	if (e == 0)
		e = nr->rt.Malloc(&nr->bar, 64);
	if (e == 0)
		e = nr->rt.Memset(nr->bar, 0, 64);
	if (e == 0)
		e = nr->rt.DeviceSynchronize();
	if (e) {
		snprintf(msg, len, "stream, events and barrier buffer: %s",
			 cudart_strerror(&nr->rt, e));
		return -1;
	}
	if (buffer_new(nr, cfg->max_send_elems * es, &nr->send, msg, len) < 0)
		return -1;
	for (nr->nrecv = 0; nr->nrecv < nr->depth; nr->nrecv++)
		if (buffer_new(nr, cfg->max_recv_elems * es, &nr->recv[nr->nrecv], msg, len) < 0)
			return -1;
	return 0;
}

int nccl_rank_main(const struct bench_cfg *cfg, int rank, struct shared_results *sr)
{
	struct nccl_rank nr = { .cfg = cfg,
				.bs = { .rt = &nr.rt, .capture_mode = CUDA_CAPTURE_GLOBAL } };
	struct runner rn = { .ops = &nccl_ops, .st = &nr };
	const char *mode = nccl_mode_names[cfg->nccl_mode];
	struct nccl_unique_id id;
	int status = 1, ver = 0;
	nccl_result_t r;
	cuda_err_t e;
	char msg[300];

	nr.depth = cfg->depth < cfg->iters ? cfg->depth : cfg->iters;
	nr.win = nccl_mode_win(cfg->nccl_mode);
	nr.graph = nccl_mode_graph(cfg->nccl_mode);
	if (cudart_load(&nr.rt, msg, sizeof(msg)) < 0 || nccl_load(&nr.nc, msg, sizeof(msg)) < 0) {
		bench_setup_error(sr, rank, "NCCL rank", "%s", msg);
		if (rank == 0)
			__atomic_store_n(&sr->id_ready, -1, __ATOMIC_RELEASE);
		return 1;
	}
	nr.nc.GetVersion(&ver);
	/* Every rank loads the same libraries and skips alike: nobody waits for the id. */
	if (mode_missing(&nr, ver, msg, sizeof(msg))) {
		mark_skipped(cfg, rank, sr, msg);
		if (rank == 0)
			fprintf(stderr, "collc-bench: %s\n", msg);
		return 0;
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
	if (rank == 0)
		fprintf(stderr, "collc-bench: NCCL %d.%d.%d (%s), mode %s\n", ver / 10000,
			ver / 100 % 100, ver % 100, nr.rt.libname, mode);
	r = nr.nc.CommInitRank(&nr.comm, cfg->nranks, id, rank);
	if (r) {
		bench_setup_error(sr, rank, "NCCL rank", "ncclCommInitRank: %s",
				  nr.nc.GetErrorString(r));
		return 1;
	}
	if (setup_buffers(&nr, msg, sizeof(msg)) < 0) {
		bench_setup_error(
			sr, rank, "NCCL rank", "mode %s, %d receive slots of %llu bytes: %s", mode,
			nr.depth,
			(unsigned long long)(cfg->max_recv_elems * collc_dtype_bytes(cfg->dtype)),
			msg);
		goto out;
	}
	if (nr.win && rank == 0)
		for (int w = 0; w < nr.nwin; w++)
			if (!nr.wins[w]) {
				/* NCCL's answer where it has no symmetric memory: no window, no error. */
				fprintf(stderr,
					"collc-bench: mode %s: NCCL registered no window (no symmetric "
					"memory here): its collectives run as in mode plain\n",
					mode);
				break;
			}
	status = bench_rank_loop(cfg, rank, &rn, sr);
out:
	/* Frees are skipped on purpose: the process exits and the context goes with it. */
	if (status == 0) {
		bench_graphs_drop(&nr.bs);
		/* Collective, like the registration. */
		for (int w = nr.nwin - 1; w >= 0; w--)
			if (nr.wins[w])
				nr.nc.CommWindowDeregister(nr.comm, nr.wins[w]);
		nr.nc.CommDestroy(nr.comm);
	}
	free(nr.recv);
	free(nr.wins);
	return status;
}
