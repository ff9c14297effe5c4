/* SPDX-License-Identifier: MIT */
/*
 * The CPU executor's rings across daemons with receives straight into the
 * rank's buffers (exec.h exec_link.recv_direct/known/dst; cpu/prims.c
 * dst_publish()), without sockets: two ranks on two threads run a sequence of
 * ring items (cpu/ring.c: all-reduce, in place too, all-gather, broadcast)
 * and all-to-all relays (cpu/copy.c, which name slots for their whole
 * window), each rank sending into a staging ring and receiving from a ring
 * that a third thread fills as node.c link_step() does on both daemons: it
 * takes step k of the sender's staging ring (its slot, or the sender's own
 * buffer, step_src) once k is published (tail, S1/R1), lands it once the
 * receiver's head leaves its slot free and the receiver named k (dst_pub,
 * D1/D1'), where it was named (exactly dst_len bytes) or in its slot, then
 * publishes it (tail) and hands the staging slot back (head). Every result
 * is checked against the exact sum; some steps must land in the buffers.
 * TSan checks the orderings (label concurrency).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <collc.h>

#include "daemon/cpu/internal.h"
#include "proto/algo_copy.h"
#include "proto/dtype.h"

/* executor.c's: no spinning before a futex sleep. */
_Atomic uint32_t exec_spin_us = 0;

#define NR     2
#define NITEMS 48
#define MAXN   (200u << 10) /* elements of float64 a rank: many 64 KiB steps */

enum kind { K_ALLREDUCE, K_INPLACE, K_ALLGATHER, K_BROADCAST, K_RELAY, K_NKINDS };

struct item {
	enum kind kind;
	uint64_t count; /* elements a rank (relay: bytes each way) */
	uint32_t root;
};

struct side {
	int rank;
	double *send, *recv;
	uint8_t *rsend, *rrecv; /* the relay's */
	struct cpu_rank rk;
	char *scratch, *stage_in, *stage_out;
	int result;
	int failed_item;
};

static struct cpu_conn stage[NR] __attribute__((aligned(64))); /* rank r's send ring */
static struct cpu_conn inbox[NR] __attribute__((aligned(64))); /* rank r's receive ring */
static struct item items[NITEMS];
static uint32_t zero, broken;
static _Atomic int stop_proxy;
static uint64_t direct_bytes, proxy_err;

static uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Rank r's input element i of item n: a small integer, so every sum is exact. */
static double input(int r, int n, uint64_t i)
{
	return (double)(mix(((uint64_t)n << 40) ^ ((uint64_t)r << 32) ^ i) % 1000);
}

static uint8_t relay_byte(int from, int n, uint64_t b)
{
	return (uint8_t)(from * 31 + n * 7 + b * 13 + 1);
}

static char *slot(const struct cpu_link *l, uint64_t step)
{
	return l->buf +
	       collc_slot_offset(step, COLLC_STEPS, collc_step_bytes(l->buf_bytes, COLLC_STEPS));
}

/* One step from rank r's staging ring into rank 1 - r's receive ring, when it can move. */
static int proxy_move(int r, uint64_t *k)
{
	struct cpu_link *s = &stage[r].simple, *d = &inbox[1 - r].simple;
	uint64_t step = *k;
	const char *src;
	char *to;
	uint32_t len, want;

	/* R1 (proxy): the payload and step_len first; S2: the receiver's slot is free. */
	if (load_acquire(&s->tail) <= step || load_acquire(&d->head) + COLLC_STEPS <= step)
		return 0;
	/* D1' (proxy): pairs with D1 in dst_publish(): the name first. */
	if (load_acquire(&d->dst_pub) <= step)
		return 0;
	len = s->step_len[step % COLLC_STEPS];
	src = s->step_src[step % COLLC_STEPS];
	if (!src)
		src = slot(s, step);
	to = d->step_dst[step % COLLC_STEPS];
	want = d->dst_len[step % COLLC_STEPS];
	if (to && len != want) {
		proxy_err++;
		return -1;
	}
	if (!to)
		to = slot(d, step);
	else
		direct_bytes += len;
	memcpy(to, src, len);
	d->step_len[step % COLLC_STEPS] = len;
	/* S1 (proxy): the landed payload, then tail. */
	cpu_post(&d->tail, step + 1, &d->tail_seq, &d->recv_waiting);
	/* R2 (proxy): the staging slot was read. */
	cpu_post(&s->head, step + 1, &s->head_seq, &s->send_waiting);
	*k = step + 1;
	return 1;
}

