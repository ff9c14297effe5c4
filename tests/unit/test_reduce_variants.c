/* SPDX-License-Identifier: MIT */
/*
 * daemon/cpu/reduce.c built three times, each for one instruction set alone
 * (x86-64, x86-64-v3, x86-64-v4; tests/unit/CMakeLists.txt renames each
 * build's functions), and compared bit for bit: every dtype x op, on random
 * bytes (NaNs, infinities and subnormals of every float type included), at
 * lengths around the loops' blocks, and the AVG finish at several rank
 * counts. collcd's loader picks one of these variants per machine, so two
 * daemons of a communicator must get the same bits from each. Variants this
 * CPU cannot run are left out, and the test says which ran (SKIPPED on a
 * CPU that runs neither: collcd then runs the x86-64 build alone).
 *
 * COLLC_TEST_SEED=N reproduces a run.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/collc.h"
#include "proto/dtype.h"

typedef void (*reduce_call)(void *dst, const void *a, const void *b, size_t n, int dtype,
			    int redop);
typedef void (*finish_call)(void *buf, size_t n, int dtype, int redop, uint32_t nranks);

void red_reduce_base(void *, const void *, const void *, size_t, int, int);
void red_finish_base(void *, size_t, int, int, uint32_t);
void red_reduce_v3(void *, const void *, const void *, size_t, int, int);
void red_finish_v3(void *, size_t, int, int, uint32_t);
void red_reduce_v4(void *, const void *, const void *, size_t, int, int);
void red_finish_v4(void *, size_t, int, int, uint32_t);

struct variant {
	const char *name;
	reduce_call reduce;
	finish_call finish;
	int runs; /* this CPU has the instructions */
};

static struct variant variants[] = {
	{ "x86-64-v3", red_reduce_v3, red_finish_v3, 0 },
	{ "x86-64-v4", red_reduce_v4, red_finish_v4, 0 },
};

#define MAX_N 1000

static uint64_t seed = 0xc011cbeefULL;
static uint64_t rng;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void fill(uint8_t *p, size_t bytes)
{
	for (size_t i = 0; i < bytes; i++)
		p[i] = (uint8_t)next();
}

static void compare(const struct variant *v, const char *what, int dtype, int op, size_t n,
		    const uint8_t *want, const uint8_t *got, size_t bytes)
{
	if (memcmp(want, got, bytes) == 0)
		return;
	for (size_t i = 0; i < bytes; i++)
		if (want[i] != got[i]) {
			fprintf(stderr,
				"seed %" PRIu64 ": %s %s dtype %d op %d n %zu: byte %zu is 0x%02x, "
				"x86-64 gave 0x%02x\n",
				seed, v->name, what, dtype, op, n, i, got[i], want[i]);
			break;
		}
	fail();
}

static void test_variants_agree(void **state)
{
	static const size_t lens[] = { 1, 3, 63, 64, 65, 127, 128, 130, 511, MAX_N };
	static const uint32_t nranks[] = { 2, 3, 7, 8, 255 };
	static uint8_t a[MAX_N * 8], b[MAX_N * 8], want[MAX_N * 8], got[MAX_N * 8];
	int compared = 0;

	(void)state;
	for (size_t k = 0; k < sizeof(variants) / sizeof(variants[0]); k++) {
		struct variant *v = &variants[k];

		if (!v->runs)
			continue;
		compared++;
		for (int dtype = 0; dtype < COLLC_NUM_DTYPES; dtype++)
			for (int op = 0; op < COLLC_NUM_REDOPS; op++) {
				if (!collc_dtype_op_valid(dtype, op))
					continue;
				for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
					size_t n = lens[l], bytes = n * collc_dtype_bytes(dtype);

					fill(a, bytes);
					fill(b, bytes);
					red_reduce_base(want, a, b, n, dtype, op);
					v->reduce(got, a, b, n, dtype, op);
					compare(v, "reduce", dtype, op, n, want, got, bytes);
					/* In place, as the executors call it. */
					memcpy(got, a, bytes);
					v->reduce(got, got, b, n, dtype, op);
					compare(v, "reduce in place", dtype, op, n, want, got,
						bytes);
					for (size_t r = 0; r < sizeof(nranks) / sizeof(nranks[0]);
					     r++) {
						memcpy(got, want, bytes);
						red_finish_base(want, n, dtype, op, nranks[r]);
						v->finish(got, n, dtype, op, nranks[r]);
						compare(v, "finish", dtype, op, n, want, got,
							bytes);
					}
				}
			}
		printf("x86-64 and %s agree on every dtype x op\n", v->name);
	}
	if (!compared) {
		/* Nor does collcd pick either here: it runs the x86-64 build alone. */
		fprintf(stderr, "SKIPPED: this CPU runs neither x86-64-v3 nor x86-64-v4\n");
		skip();
	}
}

int main(void)
{
	const char *s = getenv("COLLC_TEST_SEED");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_variants_agree),
	};

	if (s)
		seed = strtoull(s, NULL, 0);
	rng = seed ? seed : 1;
	printf("seed %" PRIu64 "\n", seed);
	__builtin_cpu_init();
	variants[0].runs = __builtin_cpu_supports("x86-64-v3");
	variants[1].runs = __builtin_cpu_supports("x86-64-v4");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
