/* SPDX-License-Identifier: MIT */
/*
 * In-place all-reduce (sendbuf == recvbuf): every dtype x op at counts 1,
 * 1023, 65537 and a random one up to 1 MiB, at random element offsets in
 * collc_mem_alloc memory with canaries around; with 2, 3 and 4 ranks, one
 * communicator after the other on one collcd.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "refcheck.h"

#define GUARD 256
#define CAP   ((1u << 20) + 16 * 8 + GUARD)

static struct collc_unique_id uid;

static int rank_main(int rank, int nranks, void *arg)
{
	uint64_t rng = h_seed ^ (uint64_t)nranks;
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	char *buf;
	int r, ncases = 0;

	(void)arg;
	if (h_join_alloc(&uid, nranks, rank, CAP, &ctx, &comm, (void **)&buf, NULL) < 0)
		return 1;
	for (int dt = 0; dt < COLLC_NUM_DTYPES; dt++)
		for (int op = 0; op < COLLC_NUM_REDOPS; op++) {
			size_t es = rc_size((collc_dtype)dt);
			size_t counts[4] = { 1, 1023, 65537,
					     1 + h_rand_below(&rng, (1u << 20) / es) };

			for (int k = 0; k < 4; k++) {
				struct rc_case c = { (collc_dtype)dt, (collc_redop)op, counts[k],
						     h_rand(&rng) };
				size_t off = es * h_rand_below(&rng, 16), bytes = c.count * es;
				char what[128];
				collc_req req;
				long bad;

				snprintf(what, sizeof(what), "in place, rank %d/%d, offset %zu",
					 rank, nranks, off);
				rc_canary_fill(buf, off + bytes + GUARD, 5);
				rc_fill(&c, rank, buf + off);
				r = collc_allreduce(comm, buf + off, buf + off, c.count, c.dtype,
						    c.op, &req);
				if (r == 0)
					r = collc_wait(ctx, req, -1);
				if (r < 0)
					return h_fail("%s: %s %s count %zu: %s", what,
						      rc_dtype_name(c.dtype), rc_op_name(c.op),
						      c.count, collc_strerror(r));
				if (rc_check(&c, nranks, buf + off, what, NULL))
					return 1;
				if ((bad = rc_canary_check(buf, 0, off, 5)) >= 0 ||
				    (bad = rc_canary_check(buf, off + bytes, off + bytes + GUARD,
							   5)) >= 0)
					return h_fail(
						"%s: %s %s count %zu: byte %ld outside the buffer changed",
						what, rc_dtype_name(c.dtype), rc_op_name(c.op),
						c.count, bad);
				ncases++;
			}
		}
	if (rank == 0)
		h_log("%d ranks: %d in-place all-reduces (10 dtypes x 5 ops x counts 1, 1023, 65537, "
		      "random <= 1 MiB) correct on every rank, nothing outside the buffers written",
		      nranks, ncases);
	collc_mem_free(ctx, buf);
	h_leave(ctx, comm);
	return 0;
}

int main(int argc, char **argv)
{
	static const int sizes[] = { 2, 3, 4 };
	int failed = 0;

	h_init("inplace", argc, argv, 120);
	h_daemon_start(NULL);
	for (int i = 0; i < 3 && !failed; i++) {
		h_unique_id(&uid);
		failed = h_run_ranks(sizes[i], rank_main, NULL);
	}
	return h_finish(failed);
}
