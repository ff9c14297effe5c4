/* SPDX-License-Identifier: MIT */
/*
 * The grid's rings across daemons as the proxy sees them (daemon/cuda/xlink.c),
 * without a GPU: host threads play the two grids with the orderings of
 * cuda/device/prims.h (a sender writes the payload and len, then releases
 * tail, and waits for head before reusing a slot; a receiver acquires tail,
 * reads the slot, releases head), and a third thread plays the two proxies
 * of node.c link_step() through struct exec_link only: it takes each step
 * published in daemon A's staging ring, lands it in daemon B's receive ring
 * once B's head leaves a slot free, publishes it there with its length and
 * hands A's slot back. Every byte and every length that arrives is checked.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/atomics.h"
#include "daemon/cuda/xlink.c"

#define NSTEPS 2000u

static uint64_t seed = 0x5eed;

static uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Bytes of step s: empty steps, whole slots and everything between, mostly small. */
static uint32_t step_len(uint64_t s)
{
	uint64_t r = mix(seed + s);

	switch (r % 16) {
	case 0:
		return 0;
	case 1:
		return CUDA_SIMPLE_SLOT;
	default:
		return (uint32_t)((r >> 8) % (64u << 10)) + 1;
	}
}

/* Step s's bytes [0, n): 8 at a time, the tail byte by byte. */
static void fill(uint8_t *p, uint64_t s, uint32_t n)
{
	for (uint32_t i = 0; i < n; i += 8) {
		uint64_t v = mix(seed ^ (s << 24) ^ (i / 8));

		memcpy(p + i, &v, n - i < 8 ? n - i : 8);
	}
}

/* 1 when p holds step s's n bytes. */
static int same(const uint8_t *p, uint64_t s, uint32_t n)
{
	for (uint32_t i = 0; i < n; i += 8) {
		uint64_t v = mix(seed ^ (s << 24) ^ (i / 8));

		if (memcmp(p + i, &v, n - i < 8 ? n - i : 8) != 0)
			return 0;
	}
	return 1;
}

struct world {
	struct cuda_xconn *a; /* daemon A: the staging ring of the remote receiver */
	struct cuda_xconn *b; /* daemon B: the local receiver's ring */
	struct exec_link la, lb;
	uint64_t bad_data, bad_len, steps_seen; /* the receiving grid's */
	uint64_t bad_wire;                      /* the proxies': a length longer than a slot */
	uint64_t max_ahead; /* sender's steps ahead of the proxy's credit, at most */
};

static void spin(void)
{
	sched_yield();
}

/* The grid that sends (rank r on daemon A): S2, payload and len, then S1/X1. */
static void *grid_send(void *arg)
{
	struct world *w = arg;

	for (uint64_t s = 0; s < NSTEPS; s++) {
		uint32_t n = step_len(s);
		uint8_t *slot = w->a->buf + (s % COLLC_STEPS) * CUDA_SIMPLE_SLOT;

		while (s + 1 > COLLC_STEPS && load_acquire(&w->a->head) < s + 1 - COLLC_STEPS)
			spin();
		fill(slot, s, n);
		store_relaxed(&w->a->len[s % COLLC_STEPS], n);
		store_release(&w->a->tail, s + 1);
	}
	return NULL;
}

/* The grid that receives (rank r + 1 on daemon B): R1, the payload, then R2/X2. */
static void *grid_recv(void *arg)
{
	struct world *w = arg;

	for (uint64_t s = 0; s < NSTEPS; s++) {
		uint32_t n = step_len(s);
		const uint8_t *slot = w->b->buf + (s % COLLC_STEPS) * CUDA_SIMPLE_SLOT;

		while (load_acquire(&w->b->tail) < s + 1)
			spin();
		if (load_relaxed(&w->b->len[s % COLLC_STEPS]) != n)
			w->bad_len++;
		if (!same(slot, s, n))
			w->bad_data++;
		w->steps_seen++;
		store_release(&w->b->head, s + 1);
	}
	return NULL;
}

/*
 * Both proxies, as link_step() drives them (L_SEND on A, L_RECV on B), with
 * the wire in between taking one step at a time.
 */
