/* SPDX-License-Identifier: MIT */
/*
 * A hostile client that bypasses libcollc and scribbles on its shared
 * region (docs/design.md §8: the shared region is untrusted). Over a raw socket it
 * says hello, maps its rings, joins a 1-rank communicator and allocates a
 * buffer, then:
 *  1. random SQEs, published a few at a time: each gets an error completion;
 *  2. SQ tails far ahead of the head (by 5000, by 2^31) for a while;
 *  3. crafted SQEs on the real communicator with one bad field each (opcode,
 *     dtype, op, flags, reserved, root, buffer handle, offset past the end,
 *     count * size overflowing, offset + length wrapping): each fails with
 *     an error completion, and a correct SQE afterwards succeeds with the
 *     right data; the same for all-to-all(v) (counts and displacements
 *     written straight into the argument area: past the end, overflowing,
 *     disagreeing, in place) and send/recv (peer out of range, a sequence
 *     number), then a correct all-to-allv and a send to itself;
 *  4. a CQ head ahead of the tail, scribbled header fields and doorbell.
 * collcd must survive and still serve a normal 2-rank all-reduce and
 * `collcctl status`.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "raw.h"
#include "refcheck.h"

static struct collc_unique_id uid;
static uint64_t rng;
static int phase_random(struct raw *c)
{
	int errors = 0;

	for (int round = 0; round < 50; round++) {
		int k = 1 + (int)h_rand_below(&rng, 32);
		uint64_t last = 0;

		for (int i = 0; i < k; i++) {
			struct collc_sqe e;
			unsigned char *p = (unsigned char *)&e;

			for (size_t b = 0; b < sizeof(e); b++)
				p[b] = (unsigned char)h_rand(&rng);
			e.user_data = last = 0x1000000ull * (uint64_t)(round + 1) + (uint64_t)i;
			raw_publish(c, &e);
		}
		/* The last of the batch must come back with an error. */
		{
			int r = raw_completion(c, last, 5000);

			if (r == 1)
				return h_fail("random SQEs: no completion for user_data %#" PRIx64
					      " within 5 s",
					      last);
			if (r == 0)
				return h_fail("random SQE %#" PRIx64 " completed with success",
					      last);
			errors++;
		}
	}
	h_log("50 batches of random SQEs: each answered with an error completion");
	return 0;
}

static int phase_tail(struct raw *c)
{
	static const uint32_t ahead[] = { 5000, 0x80000000u, 0xffffffffu, 1025 };
	uint32_t head;

	for (size_t i = 0; i < sizeof(ahead) / sizeof(ahead[0]); i++) {
		uint64_t t0 = h_now_ns();

		head = __atomic_load_n(&c->hdr->sq_head, __ATOMIC_ACQUIRE);
		__atomic_store_n(&c->hdr->sq_tail, head + ahead[i], __ATOMIC_RELEASE);
		raw_ring(c);
		while (h_now_ns() - t0 < 100000000ull) {
			raw_reap_all(c);
			usleep(1000);
		}
		if (!h_daemon_alive())
			return h_fail("collcd died with the SQ tail %u ahead of the head",
				      ahead[i]);
	}
	/* Back to a sane ring: an empty one, tail = head. */
	head = __atomic_load_n(&c->hdr->sq_head, __ATOMIC_ACQUIRE);
	c->sq_tail = head;
	__atomic_store_n(&c->hdr->sq_tail, head, __ATOMIC_RELEASE);
	usleep(50000);
	head = __atomic_load_n(&c->hdr->sq_head, __ATOMIC_ACQUIRE);
	c->sq_tail = head;
	__atomic_store_n(&c->hdr->sq_tail, head, __ATOMIC_RELEASE);
	raw_reap_all(c);
	h_log("SQ tail 5000, 2^31, 2^32-1 and 1025 entries ahead of the head, 100 ms each: collcd survives");
	return 0;
}

