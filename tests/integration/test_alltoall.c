/* SPDX-License-Identifier: MIT */
/*
 * All-to-all and all-to-allv: every dtype at counts 0, 1, 7 (odd), and
 * random ones; all-to-allv with random per-pair counts (a quarter of them 0)
 * at random, non-contiguous displacements in a random block order. Data are
 * a hash of (seed, case, sender, receiver, byte), so every byte that arrives
 * is checked exactly; every receive byte outside the blocks is a canary that
 * must survive, and the send buffer must stay unchanged. Then the refusals:
 * ranks whose counts disagree (-EINVAL on every rank, nothing written), a
 * displacement past the registration, overlapping buffers, and one rank with
 * another dtype.
 *
 *   test_alltoall NRANKS [--set KEY=VALUE]... [--seed N]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "json.h"
#include "refcheck.h"

#define MAX_RANKS        64
#define BUF_BYTES        (1u << 20)
#define NCASES_PER_DTYPE 6

static struct collc_unique_id uid;

/* One all-to-all(v) case, the same on every rank: counts[i][j] from i to j, element size es. */
struct a2a_case {
	uint64_t k;
	collc_dtype dt;
	int v;        /* alltoallv */
	size_t count; /* alltoall */
	size_t counts[MAX_RANKS][MAX_RANKS];
	size_t sdispls[MAX_RANKS][MAX_RANKS], rdispls[MAX_RANKS][MAX_RANKS];
	size_t send_off, recv_off; /* elements */
};

/* Random block order with random gaps: displacements of n blocks of sizes sz[] (elements). */
static void place_blocks(uint64_t *rng, int n, const size_t *sz, size_t *displs, size_t cap)
{
	int order[MAX_RANKS];
	size_t at = h_rand_below(rng, 5);

	for (int p = 0; p < n; p++)
		order[p] = p;
	for (int p = n - 1; p > 0; p--) {
		int q = (int)h_rand_below(rng, (uint64_t)p + 1), t = order[p];

		order[p] = order[q];
		order[q] = t;
	}
	for (int i = 0; i < n; i++) {
		displs[order[i]] = at;
		at += sz[order[i]] + h_rand_below(rng, 3);
	}
	(void)cap;
}

static void make_case(struct a2a_case *c, uint64_t k, collc_dtype dt, int v, size_t count,
		      int nranks)
{
	uint64_t rng = h_mix(h_seed + k);
	size_t es = collc_dtype_size(dt);
	size_t maxc = (BUF_BYTES / 2 / es) / (size_t)nranks / 2;

	memset(c, 0, sizeof(*c));
	c->k = k;
	c->dt = dt;
	c->v = v;
	c->count = count;
	c->send_off = h_rand_below(&rng, 8);
	c->recv_off = h_rand_below(&rng, 8);
	for (int i = 0; i < nranks; i++)
		for (int j = 0; j < nranks; j++) {
			if (!v)
				c->counts[i][j] = count;
			else if (h_rand_below(&rng, 4) == 0)
				c->counts[i][j] = 0;
			else
				c->counts[i][j] = 1 + h_rand_below(&rng, count ? count : 1);
			if (v && c->counts[i][j] > maxc)
				c->counts[i][j] = maxc;
		}
	for (int i = 0; i < nranks; i++) {
		size_t ssz[MAX_RANKS], rsz[MAX_RANKS];

		for (int j = 0; j < nranks; j++) {
			ssz[j] = c->counts[i][j];
			rsz[j] = c->counts[j][i];
		}
		if (v) {
			place_blocks(&rng, nranks, ssz, c->sdispls[i], maxc);
			place_blocks(&rng, nranks, rsz, c->rdispls[i], maxc);
		} else {
			for (int j = 0; j < nranks; j++) {
				c->sdispls[i][j] = (size_t)j * count;
				c->rdispls[i][j] = (size_t)j * count;
			}
		}
	}
}

/* Bytes of a buffer a case may touch: up to its furthest block, plus a guard (canaries). */
static size_t span_of(size_t base, const size_t *displs, const size_t *counts, int n, size_t es)
{
	size_t end = base;

	for (int j = 0; j < n; j++)
		if (base + (displs[j] + counts[j]) * es > end)
			end = base + (displs[j] + counts[j]) * es;
	return end + 256 < BUF_BYTES ? end + 256 : BUF_BYTES;
}

/*
 * Are the bytes of buf outside the n blocks (counts[j] elements at base +
 * displs[j] elements) still the canary of tag, up to span bytes? 0 yes, 1 no.
 */
static int outside_intact(const uint8_t *buf, size_t base, const size_t *displs,
			  const size_t *counts, int n, size_t es, uint64_t tag, size_t span)
{
	static uint8_t in_block[BUF_BYTES];
	size_t b = 0;

	memset(in_block, 0, span);
	for (int j = 0; j < n; j++)
		memset(in_block + base + displs[j] * es, 1, counts[j] * es);
	while (b < span) {
		size_t e = b;

		if (in_block[b]) {
			b++;
			continue;
		}
		while (e < span && !in_block[e])
			e++;
		if (rc_canary_check(buf, b, e, tag) >= 0)
			return 1;
		b = e;
	}
	return 0;
}

