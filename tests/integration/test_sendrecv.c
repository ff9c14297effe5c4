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
 *     the same for a send whose receiver never posts;
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
#include "p2pcheck.h"
#include "refcheck.h"

#define BUF_BYTES ((size_t)P2P_BLOCK * (P2P_MAX_RANKS > P2P_RING ? P2P_MAX_RANKS : P2P_RING))

static struct collc_unique_id uid;
static struct h_barrier *bar;

static int rank_main(int rank, int nranks, void *arg)
{
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	uint8_t *send, *recv;

	(void)arg;
	if (h_join_alloc(&uid, nranks, rank, BUF_BYTES, &ctx, &comm, (void **)&send,
			 (void **)&recv) < 0)
		return 1;
	for (int dt = 0; dt < COLLC_NUM_DTYPES; dt++)
		for (int round = 0; round < 2; round++)
			if (p2p_all_pairs(ctx, comm, rank, nranks, (uint64_t)(dt * 2 + round),
					  (collc_dtype)dt, send, recv, BUF_BYTES))
				return 1;
	if (rank == 0)
		h_log("%d ranks: every rank to every rank (itself too), every dtype, random counts, "
		      "random posting order: correct",
		      nranks);
	if (p2p_ring(ctx, comm, rank, nranks, send, recv, BUF_BYTES))
		return 1;
	if (rank == 0)
		h_log("%d ranks: ring exchange with %d sends and %d receives outstanding per rank: "
		      "matched in order",
		      nranks, P2P_RING, P2P_RING);
	if (rank < 2 && p2p_refusals(ctx, comm, rank, send, recv, BUF_BYTES, bar))
		return 1;
	if (rank >= 2 && (h_barrier_wait(bar, 20000) < 0 || h_barrier_wait(bar, 20000) < 0))
		return h_fail("rank %d: barrier", rank);
	if (rank == 0)
		h_log("mismatched counts and dtypes -EINVAL on both sides, nothing written; a missing "
		      "sender or receiver -ETIMEDOUT, and its late partner too");
	/* The last rank dies while rank 0 waits to receive from it. */
	return p2p_dying_peer(ctx, comm, rank, nranks, recv, bar, "");
}

int main(int argc, char **argv)
{
	int nranks = argc > 1 ? atoi(argv[1]) : 2;
	const char *dargs[32];

	h_init(h_daemon_sets("sendrecv", nranks, argc, argv, dargs), argc, argv, 240);
	if (nranks < 2 || nranks > P2P_MAX_RANKS)
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
