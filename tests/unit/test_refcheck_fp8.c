/* SPDX-License-Identifier: MIT */
/*
 * The fp8 half of the reference checker (tests/common/refcheck.c) against
 * reductions computed here with the CPU executor's own arithmetic
 * (daemon/cpu/reduce.c, one red_reduce per hop, in the orders the executors
 * use: the ring's rotations of the ranks and one-shot's rank order):
 *  - correct results pass, at 2 to 64 ranks, random and exact data, every op;
 *  - wrong ones fail: a result one code off in exact data, a sum that leaves
 *    out a rank, a product with a factor missing, at a few ranks where the
 *    bound is tight.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/cpu/reduce.h"
#include "tests/common/refcheck.h"

#define COUNT 2003 /* odd */

static int reported;

static void quiet(int fail, const char *line)
{
	(void)line;
	reported += fail;
}

/*
 * The result of rank order start, start + 1, ... (mod nranks) for element i:
 * the i-dependent start models a ring's chunks; skip >= 0 leaves out that
 * rank (a wrong result).
 */
static void reduce_elems(const struct rc_case *c, int nranks, int rotate, int skip, uint8_t *out)
{
	for (size_t i = 0; i < c->count; i++) {
		int start = rotate ? (int)((i * 7 + 3) % (size_t)nranks) : 0, first = 1;
		uint8_t acc = 0;

		for (int k = 0; k < nranks; k++) {
			int r = (start + k) % nranks;
			uint8_t x = (uint8_t)rc_input_bits(c, r, i);

			if (r == skip)
				continue;
			if (first)
				acc = x;
			else
				red_reduce(&acc, &acc, &x, 1, c->dtype, c->op);
			first = 0;
		}
		red_finish(&acc, 1, c->dtype, c->op, (uint32_t)nranks);
		out[i] = acc;
	}
}

static void test_correct_results_pass(void **state)
{
	static const int ranks[] = { 2, 3, 4, 5, 7, 8, 16, 33, 64 };
	uint8_t *out = malloc(COUNT);

	(void)state;
	assert_non_null(out);
	for (int dt = COLLC_FLOAT8_E4M3; dt <= COLLC_FLOAT8_E5M2; dt++)
		for (int op = 0; op < COLLC_NUM_REDOPS; op++)
			for (size_t k = 0; k < sizeof(ranks) / sizeof(ranks[0]); k++)
				for (int exact = 0; exact < 2; exact++)
					for (int rotate = 0; rotate < 2; rotate++) {
						int n = ranks[k];
						struct rc_case c = { (collc_dtype)dt,
								     (collc_redop)op, COUNT,
								     0x5eed + (uint64_t)k,
								     exact ? n : 0 };
						double worst = 0;

						reduce_elems(&c, n, rotate, -1, out);
						reported = 0;
						if (rc_check(&c, n, out, "fp8", &worst) != 0 ||
						    reported)
							fail_msg(
								"%s %s nranks %d exact %d rotate %d: "
								"a correct result failed",
								rc_dtype_name(c.dtype),
								rc_op_name(c.op), n, exact, rotate);
						assert_true(worst <= 1.0);
					}
	free(out);
}

static void test_wrong_results_fail(void **state)
{
	uint8_t *out = malloc(COUNT);

	(void)state;
	assert_non_null(out);
	for (int dt = COLLC_FLOAT8_E4M3; dt <= COLLC_FLOAT8_E5M2; dt++) {
		for (int op = 0; op < COLLC_NUM_REDOPS; op++)
			for (int n = 2; n <= 64; n *= 2) {
				/* Exact data: one code off anywhere is wrong. */
				struct rc_case c = { (collc_dtype)dt, (collc_redop)op, COUNT,
						     0xbad + (uint64_t)n, n };

				reduce_elems(&c, n, 1, -1, out);
				out[COUNT / 2] ^= 1;
				reported = 0;
				if (rc_check(&c, n, out, "fp8", NULL) != 1 || !reported)
					fail_msg("%s %s nranks %d: exact data one code off passed",
						 rc_dtype_name(c.dtype), rc_op_name(c.op), n);
			}
		/* Random data at few ranks: a rank left out of a sum or a product. */
		for (int n = 2; n <= 4; n++)
			for (int op = 0; op < COLLC_NUM_REDOPS; op++) {
				struct rc_case c = { (collc_dtype)dt, (collc_redop)op, COUNT,
						     0xfee1 + (uint64_t)n, 0 };

				if (op == COLLC_MAX || op == COLLC_MIN)
					continue; /* leaving a rank out is often still right there */
				reduce_elems(&c, n, 1, n - 1, out);
				reported = 0;
				if (rc_check(&c, n, out, "fp8", NULL) != 1 || !reported)
					fail_msg("%s %s nranks %d: a result without rank %d passed",
						 rc_dtype_name(c.dtype), rc_op_name(c.op), n,
						 n - 1);
			}
	}
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_correct_results_pass),
		cmocka_unit_test(test_wrong_results_fail),
	};

	rc_set_report(quiet);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