/* Runs case c on `rank`; 0 when its result, its canaries and its input are right. */
static int run_case(struct collc_ctx *ctx, struct collc_comm *comm, int rank, int nranks,
		    const struct a2a_case *c, uint8_t *send, uint8_t *recv)
{
	size_t es = collc_dtype_size(c->dt);
	uint8_t *s = send + c->send_off * es, *d = recv + c->recv_off * es;
	size_t sendcounts[MAX_RANKS], recvcounts[MAX_RANKS], sspan, rspan;
	char what[160];
	collc_req req;
	int r;

	snprintf(what, sizeof(what), "rank %d/%d case %llu %s %s count %zu", rank, nranks,
		 (unsigned long long)c->k, c->v ? "alltoallv" : "alltoall", rc_dtype_name(c->dt),
		 c->count);
	for (int j = 0; j < nranks; j++) {
		sendcounts[j] = c->counts[rank][j];
		recvcounts[j] = c->counts[j][rank];
	}
	sspan = span_of(c->send_off * es, c->sdispls[rank], sendcounts, nranks, es);
	rspan = span_of(c->recv_off * es, c->rdispls[rank], recvcounts, nranks, es);
	rc_canary_fill(send, sspan, 1);
	rc_canary_fill(recv, rspan, 3);
	for (int j = 0; j < nranks; j++) {
		for (size_t b = 0; b < sendcounts[j] * es; b++)
			s[c->sdispls[rank][j] * es + b] =
				h_pattern(c->k, (uint32_t)rank, (uint32_t)j, b);
	}
	if (c->v)
		r = collc_alltoallv(comm, s, sendcounts, c->sdispls[rank], d, recvcounts,
				    c->rdispls[rank], c->dt, &req);
	else
		r = collc_alltoall(comm, s, d, c->count, c->dt, &req);
	if (r < 0)
		return h_fail("%s: submit: %s", what, collc_strerror(r));
	r = collc_wait(ctx, req, 20000);
	if (r < 0)
		return h_fail("%s: collc_wait: %s", what, collc_strerror(r));
	for (int j = 0; j < nranks; j++)
		for (size_t b = 0; b < recvcounts[j] * es; b++) {
			uint8_t want = h_pattern(c->k, (uint32_t)j, (uint32_t)rank, b);
			uint8_t got = d[c->rdispls[rank][j] * es + b];

			if (got != want)
				return h_fail("%s: byte %zu from rank %d is %#x, not %#x", what, b,
					      j, got, want);
		}
	/* Every byte outside the blocks is still canary, in both buffers. */
	if (outside_intact(recv, c->recv_off * es, c->rdispls[rank], recvcounts, nranks, es, 3,
			   rspan))
		return h_fail("%s: receive buffer written outside every block", what);
	if (outside_intact(send, c->send_off * es, c->sdispls[rank], sendcounts, nranks, es, 1,
			   sspan))
		return h_fail("%s: send buffer written", what);
	for (int j = 0; j < nranks; j++)
		for (size_t b = 0; b < sendcounts[j] * es; b++)
			if (s[c->sdispls[rank][j] * es + b] !=
			    h_pattern(c->k, (uint32_t)rank, (uint32_t)j, b))
				return h_fail("%s: send block for rank %d changed", what, j);
	return 0;
}

/* Nothing of the receive buffer may have changed. */
static int untouched(const uint8_t *recv, const char *what)
{
	long bad = rc_canary_check(recv, 0, BUF_BYTES, 3);

	return bad >= 0 ? h_fail("%s: receive byte %ld written", what, bad) : 0;
}

