/* SPDX-License-Identifier: MIT */
/*
 * The CPU executor's hierarchical all-reduce, all-gather and reduce-scatter
 * (daemon/cpu/peer.c cpu_hier()),
 * every rank on a thread of its own over real mailboxes and Simple group
 * rings, as on D daemons of g ranks each but in one process (the proxy's
 * part, moving a group ring's steps between daemons, is the plain ring's and
 * is tested with it):
 *
 *   - a sequence of all-reduces, all-gathers and reduce-scatters (dtypes,
 *     ops, sizes that leave segments empty or odd, in place and not) on 2x2,
 *     3x2 and 2x3 ranks, and 3x2 with the ranks round-robin (a ring order),
 *     each all-reduce and every rank's reduce-scatter block against a
 *     double-precision reference of the same random inputs, each
 *     all-gather's blocks byte for byte, and every rank's all-reduce and
 *     all-gather result bytes equal to rank 0's;
 *   - a rank that never arrives: the others wait, and end with -ECANCELED
 *     once the communicator is revoked, without a hang.
 *
 * Under ThreadSanitizer (label concurrency) it checks the orderings the
 * algorithm relies on: B1/B1', B2/B2' of the mailboxes between the
 * block's phases and the ring's S1/R1, R2/S2 around them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <collc.h>

#include "common/atomics.h"
#include "daemon/cpu/internal.h"
#include "proto/dtype.h"

/* executor.c's: no spinning before a futex sleep. */
_Atomic uint32_t exec_spin_us = 0;

#define MAXR  6
#define NCOLL 20

/* One collective of the sequence every rank runs: an all-reduce, all-gather or reduce-scatter. */
struct coll {
	int coll, dtype, redop;
	uint64_t count; /* per rank for an all-gather and a reduce-scatter */
	int inplace; /* all-gather: the input is the rank's block of the output; reduce-scatter: the reverse */
};

struct rank {
	struct cpu_rank rk;
	struct collc_work_item it;
	struct cpu_run x;
	const struct coll *seq;
	uint32_t ncoll;
	char *in[NCOLL],
		*out[NCOLL]; /* in place: in == out (all-gather: in in its block, reduce-scatter: out) */
	char *alloc[NCOLL]; /* what out and in point into */
	int result;
};

static struct cpu_conn gconn[MAXR] __attribute__((aligned(64)));
static struct cpu_mbox mbox[MAXR] __attribute__((aligned(64)));
static struct rank ranks[MAXR];
static uint32_t zero, revoked, broken;
static uint8_t order[MAXR]; /* the rank at each position (the ring's order across daemons) */

static void *rank_main(void *arg)
{
	struct rank *s = arg;

	s->result = 0;
	for (uint32_t k = 0; k < s->ncoll && s->result == 0; k++) {
		const struct coll *c = &s->seq[k];

		s->it.coll = (uint8_t)c->coll;
		s->it.dtype = (uint8_t)c->dtype;
		s->it.redop = (uint8_t)c->redop;
		s->it.count = c->count;
		s->it.coll_id = k + 1;
		s->it.sendbuf = (uint64_t)(uintptr_t)s->in[k];
		s->it.recvbuf = (uint64_t)(uintptr_t)s->out[k];
		s->x.es = collc_dtype_bytes(c->dtype);
		s->result = cpu_hier(&s->x);
	}
	return NULL;
}

/*
 * Sets up n = d * g ranks, their group rings and mailboxes; with_order: the
 * ranks placed round-robin over the daemons, so position p holds rank
 * order[p] (the ring's order across daemons) and all-gather's blocks go by rank.
 */
static void setup(uint32_t n, uint32_t g, const struct coll *seq, uint32_t ncoll, int with_order)
{
	for (uint32_t p = 0; p < n; p++)
		order[p] = (uint8_t)(with_order ? (p % g) * (n / g) + p / g : p);
	memset(gconn, 0, sizeof(gconn));
	memset(mbox, 0, sizeof(mbox));
	store_relaxed(&revoked, 0u);
	for (uint32_t p = 0; p < n; p++) {
		gconn[p].simple.proto = COLLC_PROTO_SIMPLE;
		gconn[p].simple.buf = calloc(1, CPU_SIMPLE_BUFFER_BYTES);
		gconn[p].simple.buf_bytes = CPU_SIMPLE_BUFFER_BYTES;
		assert_non_null(gconn[p].simple.buf);
	}
	for (uint32_t p = 0; p < n; p++) {
		struct rank *s = &ranks[p];

		memset(s, 0, sizeof(*s));
		s->seq = seq;
		s->ncoll = ncoll;
		s->rk.grecv[0] = &gconn[p];
		s->rk.gsend[0] = &gconn[(p + g) % n];
		s->rk.mbox = mbox;
		s->rk.revoked = &revoked;
		s->rk.broken = &broken;
		s->rk.nchan = 1;
		s->rk.group = g;
		s->rk.order = with_order ? order : NULL;
		s->it = (struct collc_work_item){ .kind = COLLC_WORK_COLL,
						  .coll = COLLC_OP_ALLREDUCE,
						  .algo = COLLC_ALGO_HIER,
						  .proto = COLLC_PROTO_SIMPLE,
						  .nchannels = 1,
						  .nranks = n,
						  .rank = p };
		s->x = (struct cpu_run){ .it = &s->it,
					 .abort = &zero,
					 .revoked = &revoked,
					 .stopping = &zero,
					 .rk = &s->rk,
					 .ch = 0,
					 .share = 0,
					 .scratch = malloc(CPU_SCRATCH_BYTES),
					 .stage_in = malloc(CPU_STAGE_BYTES),
					 .stage_out = malloc(CPU_STAGE_BYTES) };
		assert_non_null(s->x.scratch);
	}
}