static void *proxy_main(void *arg)
{
	uint64_t k[NR] = { 0, 0 };

	(void)arg;
	while (!__atomic_load_n(&stop_proxy, __ATOMIC_ACQUIRE)) {
		int moved = 0;

		for (int r = 0; r < NR; r++) {
			int m = proxy_move(r, &k[r]);

			if (m < 0)
				return NULL;
			moved |= m;
		}
		if (!moved)
			sched_yield();
	}
	return NULL;
}

static struct cpu_run run_of(struct side *s, struct collc_work_item *it)
{
	return (struct cpu_run){ .it = it,
				 .abort = &zero,
				 .revoked = &zero,
				 .stopping = &zero,
				 .rk = &s->rk,
				 .es = collc_dtype_bytes(it->dtype),
				 .scratch = s->scratch,
				 .stage_in = s->stage_in,
				 .stage_out = s->stage_out };
}

static int run_item(struct side *s, int n)
{
	const struct item *m = &items[n];
	struct collc_work_item it = { .kind = COLLC_WORK_COLL,
				      .algo = COLLC_ALGO_RING,
				      .proto = COLLC_PROTO_SIMPLE,
				      .dtype = COLLC_FLOAT64,
				      .redop = COLLC_SUM,
				      .nchannels = 1,
				      .nranks = NR,
				      .rank = (uint32_t)s->rank,
				      .count = m->count,
				      .root = m->root,
				      .sendbuf = (uint64_t)(uintptr_t)s->send,
				      .recvbuf = (uint64_t)(uintptr_t)s->recv };
	uint64_t nin = m->kind == K_BROADCAST && (uint32_t)s->rank != m->root ? 0 : m->count;
	struct cpu_run x;

	if (m->kind == K_RELAY) {
		struct collc_work_copies list = { 0 };

		for (uint64_t b = 0; b < m->count; b++)
			s->rsend[b] = relay_byte(s->rank, n, b);
		memset(s->rrecv, 0xa5, m->count);
		it.coll = COLLC_OP_ALLTOALL;
		it.dtype = COLLC_UINT8;
		list.c[1 - s->rank] = (struct collc_work_copy){
			.src = (uint64_t)(uintptr_t)s->rsend,
			.dst = (uint64_t)(uintptr_t)s->rrecv,
			.bytes = collc_relay_pack(m->count, m->count),
		};
		x = run_of(s, &it);
		return cpu_copy_relay(&x, &list);
	}
	for (uint64_t i = 0; i < nin; i++)
		s->send[i] = input(s->rank, n, i);
	for (uint64_t i = 0; i < NR * MAXN; i++)
		s->recv[i] = -1.0;
	switch (m->kind) {
	case K_INPLACE:
		memcpy(s->recv, s->send, m->count * sizeof(double));
		it.sendbuf = it.recvbuf;
		/* fall through */
	case K_ALLREDUCE:
		it.coll = COLLC_OP_ALLREDUCE;
		break;
	case K_ALLGATHER:
		it.coll = COLLC_OP_ALLGATHER;
		break;
	default:
		it.coll = COLLC_OP_BROADCAST;
		break;
	}
	x = run_of(s, &it);
	return cpu_ring(&x);
}

/* Rank s's output of item n against the exact result; 0 when right. */
static int check_item(const struct side *s, int n)
{
	const struct item *m = &items[n];

	if (m->kind == K_RELAY) {
		for (uint64_t b = 0; b < m->count; b++)
			if (s->rrecv[b] != relay_byte(1 - s->rank, n, b))
				return 1;
		return 0;
	}
	for (uint64_t i = 0; i < m->count; i++) {
		double want;

		switch (m->kind) {
		case K_ALLREDUCE:
		case K_INPLACE:
			want = input(0, n, i) + input(1, n, i);
			break;
		case K_BROADCAST:
			want = input((int)m->root, n, i);
			break;
		default:
			want = 0; /* checked below */
			break;
		}
		if (m->kind == K_ALLGATHER) {
			for (int r = 0; r < NR; r++)
				if (s->recv[(uint64_t)r * m->count + i] != input(r, n, i))
					return 1;
		} else if (s->recv[i] != want) {
			return 1;
		}
	}
	return 0;
}

