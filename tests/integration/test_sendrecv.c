/* SPDX-License-Identifier: MIT */
/*
 * Send and receive:
 *   - every dtype: each rank sends every rank (itself too) a random count
 *     (odd, zero, up to 64 KiB) and receives from every rank, all posted at
 *     once in a random order, data checked bit for bit, canaries intact;
 *   - a ring exchange with many outstanding: 48 sends right and 48 receives
 *     left posted before any wait, each of another size, so the receives
 *     prove the pair's order (k-th send meets k-th receive);
 *   - a send and a receive with different counts, or dtypes: -EINVAL on
 *     both, nothing written; the pair goes on working;
 *   - a receive whose sender never posts ends with -ETIMEDOUT under the
 *     communicator's timeout, and so does that send when it comes late;
 *   - a receive from a rank that dies ends with -EPIPE.
 *
 *   test_sendrecv NRANKS [--set KEY=VALUE]... [--seed N]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "json.h"
#include "refcheck.h"

#define MAX_RANKS 64
#define BLOCK     (64u << 10) /* bytes per peer block */
#define RING_OPS  48
#define BUF_BYTES ((size_t)BLOCK * (MAX_RANKS > RING_OPS ? MAX_RANKS : RING_OPS))

static struct collc_unique_id uid;
static struct h_barrier *bar;

static void fill(uint8_t *p, size_t n, uint64_t k, uint32_t from, uint32_t to)
{
	for (size_t b = 0; b < n; b++)
		p[b] = h_pattern(k, from, to, b);
}

static int check(const uint8_t *p, size_t n, uint64_t k, uint32_t from, uint32_t to,
		 const char *what)
{
	for (size_t b = 0; b < n; b++)
		if (p[b] != h_pattern(k, from, to, b))
			return h_fail("%s: byte %zu is %#x, not %#x", what, b, p[b],
				      h_pattern(k, from, to, b));
	return 0;
}

/* Elements rank `from` sends rank `to` in round k (every rank computes the same). */
static size_t count_of(uint64_t k, int from, int to, size_t es)
{
	uint64_t x = h_mix(h_seed ^ (k * 0x100000001b3ull) ^ ((uint64_t)from << 20) ^ (uint64_t)to);

	switch (x % 5) {
	case 0:
		return 0;
	case 1:
		return 1 + (x >> 8) % 7; /* odd and tiny */
	default:
		return 1 + (x >> 8) % (BLOCK / es);
	}
}

static int wait_all(struct collc_ctx *ctx, const collc_req *reqs, int n, const char *what)
{
	for (int i = 0; i < n; i++) {
		int r = collc_wait(ctx, reqs[i], 20000);

		if (r < 0)
			return h_fail("%s: request %d: %s", what, i, collc_strerror(r));
	}
	return 0;
}

