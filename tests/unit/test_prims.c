/* SPDX-License-Identifier: MIT */
/*
 * proto/prims.h: step, slot, credit, geometry and flag arithmetic, and the
 * fault cases of the protocols (docs/design.md §4: a missing head post, tail
 * before payload, a missing LL flag, a constant flag) run on prims_harness.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "proto/prims.h"
#include "prims_harness.h"

#define KiB   (1ull << 10)
#define MiB   (1ull << 20)
#define TWO32 (1ull << 32)

static const uint32_t ring_sizes[] = { 2, 4, 8 };

static void test_div_round(void **state)
{
	(void)state;
	assert_int_equal(collc_div_up(0, 8), 0);
	assert_int_equal(collc_div_up(1, 8), 1);
	assert_int_equal(collc_div_up(8, 8), 1);
	assert_int_equal(collc_div_up(9, 8), 2);
	assert_int_equal(collc_round_up(9, 8), 16);
	assert_int_equal(collc_round_up(5 * TWO32 + 1, 16), 5 * TWO32 + 16);
	assert_int_equal(collc_min_u64(3, TWO32), 3);
	assert_int_equal(collc_max_u64(3, TWO32), TWO32);
}

static void test_slot_wrap_64bit(void **state)
{
	static const uint64_t bases[] = { 0, TWO32 - 16, 1ull << 33, 1ull << 40, (1ull << 63) - 8 };
	size_t b, i;

	(void)state;
	assert_int_equal(collc_slot(7, 8), 7);
	assert_int_equal(collc_slot(8, 8), 0);
	assert_int_equal(collc_slot(TWO32 - 1, 8), 7);
	assert_int_equal(collc_slot(TWO32, 8), 0);
	assert_int_equal(collc_slot(TWO32 + 9, 8), 1);
	/* A step truncated to 32 bits would say 0 here: 2^32 % 6 == 4. */
	assert_int_equal(collc_slot(TWO32, 6), 4);
	assert_int_equal(collc_slot(1ull << 40, 6), (uint32_t)((1ull << 40) % 6));
	assert_int_equal(collc_slot_offset(TWO32 + 3, 8, 512 * KiB), 3 * 512 * KiB);

	/* Consecutive steps walk the ring in order, across 2^32 and beyond. */
	for (b = 0; b < sizeof(bases) / sizeof(bases[0]); b++) {
		for (i = 0; i < 24; i++) {
			uint64_t s = bases[b] + i;

			assert_int_equal(collc_slot(s + 1, 8), (collc_slot(s, 8) + 1) % 8);
			assert_int_equal(collc_slot(s + 8, 8), collc_slot(s, 8));
			assert_int_equal(collc_slot(s + 4, 4), collc_slot(s, 4));
		}
	}
}

static void test_simple_credit_edges(void **state)
{
	static const uint64_t bases[] = { 0, TWO32 - 3, TWO32, 1ull << 40 };
	size_t b;
	uint32_t n;

	(void)state;
	/* Sender: head + STEPS >= step + n. */
	assert_true(collc_simple_can_send(0, 0, 1, COLLC_STEPS));
	assert_true(collc_simple_can_send(0, 7, 1, 8));
	assert_false(collc_simple_can_send(0, 8, 1, 8));
	assert_true(collc_simple_can_send(0, 6, 2, 8));
	assert_false(collc_simple_can_send(0, 7, 2, 8));
	assert_true(collc_simple_can_send(1, 8, 1, 8));
	assert_true(collc_simple_can_send(0, 0, 8, 8));
	assert_false(collc_simple_can_send(0, 0, 9, 8));
	/* Receiver: tail >= step + 1. */
	assert_false(collc_simple_can_recv(0, 0));
	assert_true(collc_simple_can_recv(1, 0));
	assert_true(collc_simple_can_recv(5, 4));
	assert_false(collc_simple_can_recv(5, 5));

	/* Near 2^32 and beyond: no 32-bit truncation on either side. */
	for (b = 0; b < sizeof(bases) / sizeof(bases[0]); b++) {
		uint64_t h = bases[b];

		for (n = 1; n <= 4; n++) {
			assert_true(collc_simple_can_send(h, h + 8 - n, n, 8));
			assert_false(collc_simple_can_send(h, h + 9 - n, n, 8));
		}
		assert_true(collc_simple_can_recv(h + 1, h));
		assert_false(collc_simple_can_recv(h, h));
		assert_false(collc_simple_can_recv(h, h + TWO32));
	}
	assert_true(collc_simple_can_send(TWO32 - 1, TWO32 + 6, 1, 8));
	assert_false(collc_simple_can_send(TWO32 - 1, TWO32 + 7, 1, 8));
	assert_false(collc_simple_can_recv(TWO32 - 1, TWO32 - 1));
	assert_true(collc_simple_can_recv(TWO32, TWO32 - 1));
	assert_false(collc_simple_can_recv(TWO32, TWO32));
}

