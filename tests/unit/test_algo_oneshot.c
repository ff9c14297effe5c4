/* SPDX-License-Identifier: MIT */
/*
 * proto/algo_oneshot.h's step sequence against a reference written here:
 * step for step against the sequences the executors ran before they shared
 * it, and by meaning, running every rank's steps phase by phase on a model
 * whose elements remember which ranks' which element they hold: every
 * rank's output is written exactly once and ends up right, reads stay in
 * their buffers and read a peer's dst only after the peer's phase wrote it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "proto/algo_oneshot.h"

#define MAX_STEPS 4096
#define MAX_N     9

static const uint32_t colls[] = { COLLC_OP_ALLREDUCE, COLLC_OP_ALLGATHER, COLLC_OP_REDUCE_SCATTER,
				  COLLC_OP_BROADCAST, COLLC_OP_REDUCE };
static const uint64_t counts[] = { 0, 1, 5, 16, 17, 64, 203 };
static const uint32_t nchs[] = { 1, 3, 4 };
static const uint64_t aligns[] = { 1, 4 };
static const uint64_t rounds[] = { 0, 1, 7, 64 };

struct cfg {
	uint32_t coll, n, rank, root, nch, share;
	uint64_t count, align, round;
	int twoshot, rotate;
};

static int steps_of(const struct cfg *c, struct collc_os_step *out)
{
	struct collc_os_iter it;
	uint64_t lo, hi;
	int k = 0;

	collc_oneshot_share(c->count, c->nch, c->share, c->align, &lo, &hi);
	assert_int_equal(collc_oneshot_begin(&it, c->coll, c->n, c->rank, c->root, c->count, lo, hi,
					     c->align, c->twoshot, c->rotate, c->round),
			 0);
	while (collc_oneshot_next(&it, &out[k])) {
		k++;
		assert_true(k < MAX_STEPS);
	}
	/* Once done, it stays done. */
	assert_int_equal(collc_oneshot_next(&it, &out[k]), 0);
	return k;
}

static void put(struct collc_os_step *s, int *k, uint32_t kind, uint32_t peer, uint64_t src,
		uint64_t dst, uint64_t nelem, uint32_t from_recv, uint32_t hold)
{
	struct collc_os_step v = { src, dst, nelem, kind, peer, from_recv, hold };

	s[(*k)++] = v;
}

/* The sequence as the executors wrote it out per collective, share and segments by hand. */
static int reference(const struct cfg *c, struct collc_os_step *s)
{
	const uint32_t n = c->n, me = c->rank;
	uint64_t per = (c->count + c->nch - 1) / c->nch, lo, hi, seg;
	int k = 0;

	per = (per + c->align - 1) / c->align * c->align;
	lo = (uint64_t)c->share * per < c->count ? (uint64_t)c->share * per : c->count;
	hi = lo + per < c->count ? lo + per : c->count;
	put(s, &k, COLLC_OS_ARRIVE, me, lo, lo, hi - lo, 0, 0);
	switch (c->coll) {
	case COLLC_OP_ALLREDUCE:
		if (c->twoshot) {
			uint64_t a, e;

			seg = ((hi - lo + n - 1) / n + c->align - 1) / c->align * c->align;
			for (uint32_t i = 0; i < n; i++) {
				uint32_t q = i == 0 ? me : c->rotate ? (me + i) % n : i - 1;

				/* Rank order skips us; from our own rank on, i = 0 is us. */
				if (!c->rotate && i > 0 && q >= me)
					q++;
				if (i > 0 && q >= n)
					break;
				a = lo + q * seg < hi ? lo + q * seg : hi;
				e = a + seg < hi ? a + seg : hi;
				if (i == 0) {
					put(s, &k, COLLC_OS_REDUCE, me, a, a, e - a, 0, 0);
					put(s, &k, COLLC_OS_MID, me, lo, lo, hi - lo, 0, 0);
				} else {
					put(s, &k, COLLC_OS_COPY, q, a, a, e - a, 1, 0);
				}
			}
		} else {
			uint64_t r = c->round ? c->round : (hi > lo ? hi - lo : 1);
			uint64_t nr = hi > lo ? (hi - lo + r - 1) / r : 1;

			for (uint64_t j = 0; j < nr; j++) {
				uint64_t a = lo + j * r < hi ? lo + j * r : hi;
				uint64_t e = a + r < hi ? a + r : hi;

				if (j)
					put(s, &k, COLLC_OS_MID, me, lo, lo, hi - lo, 0, 0);
				put(s, &k, COLLC_OS_REDUCE, me, a, a, e - a, 0, 1);
			}
		}
		break;
	case COLLC_OP_REDUCE_SCATTER:
		put(s, &k, COLLC_OS_REDUCE, me, me * c->count + lo, lo, hi - lo, 0, 0);
		break;
	case COLLC_OP_REDUCE:
		if (me == c->root)
			put(s, &k, COLLC_OS_REDUCE, me, lo, lo, hi - lo, 0, 0);
		break;
	case COLLC_OP_BROADCAST:
		put(s, &k, COLLC_OS_COPY, c->root, lo, lo, hi - lo, 0, 0);
		break;
	case COLLC_OP_ALLGATHER:
		for (uint32_t i = 0; i < n; i++) {
			uint32_t q = c->rotate ? (me + i) % n : i;

			put(s, &k, COLLC_OS_COPY, q, lo, q * c->count + lo, hi - lo, 0, 0);
		}
		break;
	}
	put(s, &k, COLLC_OS_DONE, me, lo, lo, hi - lo, 0, 0);
	return k;
}