static void *proxies(void *arg)
{
	struct world *w = arg;
	const struct exec_link *ea = &w->la, *eb = &w->lb;
	uint64_t sent = ea->head(ea->l), landed = eb->tail(eb->l);

	while (sent < NSTEPS) {
		uint64_t ta = ea->tail(ea->l), hb = eb->head(eb->l);

		if (ta - sent > w->max_ahead)
			w->max_ahead = ta - sent;
		if (sent < ta && landed < hb + eb->nslots) {
			uint32_t n = ea->len(ea->l, sent);
			const char *from = ea->buf + (sent % ea->nslots) * ea->slot_bytes;
			char *to = eb->buf + (landed % eb->nslots) * eb->slot_bytes;

			if (n > ea->slot_bytes) {
				w->bad_wire++;
				n = 0;
			}
			memcpy(to, from, n);
			eb->post_tail(eb->l, ++landed, n);
			ea->post_head(ea->l, ++sent);
			continue;
		}
		spin();
	}
	return NULL;
}

static void *xalloc(void)
{
	void *p = aligned_alloc(4096, sizeof(struct cuda_xconn));

	assert_non_null(p);
	memset(p, 0, sizeof(struct cuda_xconn));
	return p;
}

static void test_link_fields(void **state)
{
	struct cuda_xconn *x = xalloc();
	struct exec_link e;

	(void)state;
	cuda_xconn_link(x, &e);
	assert_ptr_equal(e.l, x);
	assert_ptr_equal(e.buf, (char *)x->buf);
	assert_int_equal(e.slot_bytes, CUDA_SIMPLE_SLOT);
	assert_int_equal(e.nslots, COLLC_STEPS);
	assert_int_equal((uint64_t)e.nslots * e.slot_bytes, sizeof(x->buf));
	/* The grid cannot write an eventfd: no watch, so the proxy polls. */
	assert_null(e.watch);
	/* The word the grid sets on a step of another length (prims.h), clear on a fresh ring. */
	assert_ptr_equal(e.broken, &x->broken);
	assert_int_equal(*e.broken, 0);
	assert_int_equal(e.tail(e.l), 0);
	assert_int_equal(e.head(e.l), 0);
	/* post_tail stores the last step's length in its slot, then tail. */
	e.post_tail(e.l, 11, 1234);
	assert_int_equal(e.tail(e.l), 11);
	assert_int_equal(e.len(e.l, 10), 1234);
	assert_int_equal(x->len[10 % COLLC_STEPS], 1234);
	e.post_head(e.l, 9);
	assert_int_equal(e.head(e.l), 9);
	free(x);
}

static void test_steps_across(void **state)
{
	struct world w = { 0 };
	pthread_t t[3];

	(void)state;
	if (getenv("COLLC_TEST_SEED"))
		seed = strtoull(getenv("COLLC_TEST_SEED"), NULL, 0);
	w.a = xalloc();
	w.b = xalloc();
	cuda_xconn_link(w.a, &w.la);
	cuda_xconn_link(w.b, &w.lb);
	assert_int_equal(pthread_create(&t[0], NULL, grid_send, &w), 0);
	assert_int_equal(pthread_create(&t[1], NULL, grid_recv, &w), 0);
	assert_int_equal(pthread_create(&t[2], NULL, proxies, &w), 0);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	if (w.bad_data || w.bad_len)
		fprintf(stderr,
			"seed 0x%llx: %llu steps with wrong bytes, %llu with wrong lengths\n",
			(unsigned long long)seed, (unsigned long long)w.bad_data,
			(unsigned long long)w.bad_len);
	assert_int_equal(w.steps_seen, NSTEPS);
	assert_int_equal(w.bad_data, 0);
	assert_int_equal(w.bad_len, 0);
	assert_int_equal(w.bad_wire, 0);
	/* The sender never ran more than the ring's slots ahead of the credit. */
	assert_true(w.max_ahead <= COLLC_STEPS);
	assert_int_equal(w.a->tail, NSTEPS);
	assert_int_equal(w.a->head, NSTEPS);
	assert_int_equal(w.b->tail, NSTEPS);
	assert_int_equal(w.b->head, NSTEPS);
	free(w.a);
	free(w.b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_link_fields),
		cmocka_unit_test(test_steps_across),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