/* The course's TRACE table: chunk = buffer / 8 * 4. */
static void test_course_geometry(void **state)
{
	static const struct {
		uint64_t buffer, step, chunk;
	} rows[] = {
		{ 64 * KiB, 8 * KiB, 32 * KiB },
		{ 1 * MiB, 128 * KiB, 512 * KiB },
		{ 4 * MiB, 512 * KiB, 2 * MiB },
	};
	size_t i;

	(void)state;
	assert_int_equal(COLLC_CHUNK_STEPS, 4);
	assert_int_equal(COLLC_SLICE_STEPS, 2);
	assert_int_equal(COLLC_SLICES_PER_CHUNK, 2);
	assert_int_equal(COLLC_SIMPLE_BUFFER_BYTES, 4 * MiB);
	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		assert_int_equal(collc_step_bytes(rows[i].buffer, COLLC_STEPS), rows[i].step);
		assert_int_equal(collc_simple_slot_bytes(rows[i].buffer, COLLC_STEPS),
				 rows[i].step);
		assert_int_equal(collc_chunk_bytes(rows[i].buffer, COLLC_STEPS, COLLC_CHUNK_STEPS),
				 rows[i].chunk);
	}
	assert_int_equal(collc_chunk_bytes(COLLC_SIMPLE_BUFFER_BYTES, COLLC_STEPS,
					   COLLC_CHUNK_STEPS),
			 2 * MiB);
}

/* sliceSize = max(divUp(nelem, 16 * slicesPerChunk) * 16, stepSize * stepsPerSlice / 32). */
static void test_slice_elems(void **state)
{
	/* Floats in the default 4 MiB buffer: 131072 elements a step. */
	uint64_t step_elems = collc_step_bytes(COLLC_SIMPLE_BUFFER_BYTES, COLLC_STEPS) / 4;

	(void)state;
	assert_int_equal(step_elems, 131072);
	/* The 1/32 floor: 131072 * 2 / 32. */
	assert_int_equal(collc_slice_elems(0, 2, step_elems, 2), 8192);
	assert_int_equal(collc_slice_elems(1, 2, step_elems, 2), 8192);
	assert_int_equal(collc_slice_elems(1000, 2, step_elems, 2), 8192);
	/* The even share, rounded up to 16 elements. */
	assert_int_equal(collc_slice_elems(1000000, 2, step_elems, 2), 500000);
	assert_int_equal(collc_slice_elems(1000001, 2, step_elems, 2), 500016);
	assert_int_equal(collc_slice_elems(262144, 2, step_elems, 2), 131072);
	/* Small steps: the share wins even for small counts. */
	assert_int_equal(collc_slice_elems(33, 2, 64, 2), 32);
	assert_int_equal(collc_slice_elems(33, 2, 64, 1), 32);
	assert_int_equal(collc_slice_elems(31, 1, 64, 2), 32);
	assert_int_equal(collc_slice_elems(17, 1, 0, 2), 32);
	/* Every slice is a multiple of 16 when the floor is. */
	assert_int_equal(collc_slice_elems(12345, 4, step_elems, 1) % 16, 0);
}