/* Breaks one field of a good SQE; returns what it did, or NULL past the last case. */
static const char *edit(int k, struct collc_sqe *e)
{
	switch (k) {
	case 0:
		e->opcode = COLLC_OP_NOP;
		return "opcode 0 (NOP)";
	case 1:
		e->opcode = 200;
		return "opcode 200";
	case 2:
		e->dtype = COLLC_NUM_DTYPES;
		return "dtype 10";
	case 3:
		e->dtype = 255;
		return "dtype 255";
	case 4:
		e->redop = COLLC_NUM_REDOPS;
		return "op 5";
	case 5:
		e->flags = 0x80;
		return "flags 0x80";
	case 6:
		e->gate = 7;
		return "gate 7 without a stream flag";
	case 7:
		e->opcode = COLLC_OP_BROADCAST;
		e->root = 1;
		return "broadcast root 1 of 1";
	case 8:
		e->opcode = COLLC_OP_REDUCE;
		e->root = -1;
		return "reduce root -1";
	case 9:
		e->send_mr = 999;
		return "send handle 999";
	case 10:
		e->recv_mr = COLLC_MR_NONE;
		return "receive handle 0 with count > 0";
	case 11:
		e->send_off = 8192;
		return "send offset past the end";
	case 12:
		e->recv_off = 8192 - 4 * 1000 + 1;
		return "receive range one byte too long";
	case 13:
		e->count = (UINT64_MAX >> 2) + 2;
		return "count * 4 overflowing";
	case 14:
		e->count = 1ull << 62;
		return "count 2^62";
	case 15:
		e->send_off = UINT64_MAX - 100;
		return "offset + length wrapping";
	case 16:
		e->opcode = COLLC_OP_ALLGATHER;
		e->count = 2048;
		e->recv_off = 4;
		return "allgather whose receive side runs past the end";
	}
	return NULL;
}

