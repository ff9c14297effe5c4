/* SPDX-License-Identifier: MIT */
/*
 * Send and receive as the tests drive them through libcollc (p2pcheck.h):
 * one node's (test_sendrecv) and across daemons (test_net_daemons) alike.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "p2pcheck.h"
#include "refcheck.h"

void p2p_fill(uint8_t *p, size_t n, uint64_t k, uint32_t from, uint32_t to)
{
	for (size_t b = 0; b < n; b++)
		p[b] = h_pattern(k, from, to, b);
}

int p2p_check(const uint8_t *p, size_t n, uint64_t k, uint32_t from, uint32_t to, const char *what)
{
	for (size_t b = 0; b < n; b++)
		if (p[b] != h_pattern(k, from, to, b))
			return h_fail("%s: byte %zu is %#x, not %#x", what, b, p[b],
				      h_pattern(k, from, to, b));
	return 0;
}

/* Elements rank `from` sends rank `to` in round k: 0, tiny and odd, or up to a block. */
size_t p2p_count(uint64_t k, int from, int to, size_t es)
{
	uint64_t x = h_mix(h_seed ^ (k * 0x100000001b3ull) ^ ((uint64_t)from << 20) ^ (uint64_t)to);

	switch (x % 5) {
	case 0:
		return 0;
	case 1:
		return 1 + (x >> 8) % 7;
	default:
		return 1 + (x >> 8) % (P2P_BLOCK / es);
	}
}

int p2p_wait_all(struct collc_ctx *ctx, const collc_req *reqs, int n, const char *what)
{
	for (int i = 0; i < n; i++) {
		int r = collc_wait(ctx, reqs[i], 20000);

		if (r < 0)
			return h_fail("%s: request %d: %s", what, i, collc_strerror(r));
	}
	return 0;
}

/* Every rank to every rank (itself too), dtype dt, all posted in a random order. */
int p2p_all_pairs(struct collc_ctx *ctx, struct collc_comm *comm, int rank, int nranks, uint64_t k,
		  collc_dtype dt, uint8_t *send, uint8_t *recv, size_t buf_bytes)
{
	size_t es = collc_dtype_size(dt);
	collc_req reqs[2 * P2P_MAX_RANKS];
	int order[2 * P2P_MAX_RANKS], n = 2 * nranks;
	uint64_t rng = h_mix(h_seed + k * 31 + (uint64_t)rank);
	char what[128];

	snprintf(what, sizeof(what), "rank %d/%d round %llu %s", rank, nranks,
		 (unsigned long long)k, rc_dtype_name(dt));
	rc_canary_fill(recv, buf_bytes, 3);
	for (int q = 0; q < nranks; q++)
		p2p_fill(send + (size_t)q * P2P_BLOCK, p2p_count(k, rank, q, es) * es, k,
			 (uint32_t)rank, (uint32_t)q);
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
			r = collc_recv(comm, recv + (size_t)q * P2P_BLOCK,
				       p2p_count(k, q, rank, es), dt, q, &reqs[i]);
		else
			r = collc_send(comm, send + (size_t)q * P2P_BLOCK,
				       p2p_count(k, rank, q, es), dt, q, &reqs[i]);
		if (r < 0)
			return h_fail("%s: post %d: %s", what, i, collc_strerror(r));
	}
	if (p2p_wait_all(ctx, reqs, n, what))
		return 1;
	for (int q = 0; q < nranks; q++) {
		size_t got = p2p_count(k, q, rank, es) * es;

		if (p2p_check(recv + (size_t)q * P2P_BLOCK, got, k, (uint32_t)q, (uint32_t)rank,
			      what))
			return 1;
		if (rc_canary_check(recv, (size_t)q * P2P_BLOCK + got, (size_t)(q + 1) * P2P_BLOCK,
				    3) >= 0)
			return h_fail("%s: written past the block from rank %d", what, q);
	}
	return 0;
}