/* The refusals: each must leave the receive buffer alone. */
static int run_bad(struct collc_ctx *ctx, struct collc_comm *comm, int rank, int nranks,
		   uint8_t *send, uint8_t *recv)
{
	size_t sc[MAX_RANKS], rc[MAX_RANKS], sd[MAX_RANKS], rd[MAX_RANKS];
	collc_req req;
	int r;

	for (int j = 0; j < nranks; j++) {
		sc[j] = rc[j] = 4;
		sd[j] = rd[j] = (size_t)j * 4;
	}
	/* Rank 0 sends rank 1 one element more than rank 1 expects: every rank fails. */
	rc_canary_fill(recv, BUF_BYTES, 3);
	if (rank == 0)
		sc[1] = 5;
	r = collc_alltoallv(comm, send, sc, sd, recv, rc, rd, COLLC_INT32, &req);
	if (r < 0)
		return h_fail("rank %d: mismatched alltoallv: submit: %s", rank, collc_strerror(r));
	r = collc_wait(ctx, req, 20000);
	if (r != -EINVAL)
		return h_fail("rank %d: mismatched alltoallv counts ended with %s, not -EINVAL",
			      rank, collc_strerror(r));
	if (untouched(recv, "mismatched alltoallv"))
		return 1;
	sc[1] = 4;
	/* A displacement past the registration: refused at the call, nothing sent. */
	rd[nranks - 1] = BUF_BYTES / 4;
	r = collc_alltoallv(comm, send, sc, sd, recv, rc, rd, COLLC_INT32, &req);
	if (r != -EINVAL)
		return h_fail("rank %d: displacement past the buffer: %s, not -EINVAL", rank,
			      collc_strerror(r));
	rd[nranks - 1] = (size_t)(nranks - 1) * 4;
	/* Overlapping buffers (in place) are refused: peers read what we would write. */
	r = collc_alltoall(comm, send, send + 8, 4, COLLC_INT32, &req);
	if (r != -EINVAL)
		return h_fail("rank %d: overlapping alltoall: %s, not -EINVAL", rank,
			      collc_strerror(r));
	r = collc_alltoallv(comm, recv, sc, sd, recv, rc, rd, COLLC_INT32, &req);
	if (r != -EINVAL)
		return h_fail("rank %d: in-place alltoallv: %s, not -EINVAL", rank,
			      collc_strerror(r));
	r = collc_alltoallv(comm, send, NULL, sd, recv, rc, rd, COLLC_INT32, &req);
	if (r != -EINVAL)
		return h_fail("rank %d: alltoallv without counts: %s, not -EINVAL", rank,
			      collc_strerror(r));
	/* One rank with another dtype: every rank fails, nothing written. */
	r = collc_alltoall(comm, send, recv, 4, rank == nranks - 1 ? COLLC_FLOAT32 : COLLC_INT32,
			   &req);
	if (r < 0)
		return h_fail("rank %d: alltoall: submit: %s", rank, collc_strerror(r));
	r = collc_wait(ctx, req, 20000);
	if (r != -EINVAL)
		return h_fail("rank %d: alltoall with one rank's dtype different ended with %s",
			      rank, collc_strerror(r));
	if (untouched(recv, "alltoall with mixed dtypes"))
		return 1;
	/* And the communicator still works. */
	r = collc_alltoall(comm, send, recv, 4, COLLC_INT32, &req);
	if (r == 0)
		r = collc_wait(ctx, req, 20000);
	if (r < 0)
		return h_fail("rank %d: alltoall after the refusals: %s", rank, collc_strerror(r));
	return 0;
}

static struct a2a_case *cases;
static int ncases;

static int rank_main(int rank, int nranks, void *arg)
{
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	uint8_t *send, *recv;
	int r;

	(void)arg;
	if (h_join_alloc(&uid, nranks, rank, BUF_BYTES, &ctx, &comm, (void **)&send,
			 (void **)&recv) < 0)
		return 1;
	for (int i = 0; i < ncases; i++)
		if (run_case(ctx, comm, rank, nranks, &cases[i], send, recv))
			return 1;
	if (rank == 0)
		h_log("%d ranks: %d alltoall / alltoallv cases over every dtype correct on every "
		      "rank, canaries intact",
		      nranks, ncases);
	if (run_bad(ctx, comm, rank, nranks, send, recv))
		return 1;
	if (rank == 0)
		h_log("%d ranks: mismatched counts and dtypes -EINVAL on every rank, bad "
		      "displacements and overlaps refused, nothing written",
		      nranks);
	collc_mem_free(ctx, send);
	collc_mem_free(ctx, recv);
	r = collc_comm_destroy(comm);
	if (r < 0)
		return h_fail("rank %d: collc_comm_destroy: %s", rank, collc_strerror(r));
	collc_disconnect(ctx);
	return 0;
}

int main(int argc, char **argv)
{
	int nranks = argc > 1 ? atoi(argv[1]) : 2;
	const char *dargs[32];
	uint64_t rng;

	h_init(h_daemon_sets("alltoall", nranks, argc, argv, dargs), argc, argv, 240);
	if (nranks < 2 || nranks > MAX_RANKS)
		return h_fail("usage: test_alltoall NRANKS (2..64) [--set KEY=VALUE]...");
	cases = h_shared(sizeof(*cases) * COLLC_NUM_DTYPES * NCASES_PER_DTYPE * 2);
	rng = h_seed;
	for (int dt = 0; dt < COLLC_NUM_DTYPES; dt++) {
		size_t es = collc_dtype_size((collc_dtype)dt);
		size_t big = (BUF_BYTES / 4 / es) / (size_t)nranks;
		size_t counts[NCASES_PER_DTYPE] = { 0,
						    1,
						    7,
						    2 + h_rand_below(&rng, 300),
						    1 + h_rand_below(&rng, big < 8000 ? big : 8000),
						    big / 2 + h_rand_below(&rng, big / 2) };

		for (int v = 0; v < 2; v++)
			for (int k = 0; k < NCASES_PER_DTYPE; k++) {
				make_case(&cases[ncases], (uint64_t)ncases, (collc_dtype)dt, v,
					  counts[k], nranks);
				ncases++;
			}
	}
	h_daemon_start(dargs);
	h_unique_id(&uid);
	{
		static const char *const ops[] = { "alltoall", "alltoallv" };
		int failed = h_run_ranks(nranks, rank_main, NULL);

		if (!failed)
			failed = h_check_by_op(ops, 2);
		return h_finish(failed);
	}
}