static void test_ll_line(void **state)
{
	union collc_ll_line l, torn;
	uint64_t s;

	(void)state;
	assert_int_equal(sizeof(l), 16);
	assert_int_equal(offsetof(union collc_ll_line, w.flag1), 4);
	assert_int_equal(offsetof(union collc_ll_line, w.data2), 8);
	assert_int_equal(offsetof(union collc_ll_line, w.flag2), 12);

	assert_int_equal(collc_ll_flag(0), 1);
	assert_int_equal(collc_ll_flag(7), 8);
	assert_int_equal(collc_ll_flag(TWO32 - 2), 0xffffffffu);
	assert_int_equal(collc_ll_flag(TWO32 - 1), 0); /* the documented 2^32 wrap */
	assert_int_equal(collc_ll_flag(TWO32), 1);

	l = collc_ll_pack(0x0123456789abcdefull, collc_ll_flag(41));
	assert_int_equal(l.w.data1, 0x89abcdefu);
	assert_int_equal(l.w.data2, 0x01234567u);
	assert_int_equal(l.w.flag1, 42);
	assert_int_equal(l.w.flag2, 42);
	assert_true(collc_ll_ready(l, 42));
	assert_false(collc_ll_ready(l, 41));
	assert_false(collc_ll_ready(l, 43));
	assert_int_equal(collc_ll_payload(l), 0x0123456789abcdefull);
	/* The pair view: each half is {data, flag}, one 8-byte store. */
	assert_int_equal(l.v[0], 0x0000002a89abcdefull);
	assert_int_equal(l.v[1], 0x0000002a01234567ull);

	/* A torn line: one half of the new generation, one of the old. */
	torn = collc_ll_pack(0x1111111122222222ull, 42);
	torn.w.data2 = 0x33333333u;
	torn.w.flag2 = 34;
	assert_false(collc_ll_ready(torn, 42));
	assert_false(collc_ll_ready(torn, 34));
	torn = collc_ll_pack(0, 42);
	torn.w.flag1 = 34;
	assert_false(collc_ll_ready(torn, 42));
	/* Fresh memory is ready for no step but 2^32 - 1 (flag 0). */
	memset(&torn, 0, sizeof(torn));
	assert_false(collc_ll_ready(torn, collc_ll_flag(0)));

	/* A reused slot holds generation step - STEPS: never the one expected. */
	for (s = TWO32 - 20; s < TWO32 + 20; s++) {
		l = collc_ll_pack(s, collc_ll_flag(s - 8));
		assert_false(collc_ll_ready(l, collc_ll_flag(s)));
		assert_true(collc_ll_ready(l, collc_ll_flag(s - 8)));
	}

	assert_int_equal(collc_ll_lines(0), 0);
	assert_int_equal(collc_ll_lines(1), 1);
	assert_int_equal(collc_ll_lines(8), 1);
	assert_int_equal(collc_ll_lines(9), 2);
	assert_int_equal(collc_ll_lines(32 * KiB), 4096);
	assert_int_equal(COLLC_LL_BUFFER_BYTES, 512 * KiB);
	assert_int_equal(collc_ll_slot_lines(COLLC_LL_BUFFER_BYTES, COLLC_STEPS), 4096);
	/* Half of a slot is payload: 32 KiB per step, the course's LL chunk. */
	assert_int_equal(collc_ll_step_bytes(COLLC_LL_BUFFER_BYTES, COLLC_STEPS), 32 * KiB);
	assert_int_equal(collc_ll_step_bytes(COLLC_LL_BUFFER_BYTES, COLLC_STEPS) * 2,
			 collc_step_bytes(COLLC_LL_BUFFER_BYTES, COLLC_STEPS));
}

