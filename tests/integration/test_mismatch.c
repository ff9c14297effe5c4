/* SPDX-License-Identifier: MIT */
/*
 * Ranks that disagree about a collective, 3 ranks. For each disagreement
 * (count, dtype, op, broadcast root, reduce root), with the odd rank out
 * being rank 1, rank 2 or rank 0 in turn:
 *  - every rank's collc_wait returns -EINVAL, well under a second after the
 *    last rank submitted;
 *  - a following matching all-reduce on the same communicator is correct.
 * Broadcast and reduce parts are skipped, with a note, where they return -ENOSYS.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "refcheck.h"

#define NRANKS    3
#define COUNT     4096
#define PROMPT_NS 1000000000ull

enum kind { K_COUNT, K_DTYPE, K_OP, K_BCAST_ROOT, K_REDUCE_ROOT, K_MAX };
static const char *const kind_names[K_MAX] = { "count (10 vs 11)", "dtype (float32 vs int32)",
					       "op (sum vs max)", "broadcast root (0 vs 1)",
					       "reduce root (0 vs 1)" };

static struct collc_unique_id uid;

struct shared {
	struct h_barrier bar;
	uint64_t submitted_ns[NRANKS];
	int enosys[K_MAX];
};
static struct shared *sh;

static int good_allreduce(struct collc_ctx *ctx, struct collc_comm *comm, int rank, float *send,
			  float *recv, uint64_t seed, const char *when)
{
	struct rc_case c = { COLLC_FLOAT32, COLLC_SUM, COUNT, seed };

	return h_allreduce(&c, ctx, comm, rank, NRANKS, send, recv, when);
}

/* Submits this rank's side of a collective of kind k; the odd rank `odd` disagrees. */
static int submit_kind(struct collc_comm *comm, int rank, int odd, enum kind k, float *send,
		       float *recv, collc_req *req)
{
	int me_odd = rank == odd;

	switch (k) {
	case K_COUNT:
		return collc_allreduce(comm, send, recv, me_odd ? 11 : 10, COLLC_FLOAT32, COLLC_SUM,
				       req);
	case K_DTYPE:
		return collc_allreduce(comm, send, recv, 10, me_odd ? COLLC_INT32 : COLLC_FLOAT32,
				       COLLC_SUM, req);
	case K_OP:
		return collc_allreduce(comm, send, recv, 10, COLLC_FLOAT32,
				       me_odd ? COLLC_MAX : COLLC_SUM, req);
	case K_BCAST_ROOT:
		return collc_broadcast(comm, send, recv, 10, COLLC_FLOAT32, me_odd ? 1 : 0, req);
	case K_REDUCE_ROOT:
		return collc_reduce(comm, send, recv, 10, COLLC_FLOAT32, COLLC_SUM, me_odd ? 1 : 0,
				    req);
	default:
		return -EINVAL;
	}
}

static int rank_main(int rank, int nranks, void *arg)
{
	static const int odd_ranks[] = { 1, 2, 0 };
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	float *send, *recv;
	uint64_t worst_ns = 0;
	int r, n = 0;

	(void)arg;
	if (h_join_alloc(&uid, nranks, rank, COUNT * 4, &ctx, &comm, (void **)&send,
			 (void **)&recv) < 0)
		return 1;
	memset(send, 0, COUNT * 4);
	for (int k = 0; k < K_MAX; k++)
		for (int o = 0; o < 3; o++) {
			int odd = odd_ranks[o], skip;
			collc_req req;
			uint64_t last, done;
			char when[128];

			if (h_barrier_wait(&sh->bar, 20000) < 0)
				return h_fail("barrier timed out");
			r = submit_kind(comm, rank, odd, (enum kind)k, send, recv, &req);
			sh->submitted_ns[rank] = h_now_ns();
			if (r == -ENOSYS)
				__atomic_store_n(&sh->enosys[k], 1, __ATOMIC_RELAXED);
			else if (r < 0)
				return h_fail(
					"rank %d: submitting the mismatched %s: %s (want it taken and "
					"failed by collc_wait)",
					rank, kind_names[k], collc_strerror(r));
			else
				r = collc_wait(ctx, req, 5000);
			done = h_now_ns();
			if (r == -ENOSYS)
				__atomic_store_n(&sh->enosys[k], 1, __ATOMIC_RELAXED);
			/* Everyone decides together whether this kind is implemented. */
			if (h_barrier_wait(&sh->bar, 20000) < 0)
				return h_fail("barrier timed out");
			skip = __atomic_load_n(&sh->enosys[k], __ATOMIC_RELAXED);
			if (skip) {
				if (rank == 0 && o == 0)
					h_log("NOTE: %s returns -ENOSYS: that part is skipped",
					      kind_names[k]);
				if (r == 0 || r == -EINVAL)
					continue;
				if (r != -ENOSYS)
					return h_fail("rank %d: %s: %s", rank, kind_names[k],
						      collc_strerror(r));
				continue;
			}
			if (r != -EINVAL)
				return h_fail(
					"rank %d: ranks disagree on the %s (rank %d is the odd one): "
					"collc_wait returned %d (%s), want -EINVAL",
					rank, kind_names[k], odd, r, collc_strerror(r));
			last = 0;
			for (int i = 0; i < NRANKS; i++)
				if (sh->submitted_ns[i] > last)
					last = sh->submitted_ns[i];
			if (done > last && done - last > worst_ns)
				worst_ns = done - last;
			if (done > last && done - last > PROMPT_NS)
				return h_fail(
					"rank %d: mismatched %s: -EINVAL came %.3f s after the last "
					"rank submitted (want well under 1 s)",
					rank, kind_names[k], (double)(done - last) / 1e9);
			snprintf(when, sizeof(when),
				 "the matching all-reduce after a mismatched %s (odd rank %d)",
				 kind_names[k], odd);
			if (good_allreduce(ctx, comm, rank, send, recv,
					   h_seed + (uint64_t)(k * 3 + o), when))
				return 1;
			n++;
		}
	if (rank == 0)
		h_log("%d mismatches (count, dtype, op, broadcast root, reduce root; odd rank 1, 2, 0): "
		      "every rank got -EINVAL within %.1f ms of the last submission, and the matching "
		      "all-reduce after each was correct",
		      n, (double)worst_ns / 1e6);
	h_leave(ctx, comm);
	return 0;
}

int main(int argc, char **argv)
{
	h_init("mismatch", argc, argv, 90);
	sh = h_shared(sizeof(*sh));
	h_barrier_init(&sh->bar, NRANKS);
	return h_run_comm_test(&uid, 1, NRANKS, rank_main, NULL);
}
