/* SPDX-License-Identifier: MIT */
/*
 * A multi-process all-reduce: the parent makes a unique id, forks one process
 * per rank; every rank fills its buffer with random floats, all-reduces them
 * (sum) through collcd and checks the result against a double-precision sum.
 *
 *   allreduce [--socket PATH[,PATH...]] [--nranks N] [--count N] [--iters N]
 *
 * Several sockets: rank r uses the r % n-th collcd, the id comes from the
 * first, so with daemons started with --listen the communicator spans them
 * (as ranks on several nodes would, each on its own node's collcd).
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <collc.h>

static float value(unsigned rank, size_t i, unsigned iter)
{
	/* Deterministic pseudo-random values every rank can recompute. */
	uint64_t x = (uint64_t)rank * 0x9e3779b97f4a7c15ull ^ (i + 1) * 0xbf58476d1ce4e5b9ull ^
		     iter;

	x ^= x >> 31;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 29;
	return (float)((double)(x >> 11) / (double)(1ull << 53)) * 2.0f - 1.0f;
}

static int run_rank(const char *sock, const struct collc_unique_id *id, int nranks, int rank,
		    size_t count, int iters)
{
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	float *send, *recv;
	double worst = 0;
	int r;

	r = collc_connect(sock, &ctx);
	if (r < 0) {
		fprintf(stderr, "rank %d: connect: %s\n", rank, collc_strerror(r));
		return 1;
	}
	r = collc_comm_init(ctx, id, nranks, rank, -1, &comm);
	if (r < 0) {
		fprintf(stderr, "rank %d: comm_init: %s\n", rank, collc_strerror(r));
		return 1;
	}
	if (collc_mem_alloc(ctx, count * sizeof(float), -1, (void **)&send) < 0 ||
	    collc_mem_alloc(ctx, count * sizeof(float), -1, (void **)&recv) < 0) {
		fprintf(stderr, "rank %d: mem_alloc failed\n", rank);
		return 1;
	}
	for (int it = 0; it < iters; it++) {
		collc_req req;

		for (size_t i = 0; i < count; i++)
			send[i] = value((unsigned)rank, i, (unsigned)it);
		r = collc_allreduce(comm, send, recv, count, COLLC_FLOAT32, COLLC_SUM, &req);
		if (r == 0)
			r = collc_wait(ctx, req, -1);
		if (r < 0) {
			fprintf(stderr, "rank %d: allreduce: %s\n", rank, collc_strerror(r));
			return 1;
		}
		for (size_t i = 0; i < count; i++) {
			double ref = 0, err;

			for (int k = 0; k < nranks; k++)
				ref += value((unsigned)k, i, (unsigned)it);
			err = fabs(recv[i] - ref);
			if (err > worst)
				worst = err;
			if (err > 1e-5 * nranks) {
				fprintf(stderr, "rank %d: element %zu: got %g, want %g\n", rank, i,
					recv[i], ref);
				return 1;
			}
		}
	}
	printf("rank %d/%d: %d all-reduces of %zu floats correct (max error %.2g)\n", rank, nranks,
	       iters, count, worst);
	fflush(stdout); /* the rank ends with _exit() */
	collc_mem_free(ctx, send);
	collc_mem_free(ctx, recv);
	collc_comm_destroy(comm);
	collc_disconnect(ctx);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "nranks", required_argument, NULL, 'n' },
		{ "count", required_argument, NULL, 'c' },
		{ "iters", required_argument, NULL, 'i' },
		{ 0 },
	};
	const char *sock = NULL, *socks[16];
	char *list = NULL;
	int nranks = 4, iters = 10, c, failed = 0, nsocks = 1;
	size_t count = 1 << 20;
	struct collc_unique_id id;
	struct collc_ctx *ctx;
	int r;

	while ((c = getopt_long(argc, argv, "s:n:c:i:", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			list = optarg;
			break;
		case 'n':
			nranks = atoi(optarg);
			break;
		case 'c':
			count = strtoull(optarg, NULL, 0);
			break;
		case 'i':
			iters = atoi(optarg);
			break;
		default:
			fprintf(stderr,
				"usage: allreduce [--socket PATH[,PATH...]] [--nranks N] [--count N] "
				"[--iters N]\n");
			return 2;
		}
	}
	socks[0] = NULL; /* $COLLC_SOCKET or the default */
	if (list) {
		nsocks = 0;
		for (char *save = NULL, *p = strtok_r(list, ",", &save); p && nsocks < 16;
		     p = strtok_r(NULL, ",", &save))
			socks[nsocks++] = p;
		if (!nsocks) {
			fprintf(stderr, "allreduce: --socket names no path\n");
			return 2;
		}
	}
	sock = socks[0];
	r = collc_connect(sock, &ctx);
	if (r == 0)
		r = collc_get_unique_id(ctx, &id);
	if (r < 0) {
		fprintf(stderr, "allreduce: %s\n", collc_strerror(r));
		return 1;
	}
	collc_disconnect(ctx);
	for (int rank = 0; rank < nranks; rank++)
		if (fork() == 0)
			_exit(run_rank(socks[rank % nsocks], &id, nranks, rank, count, iters));
	for (int rank = 0; rank < nranks; rank++) {
		int st;

		wait(&st);
		failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
	}
	printf("%s\n", failed ? "FAILED" : "all ranks correct");
	return failed;
}