static void test_ll128_line(void **state)
{
	uint64_t line[COLLC_LL128_LINE_WORDS] = { 0 };
	uint64_t i;

	(void)state;
	assert_int_equal(collc_ll128_flag(0), 1);
	assert_int_equal(collc_ll128_flag(TWO32 - 1), TWO32); /* 64 bits: no wrap */
	assert_false(collc_ll128_ready(line, collc_ll128_flag(0)));
	line[COLLC_LL128_FLAG_WORD] = collc_ll128_flag(TWO32 + 5);
	assert_true(collc_ll128_ready(line, TWO32 + 6));
	assert_false(collc_ll128_ready(line, collc_ll128_flag(TWO32 + 5 + 8)));
	assert_false(collc_ll128_ready(line, collc_ll128_flag(TWO32 + 4)));
	line[COLLC_LL128_FLAG_WORD] = 0;
	line[14] = TWO32 + 6; /* a data word equal to the flag means nothing */
	assert_false(collc_ll128_ready(line, TWO32 + 6));

	assert_int_equal(COLLC_LL128_LINE_PAYLOAD, 120);
	assert_int_equal(collc_ll128_lines(0), 0);
	assert_int_equal(collc_ll128_lines(1), 1);
	assert_int_equal(collc_ll128_lines(120), 1);
	assert_int_equal(collc_ll128_lines(121), 2);
	assert_int_equal(collc_ll128_lines(576000), 4800);
	/* Payload word i skips the flag word of every line. */
	assert_int_equal(collc_ll128_data_word(0), 0);
	assert_int_equal(collc_ll128_data_word(14), 14);
	assert_int_equal(collc_ll128_data_word(15), 16);
	assert_int_equal(collc_ll128_data_word(29), 30);
	assert_int_equal(collc_ll128_data_word(30), 32);
	for (i = 0; i < 1000; i++)
		assert_int_not_equal(collc_ll128_data_word(i) % 16, COLLC_LL128_FLAG_WORD);

	/* NCCL's default: 15/16 of a 614400-byte slot, 576000 payload bytes. */
	assert_int_equal(COLLC_LL128_BUFFER_BYTES, 4915200);
	assert_int_equal(collc_ll128_slot_lines(COLLC_LL128_BUFFER_BYTES, COLLC_STEPS), 4800);
	assert_int_equal(collc_ll128_step_bytes(COLLC_LL128_BUFFER_BYTES, COLLC_STEPS), 576000);
	assert_int_equal(collc_ll128_step_bytes(COLLC_LL128_BUFFER_BYTES, COLLC_STEPS) * 16,
			 collc_step_bytes(COLLC_LL128_BUFFER_BYTES, COLLC_STEPS) * 15);
}

/* One-shot LL inboxes: COLLC_OLL_SLOTS slots of one slot_lines region per sender. */
static void test_oll_inbox(void **state)
{
	static const uint32_t nranks[] = { 2, 3, 8 };
	static const uint64_t slot_lines[] = { 1, 4, 256 };
	static const uint64_t bases[] = { 0, 7, TWO32 - 1, 1ull << 40 };
	static uint8_t seen[2 * 8 * 256];
	size_t i, j, b;

	(void)state;
	/* A round carries at least one line: an empty round still sends line 0 (OLL1). */
	assert_int_equal(collc_oll_lines(0), 1);
	assert_int_equal(collc_oll_lines(1), 1);
	assert_int_equal(collc_oll_lines(8), 1);
	assert_int_equal(collc_oll_lines(9), 2);
	assert_int_equal(collc_oll_lines(2 * KiB), 256);
	assert_int_equal(collc_oll_lines(2 * KiB + 1), 257);
	assert_int_equal(COLLC_OLL_SLOTS, 2);
	assert_int_equal(collc_oll_inbox_lines(3, 256), 2 * 3 * 256);
	assert_int_equal(collc_oll_inbox_lines(64, 256) * COLLC_LL_LINE_BYTES, 512 * KiB);

	for (i = 0; i < sizeof(nranks) / sizeof(nranks[0]); i++)
		for (j = 0; j < sizeof(slot_lines) / sizeof(slot_lines[0]); j++)
			for (b = 0; b < sizeof(bases) / sizeof(bases[0]); b++) {
				uint32_t n = nranks[i], from;
				uint64_t sl = slot_lines[j], total = collc_oll_inbox_lines(n, sl),
					 g, line;

				/* Two consecutive generations cover the inbox, each line exactly once. */
				memset(seen, 0, sizeof(seen));
				assert_true(total <= sizeof(seen));
				for (g = bases[b]; g < bases[b] + COLLC_OLL_SLOTS; g++)
					for (from = 0; from < n; from++)
						for (line = 0; line < sl; line++) {
							uint64_t at = collc_oll_line(g, n, from,
										     line, sl);

							assert_true(at < total);
							assert_int_equal(seen[at]++, 0);
							/* A sender's region of a slot is contiguous. */
							assert_int_equal(at,
									 collc_oll_line(g, n, from,
											0, sl) +
										 line);
						}
				for (line = 0; line < total; line++)
					assert_int_equal(seen[line], 1);

				/* The slot alternates with the generation, across 2^32 too. */
				g = bases[b] + 1;
				assert_int_not_equal(collc_oll_line(g, n, 1, 0, sl),
						     collc_oll_line(g - 1, n, 1, 0, sl));
				assert_int_equal(collc_oll_line(g, n, 1, 0, sl),
						 collc_oll_line(g + 2, n, 1, 0, sl));
				assert_int_not_equal(collc_oll_line(g, n, 1, 0, sl),
						     collc_oll_line(g + 1, n, 1, 0, sl));
				/* The round that last used the slot (g - 2) left a flag round g rejects. */
				assert_int_not_equal(collc_ll_flag(g), collc_ll_flag(g - 2));
			}
}

