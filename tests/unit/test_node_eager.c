/* SPDX-License-Identifier: MIT */
/*
 * Eager collectives across daemons (daemon/node_eager.c): which descriptors
 * may go eager and their sizes, hostile ones included (any count, dtype, op,
 * root or rank count only makes a collective ineligible, never overflows);
 * and the root's result of every collective x dtype x op for 2, 3 and 5
 * ranks on random data, checked for every rank against the tests'
 * long double reference (tests/common/refcheck.c).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/node.h"
#include "proto/dtype.h"
#include "tests/common/refcheck.h"

static struct node_coll desc(uint32_t opcode, uint32_t dtype, uint64_t count, uint32_t redop,
			     uint32_t root)
{
	return (struct node_coll){ .seq = 1,
				   .opcode = opcode,
				   .dtype = dtype,
				   .count = count,
				   .redop = redop,
				   .root = root };
}

/* Both ways at once between two daemons only, up to NODE_PAIR_MAX of inputs in all. */
static void test_pair(void **state)
{
	struct node_coll d =
		desc(COLLC_OP_ALLREDUCE, COLLC_FLOAT32, NODE_PAIR_MAX / 8, COLLC_SUM, 0);

	(void)state;
	assert_int_equal(node_eager_pair(&d, 2, 2), 1);
	assert_int_equal(node_eager_pair(&d, 3, 2), 0);
	assert_int_equal(node_eager_pair(&d, 1, 2), 0);
	assert_int_equal(node_eager_pair(&d, 2, 4), 0); /* four ranks: twice the bytes */
	d.count++;
	assert_int_equal(node_eager_pair(&d, 2, 2), 0);
	/* What cannot go eager at all does not go both ways either. */
	d = desc(COLLC_OP_ALLREDUCE, COLLC_FLOAT32, 16, COLLC_SUM, 0);
	d.bad = EINVAL;
	assert_int_equal(node_eager_pair(&d, 2, 2), 0);
	d = desc(COLLC_OP_ALLTOALL, COLLC_FLOAT32, 16, COLLC_SUM, 0);
	assert_int_equal(node_eager_pair(&d, 2, 2), 0);
}

