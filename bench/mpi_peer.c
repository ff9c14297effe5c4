/* SPDX-License-Identifier: MIT */
/*
 * The MPI side of collc-bench --vs-mpi, started by collc-bench through
 * mpirun. It measures what collc-bench measures for collc, the same way
 * (see runner.c), with MPI on host memory:
 *   end-to-end latency: MPI_Wtime around the blocking call, per iteration
 *     the max over ranks, p50 and p99 over iterations;
 *   pipelined: after one untimed window, `iters` nonblocking calls (MPI_I*)
 *     with `depth` outstanding, each into its own receive buffer, total /
 *     iters, max over ranks;
 *   the first and last iteration checked against the reference
 *   (tests/common/refcheck.h).
 * Rank 0 prints one COLLC-PEER line per size (format in vs_mpi.c).
 *
 *   collc-mpi-peer --coll C --dtype T --root R --iters K --warmup W --depth Q --sizes B1,B2,...
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "bench/sizes.h"

struct peer {
	int coll, dtype, root, iters, warmup, depth;
	int rank, nranks;
	MPI_Datatype type;
	void *send;
	void **recv;
};

static MPI_Datatype mpi_type(int dt)
{
	switch (dt) {
	case COLLC_INT8:
		return MPI_INT8_T;
	case COLLC_UINT8:
		return MPI_UINT8_T;
	case COLLC_INT32:
		return MPI_INT32_T;
	case COLLC_UINT32:
		return MPI_UINT32_T;
	case COLLC_INT64:
		return MPI_INT64_T;
	case COLLC_UINT64:
		return MPI_UINT64_T;
	case COLLC_FLOAT32:
		return MPI_FLOAT;
	case COLLC_FLOAT64:
		return MPI_DOUBLE;
	default:
		return MPI_DATATYPE_NULL; /* MPI has no standard float16, bfloat16 or fp8 */
	}
}