/* P2P_RING sends right and receives left, all outstanding at once, each of its own size. */
int p2p_ring(struct collc_ctx *ctx, struct collc_comm *comm, int rank, int nranks, uint8_t *send,
	     uint8_t *recv, size_t buf_bytes)
{
	int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
	collc_req reqs[2 * P2P_RING];
	int n = 0;

	rc_canary_fill(recv, buf_bytes, 3);
	for (int k = 0; k < P2P_RING; k++)
		p2p_fill(send + (size_t)k * P2P_BLOCK,
			 p2p_count(1000 + (uint64_t)k, rank, right, 4) * 4, 1000 + (uint64_t)k,
			 (uint32_t)rank, (uint32_t)right);
	for (int k = 0; k < P2P_RING; k++) {
		/* Half the ranks post sends first, the others receives. */
		for (int h = 0; h < 2; h++) {
			int r;

			if ((h == 0) == (rank % 2 == 0))
				r = collc_send(comm, send + (size_t)k * P2P_BLOCK,
					       p2p_count(1000 + (uint64_t)k, rank, right, 4),
					       COLLC_FLOAT32, right, &reqs[n++]);
			else
				r = collc_recv(comm, recv + (size_t)k * P2P_BLOCK,
					       p2p_count(1000 + (uint64_t)k, left, rank, 4),
					       COLLC_FLOAT32, left, &reqs[n++]);
			if (r < 0)
				return h_fail("rank %d: ring post %d: %s", rank, k,
					      collc_strerror(r));
		}
	}
	if (p2p_wait_all(ctx, reqs, n, "ring"))
		return 1;
	for (int k = 0; k < P2P_RING; k++) {
		char what[64];

		snprintf(what, sizeof(what), "rank %d: ring receive %d", rank, k);
		if (p2p_check(recv + (size_t)k * P2P_BLOCK,
			      p2p_count(1000 + (uint64_t)k, left, rank, 4) * 4, 1000 + (uint64_t)k,
			      (uint32_t)left, (uint32_t)rank, what))
			return 1;
	}
	return 0;
}

/* Ranks 0 and 1 (on two daemons): mismatched pairs, then a timeout. */
int p2p_refusals(struct collc_ctx *ctx, struct collc_comm *comm, int rank, uint8_t *send,
		 uint8_t *recv, size_t buf_bytes, struct h_barrier *bar)
{
	collc_req req;
	int r;

	rc_canary_fill(recv, buf_bytes, 3);
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
		if (rc_canary_check(recv, 0, buf_bytes, 3) >= 0)
			return h_fail("rank %d: %s: receive buffer written", rank, what);
	}
	p2p_fill(send, 40, 77, 0, 1);
	r = rank == 0 ? collc_send(comm, send, 10, COLLC_INT32, 1, &req)
		      : collc_recv(comm, recv, 10, COLLC_INT32, 0, &req);
	if (r == 0)
		r = collc_wait(ctx, req, 20000);
	if (r < 0)
		return h_fail("rank %d: send/recv after the refusals: %s", rank, collc_strerror(r));
	if (rank == 1 && p2p_check(recv, 40, 77, 0, 1, "after the refusals"))
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
	/* A send at 1 to 0, which 0 receives only after 1 timed out. */
	if (rank == 1) {
		r = collc_send(comm, send, 8, COLLC_UINT8, 0, &req);
		if (r == 0)
			r = collc_wait(ctx, req, 20000);
		if (r != -ETIMEDOUT)
			return h_fail(
				"rank 1: send without a receiver ended with %s, not -ETIMEDOUT",
				collc_strerror(r));
	}
	if (h_barrier_wait(bar, 20000) < 0)
		return h_fail("rank %d: barrier", rank);
	if (rank == 0) {
		r = collc_recv(comm, recv, 8, COLLC_UINT8, 1, &req);
		if (r == 0)
			r = collc_wait(ctx, req, 20000);
		if (r != -ETIMEDOUT)
			return h_fail("rank 0: the late receive of a timed-out pair ended with %s",
				      collc_strerror(r));
	}
	/* The next pair matches again. */
	r = rank == 1 ? collc_send(comm, send, 10, COLLC_INT32, 0, &req)
		      : collc_recv(comm, recv, 10, COLLC_INT32, 1, &req);
	if (r == 0)
		r = collc_wait(ctx, req, 20000);
	if (r < 0)
		return h_fail("rank %d: send/recv after the timeouts: %s", rank, collc_strerror(r));
	return collc_comm_set_timeout(comm, -1) < 0;
}

int p2p_dying_peer(struct collc_ctx *ctx, struct collc_comm *comm, int rank, int nranks,
		   uint8_t *recv, struct h_barrier *bar, const char *where)
{
	collc_req req = 0;
	int r;

	if (rank == 0) {
		r = collc_recv(comm, recv, 8, COLLC_UINT8, nranks - 1, &req);
		if (r < 0)
			return h_fail("rank 0: receive from a rank about to die: %s",
				      collc_strerror(r));
	}
	if (h_barrier_wait(bar, 20000) < 0)
		return h_fail("rank %d: barrier", rank);
	if (rank == nranks - 1)
		_exit(0); /* no goodbye: its collcd sees the socket close */
	if (rank == 0) {
		r = collc_wait(ctx, req, 20000);
		if (r != -EPIPE)
			return h_fail("rank 0: receive from a dead rank ended with %s, not -EPIPE",
				      collc_strerror(r));
		h_log("a receive from a rank%s%s that died: -EPIPE", *where ? " " : "", where);
	}
	collc_comm_destroy(comm);
	collc_disconnect(ctx);
	return 0;
}