static void teardown_ranks(uint32_t n)
{
	for (uint32_t p = 0; p < n; p++) {
		struct rank *s = &ranks[p];

		for (uint32_t k = 0; k < s->ncoll; k++)
			free(s->alloc[k]);
		free(s->x.scratch);
		free(s->x.stage_in);
		free(s->x.stage_out);
		free(gconn[p].simple.buf);
	}
}

static double value_of(const char *buf, int dtype, uint64_t i)
{
	switch (dtype) {
	case COLLC_INT32:
		return ((const int32_t *)buf)[i];
	case COLLC_FLOAT32:
		return ((const float *)buf)[i];
	default:
		return ((const double *)buf)[i];
	}
}

static void put(char *buf, int dtype, uint64_t i, double v)
{
	switch (dtype) {
	case COLLC_INT32:
		((int32_t *)buf)[i] = (int32_t)v;
		break;
	case COLLC_FLOAT32:
		((float *)buf)[i] = (float)v;
		break;
	default:
		((double *)buf)[i] = v;
	}
}

/* The reference of element i of collective c from every position's input at element offset at. */
static double reference(const struct coll *c, char *const *in, uint32_t n, uint64_t at, uint64_t i)
{
	double acc = value_of(in[0], c->dtype, at + i);

	for (uint32_t p = 1; p < n; p++) {
		double v = value_of(in[p], c->dtype, at + i);

		switch (c->redop) {
		case COLLC_PROD:
			acc *= v;
			break;
		case COLLC_MIN:
			acc = v < acc ? v : acc;
			break;
		case COLLC_MAX:
			acc = v > acc ? v : acc;
			break;
		default: /* SUM, AVG */
			acc += v;
		}
	}
	if (c->redop == COLLC_AVG)
		acc /= n;
	/* Integer division truncates: exact. */
	return c->dtype == COLLC_INT32 && c->redop == COLLC_AVG ? trunc(acc) : acc;
}

/* Checks position p's result of collective k (count elements) against the reference at element at. */
static void check_reduced(uint32_t k, const struct coll *c, char *const *ref_in, uint32_t n,
			  uint32_t p, uint64_t at)
{
	for (uint64_t i = 0; i < c->count; i++) {
		double acc = reference(c, ref_in, n, at, i);
		double got = value_of(ranks[p].out[k], c->dtype, i), tol = 0.0;

		if (c->dtype != COLLC_INT32)
			tol = (c->dtype == COLLC_FLOAT32 ? 1e-5 : 1e-12) * (fabs(acc) + 8.0);
		if (fabs(got - acc) > tol)
			fail_msg(
				"collective %u (coll %d dtype %d op %d count %llu%s): position %u's "
				"element %llu is %.17g, the reference %.17g",
				k, c->coll, c->dtype, c->redop, (unsigned long long)c->count,
				c->inplace ? ", in place" : "", p, (unsigned long long)i, got, acc);
	}
}