static void test_sizes(void **state)
{
	const uint64_t max = NODE_EAGER_MAX;
	struct node_coll d;
	uint64_t in = 0, out = 0;

	(void)state;
	/* All-reduce of 1000 float32 on 2 ranks: 4000 bytes in and out. */
	d = desc(COLLC_OP_ALLREDUCE, COLLC_FLOAT32, 1000, COLLC_SUM, 0);
	assert_int_equal(node_eager_sizes(&d, 2, max, &in, &out), 1);
	assert_int_equal(in, 4000);
	assert_int_equal(out, 4000);
	/* The root holds every rank's input: exactly at the limit still goes, one byte less not. */
	assert_int_equal(node_eager_sizes(&d, 2, 8000, &in, &out), 1);
	assert_int_equal(node_eager_sizes(&d, 2, 7999, &in, &out), 0);
	/* Reduce-scatter: count is each rank's share; the input is nranks shares. */
	d = desc(COLLC_OP_REDUCE_SCATTER, COLLC_FLOAT64, 10, COLLC_MAX, 0);
	assert_int_equal(node_eager_sizes(&d, 4, max, &in, &out), 1);
	assert_int_equal(in, 320);
	assert_int_equal(out, 320);
	assert_int_equal(node_eager_sizes(&d, 4, 1279, &in, &out), 0);
	/* All-gather: the result is the gathered buffer. */
	d = desc(COLLC_OP_ALLGATHER, COLLC_INT8, 100, 0, 0);
	assert_int_equal(node_eager_sizes(&d, 3, max, &in, &out), 1);
	assert_int_equal(in, 100);
	assert_int_equal(out, 300);
	/* Broadcast: only the root contributes. */
	d = desc(COLLC_OP_BROADCAST, COLLC_UINT32, 64, 0, 2);
	assert_int_equal(node_eager_sizes(&d, 3, 256, &in, &out), 1);
	assert_true(node_eager_contributes(&d, 2));
	assert_false(node_eager_contributes(&d, 0));
	d = desc(COLLC_OP_ALLREDUCE, COLLC_UINT32, 64, COLLC_SUM, 0);
	assert_true(node_eager_contributes(&d, 0));
	/* A limit of 0 (the key off) takes nothing. */
	assert_int_equal(node_eager_sizes(&d, 2, 0, &in, &out), 0);

	/* Ineligible: what a hostile peer or a mismatch may send. */
	d = desc(COLLC_OP_ALLREDUCE, COLLC_FLOAT32, 0, COLLC_SUM, 0);
	assert_int_equal(node_eager_sizes(&d, 2, max, &in, &out), 0);
	d = desc(COLLC_OP_ALLREDUCE, COLLC_FLOAT32, UINT64_MAX, COLLC_SUM, 0);
	assert_int_equal(node_eager_sizes(&d, 2, max, &in, &out), 0);
	d = desc(COLLC_OP_ALLREDUCE, COLLC_FLOAT32, (UINT64_MAX / 4) + 2, COLLC_SUM, 0);
	assert_int_equal(node_eager_sizes(&d, 2, UINT64_MAX, &in, &out), 0);
	d = desc(COLLC_OP_REDUCE_SCATTER, COLLC_FLOAT64, NODE_EAGER_MAX, COLLC_SUM, 0);
	assert_int_equal(node_eager_sizes(&d, COLLC_MAX_RANKS, UINT64_MAX, &in, &out), 0);
	d = desc(COLLC_OP_ALLREDUCE, COLLC_NUM_DTYPES, 8, COLLC_SUM, 0);
	assert_int_equal(node_eager_sizes(&d, 2, max, &in, &out), 0);
	d = desc(COLLC_OP_ALLREDUCE, COLLC_FLOAT32, 8, COLLC_NUM_REDOPS, 0);
	assert_int_equal(node_eager_sizes(&d, 2, max, &in, &out), 0);
	d = desc(COLLC_OP_REDUCE, COLLC_FLOAT32, 8, COLLC_SUM, 2);
	assert_int_equal(node_eager_sizes(&d, 2, max, &in, &out), 0);
	d = desc(COLLC_OP_BROADCAST, COLLC_FLOAT32, 8, 0, UINT32_MAX);
	assert_int_equal(node_eager_sizes(&d, 2, max, &in, &out), 0);
	for (uint32_t op = COLLC_OP_ALLTOALL; op < COLLC_OP_MAX + 2; op++) {
		d = desc(op, COLLC_FLOAT32, 8, COLLC_SUM, 0);
		assert_int_equal(node_eager_sizes(&d, 2, max, &in, &out), 0);
	}
	d = desc(COLLC_OP_NOP, COLLC_FLOAT32, 8, COLLC_SUM, 0);
	assert_int_equal(node_eager_sizes(&d, 2, max, &in, &out), 0);
	d = desc(COLLC_OP_ALLREDUCE, COLLC_FLOAT32, 8, COLLC_SUM, 0);
	assert_int_equal(node_eager_sizes(&d, 1, max, &in, &out), 0);
	assert_int_equal(node_eager_sizes(&d, COLLC_MAX_RANKS + 1, max, &in, &out), 0);
	d.bad = 22;
	assert_int_equal(node_eager_sizes(&d, 2, max, &in, &out), 0);
}

static int reported;

static void count_failures(int fail, const char *line)
{
	if (fail && reported++ < 5)
		fprintf(stderr, "%s\n", line);
}

