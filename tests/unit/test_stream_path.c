/* SPDX-License-Identifier: MIT */
/*
 * The stream gates' host-side rules without a GPU: which path libcollc picks
 * (client/stream_path.c: $COLLC_STREAM_PATH, the driver's stream memory
 * operations), the wait test that the gate kernel and cuStreamWaitValue32
 * share (client/gate_kernel.h: cyclic >= over wrapping tickets, == for
 * graphs), and, where CUDA is built, the embedded gate kernel image.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "client/gate_kernel.h"
#include "include/collc.h"

static void test_pick(void **state)
{
	static const struct {
		const char *env;
		int memops, want;
	} cases[] = {
		{ NULL, 1, COLLC_STREAM_PATH_MEMOPS },
		{ NULL, 0, COLLC_STREAM_PATH_KERNEL },
		{ "", 1, COLLC_STREAM_PATH_MEMOPS },
		{ "", 0, COLLC_STREAM_PATH_KERNEL },
		{ "auto", 1, COLLC_STREAM_PATH_MEMOPS },
		{ "auto", 0, COLLC_STREAM_PATH_KERNEL },
		{ "memops", 1, COLLC_STREAM_PATH_MEMOPS },
		{ "memops", 0, -EOPNOTSUPP },
		{ "kernel", 1, COLLC_STREAM_PATH_KERNEL },
		{ "kernel", 0, COLLC_STREAM_PATH_KERNEL },
		{ "Kernel", 1, -EINVAL },
		{ "kernel ", 1, -EINVAL },
		{ "memop", 1, -EINVAL },
		{ "1", 0, -EINVAL },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int got = collc__stream_path_pick(cases[i].env, cases[i].memops);

		if (got != cases[i].want)
			fail_msg("COLLC_STREAM_PATH=%s, memops %d: got %d, want %d",
				 cases[i].env ? cases[i].env : "(unset)", cases[i].memops, got,
				 cases[i].want);
	}
	assert_string_equal(collc__stream_path_name(COLLC_STREAM_PATH_MEMOPS), "memops");
	assert_string_equal(collc__stream_path_name(COLLC_STREAM_PATH_KERNEL), "kernel");
	assert_string_equal(collc__stream_path_name(-EINVAL), "none");
}

static void test_memops_usable(void **state)
{
	(void)state;
	/* V2 entry points: on by default, whatever the V1 attribute says. */
	assert_int_equal(collc__stream_memops_usable(1, 0, -1), 1);
	assert_int_equal(collc__stream_memops_usable(1, 1, 0), 1);
	/* V1 only: where the driver enabled them (NVreg_EnableStreamMemOPs). */
	assert_int_equal(collc__stream_memops_usable(0, 1, 1), 1);
	assert_int_equal(collc__stream_memops_usable(0, 1, 0), 0);
	assert_int_equal(collc__stream_memops_usable(0, 1, -1), 0);
	/* None: the gate kernel. */
	assert_int_equal(collc__stream_memops_usable(0, 0, 1), 0);
	assert_int_equal(collc__stream_memops_usable(0, 0, -1), 0);
}

/* The next ticket of a stream gate, as stream.c's gate_take() makes it: never 0. */
static uint32_t next_ticket(uint32_t t)
{
	return t + 1 ? t + 1 : 1;
}

static void test_geq_wraps(void **state)
{
	uint32_t t[128];

	(void)state;
	/* A fresh word (0) holds back the first ticket. */
	assert_false(collc__gate_reached(0, 1, GATE_WAIT_GEQ));
	assert_true(collc__gate_reached(1, 1, GATE_WAIT_GEQ));
	/* Across the wrap (tickets skip 0): a later ticket releases, an earlier one never. */
	t[0] = 0xffffffc0u;
	for (int i = 1; i < 128; i++)
		t[i] = next_ticket(t[i - 1]);
	for (int i = 0; i < 128; i++)
		for (int j = 0; j < 128; j++)
			if (collc__gate_reached(t[j], t[i], GATE_WAIT_GEQ) != (j >= i))
				fail_msg("word %#x, ticket %#x: reached %d", t[j], t[i],
					 collc__gate_reached(t[j], t[i], GATE_WAIT_GEQ));
	/* The cyclic window: half the range ahead releases, beyond it reads as behind. */
	assert_true(collc__gate_reached(0xfffffff0u + 0x7fffffffu, 0xfffffff0u, GATE_WAIT_GEQ));
	assert_false(collc__gate_reached(0xfffffff0u + 0x80000000u, 0xfffffff0u, GATE_WAIT_GEQ));
	assert_false(collc__gate_reached(5, 6, GATE_WAIT_GEQ));
	assert_true(collc__gate_reached(0x80000005u, 6, GATE_WAIT_GEQ));
}

static void test_graph_eq(void **state)
{
	(void)state;
	/* A graph's word holds 0 (armed) or 1 (collcd answered); only 1 releases. */
	assert_false(collc__gate_reached(0, 1, GATE_WAIT_EQ_RESET));
	assert_true(collc__gate_reached(1, 1, GATE_WAIT_EQ_RESET));
	assert_false(collc__gate_reached(2, 1, GATE_WAIT_EQ_RESET));
	assert_false(collc__gate_reached(0xffffffffu, 1, GATE_WAIT_EQ_RESET));
}

#ifdef COLLC_HAVE_CUDA
extern const unsigned char collc__gate_image[];
extern const size_t collc__gate_image_size;

static void test_image(void **state)
{
	static const char name[] = COLLC_GATE_KERNEL;
	uint32_t magic;
	int found = 0;

	(void)state;
	/* A fat binary (cuModuleLoadData's input) whose code names the kernel libcollc asks for. */
	assert_true(collc__gate_image_size > 64);
	assert_int_equal((uintptr_t)collc__gate_image % 8, 0);
	memcpy(&magic, collc__gate_image, 4);
	assert_int_equal(magic, 0xba55ed50u);
	for (size_t i = 0; i + sizeof(name) <= collc__gate_image_size && !found; i++)
		found = memcmp(collc__gate_image + i, name, sizeof(name)) == 0;
	assert_true(found);
}
#endif

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pick),      cmocka_unit_test(test_memops_usable),
		cmocka_unit_test(test_geq_wraps), cmocka_unit_test(test_graph_eq),
#ifdef COLLC_HAVE_CUDA
		cmocka_unit_test(test_image),
#endif
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