static int phase_crafted(struct raw *c)
{
	struct collc_msg_comm_init ci = { .nranks = 1, .rank = 0, .device = -1 };
	struct collc_msg_comm_reply cr;
	struct collc_msg_mem mem = { .size = 8192, .device = -1 };
	struct collc_msg_mem_reply mr;
	struct collc_sqe base = { 0 };
	uint64_t seq = 0, ud = 0x5000;
	int fds[4], nfds, r, bad = 0, ncases = 0;
	float *buf;

	memcpy(&ci.uid, uid.bytes, sizeof(ci.uid));
	ci.uid.nonce[1] ^= 0xa5; /* a 1-rank communicator of our own */
	r = raw_request(c->fd, COLLC_MSG_COMM_INIT, &ci, sizeof(ci), &cr, sizeof(cr), NULL, NULL);
	if (r < 0)
		return h_fail("raw comm_init (1 rank): %s", collc_strerror(r));
	r = raw_request(c->fd, COLLC_MSG_MEM_ALLOC, &mem, sizeof(mem), &mr, sizeof(mr), fds, &nfds);
	if (r < 0 || nfds != 1)
		return h_fail("raw mem_alloc: %s", collc_strerror(r));
	buf = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
	close(fds[0]);
	if (buf == MAP_FAILED)
		return h_fail("mmap: %s", strerror(errno));
	base.opcode = COLLC_OP_ALLREDUCE;
	base.dtype = COLLC_FLOAT32;
	base.redop = COLLC_SUM;
	base.comm = cr.comm;
	base.count = 1000;
	base.send_mr = mr.mr;
	base.recv_mr = mr.mr;
	base.send_off = 0;
	base.recv_off = 4096;
	for (int k = 0;; k++) {
		struct collc_sqe e = base;
		const char *what = edit(k, &e);

		if (!what)
			break;
		ncases++;
		e.seq = seq++;
		e.user_data = ++ud;
		raw_publish(c, &e);
		r = raw_completion(c, ud, 5000);
		if (r == 1)
			return h_fail("crafted SQE with %s: no completion within 5 s", what);
		if (r >= 0) {
			h_fail("crafted SQE with %s: completed with %d, want an error", what, r);
			bad++;
		}
	}
	/* Sequence numbers that are not the next one. */
	{
		struct collc_sqe e = base;

		e.seq = seq + 5;
		e.user_data = ++ud;
		raw_publish(c, &e);
		r = raw_completion(c, ud, 5000);
		if (r >= 0 && r != 1)
			bad += h_fail(
				"crafted SQE with a sequence number from the future: %d, want an error",
				r);
		e = base;
		e.comm = 999;
		e.seq = 0;
		e.user_data = ++ud;
		raw_publish(c, &e);
		r = raw_completion(c, ud, 5000);
		if (r >= 0 && r != 1)
			bad += h_fail("crafted SQE on communicator handle 999: %d, want an error",
				      r);
	}
	/* All-to-all(v) and send/recv, each with one thing wrong. */
	{
		static const char *const what[] = {
			"all-to-allv whose send block runs past the buffer",
			"all-to-allv whose displacement overflows",
			"all-to-allv whose send and receive counts disagree",
			"all-to-allv with a count in the SQE",
			"all-to-all in place",
			"all-to-allv whose blocks overlap",
		};

		for (int k = 0; k < 6; k++) {
			struct collc_sqe e = base;
			struct collc_sqe_args a = { 0 };

			e.opcode = k == 4 ? COLLC_OP_ALLTOALL : COLLC_OP_ALLTOALLV;
			e.count = k == 3 ? 5 : k == 4 ? 100 : 0;
			e.recv_off = k == 4 ? 0 : 4096;
			a.sendcounts[0] = a.recvcounts[0] = 10;
			a.sdispls[0] = k == 0 ? 2040 : k == 1 ? UINT64_MAX - 5 : 0;
			a.recvcounts[0] = k == 2 ? 11 : 10;
			if (k == 5) {
				e.recv_off = 0;
				a.rdispls[0] = 5; /* receive floats 5..14 over send floats 0..9 */
			}
			e.seq = seq++;
			e.user_data = ++ud;
			raw_publish_args(c, &e, &a);
			r = raw_completion(c, ud, 5000);
			if (r == 1)
				return h_fail("crafted %s: no completion within 5 s", what[k]);
			if (r != -EINVAL)
				bad += h_fail("crafted %s: completed with %d, want -EINVAL",
					      what[k], r);
			ncases++;
		}
		for (int k = 0; k < 2; k++) {
			struct collc_sqe e = base;

			e.opcode = COLLC_OP_SEND;
			e.count = 10;
			e.root = k == 0 ? 5 : 0;
			e.seq = k == 0 ? 0 : 3;
			e.user_data = ++ud;
			raw_publish(c, &e);
			r = raw_completion(c, ud, 5000);
			if (r == 1)
				return h_fail("crafted send %d: no completion within 5 s", k);
			if (r >= 0)
				bad += h_fail(
					"crafted send with %s: completed with %d, want an error",
					k == 0 ? "peer 5 of 1" : "sequence number 3", r);
			ncases++;
		}
	}
	/* A correct all-to-allv (one rank: its own block) and a send to itself. */
	{
		struct collc_sqe e = base, s = base;
		struct collc_sqe_args a = { 0 };

		for (int i = 0; i < 2048; i++)
			buf[i] = i < 1024 ? (float)i : -1;
		e.opcode = COLLC_OP_ALLTOALLV;
		e.count = 0;
		a.sendcounts[0] = a.recvcounts[0] = 100;
		a.sdispls[0] = 7;
		a.rdispls[0] = 50; /* floats 1074 .. 1173 */
		e.seq = seq++;
		e.user_data = ++ud;
		raw_publish_args(c, &e, &a);
		r = raw_completion(c, ud, 5000);
		if (r != 0)
			return h_fail("a correct all-to-allv after the crafted ones: %d", r);
		for (int i = 0; i < 2048 - 1024; i++)
			if (buf[1024 + i] != (i >= 50 && i < 150 ? (float)(i - 50 + 7) : -1))
				return h_fail("a correct all-to-allv: float %d is %g", 1024 + i,
					      buf[1024 + i]);
		s.opcode = COLLC_OP_SEND;
		s.count = 10;
		s.root = 0;
		s.seq = 0;
		s.user_data = ++ud;
		raw_publish(c, &s);
		s.opcode = COLLC_OP_RECV;
		s.user_data = ++ud;
		raw_publish(c, &s);
		if ((r = raw_completion(c, ud - 1, 5000)) != 0 ||
		    (r = raw_completion(c, ud, 5000)) != 0)
			return h_fail("a send to itself and its receive: %d", r);
		for (int i = 0; i < 10; i++)
			if (buf[1024 + i] != (float)i)
				return h_fail("a send to itself: float %d is %g", 1024 + i,
					      buf[1024 + i]);
	}
	/* And a correct one: a 1-rank all-reduce copies send to receive. */
	for (int i = 0; i < 1000; i++) {
		buf[i] = (float)i;
		buf[1024 + i] = -1;
	}
	{
		struct collc_sqe e = base;

		e.seq = seq++;
		e.user_data = ++ud;
		raw_publish(c, &e);
		r = raw_completion(c, ud, 5000);
		if (r != 0)
			return h_fail(
				"a correct SQE after the crafted ones: %d (%s), want 0 (sequence number "
				"%" PRIu64 ")",
				r, r == 1 ? "no completion" : collc_strerror(r), e.seq);
		for (int i = 0; i < 1000; i++)
			if (buf[1024 + i] != (float)i)
				return h_fail(
					"a correct SQE after the crafted ones: element %d is %g, want %d",
					i, buf[1024 + i], i);
	}
	munmap(buf, 8192);
	if (!bad)
		h_log("%d crafted SQEs on a real communicator, one bad field each, plus a wrong sequence "
		      "number and an unknown communicator: each failed with an error completion; a "
		      "correct SQE afterwards succeeded with the right data",
		      ncases);
	return bad != 0;
}