static void *rank_main(void *arg)
{
	struct side *s = arg;

	s->failed_item = -1;
	for (int n = 0; n < NITEMS && !s->result; n++) {
		s->result = run_item(s, n);
		if (!s->result && check_item(s, n))
			s->failed_item = n;
		if (s->failed_item >= 0)
			break;
	}
	return NULL;
}

static void link_make(struct cpu_link *l)
{
	l->proto = COLLC_PROTO_SIMPLE;
	l->buf_bytes = CPU_SIMPLE_BUFFER_BYTES;
	l->buf = calloc(1, CPU_SIMPLE_BUFFER_BYTES);
	assert_non_null(l->buf);
}

static void ring_direct(void **state)
{
	struct side sd[NR];
	pthread_t t[NR], p;
	uint64_t rs = 0x5eed;

	(void)state;
	memset(stage, 0, sizeof(stage));
	memset(inbox, 0, sizeof(inbox));
	for (int r = 0; r < NR; r++) {
		link_make(&stage[r].simple);
		link_make(&inbox[r].simple);
		/* What the proxy says at attach, before the first item. */
		stage[r].simple.direct = 1;
		inbox[r].simple.recv_direct = 1;
	}
	/* Mostly several steps each, some empty or a few elements; every kind, in a random order. */
	for (int n = 0; n < NITEMS; n++) {
		rs = mix(rs + (uint64_t)n);
		items[n].kind = (enum kind)(n < K_NKINDS ? n : (int)(rs % K_NKINDS));
		switch ((rs >> 8) % 4) {
		case 0:
			items[n].count = (rs >> 16) % 8;
			break;
		default:
			items[n].count = 1 + (rs >> 16) % MAXN;
			break;
		}
		items[n].root = (uint32_t)((rs >> 40) % NR);
	}
	for (int r = 0; r < NR; r++) {
		struct side *s = &sd[r];

		memset(s, 0, sizeof(*s));
		s->rank = r;
		s->send = malloc(MAXN * sizeof(double));
		s->recv = malloc(NR * MAXN * sizeof(double));
		s->rsend = malloc(MAXN);
		s->rrecv = malloc(MAXN);
		s->scratch = malloc(CPU_SCRATCH_BYTES);
		s->stage_in = malloc(CPU_STAGE_BYTES);
		s->stage_out = malloc(CPU_STAGE_BYTES);
		assert_true(s->send && s->recv && s->rsend && s->rrecv && s->scratch &&
			    s->stage_in && s->stage_out);
		s->rk.send[0] = &stage[r];
		s->rk.recv[0] = &inbox[r];
		s->rk.revoked = &zero;
		s->rk.broken = &broken;
		s->rk.nchan = 1;
	}
	/* A hang is a failure: the watchdog ends the test. */
	alarm(120);
	__atomic_store_n(&stop_proxy, 0, __ATOMIC_RELEASE);
	assert_int_equal(pthread_create(&p, NULL, proxy_main, NULL), 0);
	for (int r = 0; r < NR; r++)
		assert_int_equal(pthread_create(&t[r], NULL, rank_main, &sd[r]), 0);
	for (int r = 0; r < NR; r++)
		pthread_join(t[r], NULL);
	__atomic_store_n(&stop_proxy, 1, __ATOMIC_RELEASE);
	pthread_join(p, NULL);
	alarm(0);
	for (int r = 0; r < NR; r++) {
		if (sd[r].result)
			fail_msg("rank %d: %s", r, strerror(-sd[r].result));
		if (sd[r].failed_item >= 0)
			fail_msg("rank %d: item %d (kind %d, count %llu, root %u): wrong result", r,
				 sd[r].failed_item, items[sd[r].failed_item].kind,
				 (unsigned long long)items[sd[r].failed_item].count,
				 items[sd[r].failed_item].root);
	}
	assert_int_equal(proxy_err, 0);
	/* Not vacuous: gather steps landed in the buffers. */
	assert_true(direct_bytes > 0);
	printf("ring_direct: %d items, %llu bytes landed in the ranks' buffers\n", NITEMS,
	       (unsigned long long)direct_bytes);
	for (int r = 0; r < NR; r++) {
		free(sd[r].send);
		free(sd[r].recv);
		free(sd[r].rsend);
		free(sd[r].rrecv);
		free(sd[r].scratch);
		free(sd[r].stage_in);
		free(sd[r].stage_out);
		free(stage[r].simple.buf);
		free(inbox[r].simple.buf);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(ring_direct),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
