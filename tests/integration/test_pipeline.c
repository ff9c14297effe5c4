/* SPDX-License-Identifier: MIT */
/*
 * Many small all-reduces in flight, 2 ranks:
 *  1. 10,000 pipelined with 64 outstanding: submit 64, then wait for the
 *     oldest and submit a new one; every result checked;
 *  2. submit 1000, then wait for all 1000 (in order, then another 1000 in
 *     reverse order, then 1000 reaped with collc_test in random order).
 * Every all-reduce has its own value, so results swapped between requests
 * show.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define NRANKS 2
#define COUNT  4
#define DEPTH  64
#define PIPE_N 10000
#define BURST  1000

static struct collc_unique_id uid;

/* Element k of rank r's input for all-reduce number it. */
static uint32_t val(int r, uint32_t it, int k)
{
	return it * 1000003u + (uint32_t)r * 7919u + (uint32_t)k * 31u;
}

static void fill(uint32_t *p, int rank, uint32_t it)
{
	for (int k = 0; k < COUNT; k++)
		p[k] = val(rank, it, k);
}

static int check(const uint32_t *p, uint32_t it, const char *phase)
{
	for (int k = 0; k < COUNT; k++) {
		uint32_t want = 0;

		for (int r = 0; r < NRANKS; r++)
			want += val(r, it, k);
		if (p[k] != want) {
			/* Name the all-reduce the value belongs to, if it is one of ours. */
			long from = -1;

			for (uint32_t j = 0; j < PIPE_N && from < 0; j++) {
				uint32_t w = 0;

				for (int r = 0; r < NRANKS; r++)
					w += val(r, j, k);
				if (w == p[k])
					from = (long)j;
			}
			return h_fail(
				"%s: all-reduce %u element %d is %u, want %u (that is the result of "
				"all-reduce %ld)",
				phase, it, k, p[k], want, from);
		}
	}
	return 0;
}

static int rank_main(int rank, int nranks, void *arg)
{
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	uint32_t *send, *recv;
	collc_req *reqs;
	uint64_t t0, rng = h_seed;
	int r;

	(void)arg;
	if (h_join_alloc(&uid, nranks, rank, (size_t)BURST * COUNT * 4, &ctx, &comm, (void **)&send,
			 (void **)&recv) < 0)
		return 1;
	reqs = calloc(BURST, sizeof(*reqs));

	/* 1: a window of 64. Slot it % 64 holds all-reduce it's buffers. */
	t0 = h_now_ns();
	for (uint32_t it = 0; it < PIPE_N + DEPTH; it++) {
		uint32_t s = it % DEPTH;

		if (it >= DEPTH) {
			uint32_t old = it - DEPTH;

			r = collc_wait(ctx, reqs[s], 10000);
			if (r < 0)
				return h_fail("pipeline: collc_wait for all-reduce %u: %s", old,
					      collc_strerror(r));
			if (check(recv + s * COUNT, old, "pipeline"))
				return 1;
		}
		if (it >= PIPE_N)
			continue;
		fill(send + s * COUNT, rank, it);
		memset(recv + s * COUNT, 0xee, COUNT * 4);
		r = collc_allreduce(comm, send + s * COUNT, recv + s * COUNT, COUNT, COLLC_UINT32,
				    COLLC_SUM, &reqs[s]);
		if (r < 0)
			return h_fail("pipeline: collc_allreduce %u: %s", it, collc_strerror(r));
	}
	if (rank == 0)
		h_log("%d all-reduces of %d uint32 with %d outstanding: every result correct (%.1f us each)",
		      PIPE_N, COUNT, DEPTH, (double)(h_now_ns() - t0) / 1e3 / PIPE_N);

	/* 2: bursts of 1000: waited in order, in reverse order, and by collc_test in random order. */
	for (int round = 0; round < 3; round++) {
		static const char *const how[] = { "in order", "in reverse order",
						   "with collc_test in random order" };
		uint32_t base = 20000 + (uint32_t)round * BURST;
		int *order = malloc(BURST * sizeof(*order)), left = BURST;

		for (int i = 0; i < BURST; i++) {
			fill(send + i * COUNT, rank, base + (uint32_t)i);
			memset(recv + i * COUNT, 0xee, COUNT * 4);
			r = collc_allreduce(comm, send + i * COUNT, recv + i * COUNT, COUNT,
					    COLLC_UINT32, COLLC_SUM, &reqs[i]);
			if (r < 0)
				return h_fail("burst: collc_allreduce %d of %d: %s", i, BURST,
					      collc_strerror(r));
			order[i] = round == 1 ? BURST - 1 - i : i;
		}
		if (round == 2) {
			for (int i = BURST - 1; i > 0; i--) {
				int j = (int)h_rand_below(&rng, (uint64_t)i + 1), t = order[i];

				order[i] = order[j];
				order[j] = t;
			}
			/* Poll until every one reports done; each is reported exactly once. */
			t0 = h_now_ns();
			while (left > 0) {
				for (int i = 0; i < BURST; i++) {
					int k = order[i];

					if (k < 0)
						continue;
					r = collc_test(ctx, reqs[k]);
					if (r < 0)
						return h_fail("burst: collc_test(%d): %s", k,
							      collc_strerror(r));
					if (r == 1) {
						if (check(recv + k * COUNT, base + (uint32_t)k,
							  "burst (collc_test)"))
							return 1;
						order[i] = -1;
						left--;
					}
				}
				if (h_now_ns() - t0 > 20000000000ull)
					return h_fail(
						"burst: %d of %d requests never reported done by collc_test",
						left, BURST);
			}
		} else {
			for (int i = 0; i < BURST; i++) {
				int k = order[i];

				r = collc_wait(ctx, reqs[k], 10000);
				if (r < 0)
					return h_fail("burst: collc_wait(%d): %s", k,
						      collc_strerror(r));
				if (check(recv + k * COUNT, base + (uint32_t)k, "burst"))
					return 1;
			}
		}
		/* Reported once, then forgotten. */
		r = collc_test(ctx, reqs[0]);
		if (r != -EINVAL)
			return h_fail(
				"collc_test on a request already reported done: %d, want -EINVAL",
				r);
		free(order);
		if (rank == 0)
			h_log("%d all-reduces submitted, then all waited %s: each request's own result correct",
			      BURST, how[round]);
	}
	free(reqs);
	collc_mem_free(ctx, send);
	collc_mem_free(ctx, recv);
	h_leave(ctx, comm);
	return 0;
}

int main(int argc, char **argv)
{
	h_init("pipeline", argc, argv, 120);
	return h_run_comm_test(&uid, 1, NRANKS, rank_main, NULL);
}
