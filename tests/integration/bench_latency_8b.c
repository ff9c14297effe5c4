/* SPDX-License-Identifier: MIT */
/*
 * Latency of small all-reduces (a measurement, never a timed test: it fails
 * only on wrong results). 2 ranks, 10,000 all-reduces of 8 bytes (2 float32),
 * one at a time; each rank times collc_allreduce() to collc_wait()'s return.
 * Prints one line starting with "LATENCY": median and p99 over both ranks.
 *
 *   bench_latency_8b [--iters N]
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define NRANKS  2
#define MAXITER 1000000

struct shared {
	struct h_barrier bar;
	uint32_t ns[NRANKS][MAXITER];
};
static struct shared *sh;
static struct collc_unique_id uid;
static int iters = 10000;

static int rank_main(int rank, int nranks, void *arg)
{
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	float *send, *recv;
	collc_req req;
	int r;

	(void)arg;
	if (h_join_alloc(&uid, nranks, rank, 8, &ctx, &comm, (void **)&send, (void **)&recv) < 0)
		return 1;
	/* Warm up, then start together. */
	for (int i = 0; i < 100; i++) {
		r = collc_allreduce(comm, send, recv, 2, COLLC_FLOAT32, COLLC_SUM, &req);
		if (r == 0)
			r = collc_wait(ctx, req, 10000);
		if (r < 0)
			return h_fail("rank %d: warm-up all-reduce: %s", rank, collc_strerror(r));
	}
	if (h_barrier_wait(&sh->bar, 10000) < 0)
		return h_fail("barrier timed out");
	for (int it = 0; it < iters; it++) {
		uint64_t t0;
		float want0 = 0, want1 = 0;

		/* Small integers: the sums are exact. */
		send[0] = (float)(it % 4096 + rank);
		send[1] = -(float)((it * 7) % 4096 + 3 * rank);
		recv[0] = recv[1] = 12345.0f;
		t0 = h_now_ns();
		r = collc_allreduce(comm, send, recv, 2, COLLC_FLOAT32, COLLC_SUM, &req);
		if (r == 0)
			r = collc_wait(ctx, req, 10000);
		sh->ns[rank][it] =
			(uint32_t)(h_now_ns() - t0 > UINT32_MAX ? UINT32_MAX : h_now_ns() - t0);
		if (r < 0)
			return h_fail("rank %d: all-reduce %d: %s", rank, it, collc_strerror(r));
		for (int k = 0; k < nranks; k++) {
			want0 += (float)(it % 4096 + k);
			want1 -= (float)((it * 7) % 4096 + 3 * k);
		}
		if (recv[0] != want0 || recv[1] != want1)
			return h_fail("rank %d: all-reduce %d: {%g, %g}, want {%g, %g}", rank, it,
				      recv[0], recv[1], want0, want1);
	}
	collc_mem_free(ctx, send);
	collc_mem_free(ctx, recv);
	h_leave(ctx, comm);
	return 0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	uint32_t *all;
	size_t n;
	int failed;

	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "--iters") == 0)
			iters = atoi(argv[i + 1]);
	if (iters < 1 || iters > MAXITER)
		iters = 10000;
	h_init("bench_latency_8b", argc, argv, 120);
	sh = h_shared(sizeof(*sh));
	h_barrier_init(&sh->bar, NRANKS);
	h_daemon_start(NULL);
	h_unique_id(&uid);
	failed = h_run_ranks(NRANKS, rank_main, NULL);
	if (!failed) {
		n = (size_t)iters * NRANKS;
		all = malloc(n * sizeof(*all));
		for (int r = 0; r < NRANKS; r++)
			memcpy(all + (size_t)r * iters, sh->ns[r], (size_t)iters * sizeof(*all));
		qsort(all, n, sizeof(*all), cmp_u32);
		h_log("%d all-reduces of 8 bytes (2 x float32, sum) on 2 ranks, one at a time: every "
		      "result correct",
		      iters);
		printf("LATENCY allreduce 8B float32 2 ranks x %d iters: median %.1f us, p99 %.1f us, "
		       "min %.1f us, max %.1f us\n",
		       iters, all[n / 2] / 1e3, all[n * 99 / 100] / 1e3, all[0] / 1e3,
		       all[n - 1] / 1e3);
		fflush(stdout);
		{
			/* Stalls as long as a sleep timeout in collcd suggest a lost wake-up. */
			size_t slow = 0;
			char list[512] = "";
			int len = 0;

			for (size_t i = n; i-- > 0 && all[i] >= 20000000u; slow++)
				if (len < (int)sizeof(list) - 16)
					len += snprintf(list + len, sizeof(list) - (size_t)len,
							" %.0f", all[i] / 1e6);
			if (slow)
				h_log("%zu all-reduces took 20 ms or more (ms, slowest first):%s",
				      slow, list);
		}
		free(all);
	}
	return h_finish(failed);
}