static struct ph_result run_ok(enum ph_proto proto, uint32_t steps, uint32_t faults,
			       const char *sched)
{
	struct ph_config cfg = { .proto = proto, .steps = steps, .faults = faults, .sched = sched };
	struct ph_result res;

	assert_int_equal(ph_run(&cfg, &res), 0);
	return res;
}

/* Every protocol x fault, each ring size: the exact failure, at the exact step. */
static void test_fault_outcomes(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(ring_sizes) / sizeof(ring_sizes[0]); i++) {
		uint32_t n = ring_sizes[i];
		struct ph_result r;

		r = run_ok(PH_SIMPLE, n, PH_F_NO_HEAD, NULL);
		assert_int_equal(r.outcome, PH_STALL);
		assert_int_equal(r.delivered, n);
		assert_int_equal(r.produced, n);

		r = run_ok(PH_SIMPLE, n, PH_F_TAIL_FIRST, NULL);
		assert_int_equal(r.outcome, PH_STALE);
		assert_int_equal(r.bad_step, 0);
		assert_true(r.seen_step == PH_SEEN_FRESH);
		assert_int_equal(r.bad_current, 0);
		assert_int_equal(r.bad_words, 30);

		r = run_ok(PH_LL, n, PH_F_LL_NO_FLAG2, NULL);
		assert_int_equal(r.outcome, PH_BLOCKED);
		assert_int_equal(r.delivered, 0);
		assert_int_equal(r.produced, n); /* then the credit runs out */

		r = run_ok(PH_LL, n, PH_F_LL_CONST_FLAG, NULL);
		assert_int_equal(r.outcome, PH_STALE_WRAP);
		assert_int_equal(r.delivered, n);
		assert_int_equal(r.bad_step, n);  /* the first wrap */
		assert_int_equal(r.seen_step, 0); /* the data of step 0, one wrap old */
		assert_int_equal(r.produced, n);

		r = run_ok(PH_LL, n, PH_F_NO_HEAD, NULL);
		assert_int_equal(r.outcome, PH_STALL);
		assert_int_equal(r.delivered, n);

		r = run_ok(PH_LL128, n, PH_F_LL128_NO_FLAG, NULL);
		assert_int_equal(r.outcome, PH_BLOCKED);
		assert_int_equal(r.delivered, 0);
		assert_int_equal(r.produced, n);

		r = run_ok(PH_LL128, n, PH_F_LL128_FLAG_FIRST, NULL);
		assert_int_equal(r.outcome, PH_PARTIAL);
		assert_int_equal(r.bad_step, 0);
		assert_int_equal(r.bad_words, 15);
		assert_int_equal(r.bad_current, 0);
		/* The consumer looks after the flag and the first half of the data. */
		r = run_ok(PH_LL128, n, PH_F_LL128_FLAG_FIRST, "ppC");
		assert_int_equal(r.outcome, PH_PARTIAL);
		assert_int_equal(r.bad_current, 8);
		assert_true(r.seen_step == PH_SEEN_FRESH);

		r = run_ok(PH_LL128, n, PH_F_NO_HEAD, NULL);
		assert_int_equal(r.outcome, PH_STALL);
		assert_int_equal(r.delivered, n);
	}
}