/* One collective: every rank's input as the root would hold it, the result, each rank's check. */
static void one(enum rc_coll coll, collc_dtype dtype, collc_redop op, uint32_t nranks,
		uint64_t count, uint64_t seed)
{
	const uint32_t opcode = (uint32_t)coll + 1, root = (uint32_t)(seed % nranks);
	struct node_coll d = desc(opcode, dtype, count, op, root);
	struct rc_case c = { .dtype = dtype, .op = op, .count = count, .seed = seed };
	uint64_t in_bytes, out_bytes, es = collc_dtype_bytes(dtype);
	const uint8_t *ptr[COLLC_MAX_RANKS];
	uint8_t *in, *out, *again;
	char what[160];

	if (coll == RC_ALLGATHER || coll == RC_BROADCAST)
		d.redop = 0;
	assert_int_equal(node_eager_sizes(&d, nranks, UINT64_MAX, &in_bytes, &out_bytes), 1);
	in = calloc(nranks, in_bytes);
	out = malloc(out_bytes + 16);
	assert_non_null(in);
	assert_non_null(out);
	memset(out + out_bytes, 0xa5, 16);
	for (uint32_t r = 0; r < nranks; r++)
		if (node_eager_contributes(&d, r))
			rc_fill_coll(&c, coll, (int)nranks, (int)r, in + r * in_bytes);
	for (uint32_t r = 0; r < nranks; r++)
		ptr[r] = in + r * in_bytes;
	node_eager_compute(&d, nranks, ptr, in_bytes, out);
	for (uint32_t r = 0; r < nranks; r++) {
		const uint8_t *mine = out;

		if (coll == RC_REDUCE_SCATTER)
			mine = out + r * count * es;
		snprintf(what, sizeof(what), "eager %s %s %s, %u ranks, count %llu, rank %u",
			 rc_coll_name(coll), rc_dtype_name(dtype), rc_op_name(op), nranks,
			 (unsigned long long)count, r);
		assert_int_equal(
			rc_check_coll(&c, coll, (int)nranks, (int)r, (int)root, mine, what), 0);
	}
	for (int i = 0; i < 16; i++)
		assert_int_equal(out[out_bytes + (uint64_t)i], 0xa5);
	/* The same bytes where out is an input (in place), and block by block (reduce-scatter). */
	again = malloc((size_t)nranks * in_bytes);
	assert_non_null(again);
	if (coll == RC_ALLREDUCE || coll == RC_REDUCE) {
		for (uint32_t k = 0; k < 2; k++) {
			memcpy(again, in, (size_t)nranks * in_bytes);
			for (uint32_t r = 0; r < nranks; r++)
				ptr[r] = again + r * in_bytes;
			node_eager_compute(&d, nranks, ptr, in_bytes, again + k * in_bytes);
			assert_memory_equal(again + k * in_bytes, out, out_bytes);
		}
	} else if (coll == RC_REDUCE_SCATTER) {
		for (uint32_t b = 0; b < nranks; b++) {
			for (uint32_t r = 0; r < nranks; r++)
				ptr[r] = in + r * in_bytes + b * count * es;
			node_eager_compute(&d, nranks, ptr, count * es, again + b * count * es);
		}
		assert_memory_equal(again, out, out_bytes);
	}
	free(again);
	free(in);
	free(out);
}

/* The limit by landing: a 1 MiB all-reduce between two ranks holds 2 MiB. */
static void test_limit(void **state)
{
	const struct node_coll d =
		desc(COLLC_OP_ALLREDUCE, COLLC_FLOAT32, (1u << 20) / 4, COLLC_SUM, 0);
	const struct node_coll half =
		desc(COLLC_OP_ALLREDUCE, COLLC_FLOAT32, (512u << 10) / 4, COLLC_SUM, 0);
	uint64_t in, out;

	(void)state;
	assert_int_equal(node_eager_limit(NODE_EAGER_DEFAULT, 1), NODE_EAGER_DEFAULT);
	assert_true(node_eager_sizes(&d, 2, node_eager_limit(NODE_EAGER_DEFAULT, 1), &in, &out));
	/* Received aside (no place, or several inputs to reduce): half. */
	assert_false(node_eager_sizes(&d, 2, node_eager_limit(NODE_EAGER_DEFAULT, 0), &in, &out));
	assert_false(node_eager_sizes(&d, 2, node_eager_limit(NODE_EAGER_DEFAULT, 2), &in, &out));
	assert_true(node_eager_sizes(&half, 2, node_eager_limit(NODE_EAGER_DEFAULT, 0), &in, &out));
	/* Two ranks a daemon: a 512 KiB all-reduce holds 2 MiB, received aside. */
	assert_false(
		node_eager_sizes(&half, 4, node_eager_limit(NODE_EAGER_DEFAULT, 0), &in, &out));
	assert_int_equal(node_eager_limit(0, 1), 0);
}

static void test_compute(void **state)
{
	static const uint32_t ranks[] = { 2, 3, 5 };
	uint64_t seed = 0x5eed;

	(void)state;
	rc_set_report(count_failures);
	for (int coll = 0; coll < RC_NUM_COLLS; coll++)
		for (int dt = 0; dt < COLLC_NUM_DTYPES; dt++)
			for (int op = 0; op < COLLC_NUM_REDOPS; op++) {
				int reduces = coll != RC_ALLGATHER && coll != RC_BROADCAST;

				if (!reduces && op > 0)
					continue;
				for (size_t k = 0; k < sizeof(ranks) / sizeof(ranks[0]); k++) {
					seed = rc_mix(seed);
					one((enum rc_coll)coll, (collc_dtype)dt, (collc_redop)op,
					    ranks[k], 1 + seed % 777, seed);
				}
			}
	assert_int_equal(reported, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes),
		cmocka_unit_test(test_pair),
		cmocka_unit_test(test_limit),
		cmocka_unit_test(test_compute),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