/* Runs seq on d daemons x g ranks and checks every result. */
static void run_seq(uint32_t d, uint32_t g, const struct coll *seq, uint32_t ncoll, unsigned seed,
		    int with_order)
{
	const uint32_t n = d * g;
	char *ref_in[NCOLL][MAXR];
	char *guard[NCOLL][MAXR]; /* the 8 bytes after the buffers that nobody may write */
	pthread_t t[MAXR];

	srand(seed);
	setup(n, g, seq, ncoll, with_order);
	for (uint32_t k = 0; k < ncoll; k++) {
		const struct coll *c = &seq[k];
		const size_t es = collc_dtype_bytes(c->dtype), bytes = c->count * es;
		const size_t out_bytes = c->coll == COLLC_OP_ALLGATHER ? n * bytes : bytes;
		const size_t in_bytes = c->coll == COLLC_OP_REDUCE_SCATTER ? n * bytes : bytes;
		const size_t all = c->inplace ? collc_max_u64(in_bytes, out_bytes)
					      : out_bytes + 8 + in_bytes;

		for (uint32_t p = 0; p < n; p++) {
			struct rank *s = &ranks[p];

			s->alloc[k] = malloc(all + 8);
			assert_non_null(s->alloc[k]);
			memset(s->alloc[k], 0x5a, all + 8);
			guard[k][p] = s->alloc[k] + all;
			s->out[k] = s->in[k] = s->alloc[k];
			if (!c->inplace) {
				s->in[k] = s->alloc[k] + out_bytes + 8;
				guard[k][p] = s->alloc[k] + out_bytes;
			} else if (c->coll == COLLC_OP_ALLGATHER) {
				s->in[k] = s->out[k] + order[p] * bytes;
			} else if (c->coll == COLLC_OP_REDUCE_SCATTER) {
				s->out[k] = s->in[k] + order[p] * bytes;
			}
			for (uint64_t i = 0; i < in_bytes / (es ? es : 1); i++) {
				/* Small values: products of six stay exact in int32 and float. */
				double v = (double)(rand() % 7 + 1) * (rand() % 2 ? 1 : -1);

				if (c->dtype != COLLC_INT32)
					v += (double)(rand() % 1000) / 1024.0;
				put(s->in[k], c->dtype, i, v);
			}
			/* The reference needs the inputs, which in place get overwritten. */
			ref_in[k][p] = malloc(in_bytes + 1);
			assert_non_null(ref_in[k][p]);
			memcpy(ref_in[k][p], s->in[k], in_bytes);
		}
	}
	/* A hang is a failure: the watchdog ends the test. */
	alarm(120);
	for (uint32_t p = 0; p < n; p++)
		assert_int_equal(pthread_create(&t[p], NULL, rank_main, &ranks[p]), 0);
	for (uint32_t p = 0; p < n; p++)
		pthread_join(t[p], NULL);
	alarm(0);
	for (uint32_t p = 0; p < n; p++)
		assert_int_equal(ranks[p].result, 0);
	for (uint32_t k = 0; k < ncoll; k++) {
		const struct coll *c = &seq[k];
		const size_t es = collc_dtype_bytes(c->dtype), bytes = c->count * es;
		const size_t out_bytes = c->coll == COLLC_OP_ALLGATHER ? n * bytes : bytes;

		if (c->coll == COLLC_OP_ALLGATHER) {
			/* Block order[p] holds position p's input, byte for byte. */
			for (uint32_t p = 0; p < n; p++)
				if (memcmp(ranks[0].out[k] + order[p] * bytes, ref_in[k][p], bytes))
					fail_msg(
						"collective %u (all-gather, count %llu%s): block %u is "
						"not position %u's input",
						k, (unsigned long long)c->count,
						c->inplace ? ", in place" : "", order[p], p);
		}
		if (c->coll == COLLC_OP_ALLREDUCE)
			check_reduced(k, c, ref_in[k], n, 0, 0);
		for (uint32_t p = 0; p < n && c->coll == COLLC_OP_REDUCE_SCATTER; p++) {
			/* Position p holds the reduction of block order[p]; in place, nothing else changed. */
			check_reduced(k, c, ref_in[k], n, p, order[p] * c->count);
			for (uint32_t b = 0; b < n && c->inplace; b++)
				if (b != order[p] && memcmp(ranks[p].in[k] + b * bytes,
							    ref_in[k][p] + b * bytes, bytes))
					fail_msg(
						"collective %u (reduce-scatter in place): position "
						"%u's input block %u was written",
						k, p, b);
		}
		for (uint32_t p = 1; p < n && c->coll != COLLC_OP_REDUCE_SCATTER; p++)
			if (memcmp(ranks[p].out[k], ranks[0].out[k], out_bytes) != 0)
				fail_msg("collective %u: rank %u's result differs from rank 0's", k,
					 p);
		for (uint32_t p = 0; p < n; p++)
			for (size_t b = 0; b < 8; b++)
				if ((unsigned char)guard[k][p][b] != 0x5a)
					fail_msg("collective %u: rank %u wrote past its buffer", k,
						 p);
		for (uint32_t p = 0; p < n; p++)
			free(ref_in[k][p]);
	}
	teardown_ranks(n);
}

#define AR COLLC_OP_ALLREDUCE
#define AG COLLC_OP_ALLGATHER
#define RS COLLC_OP_REDUCE_SCATTER