/* The correct variants deliver 64 steps under every schedule and geometry. */
static void test_correct_variants(void **state)
{
	static const char *const scheds[] = { "pC", "Pc", "PC", "pc", "cp", "ppC", "pppc", "r" };
	static const uint32_t step_bytes[] = { 8, 120, 128, 240, 1000 };
	static const enum ph_proto protos[] = { PH_SIMPLE, PH_LL, PH_LL128 };
	size_t p, i, s, b;
	uint64_t seed;

	(void)state;
	for (p = 0; p < 3; p++)
		for (i = 0; i < sizeof(ring_sizes) / sizeof(ring_sizes[0]); i++)
			for (s = 0; s < sizeof(scheds) / sizeof(scheds[0]); s++)
				for (b = 0; b < sizeof(step_bytes) / sizeof(step_bytes[0]); b++)
					for (seed = 1; seed <= (scheds[s][0] == 'r' ? 16u : 1u);
					     seed++) {
						struct ph_config cfg = {
							.proto = protos[p],
							.steps = ring_sizes[i],
							.step_bytes = step_bytes[b],
							.sched = scheds[s],
							.seed = seed,
						};
						struct ph_result r;

						assert_int_equal(ph_run(&cfg, &r), 0);
						if (r.outcome != PH_COMPLETE || r.delivered != 64)
							fail_msg(
								"%s steps=%u sched=%s bytes=%u seed=%llu: %s",
								ph_proto_name(protos[p]),
								ring_sizes[i], scheds[s],
								step_bytes[b],
								(unsigned long long)seed,
								ph_outcome_name(r.outcome));
						assert_int_equal(r.produced, 64);
					}
}

/* A connection in mid-life, steps crossing 2^32 (the LL flag wraps) and 2^40. */
static void test_midlife_wrap(void **state)
{
	static const uint64_t firsts[] = { TWO32 - 5, TWO32 - 8, 1ull << 40 };
	static const enum ph_proto protos[] = { PH_SIMPLE, PH_LL, PH_LL128 };
	size_t f, p, i;

	(void)state;
	for (f = 0; f < 3; f++)
		for (p = 0; p < 3; p++)
			for (i = 0; i < 3; i++) {
				struct ph_config cfg = { .proto = protos[p],
							 .steps = ring_sizes[i],
							 .first_step = firsts[f],
							 .sched = "r",
							 .seed = 7 + i };
				struct ph_result r;

				assert_int_equal(ph_run(&cfg, &r), 0);
				assert_int_equal(r.outcome, PH_COMPLETE);
				assert_int_equal(r.delivered, 64);
			}

	/* With the ring holding the last generation, a constant flag fails at once. */
	for (i = 0; i < 3; i++) {
		struct ph_config cfg = { .proto = PH_LL,
					 .steps = ring_sizes[i],
					 .faults = PH_F_LL_CONST_FLAG,
					 .first_step = TWO32 - 5 };
		struct ph_result r;

		assert_int_equal(ph_run(&cfg, &r), 0);
		assert_int_equal(r.outcome, PH_STALE_WRAP);
		assert_int_equal(r.bad_step, 0);
		assert_int_equal(r.seen_step, -(int64_t)ring_sizes[i]);
	}
}

static void test_harness_rejects(void **state)
{
	struct ph_config cfg = { .proto = PH_SIMPLE, .steps = 4 };
	struct ph_result r;

	(void)state;
	memset(&r, 0xa5, sizeof(r));
	cfg.faults = PH_F_LL_CONST_FLAG;
	assert_int_equal(ph_run(&cfg, &r), -22);
	cfg.faults = 0;
	cfg.steps = 0;
	assert_int_equal(ph_run(&cfg, &r), -22);
	cfg.steps = 4;
	cfg.step_bytes = 12;
	assert_int_equal(ph_run(&cfg, &r), -22);
	cfg.step_bytes = 0;
	cfg.sched = "px";
	assert_int_equal(ph_run(&cfg, &r), -22);
	cfg.sched = "";
	assert_int_equal(ph_run(&cfg, &r), -22);
	cfg.sched = NULL;
	cfg.first_step = 2;
	assert_int_equal(ph_run(&cfg, &r), -22);
	assert_int_equal(r.delivered, 0xa5a5a5a5a5a5a5a5ull); /* untouched on failure */
	assert_int_equal(ph_run(NULL, &r), -22);
}

