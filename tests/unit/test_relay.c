/* SPDX-License-Identifier: MIT */
/*
 * The all-to-all relay of the CPU executor (daemon/cpu/copy.c
 * cpu_copy_relay()), two ranks on two threads over real Simple rings: the
 * blocks arrive byte for byte when the lengths agree; when a peer streams a
 * block of another length than the receiver expects (what only a hostile or
 * broken daemon sends), the receiver ends with -EPROTO, writes nothing of
 * that block, and stays in step with the stream, so neither thread hangs.
 */
#define _GNU_SOURCE
#include <errno.h>
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

#include "daemon/cpu/internal.h"
#include "proto/algo_copy.h"

/* executor.c's: no spinning before a futex sleep. */
_Atomic uint32_t exec_spin_us = 0;

#define NR 2

struct side {
	struct collc_work_item it;
	struct collc_work_copies list;
	struct cpu_rank rk;
	struct cpu_run x;
	uint8_t *send, *recv;
	int result;
};

static struct cpu_conn conn[NR] __attribute__((aligned(64)));
static uint32_t zero, broken;

static void *rank_main(void *arg)
{
	struct side *s = arg;

	s->result = cpu_copy_relay(&s->x, &s->list);
	return NULL;
}

static uint8_t pattern(int from, int to, size_t b)
{
	return (uint8_t)(from * 31 + to * 7 + b * 13 + 1);
}

/*
 * sends[i]: bytes rank i streams to the other; expects[i]: bytes rank i
 * expects from it. Returns each rank's result.
 */
static void run_pair(const size_t sends[NR], const size_t expects[NR], int ret[NR],
		     struct side sd[NR])
{
	pthread_t t[NR];

	memset(conn, 0, sizeof(conn));
	for (int r = 0; r < NR; r++) {
		conn[r].simple.proto = COLLC_PROTO_SIMPLE;
		conn[r].simple.buf = calloc(1, CPU_SIMPLE_BUFFER_BYTES);
		conn[r].simple.buf_bytes = CPU_SIMPLE_BUFFER_BYTES;
		assert_non_null(conn[r].simple.buf);
	}
	for (int r = 0; r < NR; r++) {
		struct side *s = &sd[r];
		int o = 1 - r;

		memset(s, 0, sizeof(*s));
		s->send = malloc(sends[r] + 1);
		s->recv = malloc(expects[r] + 64);
		assert_non_null(s->send);
		assert_non_null(s->recv);
		for (size_t b = 0; b < sends[r]; b++)
			s->send[b] = pattern(r, o, b);
		memset(s->recv, 0xa5, expects[r] + 64);
		s->it = (struct collc_work_item){ .kind = COLLC_WORK_COLL,
						  .coll = COLLC_OP_ALLTOALL,
						  .algo = COLLC_ALGO_RING,
						  .proto = COLLC_PROTO_SIMPLE,
						  .dtype = COLLC_UINT8,
						  .nchannels = 1,
						  .nranks = NR,
						  .rank = (uint32_t)r };
		s->list.c[o] = (struct collc_work_copy){
			.src = (uint64_t)(uintptr_t)s->send,
			.dst = (uint64_t)(uintptr_t)s->recv,
			.bytes = collc_relay_pack(sends[r], expects[r]),
		};
		s->rk.recv[0] = &conn[r];
		s->rk.send[0] = &conn[o];
		s->rk.revoked = &zero;
		s->rk.broken = &broken;
		s->rk.nchan = 1;
		s->x = (struct cpu_run){ .it = &s->it,
					 .abort = &zero,
					 .revoked = &zero,
					 .stopping = &zero,
					 .rk = &s->rk,
					 .ch = 0,
					 .share = 0,
					 .es = 1,
					 .scratch = malloc(CPU_SCRATCH_BYTES),
					 .stage_in = malloc(CPU_STAGE_BYTES),
					 .stage_out = malloc(CPU_STAGE_BYTES) };
		assert_non_null(s->x.scratch);
	}
	/* A hang is a failure: the watchdog ends the test. */
	alarm(60);
	for (int r = 0; r < NR; r++)
		assert_int_equal(pthread_create(&t[r], NULL, rank_main, &sd[r]), 0);
	for (int r = 0; r < NR; r++) {
		pthread_join(t[r], NULL);
		ret[r] = sd[r].result;
	}
	alarm(0);
}

static void free_pair(struct side sd[NR])
{
	for (int r = 0; r < NR; r++) {
		free(sd[r].send);
		free(sd[r].recv);
		free(sd[r].x.scratch);
		free(sd[r].x.stage_in);
		free(sd[r].x.stage_out);
		free(conn[r].simple.buf);
	}
}

/* Lengths that agree, several steps each (and one odd tail): every byte lands. */
static void relay_agree(void **state)
{
	const size_t sends[NR] = { 300001, 70000 }, expects[NR] = { 70000, 300001 };
	struct side sd[NR];
	int ret[NR];

	(void)state;
	run_pair(sends, expects, ret, sd);
	for (int r = 0; r < NR; r++) {
		assert_int_equal(ret[r], 0);
		for (size_t b = 0; b < expects[r]; b++)
			if (sd[r].recv[b] != pattern(1 - r, r, b))
				fail_msg("rank %d: byte %zu of %zu", r, b, expects[r]);
		assert_int_equal(sd[r].recv[expects[r]], 0xa5);
	}
	free_pair(sd);
}

/*
 * Rank 0 streams more (then less) than rank 1 expects: rank 1 ends with
 * -EPROTO and its block stays untouched; rank 0, whose own block agrees,
 * completes. Neither hangs: the discard consumes exactly what was streamed.
 */
static void relay_disagree(void **state)
{
	const size_t cases[][2] = { { 300001, 200000 }, { 1000, 5000 }, { 0, 64 }, { 64, 0 } };

	(void)state;
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		const size_t sends[NR] = { cases[k][0], 4096 }, expects[NR] = { 4096, cases[k][1] };
		struct side sd[NR];
		int ret[NR];

		run_pair(sends, expects, ret, sd);
		assert_int_equal(ret[0], 0);
		assert_int_equal(ret[1], -EPROTO);
		for (size_t b = 0; b < expects[0]; b++)
			if (sd[0].recv[b] != pattern(1, 0, b))
				fail_msg("case %zu: rank 0 byte %zu", k, b);
		for (size_t b = 0; b < expects[1] + 64; b++)
			if (sd[1].recv[b] != 0xa5)
				fail_msg("case %zu: rank 1 wrote byte %zu of a block it refused", k,
					 b);
		free_pair(sd);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(relay_agree),
		cmocka_unit_test(relay_disagree),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