static int phase_scribble(struct raw *c)
{
	uint32_t tail = __atomic_load_n(&c->hdr->cq_tail, __ATOMIC_ACQUIRE);

	__atomic_store_n(&c->hdr->cq_head, tail + 100000, __ATOMIC_RELEASE);
	__atomic_store_n(&c->hdr->cq_flags, 0xffffffffu, __ATOMIC_RELEASE);
	c->hdr->sq_entries = 0xffffffffu;
	c->hdr->cq_entries = 3;
	c->hdr->sqes_off = 0xfffffff0u;
	c->hdr->cqes_off = 0xfffffff0u;
	c->hdr->size = UINT64_MAX;
	c->hdr->sq_head = 12345;
	c->hdr->sq_flags = 0xffffffffu;
	for (int i = 0; i < 3; i++) {
		struct collc_sqe e;

		memset(&e, 0xff, sizeof(e));
		raw_publish(c, &e);
	}
	for (int i = 0; i < 1024; i++)
		c->bell->reserved[i % 1023] = (uint32_t)h_rand(&rng);
	for (int i = 0; i < 1000; i++)
		raw_ring(c);
	c->bell->seq = 0;
	usleep(200000);
	if (!h_daemon_alive())
		return h_fail(
			"collcd died after the CQ head, header fields and doorbell were scribbled on");
	h_log("CQ head 100000 ahead of the tail, header fields, SQ head and flags, and the doorbell "
	      "scribbled on, 1000 doorbell rings: collcd survives");
	return 0;
}

static int hostile(int rank, int nranks, void *arg)
{
	struct raw c;

	(void)rank;
	(void)nranks;
	(void)arg;
	if (raw_open(&c))
		return 1;
	if (phase_random(&c) || phase_tail(&c) || phase_crafted(&c) || phase_scribble(&c))
		return 1;
	close(c.fd);
	return 0;
}

static int rank_main(int rank, int nranks, void *arg)
{
	struct rc_case rc = { COLLC_INT32, COLLC_SUM, 30000, h_seed };

	(void)arg;
	return h_join_allreduce(&uid, &rc, 1, rank, nranks, "all-reduce after the hostile client");
}

int main(int argc, char **argv)
{
	static char out[1 << 16];
	char cmd[512];
	int failed;

	h_init("garbage_ring", argc, argv, 90);
	rng = h_seed;
	h_daemon_start(NULL);
	h_unique_id(&uid);
	failed = h_run_ranks(1, hostile, NULL);
	usleep(100000);
	if (!h_daemon_alive())
		return h_finish(h_fail("collcd died because of the hostile client"));
	h_unique_id(&uid);
	failed |= h_run_ranks(2, rank_main, NULL);
	if (!failed)
		h_log("a normal 2-rank all-reduce afterwards: correct");
	snprintf(cmd, sizeof(cmd), "%s --socket %s status --json", h_collcctl(), h_sock);
	if (h_run_capture(cmd, out, sizeof(out)) != 0 || out[0] != '{')
		failed |=
			h_fail("collcctl status --json after the hostile client failed:\n%s", out);
	return h_finish(failed);
}