static const struct coll seq[NCOLL] = {
	{ AR, COLLC_FLOAT32, COLLC_SUM, 1000, 0 },
	{ AR, COLLC_FLOAT32, COLLC_AVG, 3, 1 }, /* segments of one element and empty ones */
	{ AG, COLLC_INT32, COLLC_SUM, 0, 0 },   /* count 0: every phase still meets */
	{ AR, COLLC_INT32, COLLC_PROD, 4097, 1 },
	{ AG, COLLC_FLOAT32, COLLC_SUM, 77, 1 },
	{ AR, COLLC_INT32, COLLC_AVG, 5000, 0 },
	{ AG, COLLC_FLOAT64, COLLC_SUM, 1, 0 },
	{ AR, COLLC_FLOAT64, COLLC_SUM, 300001, 1 }, /* several ring chunks and rounds */
	{ AG, COLLC_FLOAT32, COLLC_SUM, 262147, 0 },
	{ AR, COLLC_FLOAT64, COLLC_AVG, 100003, 0 },
	{ AG, COLLC_INT32, COLLC_SUM, 65537, 1 },
	{ AR, COLLC_INT32, COLLC_MAX, 65536, 1 },
	{ AR, COLLC_INT32, COLLC_MIN, 77, 0 },
	{ AR, COLLC_FLOAT32, COLLC_PROD, 129, 1 },
	{ RS, COLLC_FLOAT32, COLLC_SUM, 1000, 0 },
	{ RS, COLLC_FLOAT64, COLLC_AVG, 3, 1 },    /* pieces of one element */
	{ RS, COLLC_INT32, COLLC_SUM, 0, 0 },      /* count 0: every step still runs */
	{ RS, COLLC_INT32, COLLC_MIN, 300007, 1 }, /* several steps and rounds, in place */
	{ RS, COLLC_FLOAT32, COLLC_PROD, 4099, 0 },
	{ RS, COLLC_FLOAT64, COLLC_MAX, 270001, 0 }, /* chunks of several pieces */
};

static void hier_2x2(void **state)
{
	(void)state;
	run_seq(2, 2, seq, NCOLL, 1, 0);
}

static void hier_3x2(void **state)
{
	(void)state;
	run_seq(3, 2, seq, NCOLL, 2, 0);
}

static void hier_2x3(void **state)
{
	(void)state;
	run_seq(2, 3, seq, NCOLL, 3, 0);
}

/* Ranks round-robin over the daemons: all-gather's blocks follow the ranks, not the positions. */
static void hier_3x2_rr(void **state)
{
	(void)state;
	run_seq(3, 2, seq, NCOLL, 4, 1);
}

/* The last rank never arrives: the others wait, then end with -ECANCELED on revocation. */
static void hier_revoked(void **state)
{
	const struct coll one = { AR, COLLC_FLOAT32, COLLC_SUM, 4096, 0 };
	const uint32_t n = 4;
	pthread_t t[MAXR];

	(void)state;
	setup(n, 2, &one, 1, 0);
	for (uint32_t p = 0; p < n; p++) {
		ranks[p].alloc[0] = calloc(2 * 4096, sizeof(float));
		assert_non_null(ranks[p].alloc[0]);
		ranks[p].in[0] = ranks[p].alloc[0];
		ranks[p].out[0] = ranks[p].alloc[0] + 4096 * sizeof(float);
	}
	alarm(60);
	for (uint32_t p = 0; p + 1 < n; p++)
		assert_int_equal(pthread_create(&t[p], NULL, rank_main, &ranks[p]), 0);
	usleep(100 * 1000);
	store_release(&revoked, 1u);
	for (uint32_t p = 0; p + 1 < n; p++) {
		pthread_join(t[p], NULL);
		assert_int_equal(ranks[p].result, -ECANCELED);
	}
	alarm(0);
	teardown_ranks(n);
}

/* Not a hierarchical communicator, or a collective it does not run: -EINVAL before any wait. */
static void hier_refuses(void **state)
{
	const struct coll one = { AR, COLLC_FLOAT32, COLLC_SUM, 16, 0 };

	(void)state;
	setup(4, 2, &one, 1, 0);
	ranks[0].it.coll = COLLC_OP_BROADCAST;
	assert_int_equal(cpu_hier(&ranks[0].x), -EINVAL);
	ranks[0].it.coll = COLLC_OP_ALLREDUCE;
	ranks[0].rk.group = 0;
	assert_int_equal(cpu_hier(&ranks[0].x), -EINVAL);
	ranks[0].rk.group = 4; /* one daemon: no group ring */
	assert_int_equal(cpu_hier(&ranks[0].x), -EINVAL);
	ranks[0].rk.group = 3; /* 4 ranks are no whole blocks of 3 */
	assert_int_equal(cpu_hier(&ranks[0].x), -EINVAL);
	teardown_ranks(4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(hier_2x2),     cmocka_unit_test(hier_3x2),
		cmocka_unit_test(hier_2x3),     cmocka_unit_test(hier_3x2_rr),
		cmocka_unit_test(hier_revoked), cmocka_unit_test(hier_refuses),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