static int once(struct peer *p, const struct bench_size *sz, int slot)
{
	int c = (int)sz->count;
	void *recv = p->recv[slot];

	switch (p->coll) {
	case BENCH_ALLREDUCE:
		return MPI_Allreduce(p->send, recv, c, p->type, MPI_SUM, MPI_COMM_WORLD);
	case BENCH_ALLGATHER:
		return MPI_Allgather(p->send, c, p->type, recv, c, p->type, MPI_COMM_WORLD);
	case BENCH_REDUCE_SCATTER:
		return MPI_Reduce_scatter_block(p->send, recv, c, p->type, MPI_SUM, MPI_COMM_WORLD);
	case BENCH_BROADCAST:
		/* The root broadcasts from its send buffer; it receives nothing. */
		return MPI_Bcast(p->rank == p->root ? p->send : recv, c, p->type, p->root,
				 MPI_COMM_WORLD);
	case BENCH_ALLTOALL:
		return MPI_Alltoall(p->send, c, p->type, recv, c, p->type, MPI_COMM_WORLD);
	case BENCH_SENDRECV:
		return MPI_Sendrecv(p->send, c, p->type, (p->rank + 1) % p->nranks, 0, recv, c,
				    p->type, (p->rank + p->nranks - 1) % p->nranks, 0,
				    MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	default:
		return MPI_Reduce(p->send, recv, c, p->type, MPI_SUM, p->root, MPI_COMM_WORLD);
	}
}

/* Starts one iteration into req[0] (and req[1] for send/recv; else MPI_REQUEST_NULL). */
static int start(struct peer *p, const struct bench_size *sz, int slot, MPI_Request *req)
{
	int c = (int)sz->count;
	void *recv = p->recv[slot];

	req[1] = MPI_REQUEST_NULL;
	if (p->coll == BENCH_SENDRECV) {
		int r = MPI_Irecv(recv, c, p->type, (p->rank + p->nranks - 1) % p->nranks, 0,
				  MPI_COMM_WORLD, &req[1]);

		return r ? r
			 : MPI_Isend(p->send, c, p->type, (p->rank + 1) % p->nranks, 0,
				     MPI_COMM_WORLD, req);
	}

	switch (p->coll) {
	case BENCH_ALLREDUCE:
		return MPI_Iallreduce(p->send, recv, c, p->type, MPI_SUM, MPI_COMM_WORLD, req);
	case BENCH_ALLGATHER:
		return MPI_Iallgather(p->send, c, p->type, recv, c, p->type, MPI_COMM_WORLD, req);
	case BENCH_REDUCE_SCATTER:
		return MPI_Ireduce_scatter_block(p->send, recv, c, p->type, MPI_SUM, MPI_COMM_WORLD,
						 req);
	case BENCH_BROADCAST:
		return MPI_Ibcast(p->rank == p->root ? p->send : recv, c, p->type, p->root,
				  MPI_COMM_WORLD, req);
	case BENCH_ALLTOALL:
		return MPI_Ialltoall(p->send, c, p->type, recv, c, p->type, MPI_COMM_WORLD, req);
	default:
		return MPI_Ireduce(p->send, recv, c, p->type, MPI_SUM, p->root, MPI_COMM_WORLD,
				   req);
	}
}

/* The first mismatch the reference check reports (it prints nothing itself). */
static char first_wrong[256];

static void keep_first_wrong(int fail, const char *line)
{
	if (fail && !first_wrong[0])
		snprintf(first_wrong, sizeof(first_wrong), "%s", line);
}

/* Size s's data set `last`, as collc-bench's ranks use it (runner.c). */
static struct rc_case peer_case(const struct peer *p, const struct bench_size *sz, int s, int last)
{
	return (struct rc_case){ (collc_dtype)p->dtype, COLLC_SUM, sz->count, bench_seed(s, last),
				 0 };
}

static void fill(struct peer *p, const struct bench_size *sz, int s, int last)
{
	struct rc_case c = peer_case(p, sz, s, last);

	bench_fill(&c, p->coll, p->nranks, p->rank, p->send);
}

static int check(struct peer *p, const struct bench_size *sz, int s, int slot, int last, char *msg,
		 size_t len)
{
	struct rc_case c = peer_case(p, sz, s, last);
	char what[64];

	if (p->coll == BENCH_BROADCAST && p->rank == p->root)
		return 0;
	snprintf(what, sizeof(what), "rank %d, %s iteration", p->rank, last ? "last" : "first");
	first_wrong[0] = '\0';
	if (bench_check(&c, p->coll, p->nranks, p->rank, p->root, p->recv[slot], what) == 0)
		return 0;
	snprintf(msg, len, "%s", first_wrong);
	return -1;
}

/* n collectives with depth outstanding, the j-th into slot j % depth. */
static void window(struct peer *p, const struct bench_size *sz, int n, int depth, MPI_Request *reqs)
{
	for (int j = 0; j < n + depth; j++) {
		int q = j % depth;

		if (j >= depth)
			MPI_Waitall(2, &reqs[2 * q], MPI_STATUSES_IGNORE);
		if (j < n)
			start(p, sz, q, &reqs[2 * q]);
	}
}

static void run_size(struct peer *p, int s, const struct bench_size *sz, double *lat,
		     double *latmax, MPI_Request *reqs)
{
	size_t es = collc_dtype_bytes(p->dtype);
	size_t recv_bytes = sz->recv_elems * es;
	int depth = p->depth < p->iters ? p->depth : p->iters, wrong = 0, culprit = 0;
	double pipe, pipemax = 0, t0;
	char msg[256] = "";

	if (p->coll == BENCH_REDUCE && p->rank != p->root)
		recv_bytes = 0;

	fill(p, sz, s, 0);
	memset(p->recv[0], 0xff, recv_bytes);
	once(p, sz, 0);
	wrong |= check(p, sz, s, 0, 0, msg, sizeof(msg)) < 0;

	for (int i = 0; i < p->warmup; i++)
		once(p, sz, 0);
	for (int i = 0; i < p->iters; i++) {
		t0 = MPI_Wtime();
		once(p, sz, 0);
		lat[i] = MPI_Wtime() - t0;
	}

	fill(p, sz, s, 1);
	/* One untimed window first, as collc-bench's runner does (bench/runner.c step 3). */
	window(p, sz, depth, depth, reqs);
	for (int q = 0; q < depth; q++)
		memset(p->recv[q], 0xff, recv_bytes);
	MPI_Barrier(MPI_COMM_WORLD);
	t0 = MPI_Wtime();
	window(p, sz, p->iters, depth, reqs);
	pipe = MPI_Wtime() - t0;
	for (int q = 0; q < depth && !wrong; q++)
		wrong |= check(p, sz, s, q, 1, msg, sizeof(msg)) < 0;

	MPI_Reduce(lat, latmax, p->iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	MPI_Reduce(&pipe, &pipemax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	/* The lowest wrong rank tells rank 0 what it saw. */
	wrong = wrong ? p->rank + 1 : p->nranks + 1;
	MPI_Allreduce(&wrong, &culprit, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	if (culprit <= p->nranks && culprit - 1 != 0) {
		if (p->rank == culprit - 1)
			MPI_Send(msg, sizeof(msg), MPI_CHAR, 0, 0, MPI_COMM_WORLD);
		else if (p->rank == 0)
			MPI_Recv(msg, sizeof(msg), MPI_CHAR, culprit - 1, 0, MPI_COMM_WORLD,
				 MPI_STATUS_IGNORE);
	}
	if (p->rank != 0)
		return;
	if (culprit <= p->nranks) {
		printf("COLLC-PEER %d %llu wrong %s\n", s, (unsigned long long)sz->bytes, msg);
	} else {
		qsort(latmax, (size_t)p->iters, sizeof(double), bench_cmp_double);
		printf("COLLC-PEER %d %llu ok %.3f %.3f %.3f\n", s, (unsigned long long)sz->bytes,
		       bench_percentile(latmax, p->iters, 50) * 1e6,
		       bench_percentile(latmax, p->iters, 99) * 1e6, pipemax / p->iters * 1e6);
	}
	fflush(stdout);
}

static void usage(void)
{
	fprintf(stderr, "usage: collc-mpi-peer --coll C --dtype T [--root R] --iters K --warmup W "
			"--depth Q --sizes B1,B2,... (started by collc-bench --vs-mpi)\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "coll", required_argument, NULL, 'c' },
		{ "dtype", required_argument, NULL, 't' },
		{ "root", required_argument, NULL, 'r' },
		{ "iters", required_argument, NULL, 'i' },
		{ "warmup", required_argument, NULL, 'w' },
		{ "depth", required_argument, NULL, 'q' },
		{ "sizes", required_argument, NULL, 's' },
		{ 0 },
	};
	struct peer p = { .coll = -1, .dtype = COLLC_FLOAT32, .iters = 20, .warmup = 5, .depth = 4 };
	struct bench_size sizes[64];
	uint64_t bytes[64], max_send = 0, max_recv = 0;
	int nsizes = 0, c, depth;
	double *lat, *latmax;
	MPI_Request *reqs;
	char ver[MPI_MAX_LIBRARY_VERSION_STRING];

	MPI_Init(&argc, &argv);
	rc_set_report(keep_first_wrong);
	MPI_Comm_rank(MPI_COMM_WORLD, &p.rank);
	MPI_Comm_size(MPI_COMM_WORLD, &p.nranks);
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		char *tok, *save = NULL;
		int ok;

		switch (c) {
		case 'c':
			p.coll = rc_name_index(bench_coll_names, BENCH_NUM_COLLS, optarg);
			break;
		case 't':
			p.dtype = rc_name_index(bench_dtype_names, COLLC_NUM_DTYPES, optarg);
			break;
		case 'r':
			p.root = atoi(optarg);
			break;
		case 'i':
			p.iters = atoi(optarg);
			break;
		case 'w':
			p.warmup = atoi(optarg);
			break;
		case 'q':
			p.depth = atoi(optarg);
			break;
		case 's':
			for (tok = strtok_r(optarg, ",", &save); tok && nsizes < 64;
			     tok = strtok_r(NULL, ",", &save)) {
				bytes[nsizes] = bench_parse_bytes(tok, &ok);
				if (!ok)
					goto bad;
				nsizes++;
			}
			break;
		default:
			goto bad;
		}
	}
	if (p.coll < 0 || p.dtype < 0 || p.iters < 1 || p.warmup < 0 || p.depth < 1 || !nsizes ||
	    p.root < 0 || p.root >= p.nranks)
		goto bad;
	p.type = mpi_type(p.dtype);
	if (p.rank == 0) {
		int len;

		MPI_Get_library_version(ver, &len);
		ver[strcspn(ver, "\n")] = 0;
		printf("COLLC-PEER-INFO %s, %d ranks\n", ver, p.nranks);
	}
	for (int s = 0; s < nsizes; s++) {
		if (bench_size_of(p.coll, p.dtype, p.nranks, bytes[s], &sizes[s]) < 0 ||
		    sizes[s].bytes != bytes[s] || sizes[s].count > 0x7fffffff)
			goto bad;
		if (sizes[s].send_elems > max_send)
			max_send = sizes[s].send_elems;
		if (sizes[s].recv_elems > max_recv)
			max_recv = sizes[s].recv_elems;
	}
	if (p.type == MPI_DATATYPE_NULL) {
		for (int s = 0; s < nsizes && p.rank == 0; s++)
			printf("COLLC-PEER %d %llu error MPI has no %s type\n", s,
			       (unsigned long long)bytes[s], bench_dtype_names[p.dtype]);
		MPI_Finalize();
		return 0;
	}
	depth = p.depth < p.iters ? p.depth : p.iters;
	p.send = malloc(max_send * collc_dtype_bytes(p.dtype));
	p.recv = calloc((size_t)depth, sizeof(*p.recv));
	lat = malloc((size_t)p.iters * sizeof(double));
	latmax = malloc((size_t)p.iters * sizeof(double));
	reqs = calloc(2 * (size_t)depth, sizeof(*reqs)); /* two per iteration for send/recv */
	if (!p.send || !p.recv || !lat || !latmax || !reqs) {
		fprintf(stderr, "collc-mpi-peer: out of memory\n");
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	for (int q = 0; q < depth; q++) {
		p.recv[q] = malloc(max_recv * collc_dtype_bytes(p.dtype));
		if (!p.recv[q]) {
			fprintf(stderr, "collc-mpi-peer: out of memory\n");
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
	}
	for (int s = 0; s < nsizes; s++)
		run_size(&p, s, &sizes[s], lat, latmax, reqs);
	MPI_Finalize();
	return 0;
bad:
	if (p.rank == 0)
		usage();
	MPI_Finalize();
	return 2;
}