/*
 * The course's 27 rows: 9 (protocol, fault) cases x fifo_steps 2/4/8. `at` is
 * where it happens: steps delivered (complete, stall, blocked) or the step
 * taken with bad data (stale, stale-at-wrap, partial-line).
 */
struct course_row {
	enum ph_proto proto;
	uint32_t fault;
	uint32_t steps;
	enum ph_outcome expect;
	uint64_t at;
	const char *course; /* the course's "observed" column */
};

#define ROWS3(p, f, o, at2, at4, at8, txt)                                                         \
	{ p, f, 2, o, at2, txt }, { p, f, 4, o, at4, txt },                                        \
	{                                                                                          \
		p, f, 8, o, at8, txt                                                               \
	}

static const struct course_row course_rows[] = {
	ROWS3(PH_SIMPLE, 0, PH_COMPLETE, 64, 64, 64, "64 steps complete"),
	ROWS3(PH_SIMPLE, PH_F_NO_HEAD, PH_STALL, 2, 4, 8, "deadlock after exactly N slots"),
	ROWS3(PH_SIMPLE, PH_F_TAIL_FIRST, PH_STALE, 0, 0, 0, "consumer corruption"),
	ROWS3(PH_LL, 0, PH_COMPLETE, 64, 64, 64, "complete"),
	ROWS3(PH_LL, PH_F_LL_NO_FLAG2, PH_BLOCKED, 0, 0, 0, "blocked"),
	ROWS3(PH_LL, PH_F_LL_CONST_FLAG, PH_STALE_WRAP, 2, 4, 8, "stale slot accepted"),
	ROWS3(PH_LL128, 0, PH_COMPLETE, 64, 64, 64, "complete"),
	ROWS3(PH_LL128, PH_F_LL128_NO_FLAG, PH_BLOCKED, 0, 0, 0, "warp blocked"),
	ROWS3(PH_LL128, PH_F_LL128_FLAG_FIRST, PH_PARTIAL, 0, 0, 0, "incomplete line corruption"),
};

static uint64_t row_at(const struct ph_result *r)
{
	switch (r->outcome) {
	case PH_STALE:
	case PH_STALE_WRAP:
	case PH_PARTIAL:
		return r->bad_step;
	default:
		return r->delivered;
	}
}

static void test_course_table(void **state)
{
	size_t n = sizeof(course_rows) / sizeof(course_rows[0]);
	size_t i, fails = 0;

	(void)state;
	assert_int_equal(n, 27);
	printf("%-3s %-7s %-11s %-5s %-20s %-20s %s\n", "#", "proto", "fault", "steps", "expected",
	       "got", "result");
	for (i = 0; i < n; i++) {
		const struct course_row *row = &course_rows[i];
		struct ph_config cfg = { .proto = row->proto,
					 .steps = row->steps,
					 .faults = row->fault };
		struct ph_result r;
		char want[32], got[32];
		int ok;

		ok = ph_run(&cfg, &r) == 0;
		ok = ok && r.outcome == row->expect && row_at(&r) == row->at;
		snprintf(want, sizeof(want), "%s@%llu", ph_outcome_name(row->expect),
			 (unsigned long long)row->at);
		snprintf(got, sizeof(got), "%s@%llu", ph_outcome_name(r.outcome),
			 (unsigned long long)row_at(&r));
		printf("%-3zu %-7s %-11s %-5u %-20s %-20s %s  (%s)\n", i + 1,
		       ph_proto_name(row->proto), ph_fault_name(row->fault), row->steps, want, got,
		       ok ? "PASS" : "FAIL", row->course);
		fails += !ok;
	}
	printf("state model: %zu/%zu PASS\n", n - fails, n);
	assert_int_equal(fails, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_div_round),           cmocka_unit_test(test_slot_wrap_64bit),
		cmocka_unit_test(test_simple_credit_edges), cmocka_unit_test(test_course_geometry),
		cmocka_unit_test(test_slice_elems),         cmocka_unit_test(test_ll_line),
		cmocka_unit_test(test_ll128_line),          cmocka_unit_test(test_oll_inbox),
		cmocka_unit_test(test_fault_outcomes),      cmocka_unit_test(test_correct_variants),
		cmocka_unit_test(test_midlife_wrap),        cmocka_unit_test(test_harness_rejects),
		cmocka_unit_test(test_course_table),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