/* Every rank to every rank, dtype dt, all posted in a random order. */
static int all_pairs(struct collc_ctx *ctx, struct collc_comm *comm, int rank, int nranks,
		     uint64_t k, collc_dtype dt, uint8_t *send, uint8_t *recv)
{
	size_t es = collc_dtype_size(dt);
	collc_req reqs[2 * MAX_RANKS];
	int order[2 * MAX_RANKS], n = 2 * nranks;
	uint64_t rng = h_mix(h_seed + k * 31 + (uint64_t)rank);
	char what[128];

	snprintf(what, sizeof(what), "rank %d/%d round %llu %s", rank, nranks,
		 (unsigned long long)k, rc_dtype_name(dt));
	rc_canary_fill(recv, BUF_BYTES, 3);
	for (int q = 0; q < nranks; q++)
		fill(send + (size_t)q * BLOCK, count_of(k, rank, q, es) * es, k, (uint32_t)rank,
		     (uint32_t)q);
	for (int i = 0; i < n; i++)
		order[i] = i;
	for (int i = n - 1; i > 0; i--) {
		int j = (int)h_rand_below(&rng, (uint64_t)i + 1), t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	for (int i = 0; i < n; i++) {
		int q = order[i] / 2, r;

		if (order[i] & 1)
			r = collc_recv(comm, recv + (size_t)q * BLOCK, count_of(k, q, rank, es), dt,
				       q, &reqs[i]);
		else
			r = collc_send(comm, send + (size_t)q * BLOCK, count_of(k, rank, q, es), dt,
				       q, &reqs[i]);
		if (r < 0)
			return h_fail("%s: post %d: %s", what, i, collc_strerror(r));
	}
	if (wait_all(ctx, reqs, n, what))
		return 1;
	for (int q = 0; q < nranks; q++) {
		size_t got = count_of(k, q, rank, es) * es;

		if (check(recv + (size_t)q * BLOCK, got, k, (uint32_t)q, (uint32_t)rank, what))
			return 1;
		if (rc_canary_check(recv, (size_t)q * BLOCK + got, (size_t)(q + 1) * BLOCK, 3) >= 0)
			return h_fail("%s: written past the block from rank %d", what, q);
	}
	return 0;
}

/* RING_OPS sends right and receives left, all outstanding at once, each of its own size. */
static int ring(struct collc_ctx *ctx, struct collc_comm *comm, int rank, int nranks, uint8_t *send,
		uint8_t *recv)
{
	int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
	collc_req reqs[2 * RING_OPS];
	int n = 0;

	rc_canary_fill(recv, BUF_BYTES, 3);
	for (int k = 0; k < RING_OPS; k++)
		fill(send + (size_t)k * BLOCK, count_of(1000 + (uint64_t)k, rank, right, 4) * 4,
		     1000 + (uint64_t)k, (uint32_t)rank, (uint32_t)right);
	for (int k = 0; k < RING_OPS; k++) {
		/* Half the ranks post sends first, the others receives. */
		for (int h = 0; h < 2; h++) {
			int r;

			if ((h == 0) == (rank % 2 == 0))
				r = collc_send(comm, send + (size_t)k * BLOCK,
					       count_of(1000 + (uint64_t)k, rank, right, 4),
					       COLLC_FLOAT32, right, &reqs[n++]);
			else
				r = collc_recv(comm, recv + (size_t)k * BLOCK,
					       count_of(1000 + (uint64_t)k, left, rank, 4),
					       COLLC_FLOAT32, left, &reqs[n++]);
			if (r < 0)
				return h_fail("rank %d: ring post %d: %s", rank, k,
					      collc_strerror(r));
		}
	}
	if (wait_all(ctx, reqs, n, "ring"))
		return 1;
	for (int k = 0; k < RING_OPS; k++) {
		char what[64];

		snprintf(what, sizeof(what), "rank %d: ring receive %d", rank, k);
		if (check(recv + (size_t)k * BLOCK, count_of(1000 + (uint64_t)k, left, rank, 4) * 4,
			  1000 + (uint64_t)k, (uint32_t)left, (uint32_t)rank, what))
			return 1;
	}
	return 0;
}

/* Ranks 0 and 1: mismatched pairs, then a timeout. */
static int refusals(struct collc_ctx *ctx, struct collc_comm *comm, int rank, uint8_t *send,
		    uint8_t *recv)
{
	collc_req req;
	int r;

	rc_canary_fill(recv, BUF_BYTES, 3);
	/* Counts that differ, then dtypes that differ: -EINVAL on both sides. */
	for (int c = 0; c < 2; c++) {
		const char *what = c ? "dtypes differ" : "counts differ";

		if (rank == 0)
			r = collc_send(comm, send, 10, COLLC_INT32, 1, &req);
		else
			r = collc_recv(comm, recv, c ? 10 : 11, c ? COLLC_FLOAT32 : COLLC_INT32, 0,
				       &req);
		if (r < 0)
			return h_fail("rank %d: %s: post: %s", rank, what, collc_strerror(r));
		r = collc_wait(ctx, req, 20000);
		if (r != -EINVAL)
			return h_fail("rank %d: %s: ended with %s, not -EINVAL", rank, what,
				      collc_strerror(r));
		if (rc_canary_check(recv, 0, BUF_BYTES, 3) >= 0)
			return h_fail("rank %d: %s: receive buffer written", rank, what);
	}
	/* The pair still works. */
	fill(send, 40, 77, 0, 1);
	r = rank == 0 ? collc_send(comm, send, 10, COLLC_INT32, 1, &req)
		      : collc_recv(comm, recv, 10, COLLC_INT32, 0, &req);
	if (r == 0)
		r = collc_wait(ctx, req, 20000);
	if (r < 0)
		return h_fail("rank %d: send/recv after the refusals: %s", rank, collc_strerror(r));
	if (rank == 1 && check(recv, 40, 77, 0, 1, "after the refusals"))
		return 1;
	/* A receive at 0 from 1, which 1 posts only after 0 timed out. */
	r = collc_comm_set_timeout(comm, 300);
	if (r < 0)
		return h_fail("rank %d: collc_comm_set_timeout: %s", rank, collc_strerror(r));
	if (rank == 0) {
		r = collc_recv(comm, recv, 8, COLLC_UINT8, 1, &req);
		if (r == 0)
			r = collc_wait(ctx, req, 20000);
		if (r != -ETIMEDOUT)
			return h_fail(
				"rank 0: receive without a sender ended with %s, not -ETIMEDOUT",
				collc_strerror(r));
	}
	if (h_barrier_wait(bar, 20000) < 0)
		return h_fail("rank %d: barrier", rank);
	if (rank == 1) {
		r = collc_send(comm, send, 8, COLLC_UINT8, 0, &req);
		if (r == 0)
			r = collc_wait(ctx, req, 20000);
		if (r != -ETIMEDOUT)
			return h_fail("rank 1: the late send of a timed-out pair ended with %s",
				      collc_strerror(r));
	}
	/* The next pair matches again. */
	r = rank == 1 ? collc_send(comm, send, 10, COLLC_INT32, 0, &req)
		      : collc_recv(comm, recv, 10, COLLC_INT32, 1, &req);
	if (r == 0)
		r = collc_wait(ctx, req, 20000);
	if (r < 0)
		return h_fail("rank %d: send/recv after the timeout: %s", rank, collc_strerror(r));
	return collc_comm_set_timeout(comm, -1) < 0;
}

static int rank_main(int rank, int nranks, void *arg)
{
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	uint8_t *send, *recv;
	collc_req req;
	int r;

	(void)arg;
	if (h_join_alloc(&uid, nranks, rank, BUF_BYTES, &ctx, &comm, (void **)&send,
			 (void **)&recv) < 0)
		return 1;
	for (int dt = 0; dt < COLLC_NUM_DTYPES; dt++)
		for (int round = 0; round < 2; round++)
			if (all_pairs(ctx, comm, rank, nranks, (uint64_t)(dt * 2 + round),
				      (collc_dtype)dt, send, recv))
				return 1;
	if (rank == 0)
		h_log("%d ranks: every rank to every rank (itself too), every dtype, random counts, "
		      "random posting order: correct",
		      nranks);
	if (ring(ctx, comm, rank, nranks, send, recv))
		return 1;
	if (rank == 0)
		h_log("%d ranks: ring exchange with %d sends and %d receives outstanding per rank: "
		      "matched in order",
		      nranks, RING_OPS, RING_OPS);
	if (rank < 2 && refusals(ctx, comm, rank, send, recv))
		return 1;
	if (rank >= 2 && h_barrier_wait(bar, 20000) < 0)
		return h_fail("rank %d: barrier", rank);
	if (rank == 0)
		h_log("mismatched counts and dtypes -EINVAL on both sides, nothing written; a missing "
		      "sender -ETIMEDOUT, and its late send too");
	/* The last rank dies while rank 0 waits to receive from it. */
	if (rank == 0) {
		r = collc_recv(comm, recv, 8, COLLC_UINT8, nranks - 1, &req);
		if (r < 0)
			return h_fail("rank 0: receive from a rank about to die: %s",
				      collc_strerror(r));
	}
	if (h_barrier_wait(bar, 20000) < 0)
		return h_fail("rank %d: barrier", rank);
	if (rank == nranks - 1)
		_exit(0); /* no goodbye: collcd sees the socket close */
	if (rank == 0) {
		r = collc_wait(ctx, req, 20000);
		if (r != -EPIPE)
			return h_fail("rank 0: receive from a dead rank ended with %s, not -EPIPE",
				      collc_strerror(r));
		h_log("a receive from a rank that died: -EPIPE");
	}
	collc_comm_destroy(comm);
	collc_disconnect(ctx);
	return 0;
}

int main(int argc, char **argv)
{
	int nranks = argc > 1 ? atoi(argv[1]) : 2;
	const char *dargs[32];

	h_init(h_daemon_sets("sendrecv", nranks, argc, argv, dargs), argc, argv, 240);
	if (nranks < 2 || nranks > MAX_RANKS)
		return h_fail("usage: test_sendrecv NRANKS (2..64) [--set KEY=VALUE]...");
	bar = h_shared(sizeof(*bar));
	h_barrier_init(bar, (uint32_t)nranks);
	h_daemon_start(dargs);
	h_unique_id(&uid);
	{
		static const char *const ops[] = { "send", "recv" };
		int failed = h_run_ranks(nranks, rank_main, NULL);

		if (!failed)
			failed = h_check_by_op(ops, 2);
		return h_finish(failed);
	}
}
