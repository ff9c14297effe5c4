/* SPDX-License-Identifier: MIT */
/*
 * collc_comm_abort from one rank: every other rank's pending and later
 * collectives on that communicator end with -ECANCELED, and so do the
 * aborting rank's own later ones; other communicators of the same
 * processes keep working; a new communicator of the same processes works.
 *
 *   2 ranks: rank 0 has two collectives pending (rank 1 never submitted
 *            them); rank 1 aborts. Then rank 0 keeps submitting on the
 *            aborted communicator 2000 times (past the 1024-collective
 *            window): every one must end with -ECANCELED, promptly.
 *   3 ranks: ranks 0 and 1 pending, rank 2 aborts.
 * Each rank also belongs to a second communicator (B) with the same ranks;
 * after the abort an all-reduce on B must be correct.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rel.h"
#include "refcheck.h"

#define COUNT 1024
#define LATER 2000

struct shared {
	struct collc_unique_id uid_a, uid_b, uid_c;
	int nranks;
	uint32_t joined, pending_submitted, aborted, done_checks;
	uint64_t t_abort;
};

static struct shared *S;

static int check_ok(struct collc_ctx *ctx, struct collc_comm *comm, float *send, float *recv,
		    int rank, uint64_t key, const char *what)
{
	struct rc_case c = { COLLC_FLOAT32, COLLC_SUM, COUNT, key, S->nranks };

	return h_allreduce(&c, ctx, comm, rank, S->nranks, send, recv, what);
}

static int rank_main(void *arg)
{
	int rank = (int)(intptr_t)arg, n = S->nranks, aborter = n - 1, failed = 0, r;
	struct collc_ctx *ctx;
	struct collc_comm *a, *b, *c;
	float *send, *recv;
	collc_req pend[2];

	if (h_join(&S->uid_a, n, rank, &ctx, &a) < 0)
		return 1;
	r = collc_comm_init(ctx, &S->uid_b, n, rank, -1, &b);
	if (r < 0)
		return h_fail("rank %d: second communicator: %s", rank, collc_strerror(r));
	if ((r = collc_mem_alloc(ctx, COUNT * 4, -1, (void **)&send)) < 0 ||
	    (r = collc_mem_alloc(ctx, COUNT * 4, -1, (void **)&recv)) < 0)
		return h_fail("rank %d: collc_mem_alloc: %s", rank, collc_strerror(r));
	/* One collective that works before anything happens. */
	failed |= check_ok(ctx, a, send, recv, rank, h_seed ^ 0xa0, "all-reduce before the abort");
	h_add(&S->joined, 1);
	h_wait_at_least(&S->joined, (uint32_t)n, 10000);

	if (rank != aborter) {
		for (int i = 0; i < 2; i++) {
			r = collc_allreduce(a, send, recv, COUNT, COLLC_FLOAT32, COLLC_SUM,
					    &pend[i]);
			if (r < 0)
				return h_fail("rank %d: submit: %s", rank, collc_strerror(r));
		}
		h_add(&S->pending_submitted, 1);
		for (int i = 0; i < 2; i++) {
			uint64_t t;

			r = collc_wait(ctx, pend[i], 10000);
			t = h_now_ns();
			if (i == 0 && r == -ECANCELED && t - S->t_abort > 100000000ull)
				failed |= h_fail(
					"rank %d: -ECANCELED came %.1f ms after the abort (want < 100 ms)",
					rank, (double)(t - S->t_abort) / 1e6);
			if (r != -ECANCELED)
				failed |= h_fail(
					"rank %d: pending collective %d ended with %d (%s), want -ECANCELED",
					rank, i, r, collc_strerror(r));
			else if (i == 0)
				h_log("rank %d: pending collectives ended with -ECANCELED %.2f ms after collc_comm_abort was called",
				      rank, (double)(t - S->t_abort) / 1e6);
		}
	} else {
		h_wait_at_least(&S->pending_submitted, (uint32_t)n - 1, 10000);
		h_sleep_us(20000); /* let collcd take the pending submissions */
		S->t_abort = h_now_ns();
		r = collc_comm_abort(a);
		if (r < 0)
			return h_fail("rank %d: collc_comm_abort: %s", rank, collc_strerror(r));
		h_store(&S->aborted, 1);
	}
	h_wait_at_least(&S->aborted, 1, 10000);

	/* Later collectives on the aborted communicator: -ECANCELED, every one. */
	{
		int later = rank == 0 ? LATER : 3;
		uint64_t t0 = h_now_ns();

		for (int i = 0; i < later; i++) {
			collc_req req;

			r = collc_allreduce(a, send, recv, COUNT, COLLC_FLOAT32, COLLC_SUM, &req);
			if (r == 0)
				r = collc_wait(ctx, req, 5000);
			if (r != -ECANCELED) {
				failed |= h_fail(
					"rank %d: collective %d after the abort ended with %d (%s), want -ECANCELED%s",
					rank, i, r, collc_strerror(r),
					r == -EAGAIN
						? " (still pending after 5 s: the submission ring stalls)"
						: "");
				break;
			}
		}
		if (!failed)
			h_log("rank %d: %d collectives after the abort: all -ECANCELED (%.1f ms)",
			      rank, later, (double)(h_now_ns() - t0) / 1e6);
	}
	h_add(&S->done_checks, 1);
	h_wait_at_least(&S->done_checks, (uint32_t)n, 30000);
	if (failed)
		return failed;

	/* The other communicator of the same ranks is untouched. */
	failed |= check_ok(ctx, b, send, recv, rank, h_seed ^ 0xb0,
			   "all-reduce on the other communicator");
	r = collc_comm_destroy(a);
	if (r < 0)
		failed |=
			h_fail("rank %d: collc_comm_destroy(aborted): %s", rank, collc_strerror(r));
	/* And a new one of the same processes works. */
	r = collc_comm_init(ctx, &S->uid_c, n, rank, -1, &c);
	if (r < 0)
		return h_fail("rank %d: new communicator after the abort: %s", rank,
			      collc_strerror(r));
	failed |= check_ok(ctx, c, send, recv, rank, h_seed ^ 0xc0,
			   "all-reduce on a new communicator");
	collc_comm_destroy(b);
	collc_comm_destroy(c);
	collc_disconnect(ctx);
	return failed;
}

static int scenario(int nranks)
{
	pid_t pid[3];

	memset(S, 0, sizeof(*S));
	S->nranks = nranks;
	h_unique_ids(&S->uid_a, 1);
	h_unique_ids(&S->uid_b, 1);
	h_unique_ids(&S->uid_c, 1);
	h_log("scenario: %d ranks, rank %d aborts", nranks, nranks - 1);
	for (int r = 0; r < nranks; r++)
		pid[r] = h_fork(rank_main, (void *)(intptr_t)r);
	return h_reap_all_ok(pid, nranks, 60000, "rank");
}

int main(int argc, char **argv)
{
	int failed = 0;

	rel_init("rel_abort", argc, argv, 100);
	h_daemon_start(NULL);
	S = h_shared(sizeof(*S));
	failed |= scenario(2);
	failed |= scenario(3);
	if (!h_daemon_alive())
		failed |= h_fail("collcd died");
	return h_finish(failed);
}
