/* SPDX-License-Identifier: MIT */
/*
 * Two communicators over the same 3 processes (A: rank = process; B: ranks
 * reversed), one ctx per process, collectives interleaved with different
 * dtypes, ops and sizes:
 *  1. A, B, A, B ... each waited before the next;
 *  2. A, B, A, B ... 16 of each outstanding, then waited (some in reverse order);
 *  3. processes submit in different orders (even: A then B; odd: B then A)
 *     before waiting for either, which must not deadlock.
 * Every result is checked against its reference.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "refcheck.h"

#define NPROC 3
#define BATCH 16
#define SLOT  (64u << 10) /* bytes per buffer in the batched phases */
#define BIG   (1u << 20)

static struct collc_unique_id uid_a, uid_b;

struct op {
	struct rc_case c;
	int comm; /* 0: A, 1: B */
	char *send, *recv;
	collc_req req;
};

static struct rc_case pick(uint64_t *rng, size_t max_bytes)
{
	struct rc_case c = { 0 }; /* random data (c.exact 0) */

	c.dtype = (collc_dtype)h_rand_below(rng, COLLC_NUM_DTYPES);
	c.op = (collc_redop)h_rand_below(rng, COLLC_NUM_REDOPS);
	c.count = h_rand_below(rng, max_bytes / rc_size(c.dtype) + 1);
	c.seed = h_rand(rng);
	return c;
}

static int submit(struct collc_comm *const comms[2], const int ranks[2], struct op *o)
{
	int r;

	rc_fill(&o->c, ranks[o->comm], o->send);
	r = collc_allreduce(comms[o->comm], o->send, o->recv, o->c.count, o->c.dtype, o->c.op,
			    &o->req);
	if (r < 0)
		return h_fail("comm %c: collc_allreduce %s %s count %zu: %s", 'A' + o->comm,
			      rc_dtype_name(o->c.dtype), rc_op_name(o->c.op), o->c.count,
			      collc_strerror(r));
	return 0;
}

static int finish(struct collc_ctx *ctx, const int ranks[2], struct op *o, const char *phase)
{
	char what[96];
	int r = collc_wait(ctx, o->req, 20000);

	snprintf(what, sizeof(what), "%s, comm %c rank %d", phase, 'A' + o->comm, ranks[o->comm]);
	if (r < 0)
		return h_fail("%s: collc_wait %s %s count %zu: %s", what, rc_dtype_name(o->c.dtype),
			      rc_op_name(o->c.op), o->c.count, collc_strerror(r));
	return rc_check(&o->c, NPROC, o->recv, what, NULL);
}

static int rank_main(int proc, int nproc, void *arg)
{
	uint64_t rng = h_seed; /* the same sequence in every process */
	struct collc_comm *comms[2];
	struct collc_ctx *ctx;
	int ranks[2] = { proc, nproc - 1 - proc };
	struct op ops[2 * BATCH];
	char *mem;
	int r, n = 0;

	(void)arg;
	r = collc_connect(h_sock, &ctx);
	if (r < 0)
		return h_fail("process %d: collc_connect: %s", proc, collc_strerror(r));
	/* comm_init blocks until every rank joined: every process joins A first, then B. */
	r = collc_comm_init(ctx, &uid_a, nproc, ranks[0], -1, &comms[0]);
	if (r == 0)
		r = collc_comm_init(ctx, &uid_b, nproc, ranks[1], -1, &comms[1]);
	if (r < 0)
		return h_fail("process %d: collc_comm_init: %s", proc, collc_strerror(r));
	r = collc_mem_alloc(ctx, 2 * BATCH * 2 * SLOT + 2 * BIG, -1, (void **)&mem);
	if (r < 0)
		return h_fail("process %d: collc_mem_alloc: %s", proc, collc_strerror(r));
	for (int i = 0; i < 2 * BATCH; i++) {
		ops[i].send = mem + (size_t)i * 2 * SLOT;
		ops[i].recv = ops[i].send + SLOT;
	}

	/* 1: alternate, one at a time, sizes up to 1 MiB. */
	for (int it = 0; it < 40; it++) {
		struct op o = { .c = pick(&rng, BIG),
				.comm = it & 1,
				.send = mem + 4 * BATCH * SLOT };

		o.recv = o.send + BIG;
		if (submit(comms, ranks, &o) || finish(ctx, ranks, &o, "alternating"))
			return 1;
		n++;
	}
	if (proc == 0)
		h_log("phase 1: 40 all-reduces alternating A, B (random dtype/op, 0..1 MiB), each waited: correct");

	/* 2: 16 of each outstanding, interleaved; waited in order, then in reverse order. */
	for (int round = 0; round < 4; round++) {
		for (int i = 0; i < 2 * BATCH; i++) {
			ops[i].c = pick(&rng, SLOT);
			ops[i].comm = i & 1;
			if (submit(comms, ranks, &ops[i]))
				return 1;
		}
		for (int i = 0; i < 2 * BATCH; i++) {
			int k = round & 1 ? 2 * BATCH - 1 - i : i;

			if (finish(ctx, ranks, &ops[k],
				   round & 1 ? "batched (reverse wait)" : "batched"))
				return 1;
			n++;
		}
	}
	if (proc == 0)
		h_log("phase 2: 4 rounds of 32 outstanding all-reduces interleaved A, B, waited in order "
		      "and in reverse order: correct");

	/* 3: even processes submit A then B, odd ones B then A; then wait for both. */
	for (int it = 0; it < 30; it++) {
		struct op *o = ops;

		o[0].c = pick(&rng, SLOT);
		o[0].comm = 0;
		o[1].c = pick(&rng, SLOT);
		o[1].comm = 1;
		if (proc & 1) {
			if (submit(comms, ranks, &o[1]) || submit(comms, ranks, &o[0]))
				return 1;
		} else {
			if (submit(comms, ranks, &o[0]) || submit(comms, ranks, &o[1]))
				return 1;
		}
		if (finish(ctx, ranks, &o[(proc + it) & 1], "crossed order") ||
		    finish(ctx, ranks, &o[(proc + it + 1) & 1], "crossed order"))
			return 1;
		n += 2;
	}
	if (proc == 0)
		h_log("phase 3: 30 rounds where processes submit A and B in different orders: no deadlock, "
		      "correct");
	if (proc == 0)
		h_log("%d all-reduces per process over two communicators, all correct", n);
	collc_mem_free(ctx, mem);
	collc_comm_destroy(comms[0]);
	collc_comm_destroy(comms[1]);
	collc_disconnect(ctx);
	return 0;
}

int main(int argc, char **argv)
{
	h_init("two_comms", argc, argv, 90);
	h_daemon_start(NULL);
	h_unique_id(&uid_a);
	h_unique_id(&uid_b);
	return h_finish(h_run_ranks(NPROC, rank_main, NULL));
}