static void assert_same_step(const struct collc_os_step *a, const struct collc_os_step *b)
{
	assert_int_equal(a->kind, b->kind);
	if (a->kind == COLLC_OS_REDUCE || a->kind == COLLC_OS_COPY) {
		assert_int_equal(a->src, b->src);
		assert_int_equal(a->dst, b->dst);
		assert_int_equal(a->nelem, b->nelem);
		assert_int_equal(a->hold, b->hold);
	}
	if (a->kind == COLLC_OS_COPY) {
		assert_int_equal(a->peer, b->peer);
		assert_int_equal(a->from_recv, b->from_recv);
	}
}

/* An element of the model: the ranks whose element idx it reduces; the phase that wrote it. */
struct val {
	uint32_t mask;
	uint64_t idx;
	int phase; /* -1: never written */
	uint32_t share;
	int writes;
};

static uint64_t in_elems(const struct cfg *c)
{
	return c->coll == COLLC_OP_REDUCE_SCATTER ? c->count * c->n : c->count;
}

static uint64_t out_elems(const struct cfg *c)
{
	return c->coll == COLLC_OP_ALLGATHER ? c->count * c->n : c->count;
}

static struct collc_os_step seq[MAX_N][MAX_STEPS];
static int nseq[MAX_N];

/* Runs every rank's steps of every share on the model, phase by phase; checks the outputs. */
static void model(struct cfg c)
{
	const uint32_t n = c.n, all = (1u << n) - 1;
	const uint64_t ne = out_elems(&c);
	struct val *out[MAX_N];

	for (uint32_t r = 0; r < n; r++) {
		out[r] = calloc(ne ? ne : 1, sizeof(struct val));
		assert_non_null(out[r]);
		for (uint64_t i = 0; i < ne; i++)
			out[r][i].phase = -1;
	}
	for (c.share = 0; c.share < c.nch; c.share++) {
		int pos[MAX_N] = { 0 };

		for (uint32_t r = 0; r < n; r++) {
			struct cfg rc = c;

			rc.rank = r;
			nseq[r] = steps_of(&rc, seq[r]);
			assert_int_equal(seq[r][0].kind, COLLC_OS_ARRIVE);
			assert_int_equal(seq[r][nseq[r] - 1].kind, COLLC_OS_DONE);
		}
		for (uint32_t r = 0; r < n; r++)
			pos[r] = 1; /* past ARRIVE */
		/* Phase ph: every rank's steps up to its next MID or DONE; all must agree on which. */
		for (int ph = 0;; ph++) {
			uint32_t end = COLLC_OS_ARRIVE;

			for (uint32_t r = 0; r < n; r++) {
				struct collc_os_step *s;

				for (;; pos[r]++) {
					s = &seq[r][pos[r]];
					if (s->kind == COLLC_OS_MID || s->kind == COLLC_OS_DONE)
						break;
					assert_true(s->kind == COLLC_OS_REDUCE ||
						    s->kind == COLLC_OS_COPY);
					assert_true(s->dst + s->nelem <= ne);
					for (uint64_t j = 0; j < s->nelem; j++) {
						struct val *d = &out[r][s->dst + j], v;

						if (s->kind == COLLC_OS_REDUCE) {
							assert_true(s->src + s->nelem <=
								    in_elems(&c));
							v.mask = all;
							v.idx = s->src + j;
						} else if (s->from_recv) {
							/* A peer's result from an earlier phase. */
							assert_true(s->src + s->nelem <= ne);
							v = out[s->peer][s->src + j];
							assert_true(v.phase >= 0 && v.phase < ph);
							assert_int_equal(v.share, c.share);
						} else {
							assert_true(s->src + s->nelem <=
								    in_elems(&c));
							v.mask = 1u << s->peer;
							v.idx = s->src + j;
						}
						v.phase = ph;
						v.share = c.share;
						v.writes = d->writes + 1;
						*d = v;
					}
				}
				if (r == 0)
					end = s->kind;
				assert_int_equal(s->kind, end);
				pos[r]++;
			}
			if (end == COLLC_OS_DONE)
				break;
		}
		for (uint32_t r = 0; r < n; r++)
			assert_int_equal(pos[r], nseq[r]);
	}
	for (uint32_t r = 0; r < n; r++) {
		for (uint64_t i = 0; i < ne; i++) {
			const struct val *v = &out[r][i];

			if (c.coll == COLLC_OP_REDUCE && r != c.root) {
				assert_int_equal(v->writes, 0);
				continue;
			}
			assert_int_equal(v->writes, 1);
			switch (c.coll) {
			case COLLC_OP_ALLREDUCE:
			case COLLC_OP_REDUCE:
				assert_int_equal(v->mask, all);
				assert_int_equal(v->idx, i);
				break;
			case COLLC_OP_REDUCE_SCATTER:
				assert_int_equal(v->mask, all);
				assert_int_equal(v->idx, r * c.count + i);
				break;
			case COLLC_OP_BROADCAST:
				assert_int_equal(v->mask, 1u << c.root);
				assert_int_equal(v->idx, i);
				break;
			case COLLC_OP_ALLGATHER:
				assert_int_equal(v->mask, 1u << (i / c.count));
				assert_int_equal(v->idx, i % c.count);
				break;
			}
		}
		free(out[r]);
	}
}

static void sweep(int check_model)
{
	static struct collc_os_step got[MAX_STEPS], want[MAX_STEPS];
	uint64_t nmodel = 0;

	for (size_t o = 0; o < sizeof(colls) / sizeof(colls[0]); o++)
		for (uint32_t n = 1; n <= MAX_N; n++)
			for (uint32_t root = 0; root < n; root++)
				for (int ts = 0; ts < 2; ts++)
					for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]);
					     ci++)
						for (size_t hi = 0;
						     hi < sizeof(nchs) / sizeof(nchs[0]); hi++)
							for (size_t ai = 0; ai < 2; ai++)
								for (int rot = 0; rot < 2; rot++)
									for (size_t ri = 0; ri < 4;
									     ri++) {
										struct cfg c = {
											.coll = colls
												[o],
											.n = n,
											.root = root,
											.nch = nchs
												[hi],
											.count = counts
												[ci],
											.align = aligns
												[ai],
											.round = rounds
												[ri],
											.twoshot =
												ts,
											.rotate =
												rot,
										};

										/* Only broadcast and reduce have a root. */
										if (root &&
										    colls[o] !=
											    COLLC_OP_BROADCAST &&
										    colls[o] !=
											    COLLC_OP_REDUCE)
											continue;
										if (check_model) {
											model(c);
											nmodel++;
											continue;
										}
										for (c.rank = 0;
										     c.rank < n;
										     c.rank++)
											for (c.share =
												     0;
											     c.share <
											     c.nch;
											     c.share++) {
												int k = steps_of(
													&c,
													got);

												assert_int_equal(
													k,
													reference(
														&c,
														want));
												for (int i = 0;
												     i <
												     k;
												     i++)
													assert_same_step(
														&got[i],
														&want[i]);
											}
									}
	if (check_model)
		assert_true(nmodel > 10000);
}

static void test_reference_sequence(void **state)
{
	(void)state;
	sweep(0);
}

static void test_model(void **state)
{
	(void)state;
	sweep(1);
}

/* Collectives one-shot does not run are refused. */
static void test_unknown_coll(void **state)
{
	struct collc_os_iter it;

	(void)state;
	assert_int_equal(collc_oneshot_begin(&it, COLLC_OP_NOP, 2, 0, 0, 8, 0, 8, 1, 0, 0, 0), -1);
	assert_int_equal(collc_oneshot_begin(&it, COLLC_OP_MAX, 2, 0, 0, 8, 0, 8, 1, 0, 0, 0), -1);
}

/* One-shot LL: which piece of our input each rank gets, where each rank's piece lands. */
static void test_oll_strides(void **state)
{
	(void)state;
	assert_int_equal(collc_oll_in_stride(COLLC_OP_REDUCE_SCATTER, 96), 96);
	assert_int_equal(collc_oll_in_stride(COLLC_OP_ALLREDUCE, 96), 0);
	assert_int_equal(collc_oll_in_stride(COLLC_OP_ALLGATHER, 96), 0);
	assert_int_equal(collc_oll_out_stride(COLLC_OP_ALLGATHER, 96), 96);
	assert_int_equal(collc_oll_out_stride(COLLC_OP_ALLREDUCE, 96), 0);
	assert_int_equal(collc_oll_out_stride(COLLC_OP_REDUCE_SCATTER, 96), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reference_sequence),
		cmocka_unit_test(test_model),
		cmocka_unit_test(test_unknown_coll),
		cmocka_unit_test(test_oll_strides),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
